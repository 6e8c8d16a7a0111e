// A tenant's encryption keys (operator key only): which provider holds them (the keyring or the tenant's PKCS#11 HSM), rotation and revocation.
import type * as ControlPlaneApi from './api/control-plane.generated.js';
import { ControlPlane } from './client.js';
import type { ConnectionConfig } from './config.js';
import type { ControlPlaneReply } from './replies.js';

type ControlPlaneSchemas = ControlPlaneApi.components['schemas'];

/** Provider, data key versions, last use and whether the key was revoked: never a key or a PIN. */
export type TenantKeyStatus = ControlPlaneSchemas['TenantKeyStatus'];
export type KeyProviderChoice = ControlPlaneSchemas['SetKeyProviderRequest'];

const path = (tenant: string, rest = '') => `/v1/tenants/${encodeURIComponent(tenant)}/keys${rest}`;

export class TenantKeys {
  private constructor() {}

  /** Registers the tenant's provider; a PKCS#11 one is proven by wrapping the tenant's first data key with it. */
  static async use(tenant: string, choice: KeyProviderChoice, config?: ConnectionConfig): Promise<TenantKeyStatus> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'setTenantKeyProvider'>>('PUT', path(tenant), { json: choice });
  }

  static async status(tenant: string, config?: ConnectionConfig): Promise<TenantKeyStatus> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'getTenantKeys'>>('GET', path(tenant));
  }

  /** A new data key version for new writes; `key` moves every version under a new HSM key. */
  static async rotate(tenant: string, opts: { key?: string } & ConnectionConfig = {}): Promise<TenantKeyStatus> {
    const { key, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'rotateTenantKey'>>('POST', path(tenant, '/rotate'), { json: key === undefined ? {} : { key } });
  }

  /** Final: the tenant's sandboxes stop, its plaintext is wiped, and nothing of it can be read again. */
  static async revoke(tenant: string, config?: ConnectionConfig): Promise<ControlPlaneReply<'revokeTenantKey'>> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'revokeTenantKey'>>('POST', path(tenant, '/revoke'));
  }
}
