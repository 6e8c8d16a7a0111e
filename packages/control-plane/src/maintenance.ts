// Snapshot retention and chunk-store GC for a cluster: one replica at a time, the sweep gated against captures on every node.
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { SandglassError, type Clock, type Logger } from '@sandglass/core';
import type { ChunkStore, GcResult } from '@sandglass/chunkstore';
import { isPostgres, toIso, type Schema } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';
import { planRetention, type RetentionPolicy } from '@sandglass/snapshots';
import { GcGate } from './gc-gate.js';
import { claimLease, releaseLease } from './nodes.js';
import { Rounds } from './rounds.js';

export const MAINTENANCE_LEASE = 'maintenance';

export interface MaintenanceOptions {
  db: Kysely<Schema>;
  events: EventLog;
  /** The chunk store every gateway writes, opened with the control plane's own keyring. */
  store: ChunkStore;
  retention: RetentionPolicy;
  clock: Clock;
  logger: Logger;
  intervalMs: number;
  /** Unreferenced chunks younger than this survive (also staged writes of a crashed capture); default 15 min. */
  graceMs?: number;
  /** How long the maintenance and gc claims last between renewals (renewed every quarter of it); default 2 min. */
  leaseMs?: number;
  /** How often a sweep holding the gate looks whether the captures in flight have finished; default 1 s. */
  pollMs?: number;
  /**
   * How long a sweep holds the gate waiting for captures in flight before it gives the round up (default 2 min):
   * every capture in the cluster waits meanwhile, and a lease left by a dead gateway would hold them all until it expires.
   */
  captureWaitMs?: number;
}

export interface MaintenanceResult {
  deleted: number;
  gc: GcResult;
}

const DEFAULT_GRACE_MS = 15 * 60_000;
const DEFAULT_LEASE_MS = 2 * 60_000;
const DEFAULT_CAPTURE_WAIT_MS = 2 * 60_000;

/**
 * Every intervalMs, each replica tries the `maintenance` lease; the winner thins snapshots by the retention policy
 * (the `snapshots` projection: `snapshot.deleted`, then the manifest goes) and then sweeps the chunk store under the
 * gc gate (gc-gate.ts): it claims `gc`, which refuses new capture leases, waits until no unexpired capture lease is
 * left, marks (every manifest) and sweeps. Both claims are renewed while the round runs; when a renewal fails or does
 * not come back in time the round stops before its next delete, since another replica or new captures may then go ahead.
 */
export class Maintenance {
  readonly #holder = `cp-${process.pid}-${randomBytes(4).toString('hex')}`;
  readonly #gate: GcGate;
  readonly #leaseMs: number;
  readonly #rounds: Rounds;

  constructor(private readonly opts: MaintenanceOptions) {
    this.#gate = new GcGate(opts.db, opts.clock);
    this.#leaseMs = opts.leaseMs ?? DEFAULT_LEASE_MS;
    this.#rounds = new Rounds(
      async () => {
        const r = await this.tick();
        if (r) opts.logger.info({ deleted: r.deleted, deletedChunks: r.gc.deletedChunks, freedBytes: r.gc.freedBytes }, 'snapshot maintenance done');
      },
      opts.intervalMs,
      (err) => opts.logger.warn({ err: (err as Error).message }, 'snapshot maintenance failed'),
    );
  }

  start(): void {
    this.#rounds.start();
  }

  async stop(): Promise<void> {
    await this.#rounds.stop();
  }

  /** One round; undefined when another replica holds the maintenance lease. */
  async tick(): Promise<MaintenanceResult | undefined> {
    const { db, clock } = this.opts;
    if (!(await claimLease(db, MAINTENANCE_LEASE, this.#holder, this.#leaseMs, clock))) return undefined;
    const lapse = new AbortController();
    let sweeping = false;
    const keepAlive = this.#keepAlive(lapse, () => sweeping);
    try {
      const deleted = await this.#thin(lapse.signal);
      if (!(await this.#gate.claimSweep(this.#holder, this.#leaseMs))) {
        throw new SandglassError('conflict', 'Another replica still holds the gc gate; the next round sweeps.');
      }
      sweeping = true;
      let gc: GcResult;
      try {
        await this.#waitForCaptures(lapse.signal);
        gc = await this.opts.store.gc({ graceMs: this.opts.graceMs ?? DEFAULT_GRACE_MS, signal: lapse.signal });
      } finally {
        sweeping = false;
        await this.#gate.releaseSweep(this.#holder);
      }
      await this.opts.events.append({ type: 'gc.completed', tenantId: 'system', data: { thinned: deleted, ...gc } }, { clock });
      return { deleted, gc };
    } finally {
      keepAlive();
      await releaseLease(db, MAINTENANCE_LEASE, this.#holder).catch(() => undefined);
    }
  }

  /** Deletes what the retention policy drops: the record first (never offered again), then the manifest. */
  async #thin(signal: AbortSignal): Promise<number> {
    const { db, events, store, clock } = this.opts;
    const rows = await db
      .selectFrom('snapshots')
      .innerJoin('sandboxes', 'sandboxes.id', 'snapshots.sandbox_id')
      .select(['snapshots.id', 'snapshots.tenant_id', 'snapshots.sandbox_id', 'snapshots.taken_at', 'snapshots.pinned', 'sandboxes.state'])
      .execute();
    const drop = new Set(
      planRetention(
        rows.map((r) => ({
          id: r.id,
          sandboxId: r.sandbox_id,
          takenAtMs: Date.parse(r.taken_at),
          pinned: r.pinned === 1,
          sandboxEnded: r.state === 'ended' || r.state === 'failed',
        })),
        clock.nowMs(),
        this.opts.retention,
      ),
    );
    let deleted = 0;
    for (const r of rows) {
      if (!drop.has(r.id)) continue;
      signal.throwIfAborted();
      // Named (so pinned) since the plan read it, or deleted meanwhile: it stays out of this round. Row and append
      // share a transaction, the row locked on PostgreSQL, so a snapshot.named cannot land between them.
      const thinned = await db.transaction().execute(async (trx) => {
        const q = trx.selectFrom('snapshots').select('pinned').where('id', '=', r.id);
        const now = await (isPostgres(trx) ? q.forUpdate() : q).executeTakeFirst();
        if (!now || now.pinned === 1) return false;
        await events.append(
          { type: 'snapshot.deleted', tenantId: r.tenant_id, sandboxId: r.sandbox_id, data: { snapshotId: r.id, why: 'retention' } },
          { clock, trx },
        );
        return true;
      });
      if (!thinned) continue;
      await (await store.tenant(r.tenant_id)).deleteManifest(r.id);
      deleted++;
    }
    return deleted;
  }

  /** No capture starts while `gc` is held; those in flight end by committing, failing, or their lease expiring. */
  async #waitForCaptures(signal: AbortSignal): Promise<void> {
    const pollMs = this.opts.pollMs ?? 1000;
    const giveUpAtMs = performance.now() + (this.opts.captureWaitMs ?? DEFAULT_CAPTURE_WAIT_MS);
    for (let first = true, n: number; (n = await this.#gate.capturesInFlight()) > 0; first = false) {
      if (first) this.opts.logger.info({ captures: n }, 'gc sweep waiting for the captures in flight');
      signal.throwIfAborted();
      if (performance.now() >= giveUpAtMs) {
        throw new SandglassError('conflict', `${n} capture lease(s) still held; this round does not sweep, a later one will (leases expire).`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, pollMs);
        signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
    signal.throwIfAborted();
  }

  /**
   * Renews the maintenance lease (and the gc claim while sweeping) every quarter of leaseMs. A renewal refused, failed,
   * or not answered within half of leaseMs of the last good one aborts the round: by then the claim may lapse on
   * the database's terms. Returns the stopper.
   */
  #keepAlive(lapse: AbortController, sweeping: () => boolean): () => void {
    const { db, clock, logger } = this.opts;
    const leaseMs = this.#leaseMs;
    const lapsed = (why: string) => {
      if (lapse.signal.aborted) return;
      logger.warn({ why }, 'maintenance claim lapsed: stopping this round');
      lapse.abort(new SandglassError('conflict', `The maintenance round lost its claim (${why}); a later round goes on.`));
    };
    let deadline = setTimeout(() => lapsed('no renewal in time'), leaseMs / 2);
    const renew = async () => {
      const sentMs = performance.now();
      const nowMs = clock.nowMs();
      const ok =
        (
          await db
            .updateTable('leases')
            .set({ expires_at: toIso(nowMs + leaseMs) })
            .where('name', '=', MAINTENANCE_LEASE)
            .where('holder', '=', this.#holder)
            .where('expires_at', '>', toIso(nowMs))
            .executeTakeFirst()
        ).numUpdatedRows === 1n &&
        (!sweeping() || (await this.#gate.renewSweep(this.#holder, leaseMs)));
      if (!ok) return lapsed('renewal refused');
      clearTimeout(deadline);
      // From when the renewal was sent: the database dated the new expiry no earlier than that.
      deadline = setTimeout(() => lapsed('no renewal in time'), leaseMs / 2 - (performance.now() - sentMs));
    };
    const every = setInterval(() => {
      renew().catch((err: unknown) => lapsed((err as Error).message));
    }, leaseMs / 4);
    return () => {
      clearInterval(every);
      clearTimeout(deadline);
    };
  }
}
