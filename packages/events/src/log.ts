// The append-only, hash-chained event log; each append updates the projections in the same transaction.
import type { Kysely } from 'kysely';
import { failpoint, newId, SandglassError, systemRandom, type Clock, type Random } from '@sandglass/core';
import { GENESIS_HASH, fromIso, isPostgres, toIso, type EventRow, type Schema, type SandboxRow } from '@sandglass/db';
import { canonicalJson, eventHash } from './hash.js';
import { project, projectSnapshot } from './project.js';
import { EVENT_TYPE_PATTERN, type AppendInput, type StoredEvent } from './types.js';

const HEAD_ID = 'main';

export interface AppendOptions {
  clock: Clock;
  /** Source of the event id's randomness. */
  random?: Random;
  /** Append inside the caller's transaction, so a row the caller writes and its event commit together. */
  trx?: Kysely<Schema>;
}

export interface ListFilter {
  sandboxId?: string;
  tenantId?: string;
  /** Only events of these types or families: 'egress' is every egress.* type, 'sandbox.created' that type alone. */
  types?: string[];
  /** Only events with a larger seq: resume where a previous page ended. */
  afterSeq?: number;
  /** Only events with this seq or a smaller one. */
  untilSeq?: number;
  limit?: number;
}

export type ChainReport = { ok: true; count: number; headSeq: number; headHash: string } | { ok: false; seq: number; problem: string };

/**
 * How many times an append that lost the race for the chain head starts again. On PostgreSQL the head's row lock makes a
 * lost race impossible at READ COMMITTED; the retry covers what the lock cannot (another isolation level, a SQLite file
 * written by a second process), so a concurrent appender never surfaces as an error to the user.
 */
const APPEND_ATTEMPTS = 5;

/**
 * Several writers (control-plane replicas, each with its own pool, on one PostgreSQL database) append to one chain:
 * - Each append, in one transaction, locks the single `event_chain_head` row (SELECT … FOR UPDATE), links the new event
 *   to the head it read, inserts it, moves the head with a compare-and-set and applies the event to the projections,
 *   then commits, releasing the lock. Appenders queue on that row lock, so the chain is linear: no two events link to
 *   the same predecessor (prev_hash is also UNIQUE, a second line of defence).
 * - seq is drawn from the identity sequence while the lock is held, so seq order is chain order and commit order: a
 *   reader paging with `afterSeq` never skips an event that commits later with a smaller seq.
 * - The projections (sandboxes, snapshots) are written only by appends and rebuilds, both under the same lock, each
 *   reading the row it changes inside the lock: they are the fold of the log in seq order, exactly what
 *   rebuildProjections computes.
 * - An append inside a caller's transaction holds the lock until the caller commits; callers append last, after their
 *   own rows, so no transaction waits for the head while holding a row another appender needs.
 * SQLite has one writer at a time (one connection per process, and a database-wide write lock), so the same holds there
 * without a row lock.
 */
export class EventLog {
  readonly #postgres: boolean;

  constructor(private readonly db: Kysely<Schema>) {
    this.#postgres = isPostgres(db);
  }

  async append(input: AppendInput, opts: AppendOptions): Promise<StoredEvent> {
    if (!EVENT_TYPE_PATTERN.test(input.type)) throw new Error(`event type ${JSON.stringify(input.type)} is not a dotted lowercase name`);
    if (input.type.startsWith('sandbox.') && !input.sandboxId) throw new Error(`${input.type} needs a sandboxId`);
    // What is hashed must be exactly what a later read parses back, so normalise through canonical JSON first.
    const data = JSON.parse(canonicalJson(input.data ?? {})) as Record<string, unknown>;
    const run = async (trx: Kysely<Schema>): Promise<StoredEvent> => {
      failpoint('events.append');
      const head = await this.#lockHead(trx);
      if (input.id !== undefined) {
        // A redelivery (the sender did not see our answer): the event is in the log once already. Checked under the
        // head's lock, so two deliveries of one event cannot both pass.
        const existing = await trx.selectFrom('events').selectAll().where('id', '=', input.id).executeTakeFirst();
        if (existing) return fromRow(existing);
      }
      const sandboxId = input.sandboxId ?? null;
      // Read under the head's lock like the head itself: the sandbox's chain cannot fork any more than the main one.
      const sandboxPrevHash = sandboxId === null ? undefined : await sandboxHead(trx, input.tenantId, sandboxId);
      const body = {
        id: input.id ?? newId('evt', (opts.random ?? systemRandom).bytes),
        type: input.type,
        tenantId: input.tenantId,
        sandboxId,
        at: input.at === undefined ? toIso(opts.clock.nowMs()) : toIso(fromIso(input.at)),
        data,
        prevHash: head.hash,
        ...(sandboxPrevHash === undefined ? {} : { sandboxPrevHash }),
      };
      const hash = eventHash(body);
      const { seq } = await trx
        .insertInto('events')
        .values({
          id: body.id,
          type: body.type,
          tenant_id: body.tenantId,
          sandbox_id: body.sandboxId,
          at: body.at,
          data: canonicalJson(data),
          prev_hash: body.prevHash,
          sandbox_prev_hash: sandboxPrevHash ?? null,
          hash,
        })
        .returning('seq')
        .executeTakeFirstOrThrow();
      // Compare-and-set on the head: should another appender have linked to the same head (no row lock held), this
      // update misses and the append rolls back instead of forking the chain.
      const moved = await trx.updateTable('event_chain_head').set({ seq, hash }).where('id', '=', HEAD_ID).where('hash', '=', head.hash).executeTakeFirst();
      if (moved.numUpdatedRows !== 1n) throw new SandglassError('conflict', 'The event log moved during this append; retry the request.');
      const event: StoredEvent = { seq, ...body, hash };
      if (event.sandboxId && event.type.startsWith('sandbox.')) await applyToProjection(trx, event);
      if (event.type.startsWith('snapshot.')) await applySnapshot(trx, event);
      // Thrown here, the whole transaction rolls back: the commit that fails (or the crash just before it).
      failpoint('db.commit');
      return event;
    };
    // In the caller's transaction a lost race cannot be retried here (the caller's own writes would be lost with it).
    if (opts.trx) return run(opts.trx);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.db.transaction().execute(run);
      } catch (err) {
        if (attempt >= APPEND_ATTEMPTS || !lostTheRace(err)) throw err;
      }
    }
  }

  /** The chain head, locked until the transaction ends on PostgreSQL, so appends and rebuilds queue behind each other. */
  async #lockHead(trx: Kysely<Schema>): Promise<{ seq: number; hash: string }> {
    const q = trx.selectFrom('event_chain_head').select(['seq', 'hash']).where('id', '=', HEAD_ID);
    return (this.#postgres ? q.forUpdate() : q).executeTakeFirstOrThrow();
  }

  /** The newest event's seq (0 for an empty log). seq is commit order, so every event up to it has committed: a tail starts here. */
  async headSeq(): Promise<number> {
    const row = await this.db.selectFrom('event_chain_head').select('seq').where('id', '=', HEAD_ID).executeTakeFirstOrThrow();
    return Number(row.seq);
  }

  async list(filter: ListFilter = {}): Promise<StoredEvent[]> {
    let q = this.db.selectFrom('events').selectAll().orderBy('seq', 'asc');
    if (filter.sandboxId !== undefined) q = q.where('sandbox_id', '=', filter.sandboxId);
    if (filter.tenantId !== undefined) q = q.where('tenant_id', '=', filter.tenantId);
    if (filter.types !== undefined) {
      const types = filter.types;
      // A prefix compare rather than LIKE, whose '_' wildcard would let 'api_key' match 'apixkey'; substr is on both dialects.
      q = q.where((eb) =>
        eb.or(types.flatMap((t) => [eb('type', '=', t), eb(eb.fn<string>('substr', ['type', eb.val(1), eb.val(t.length + 1)]), '=', `${t}.`)])),
      );
    }
    if (filter.afterSeq !== undefined) q = q.where('seq', '>', filter.afterSeq);
    if (filter.untilSeq !== undefined) q = q.where('seq', '<=', filter.untilSeq);
    if (filter.limit !== undefined) q = q.limit(filter.limit);
    return (await q.execute()).map(fromRow);
  }

  /**
   * How many of the tenant's events name the sandbox, and the last one's seq, read in one statement. seq is commit order,
   * so no event with a seq up to lastSeq commits later: paging with untilSeq = lastSeq reads exactly `count` events.
   */
  async sandboxExtent(tenantId: string, sandboxId: string): Promise<{ count: number; lastSeq: number }> {
    const row = await this.db
      .selectFrom('events')
      .select((eb) => [eb.fn.countAll<number | string | bigint>().as('count'), eb.fn.max('seq').as('lastSeq')])
      .where('sandbox_id', '=', sandboxId)
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    // PostgreSQL answers count(*) and a bigint max as strings.
    return { count: Number(row.count), lastSeq: Number(row.lastSeq ?? 0) };
  }

  /** Walks the whole log: every hash recomputes, every link points at the previous event, and the head is the last. */
  async verifyChain(): Promise<ChainReport> {
    // One snapshot for the events and the head, so appends committing meanwhile do not look like a truncated tail.
    // (SQLite: a transaction is one snapshot already.)
    const trx = this.db.transaction();
    return (this.#postgres ? trx.setIsolationLevel('repeatable read') : trx).execute(verifyIn);
  }

  /** Recomputes the sandboxes and snapshots tables from the log alone, in one transaction that holds off appends. */
  async rebuildProjections(): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await this.#lockHead(trx);
      const events = (await trx.selectFrom('events').selectAll().orderBy('seq', 'asc').execute()).map(fromRow);
      await trx.deleteFrom('sandboxes').execute();
      for (const row of project(events).values()) await trx.insertInto('sandboxes').values(row).execute();
      await trx.deleteFrom('snapshots').execute();
      for (const e of events) if (e.type.startsWith('snapshot.')) await applySnapshot(trx, e);
    });
  }
}

/** An append that linked to a head another appender took first: the conflict above, or prev_hash's UNIQUE refusing the fork. */
function lostTheRace(err: unknown): boolean {
  if (err instanceof SandglassError) return err.code === 'conflict';
  const e = err as { code?: unknown; constraint?: unknown; message?: unknown };
  // PostgreSQL: unique_violation on the prev_hash index; SQLite: SQLITE_CONSTRAINT_UNIQUE naming the column.
  if (e.code === '23505') return e.constraint === 'events_prev_hash_key';
  return e.code === 'SQLITE_CONSTRAINT_UNIQUE' && typeof e.message === 'string' && e.message.includes('events.prev_hash');
}

/**
 * The hash of the sandbox's last event (the (sandbox_id, seq) index finds it), or GENESIS_HASH before its first. The
 * chain is the tenant's events of the sandbox, exactly what that tenant may export: an event some gateway recorded under
 * another tenant for the same id starts a chain of its own rather than becoming a link the tenant could not show.
 */
async function sandboxHead(trx: Kysely<Schema>, tenantId: string, sandboxId: string): Promise<string> {
  const last = await trx
    .selectFrom('events')
    .select('hash')
    .where('sandbox_id', '=', sandboxId)
    .where('tenant_id', '=', tenantId)
    .orderBy('seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  return last?.hash ?? GENESIS_HASH;
}

/**
 * Walks the whole log: every hash recomputes, every link points at the previous event (and at the sandbox's previous
 * event, where the event has that link), and the head is the last.
 */
async function verifyIn(db: Kysely<Schema>): Promise<ChainReport> {
  let prev = GENESIS_HASH;
  let count = 0;
  let last = { seq: 0, hash: GENESIS_HASH };
  // Each sandbox's last hash so far; events from before the sub-chain count too, since the first linked event points at one.
  const sandboxHeads = new Map<string, string>();
  for (const row of await db.selectFrom('events').selectAll().orderBy('seq', 'asc').execute()) {
    let event: StoredEvent;
    try {
      event = fromRow(row);
    } catch {
      return { ok: false, seq: row.seq, problem: 'data is not valid JSON' };
    }
    if (event.prevHash !== prev) return { ok: false, seq: row.seq, problem: 'prev_hash does not match the previous event: an event was removed or reordered' };
    if (eventHash(event) !== event.hash) return { ok: false, seq: row.seq, problem: 'hash does not match the content: the event was edited' };
    if (event.sandboxId !== null) {
      const chain = `${event.tenantId}/${event.sandboxId}`;
      if (event.sandboxPrevHash !== undefined && event.sandboxPrevHash !== (sandboxHeads.get(chain) ?? GENESIS_HASH)) {
        return {
          ok: false,
          seq: row.seq,
          problem: "sandbox_prev_hash does not match the sandbox's previous event: one of its events was removed or reordered",
        };
      }
      sandboxHeads.set(chain, event.hash);
    }
    prev = event.hash;
    last = { seq: row.seq, hash: event.hash };
    count++;
  }
  const head = await db.selectFrom('event_chain_head').select(['seq', 'hash']).where('id', '=', HEAD_ID).executeTakeFirst();
  if (!head || head.seq !== last.seq || head.hash !== last.hash) {
    return { ok: false, seq: head?.seq ?? 0, problem: 'the chain head is not the last event: events were removed from the end' };
  }
  return { ok: true, count, headSeq: last.seq, headHash: last.hash };
}

async function applyToProjection(trx: Kysely<Schema>, event: StoredEvent): Promise<void> {
  const id = event.sandboxId!;
  const current = await trx.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirst();
  const next = project([event], new Map<string, SandboxRow>(current ? [[id, current]] : [])).get(id)!;
  if (!current) await trx.insertInto('sandboxes').values(next).execute();
  else if (next !== current) await trx.updateTable('sandboxes').set(next).where('id', '=', id).execute();
}

async function applySnapshot(trx: Kysely<Schema>, event: StoredEvent): Promise<void> {
  const change = projectSnapshot(event);
  if (change.insert) await trx.insertInto('snapshots').values(change.insert).execute();
  if (change.rename) {
    const { id, tenantId, name, pinned } = change.rename;
    // Only the tenant's own row: a rename of an id thinned or deleted meanwhile changes nothing, live or rebuilt.
    await trx.updateTable('snapshots').set({ name, pinned }).where('id', '=', id).where('tenant_id', '=', tenantId).execute();
  }
  if (change.deletion) {
    const { id, tenantId, sandboxId } = change.deletion;
    await trx
      .deleteFrom('snapshots')
      .where('id', '=', id)
      .where('tenant_id', '=', tenantId)
      .$if(sandboxId !== undefined, (q) => q.where('sandbox_id', '=', sandboxId!))
      .execute();
  }
}

function fromRow(row: EventRow): StoredEvent {
  return {
    seq: row.seq,
    id: row.id,
    type: row.type,
    tenantId: row.tenant_id,
    sandboxId: row.sandbox_id,
    at: row.at,
    data: JSON.parse(row.data) as Record<string, unknown>,
    prevHash: row.prev_hash,
    ...(row.sandbox_prev_hash === null ? {} : { sandboxPrevHash: row.sandbox_prev_hash }),
    hash: row.hash,
  };
}
