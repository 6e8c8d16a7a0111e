// The cluster's readers-writer gate between captures (readers) and a chunk-store GC sweep (the writer), kept in the leases table.
import type { Kysely } from 'kysely';
import { SandglassError, type Clock } from '@sandglass/core';
import { isPostgres, toIso, type Schema } from '@sandglass/db';

/** The writer's row. It is never deleted (released = no holder), so it can always be locked. */
export const GC_LEASE = 'gc';
const CAPTURE_PREFIX = 'capture:';
const FREE = { holder: '', expires_at: toIso(0) };
/** Longer than any capture: a gateway that died mid-capture stops blocking the sweep after this. */
export const DEFAULT_CAPTURE_LEASE_MS = 15 * 60_000;

export interface CaptureLeaseGrant {
  expiresAt: string;
  ttlMs: number;
}

/**
 * A capture in flight anywhere holds `capture:<snapshotId>`; a sweep holds `gc`. Every change to either takes the `gc`
 * row's lock first (FOR UPDATE on PostgreSQL; SQLite has one writer), so a capture lease and the gc claim are
 * serialized: a capture either committed its lease before the sweep claimed `gc` (and the sweep, which then waits for
 * every capture lease to go, sees it) or reads `gc` held and is refused. Without the lock, READ COMMITTED lets a
 * capture's insert and the sweep's claim each miss the other (write skew). Writer-preferring: once `gc` is held no new
 * capture starts, so the wait ends when the captures in flight commit (or their leases expire).
 */
export class GcGate {
  constructor(
    private readonly db: Kysely<Schema>,
    private readonly clock: Clock,
  ) {}

  /** Takes a capture lease for `holder` (a node id); `conflict` while a sweep holds the gate, or another holder has the id. */
  async enterCapture(snapshotId: string, holder: string, ttlMs = DEFAULT_CAPTURE_LEASE_MS): Promise<CaptureLeaseGrant> {
    const nowMs = this.clock.nowMs();
    const expiresAt = toIso(nowMs + ttlMs);
    const name = CAPTURE_PREFIX + snapshotId;
    await this.db.transaction().execute(async (trx) => {
      const gate = await lockGate(trx);
      if (gate.holder !== '' && gate.expires_at > toIso(nowMs)) {
        throw new SandglassError('conflict', 'A chunk-store GC sweep is running; retry the capture once it has finished (minutes at most).');
      }
      const taken = await trx
        .insertInto('leases')
        .values({ name, holder, expires_at: expiresAt })
        .onConflict((oc) =>
          oc
            .column('name')
            .doUpdateSet({ holder, expires_at: expiresAt })
            .where((eb) => eb.or([eb('leases.holder', '=', holder), eb('leases.expires_at', '<=', toIso(nowMs))])),
        )
        .executeTakeFirst();
      if (Number(taken.numInsertedOrUpdatedRows ?? 0n) !== 1) {
        throw new SandglassError('conflict', `Snapshot ${snapshotId} is being captured by another node.`);
      }
    });
    return { expiresAt, ttlMs };
  }

  async leaveCapture(snapshotId: string, holder: string): Promise<void> {
    await this.db
      .deleteFrom('leases')
      .where('name', '=', CAPTURE_PREFIX + snapshotId)
      .where('holder', '=', holder)
      .execute();
  }

  /** Claims the gate for a sweep (or renews this holder's claim); false while another holder has it unexpired. */
  async claimSweep(holder: string, ttlMs: number): Promise<boolean> {
    const nowMs = this.clock.nowMs();
    return this.db.transaction().execute(async (trx) => {
      const gate = await lockGate(trx);
      if (gate.holder !== '' && gate.holder !== holder && gate.expires_at > toIso(nowMs)) return false;
      await trx
        .updateTable('leases')
        .set({ holder, expires_at: toIso(nowMs + ttlMs) })
        .where('name', '=', GC_LEASE)
        .execute();
      return true;
    });
  }

  /**
   * Renews this holder's claim; false when it lapsed (expired, and possibly taken since): the sweep must stop, since
   * captures may have started. Renewing an expired claim would hide that, so it is refused.
   */
  async renewSweep(holder: string, ttlMs: number): Promise<boolean> {
    const nowMs = this.clock.nowMs();
    const r = await this.db
      .updateTable('leases')
      .set({ expires_at: toIso(nowMs + ttlMs) })
      .where('name', '=', GC_LEASE)
      .where('holder', '=', holder)
      .where('expires_at', '>', toIso(nowMs))
      .executeTakeFirst();
    return r.numUpdatedRows === 1n;
  }

  async releaseSweep(holder: string): Promise<void> {
    await this.db.updateTable('leases').set(FREE).where('name', '=', GC_LEASE).where('holder', '=', holder).execute();
  }

  /** Capture leases not yet expired: the sweep may mark only when there are none. */
  async capturesInFlight(): Promise<number> {
    const rows = await this.db
      .selectFrom('leases')
      .select('name')
      .where('name', 'like', `${CAPTURE_PREFIX}%`)
      .where('expires_at', '>', toIso(this.clock.nowMs()))
      .execute();
    return rows.length;
  }
}

/** Creates the gate row if it is missing and locks it for the rest of the transaction. */
async function lockGate(trx: Kysely<Schema>): Promise<{ holder: string; expires_at: string }> {
  await trx
    .insertInto('leases')
    .values({ name: GC_LEASE, ...FREE })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  const q = trx.selectFrom('leases').select(['holder', 'expires_at']).where('name', '=', GC_LEASE);
  return (isPostgres(trx) ? q.forUpdate() : q).executeTakeFirstOrThrow();
}
