// Custom templates' warm pools: the size each tenant set, and telling the node that holds the pool what to keep.
import type { Kysely } from 'kysely';
import { invalidArgument, type Clock, type Logger } from '@sandglass/core';
import { toIso, type Schema } from '@sandglass/db';
import type { GatewayClient, GatewayDirectory, GatewayEndpoint } from './gateways.js';
import { findTemplateVersion } from './templates.js';

/** The most warmed VMs one custom template may keep (the node's memory budget may hold fewer). */
export const MAX_WARM_POOL_SIZE = 8;

export interface TemplatePoolsDeps {
  db: Kysely<Schema>;
  clock: Clock;
  logger: Logger;
  gateways: GatewayDirectory;
  gatewayClient: GatewayClient;
}

/**
 * The database holds each pool's size and node; the node holds the VMs. Every change (size set, version published,
 * template deleted) is sent to the node at once, and every pool is sent again when the control plane starts and when
 * its node registers, so a restart of either side keeps it. A node that cannot be told now keeps what it had (a
 * deleted template's pool is drained at its next registration); creates never depend on the pool, only get faster.
 */
export class TemplatePools {
  constructor(private readonly deps: TemplatePoolsDeps) {}

  async size(tenantId: string, name: string): Promise<number> {
    const row = await this.deps.db.selectFrom('template_pools').select('size').where('tenant_id', '=', tenantId).where('name', '=', name).executeTakeFirst();
    return row?.size ?? 0;
  }

  async set(tenantId: string, name: string, size: number): Promise<void> {
    if (!Number.isInteger(size) || size < 0 || size > MAX_WARM_POOL_SIZE) {
      throw invalidArgument('warmPoolSize', `must be an integer from 0 to ${MAX_WARM_POOL_SIZE}`);
    }
    const { db, clock } = this.deps;
    const now = toIso(clock.nowMs());
    await db
      .insertInto('template_pools')
      .values({ tenant_id: tenantId, name, size, gateway_id: null, updated_at: now })
      .onConflict((oc) => oc.columns(['tenant_id', 'name']).doUpdateSet({ size, updated_at: now }))
      .execute();
    await this.push(tenantId, name);
  }

  /**
   * Warmed VMs of the pool ready to hand out now, as its node reports them; null when the node cannot say (not
   * placed yet, unreachable). A pool of size 0 has none.
   */
  async ready(tenantId: string, name: string): Promise<number | null> {
    const { db, gateways, gatewayClient } = this.deps;
    const row = await db
      .selectFrom('template_pools')
      .select(['size', 'gateway_id'])
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .executeTakeFirst();
    if (!row || row.size === 0) return 0;
    const node = row.gateway_id === null ? undefined : await gateways.get(row.gateway_id);
    if (!node) return null;
    try {
      const pool = (await gatewayClient.listTemplatePools(node)).find((p) => p.tenantId === tenantId && p.name === name);
      return pool?.available ?? 0;
    } catch {
      return null;
    }
  }

  /** The node holding a warm pool of this version's snapshot: placement prefers it for creates from the version. */
  async nodeFor(tenantId: string, name: string): Promise<string | undefined> {
    const row = await this.deps.db
      .selectFrom('template_pools')
      .select(['size', 'gateway_id'])
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .executeTakeFirst();
    return row && row.size > 0 && row.gateway_id !== null ? row.gateway_id : undefined;
  }

  /**
   * Tells the pool's node what to keep now: the newest version's snapshot at its size, or nothing (size 0, or the
   * template has no version left: its row goes too). A pool not yet placed goes where placement puts a create.
   */
  async push(tenantId: string, name: string): Promise<void> {
    const { db, gateways } = this.deps;
    const row = await db.selectFrom('template_pools').selectAll().where('tenant_id', '=', tenantId).where('name', '=', name).executeTakeFirst();
    if (!row) return;
    const version = await findTemplateVersion(db, tenantId, name);
    const held = row.gateway_id === null ? undefined : await gateways.get(row.gateway_id);
    if (!version || row.size === 0) {
      if (held) await this.#send(held, { tenantId, name, size: 0 });
      if (!version) await db.deleteFrom('template_pools').where('tenant_id', '=', tenantId).where('name', '=', name).execute();
      return;
    }
    const node = held ?? (await gateways.pick({ tenantId, memoryMib: version.memory_mib, vcpus: version.vcpus }).catch(() => undefined));
    if (!node) {
      this.deps.logger.warn({ tenantId, name }, 'no node has room for the warm pool of a template now; it is placed at the next node registration');
      return;
    }
    if (row.gateway_id !== node.id) {
      await db.updateTable('template_pools').set({ gateway_id: node.id }).where('tenant_id', '=', tenantId).where('name', '=', name).execute();
    }
    await this.#send(node, { tenantId, name, snapshotId: version.snapshot_id, size: row.size });
  }

  /** Sends every pool again (control plane start), or those of one node and those placed nowhere (its registration). */
  async pushAll(gatewayId?: string): Promise<void> {
    let q = this.deps.db.selectFrom('template_pools').select(['tenant_id', 'name']);
    if (gatewayId !== undefined) q = q.where((eb) => eb.or([eb('gateway_id', '=', gatewayId), eb('gateway_id', 'is', null)]));
    for (const r of await q.execute()) {
      await this.push(r.tenant_id, r.name).catch((err: unknown) => {
        this.deps.logger.warn({ tenantId: r.tenant_id, name: r.name, err: (err as Error).message }, 'could not set a template warm pool on its node');
      });
    }
  }

  async #send(node: GatewayEndpoint, req: { tenantId: string; name: string; snapshotId?: string; size: number }): Promise<void> {
    await this.deps.gatewayClient.setTemplatePool(node, req);
  }
}
