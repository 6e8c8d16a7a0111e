// Sandbox lifecycle as the control plane drives it: typed commands in, events appended, gateways called; no HTTP here.
import type { Kysely } from 'kysely';
import { newId, SandglassError, signAccessToken, type Clock } from '@sandglass/core';
import { toIso, type SandboxRow, type SandboxState, type Schema } from '@sandglass/db';
import type { EventLog, StoredEvent } from '@sandglass/events';
import { toSandbox, type Access, type CreateSandboxRequest, type Sandbox } from './api.js';
import type { GatewayClient, GatewayDirectory, GatewayEndpoint } from './gateways.js';
import type { Principal } from './keys.js';
import { findTemplate } from './templates.js';

/** How long a data-plane token lives: short, because it cannot be revoked. */
export const ACCESS_TOKEN_TTL_MS = 15 * 60_000;

export interface SandboxServiceDeps {
  db: Kysely<Schema>;
  events: EventLog;
  gateways: GatewayDirectory;
  gatewayClient: GatewayClient;
  nodeSecret: Buffer;
  clock: Clock;
  /** The data-plane URL clients are given, when it differs from the URL the control plane reaches the gateway at. */
  publicGatewayUrl?: string;
}

const isFinal = (state: SandboxState) => state === 'ended' || state === 'failed';

/**
 * The control plane appends only `sandbox.created`, `sandbox.killed` and `sandbox.extended` (and `sandbox.failed` when the
 * gateway could not); the gateway appends `sandbox.started`, `sandbox.failed`, `command.*` and `file.*` itself.
 * No transaction is ever held across a gateway call: in the embedded deployment the gateway appends to the same database meanwhile.
 */
export class SandboxService {
  constructor(private readonly deps: SandboxServiceDeps) {}

  async create(who: Principal, req: CreateSandboxRequest): Promise<Sandbox> {
    const { db, events, gateways, gatewayClient, clock } = this.deps;
    const template = await findTemplate(db, req.template);
    if (!template) throw new SandglassError('template_not_found', `No template ${JSON.stringify(req.template)}; GET /v1/templates lists them.`, { details: { field: 'template' } });
    if (template.status === 'failed') throw new SandglassError('template_not_ready', `Template ${template.name} failed to build; rebuild it before creating sandboxes from it.`);
    if (template.status !== 'ready') throw new SandglassError('template_not_ready', `Template ${template.name} is still being built; retry shortly.`);

    const gateway = await gateways.pick({ tenantId: who.tenantId, memoryMib: req.memoryMib, vcpus: req.vcpus });
    const id = newId('sbx');
    const spec = { template: template.name, memoryMib: req.memoryMib, vcpus: req.vcpus, timeoutS: req.timeoutS };
    await events.append(
      { type: 'sandbox.created', tenantId: who.tenantId, sandboxId: id, data: { ...spec, metadata: req.metadata ?? {}, gatewayId: gateway.id, gatewayUrl: gateway.url } },
      { clock },
    );
    try {
      await gatewayClient.createSandbox(gateway, { id, tenantId: who.tenantId, ...spec });
    } catch (err) {
      const cause = err instanceof SandglassError ? err : new SandglassError('internal', undefined, { cause: err });
      // The gateway may already have recorded the failure itself; record it only where it did not.
      if (!isFinal((await this.#row(id)).state)) {
        await events.append({ type: 'sandbox.failed', tenantId: who.tenantId, sandboxId: id, data: { reason: cause.message, code: cause.code } }, { clock });
      }
      throw cause;
    }
    const row = await this.#row(id);
    return { ...toSandbox(row), access: this.#access(row, gateway) };
  }

  async list(who: Principal, state?: SandboxState): Promise<Sandbox[]> {
    let q = this.deps.db.selectFrom('sandboxes').selectAll().where('tenant_id', '=', who.tenantId);
    if (state) q = q.where('state', '=', state);
    return (await q.orderBy('created_at', 'desc').orderBy('id', 'desc').execute()).map(toSandbox);
  }

  async get(who: Principal, id: string): Promise<Sandbox> {
    return toSandbox(await this.#own(who, id));
  }

  /** Tells the gateway first, then records the kill; an ended sandbox is left as it is. */
  async kill(who: Principal, id: string): Promise<void> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) return;
    try {
      await this.deps.gatewayClient.killSandbox(await this.#gatewayOf(row), id);
    } catch (err) {
      // The gateway no longer runs it (it restarted, or the VM just ended): the kill has nothing left to do there.
      if (!(err instanceof SandglassError && (err.code === 'sandbox_not_found' || err.code === 'sandbox_not_running'))) throw err;
    }
    if (!isFinal((await this.#row(id)).state)) {
      await this.deps.events.append({ type: 'sandbox.killed', tenantId: who.tenantId, sandboxId: id, data: { reason: 'killed' } }, { clock: this.deps.clock });
    }
  }

  /** Moves the expiry to now + timeoutS, on the gateway first (it enforces it), then in the log. */
  async setTimeout(who: Principal, id: string, timeoutS: number): Promise<Sandbox> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) throw new SandglassError('sandbox_not_running', `Sandbox ${id} has ${row.state}; its timeout can no longer change.`);
    const expiresAt = toIso(this.deps.clock.nowMs() + timeoutS * 1000);
    await this.deps.gatewayClient.setExpiry(await this.#gatewayOf(row), id, expiresAt);
    await this.deps.events.append({ type: 'sandbox.extended', tenantId: who.tenantId, sandboxId: id, data: { timeoutS, expiresAt } }, { clock: this.deps.clock });
    return toSandbox(await this.#row(id));
  }

  async access(who: Principal, id: string): Promise<Access> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) throw new SandglassError('sandbox_not_running', `Sandbox ${id} has ${row.state}; there is nothing to connect to.`);
    return this.#access(row, await this.#gatewayOf(row));
  }

  async events(who: Principal, id: string, page: { afterSeq?: number; limit?: number }): Promise<StoredEvent[]> {
    await this.#own(who, id);
    return this.deps.events.list({ sandboxId: id, tenantId: who.tenantId, ...page });
  }

  async #row(id: string): Promise<SandboxRow> {
    return this.deps.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  }

  /** Another tenant's sandbox is indistinguishable from one that does not exist. */
  async #own(who: Principal, id: string): Promise<SandboxRow> {
    const row = await this.deps.db.selectFrom('sandboxes').selectAll().where('id', '=', id).where('tenant_id', '=', who.tenantId).executeTakeFirst();
    if (!row) throw new SandglassError('sandbox_not_found', `No sandbox ${id} exists for your tenant.`);
    return row;
  }

  async #gatewayOf(row: SandboxRow): Promise<GatewayEndpoint> {
    const known = row.gateway_id === null ? undefined : await this.deps.gateways.get(row.gateway_id);
    if (known) return known;
    if (row.gateway_id !== null && row.gateway_url !== null) return { id: row.gateway_id, url: row.gateway_url };
    throw new SandglassError('gateway_unavailable', `The gateway that runs sandbox ${row.id} is not known any more.`);
  }

  #access(row: SandboxRow, gateway: GatewayEndpoint): Access {
    const expMs = this.deps.clock.nowMs() + ACCESS_TOKEN_TTL_MS;
    return {
      gatewayUrl: this.deps.publicGatewayUrl ?? gateway.url,
      token: signAccessToken({ sbx: row.id, ten: row.tenant_id, exp: expMs }, this.deps.nodeSecret),
      expiresAt: toIso(expMs),
    };
  }
}
