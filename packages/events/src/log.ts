// The append-only, hash-chained event log; each append updates the projections in the same transaction.
import type { Kysely } from 'kysely';
import { newId, SandglassError, systemRandom, type Clock, type Random } from '@sandglass/core';
import { GENESIS_HASH, toIso, type EventRow, type Schema, type SandboxRow } from '@sandglass/db';
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
  limit?: number;
}

export type ChainReport = { ok: true; count: number; headSeq: number; headHash: string } | { ok: false; seq: number; problem: string };

export class EventLog {
  constructor(private readonly db: Kysely<Schema>) {}

  async append(input: AppendInput, opts: AppendOptions): Promise<StoredEvent> {
    if (!EVENT_TYPE_PATTERN.test(input.type)) throw new Error(`event type ${JSON.stringify(input.type)} is not a dotted lowercase name`);
    if (input.type.startsWith('sandbox.') && !input.sandboxId) throw new Error(`${input.type} needs a sandboxId`);
    // What is hashed must be exactly what a later read parses back, so normalise through canonical JSON first.
    const data = JSON.parse(canonicalJson(input.data ?? {})) as Record<string, unknown>;
    const run = async (trx: Kysely<Schema>): Promise<StoredEvent> => {
      const head = await trx.selectFrom('event_chain_head').select(['seq', 'hash']).where('id', '=', HEAD_ID).executeTakeFirstOrThrow();
      const body = {
        id: newId('evt', (opts.random ?? systemRandom).bytes),
        type: input.type,
        tenantId: input.tenantId,
        sandboxId: input.sandboxId ?? null,
        at: toIso(opts.clock.nowMs()),
        data,
        prevHash: head.hash,
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
          hash,
        })
        .returning('seq')
        .executeTakeFirstOrThrow();
      // Compare-and-set on the head: a concurrent appender (another replica on PostgreSQL) that linked to the same
      // head makes this update miss, and the whole append rolls back instead of forking the chain.
      const moved = await trx.updateTable('event_chain_head').set({ seq, hash }).where('id', '=', HEAD_ID).where('hash', '=', head.hash).executeTakeFirst();
      if (moved.numUpdatedRows !== 1n) throw new SandglassError('conflict', 'The event log moved during this append; retry the request.');
      const event: StoredEvent = { seq, ...body, hash };
      if (event.sandboxId && event.type.startsWith('sandbox.')) await applyToProjection(trx, event);
      if (event.type.startsWith('snapshot.')) await applySnapshot(trx, event);
      return event;
    };
    return opts.trx ? run(opts.trx) : this.db.transaction().execute(run);
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
    if (filter.limit !== undefined) q = q.limit(filter.limit);
    return (await q.execute()).map(fromRow);
  }

  /** Walks the whole log: every hash recomputes, every link points at the previous event, and the head is the last. */
  async verifyChain(): Promise<ChainReport> {
    let prev = GENESIS_HASH;
    let count = 0;
    let last = { seq: 0, hash: GENESIS_HASH };
    for (const row of await this.db.selectFrom('events').selectAll().orderBy('seq', 'asc').execute()) {
      let event: StoredEvent;
      try {
        event = fromRow(row);
      } catch {
        return { ok: false, seq: row.seq, problem: 'data is not valid JSON' };
      }
      if (event.prevHash !== prev)
        return { ok: false, seq: row.seq, problem: 'prev_hash does not match the previous event: an event was removed or reordered' };
      if (eventHash(event) !== event.hash) return { ok: false, seq: row.seq, problem: 'hash does not match the content: the event was edited' };
      prev = event.hash;
      last = { seq: row.seq, hash: event.hash };
      count++;
    }
    const head = await this.db.selectFrom('event_chain_head').select(['seq', 'hash']).where('id', '=', HEAD_ID).executeTakeFirst();
    if (!head || head.seq !== last.seq || head.hash !== last.hash) {
      return { ok: false, seq: head?.seq ?? 0, problem: 'the chain head is not the last event: events were removed from the end' };
    }
    return { ok: true, count, headSeq: last.seq, headHash: last.hash };
  }

  /** Recomputes the sandboxes and snapshots tables from the log alone, in one transaction. */
  async rebuildProjections(): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      const events = (await trx.selectFrom('events').selectAll().orderBy('seq', 'asc').execute()).map(fromRow);
      await trx.deleteFrom('sandboxes').execute();
      for (const row of project(events).values()) await trx.insertInto('sandboxes').values(row).execute();
      await trx.deleteFrom('snapshots').execute();
      for (const e of events) if (e.type.startsWith('snapshot.')) await applySnapshot(trx, e);
    });
  }
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
  if (change.deleteId) await trx.deleteFrom('snapshots').where('id', '=', change.deleteId).execute();
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
    hash: row.hash,
  };
}
