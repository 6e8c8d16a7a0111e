// API keys of a tenant: create (the key is shown once), list (metadata only) and revoke; admin keys manage their own tenant, the operator key every tenant.
import type * as ControlPlaneApi from './api/control-plane.generated.js';
import { ControlPlane } from './client.js';
import type { ConnectionConfig } from './config.js';
import type { ControlPlaneReply } from './replies.js';

type ControlPlaneSchemas = ControlPlaneApi.components['schemas'];

export type ApiKeyRole = ControlPlaneSchemas['ApiKeyRole'];

/** An API key as listed: never the key itself. */
export type ApiKeyInfo = ControlPlaneSchemas['ApiKeyInfo'];

/** A key just created: the only time the key itself is shown. */
export type CreatedApiKey = ControlPlaneSchemas['ApiKey'];

export interface ApiKeyCreateOptions extends ConnectionConfig {
  /** Default member. operator: only with an operator key, in its own tenant. */
  role?: ApiKeyRole;
  name?: string;
  /** Default: the caller's own tenant. Another tenant needs the operator key. */
  tenantId?: string;
  /** Refused this many seconds from now (60 … ten years); not with expiresAt. */
  expiresInS?: number;
  /** Refused from this time on; not with expiresInS. */
  expiresAt?: Date | string;
  /** Default sandglass (`sg_…`); e2b (`e2b_` + hex) for E2B SDK releases that refuse any other key. */
  format?: ControlPlaneSchemas['CreateApiKeyInTenantRequest']['format'];
}

export interface ApiKeyListOptions extends ConnectionConfig {
  /** Default: the caller's own tenant. */
  tenantId?: string;
}

export class ApiKeys {
  private constructor() {}

  static async create(opts: ApiKeyCreateOptions = {}): Promise<CreatedApiKey> {
    const { role, name, tenantId, expiresInS, expiresAt, format, ...config } = opts;
    const cp = await ControlPlane.open(config);
    const at = expiresAt instanceof Date ? expiresAt.toISOString() : expiresAt;
    return cp.json<ControlPlaneReply<'createApiKeyInTenant'>>('POST', '/v1/api-keys', { json: { role, name, tenantId, expiresInS, expiresAt: at, format } });
  }

  /** The keys of a tenant, oldest first, revoked and expired ones included. */
  static async list(opts: ApiKeyListOptions = {}): Promise<ApiKeyInfo[]> {
    const { tenantId, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listApiKeys'>>('GET', '/v1/api-keys', { query: { tenantId } })).apiKeys;
  }

  /** Refuses the key from the next request on; revoking a revoked key changes nothing. An unknown id throws NotFoundError (api_key_not_found). */
  static async revoke(id: string, config?: ConnectionConfig): Promise<ApiKeyInfo> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'revokeApiKey'>>('DELETE', `/v1/api-keys/${encodeURIComponent(id)}`);
  }
}
