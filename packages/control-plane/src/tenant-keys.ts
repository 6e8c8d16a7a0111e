// Operator routes for a tenant's keys (bring your own key): which provider, rotation, and revocation told to every gateway at once.
import type { Kysely } from 'kysely';
import { invalidArgument, SandglassError, type Clock, type ControlPlaneApi, type Logger } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';
import type { ProviderChoice, TenantKeyStatus } from '@sandglass/kms';
import type { GatewayClient, GatewayDirectory } from './gateways.js';
import type { Principal } from './keys.js';

type SetKeyProviderRequest = ControlPlaneApi.components['schemas']['SetKeyProviderRequest'];

/** What the deployment's key provider offers the operator (kms TenantKeys). */
export interface TenantKeyAdmin {
  use(tenantId: string, choice: ProviderChoice): Promise<TenantKeyStatus>;
  status(tenantId: string): Promise<TenantKeyStatus>;
  rotate(tenantId: string, opts?: { key?: string }): Promise<TenantKeyStatus>;
  revoke(tenantId: string): Promise<void>;
}

export interface TenantKeyServiceOptions {
  db: Kysely<Schema>;
  events: EventLog;
  clock: Clock;
  logger: Logger;
  admin: TenantKeyAdmin;
  gateways: GatewayDirectory;
  gatewayClient: GatewayClient;
}

/**
 * Only the operator manages keys: a provider names a module the control plane loads and a PIN file on its host, and a
 * revocation destroys a tenant's data for good. Every step is an event naming the provider and versions, never a key.
 */
export class TenantKeyService {
  readonly #o: TenantKeyServiceOptions;

  constructor(opts: TenantKeyServiceOptions) {
    this.#o = opts;
  }

  async status(by: Principal, tenant: string): Promise<TenantKeyStatus> {
    return this.#o.admin.status(await this.#tenant(by, tenant));
  }

  async use(by: Principal, tenant: string, body: SetKeyProviderRequest): Promise<TenantKeyStatus> {
    const tenantId = await this.#tenant(by, tenant);
    const status = await this.#o.admin.use(tenantId, choiceOf(body));
    await this.#append('key.provider_set', tenantId, {
      provider: status.provider,
      ...(status.pkcs11 ? { token: status.pkcs11.token, key: status.pkcs11.key } : {}),
      currentVersion: status.currentVersion,
      byKeyId: by.keyId,
    });
    return status;
  }

  async rotate(by: Principal, tenant: string, body: { key?: string } | undefined): Promise<TenantKeyStatus> {
    const tenantId = await this.#tenant(by, tenant);
    const before = await this.#o.admin.status(tenantId);
    const status = await this.#o.admin.rotate(tenantId, body?.key === undefined ? {} : { key: body.key });
    await this.#append('key.rotated', tenantId, {
      provider: status.provider,
      fromVersion: before.currentVersion,
      toVersion: status.currentVersion,
      ...(status.pkcs11 ? { key: status.pkcs11.key, rewrappedVersions: before.versions.map((v) => v.version) } : {}),
      byKeyId: by.keyId,
    });
    return status;
  }

  /** Shreds first, so nothing can be unwrapped again whatever happens next; then every gateway stops and wipes. */
  async revoke(by: Principal, tenant: string): Promise<{ keys: TenantKeyStatus; stoppedSandboxes: string[] }> {
    const tenantId = await this.#tenant(by, tenant);
    await this.#o.admin.revoke(tenantId);
    const keys = await this.#o.admin.status(tenantId);
    await this.#append('key.revoked', tenantId, { provider: keys.provider, versions: keys.versions.map((v) => v.version), byKeyId: by.keyId });
    const stoppedSandboxes: string[] = [];
    for (const gateway of await this.#o.gateways.all()) {
      try {
        stoppedSandboxes.push(...(await this.#o.gatewayClient.tenantKeyRevoked(gateway, tenantId)).stoppedSandboxes);
      } catch (err) {
        // The node's own poll of the provider finds the revocation within its interval.
        this.#o.logger.warn({ gateway: gateway.id, tenantId, err: (err as Error).message }, 'could not tell a gateway about a revoked tenant key');
      }
    }
    return { keys, stoppedSandboxes };
  }

  async #tenant(by: Principal, tenant: string): Promise<string> {
    if (by.role !== 'operator') throw new SandglassError('permission_denied', "Only an operator API key may manage tenants' keys.");
    const row = await this.#o.db
      .selectFrom('tenants')
      .select('id')
      .where((eb) => eb.or([eb('id', '=', tenant), eb('name', '=', tenant)]))
      .executeTakeFirst();
    if (!row) throw new SandglassError('tenant_not_found', `No tenant ${tenant} exists.`, { details: { field: 'id' } });
    return row.id;
  }

  async #append(type: string, tenantId: string, data: Record<string, unknown>): Promise<void> {
    await this.#o.events.append({ type, tenantId, data }, { clock: this.#o.clock });
  }
}

function choiceOf(body: SetKeyProviderRequest): ProviderChoice {
  const fields = ['module', 'token', 'key', 'pinFile'] as const;
  if (body.provider === 'keyring') {
    const extra = fields.find((f) => body[f] !== undefined);
    if (extra) throw invalidArgument(extra, 'is only for provider pkcs11');
    return { provider: 'keyring' };
  }
  for (const f of fields) if (body[f] === undefined) throw invalidArgument(f, 'is required for provider pkcs11');
  if (!body.module!.startsWith('/')) throw invalidArgument('module', 'must be an absolute path');
  if (!body.pinFile!.startsWith('/')) throw invalidArgument('pinFile', 'must be an absolute path');
  return { provider: 'pkcs11', module: body.module!, token: body.token!, key: body.key!, pinFile: body.pinFile! };
}
