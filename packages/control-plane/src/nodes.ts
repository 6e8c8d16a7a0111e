// Gateways as members of a cluster: registration and heartbeats, placement by capacity, and death decided once.
import { sql, type Kysely } from 'kysely';
import { SandglassError, type Clock, type NodeApi } from '@sandglass/core';
import { isPostgres, toIso, type NodeRow, type Schema } from '@sandglass/db';
import type { GatewayDirectory, GatewayEndpoint, PlacementRequest } from './gateways.js';

/** What a gateway reports in each heartbeat: epoch null registers; sandboxes are those whose VMs run there now. */
export type Heartbeat = NodeApi.components['schemas']['Heartbeat'];

export interface HeartbeatResult {
  epoch: number;
  /** Sandboxes of the heartbeat that are not placed on this node any more: it must stop them. */
  stop: string[];
  /** Set on registration: sandboxes the node's previous process ran, whose VMs died with it. */
  orphaned: string[];
}

export interface MembershipOptions {
  db: Kysely<Schema>;
  clock: Clock;
  /** A node that has not sent a heartbeat for this long is declared dead and its sandboxes move. */
  deadAfterMs: number;
  heartbeatIntervalMs: number;
}

const LIVE_STATES = ['starting', 'running'] as const;

/**
 * The nodes table as a gateway directory. Every decision is one conditional UPDATE, so several control-plane replicas
 * on one database agree: a node is declared dead by exactly one of them, and a heartbeat carrying an epoch from before
 * that (or from before a newer registration) matches no row and is fenced.
 */
export class NodeDirectory implements GatewayDirectory {
  constructor(private readonly opts: MembershipOptions) {}

  get deadAfterMs(): number {
    return this.opts.deadAfterMs;
  }

  get heartbeatIntervalMs(): number {
    return this.opts.heartbeatIntervalMs;
  }

  async heartbeat(nodeId: string, hb: Heartbeat): Promise<HeartbeatResult> {
    checkUrl(hb.url, 'url');
    checkUrl(hb.internalUrl, 'internalUrl');
    const { db, clock } = this.opts;
    const now = toIso(clock.nowMs());
    const report = {
      url: hb.url,
      internal_url: hb.internalUrl,
      capacity_memory_mib: hb.capacityMemoryMib,
      free_memory_mib: hb.freeMemoryMib,
      capture_capacity_per_min: hb.captureCapacityPerMin == null ? null : Math.floor(hb.captureCapacityPerMin),
      sandboxes: hb.sandboxes.length,
      templates: JSON.stringify(hb.templates),
      last_seen_at: now,
    };
    let epoch: number;
    let orphaned: string[] = [];
    if (hb.epoch === null) {
      epoch = await db.transaction().execute(async (trx) => {
        // Two registrations of one node id at once (a misconfiguration) still get distinct epochs: the row is locked on
        // PostgreSQL, and SQLite has one writer at a time.
        const q = trx.selectFrom('nodes').select('epoch').where('id', '=', nodeId);
        const row = await (isPostgres(trx) ? q.forUpdate() : q).executeTakeFirst();
        const next = (row?.epoch ?? 0) + 1;
        if (row) {
          await trx
            .updateTable('nodes')
            .set({ ...report, state: 'alive', epoch: next, registered_at: now, dead_at: null })
            .where('id', '=', nodeId)
            .execute();
        } else {
          await trx
            .insertInto('nodes')
            .values({ id: nodeId, ...report, state: 'alive', epoch: next, registered_at: now, dead_at: null })
            .execute();
        }
        return next;
      });
      // What this node ran before it registered again died with its previous process (or was never started).
      const running = new Set(hb.sandboxes);
      orphaned = (await this.#placedOn(nodeId)).filter((id) => !running.has(id));
    } else {
      const moved = await db
        .updateTable('nodes')
        .set(report)
        .where('id', '=', nodeId)
        .where('epoch', '=', hb.epoch)
        .where('state', '=', 'alive')
        .executeTakeFirst();
      if (moved.numUpdatedRows !== 1n) {
        throw new SandglassError(
          'node_fenced',
          `Node ${nodeId} at epoch ${hb.epoch} was declared dead or registered again; stop every VM and register afresh.`,
        );
      }
      epoch = hb.epoch;
    }
    return { epoch, stop: await this.#notPlacedOn(nodeId, hb.sandboxes), orphaned };
  }

  /**
   * Declares dead every alive node silent for longer than deadAfterMs, and returns those this call decided (each
   * node is decided by exactly one caller, whichever replica's UPDATE matched it first).
   */
  async declareDead(): Promise<string[]> {
    const { db, clock, deadAfterMs } = this.opts;
    const nowMs = clock.nowMs();
    const rows = await db
      .updateTable('nodes')
      .set({ state: 'dead', epoch: sql<number>`epoch + 1`, dead_at: toIso(nowMs) })
      .where('state', '=', 'alive')
      .where('last_seen_at', '<', toIso(nowMs - deadAfterMs))
      .returning('id')
      .execute();
    return rows.map((r) => r.id);
  }

  /**
   * The alive node with the most uncommitted memory that fits the sandbox, preferring first the node holding a warm
   * pool of its template (`preferNode`: a create from it is a hand-over there), then one that can keep the
   * snapshot intervals asked of it (its sandboxes' and the new one's, against the capture capacity it last reported;
   * a node that has not measured one yet counts as able), then one with the template cached. A node that cannot keep up
   * is still used when no other fits: late snapshots are reported (snapshot.behind), a refused create is not a snapshot.
   */
  async pick(req: PlacementRequest): Promise<GatewayEndpoint> {
    const alive = await this.#alive();
    const committed = await this.#committed();
    const asked = req.snapshotIntervalS === undefined ? 0 : 60 / req.snapshotIntervalS;
    const candidates = alive
      .filter((n) => !req.exclude?.includes(n.id))
      .map((n) => ({
        node: n,
        room: Math.min(n.capacity_memory_mib - (committed.get(n.id)?.memoryMib ?? 0), n.free_memory_mib),
        keepsUp: n.capture_capacity_per_min === null || (committed.get(n.id)?.capturesPerMin ?? 0) + asked <= n.capture_capacity_per_min,
        cached: req.templateKey !== undefined && (JSON.parse(n.templates) as string[]).includes(req.templateKey),
        pooled: req.preferNode === n.id,
      }))
      .filter((c) => c.room >= req.memoryMib);
    candidates.sort(
      (a, b) =>
        Number(b.pooled) - Number(a.pooled) ||
        Number(b.keepsUp) - Number(a.keepsUp) ||
        Number(b.cached) - Number(a.cached) ||
        b.room - a.room ||
        a.node.id.localeCompare(b.node.id),
    );
    const best = candidates[0];
    if (!best) {
      throw new SandglassError(
        'capacity_exhausted',
        alive.length === 0
          ? 'No gateway is alive to run the sandbox; retry once a node has registered.'
          : `No gateway has ${req.memoryMib} MiB of guest memory free; retry later or ask for less memory.`,
      );
    }
    return endpoint(best.node);
  }

  /**
   * An alive node; a dead or unknown one is undefined, so nothing is sent to a node whose sandboxes may have moved.
   * One row by its key: every access-token issue asks this, and reading the whole fleet for it cost a scan of every
   * alive node per token (bench/fleet.ts).
   */
  async get(id: string): Promise<GatewayEndpoint | undefined> {
    const row = await this.#aliveQuery().where('id', '=', id).executeTakeFirst();
    return row && endpoint(row);
  }

  async all(): Promise<GatewayEndpoint[]> {
    return (await this.#alive()).map(endpoint);
  }

  async list(): Promise<NodeRow[]> {
    return this.opts.db.selectFrom('nodes').selectAll().orderBy('id').execute();
  }

  /** Alive and heard from within deadAfterMs: a silent node gets no new work even before it is declared dead. */
  async #alive(): Promise<NodeRow[]> {
    return this.#aliveQuery().orderBy('id').execute();
  }

  #aliveQuery() {
    const since = toIso(this.opts.clock.nowMs() - this.opts.deadAfterMs);
    return this.opts.db.selectFrom('nodes').selectAll().where('state', '=', 'alive').where('last_seen_at', '>=', since);
  }

  /** Per node, the guest memory and the rolling snapshots a minute its live sandboxes ask for. */
  async #committed(): Promise<Map<string, { memoryMib: number; capturesPerMin: number }>> {
    const rows = await this.opts.db
      .selectFrom('sandboxes')
      .select(['gateway_id', 'memory_mib', 'snapshot_interval_s'])
      .where('state', 'in', LIVE_STATES)
      .where('gateway_id', 'is not', null)
      .execute();
    const out = new Map<string, { memoryMib: number; capturesPerMin: number }>();
    for (const r of rows) {
      const c = out.get(r.gateway_id!) ?? { memoryMib: 0, capturesPerMin: 0 };
      c.memoryMib += r.memory_mib;
      c.capturesPerMin += 60 / r.snapshot_interval_s;
      out.set(r.gateway_id!, c);
    }
    return out;
  }

  async #placedOn(nodeId: string): Promise<string[]> {
    const rows = await this.opts.db.selectFrom('sandboxes').select('id').where('gateway_id', '=', nodeId).where('state', 'in', LIVE_STATES).execute();
    return rows.map((r) => r.id);
  }

  /**
   * Of the sandboxes a node runs, those the log places elsewhere or has ended (or never heard of). A paused one placed
   * on the node is its own: a resume there runs its VM before the node's sandbox.resumed reaches the log.
   */
  async #notPlacedOn(nodeId: string, running: string[]): Promise<string[]> {
    if (running.length === 0) return [];
    const mine = new Set<string>();
    for (let i = 0; i < running.length; i += 500) {
      const rows = await this.opts.db
        .selectFrom('sandboxes')
        .select('id')
        .where('id', 'in', running.slice(i, i + 500))
        .where('gateway_id', '=', nodeId)
        .where('state', 'in', [...LIVE_STATES, 'paused'])
        .execute();
      for (const r of rows) mine.add(r.id);
    }
    return running.filter((id) => !mine.has(id));
  }
}

function endpoint(row: NodeRow): GatewayEndpoint {
  return { id: row.id, url: row.url, internalUrl: row.internal_url };
}

/** Only http(s) URLs: the control plane calls internalUrl and hands url to clients. */
function checkUrl(value: string, field: string): void {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new SandglassError('invalid_argument', `${field} is not a URL.`, { details: { field } });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new SandglassError('invalid_argument', `${field} must be an http:// or https:// URL.`, { details: { field } });
  }
}

/**
 * Takes the named lease for ttlMs unless another holder has it unexpired; true when this holder now has it. One
 * statement, so two replicas racing for it cannot both win.
 */
export async function claimLease(db: Kysely<Schema>, name: string, holder: string, ttlMs: number, clock: Clock): Promise<boolean> {
  const nowMs = clock.nowMs();
  const expires = toIso(nowMs + ttlMs);
  const r = await db
    .insertInto('leases')
    .values({ name, holder, expires_at: expires })
    .onConflict((oc) => oc.column('name').doUpdateSet({ holder, expires_at: expires }).where('leases.expires_at', '<=', toIso(nowMs)))
    .executeTakeFirst();
  return Number(r.numInsertedOrUpdatedRows ?? 0n) === 1;
}

export async function releaseLease(db: Kysely<Schema>, name: string, holder: string): Promise<void> {
  await db.deleteFrom('leases').where('name', '=', name).where('holder', '=', holder).execute();
}
