// The templates table (the gateway's boot code registers each template's status; the API lists them), and the
// registry of which stored snapshot is each template key's.
import type { Kysely } from 'kysely';
import { newId, systemClock, type Clock } from '@sandglass/core';
import { toIso, type Schema, type TemplateRow, type TemplateStatus } from '@sandglass/db';

export interface TemplateUpsert {
  name: string;
  status: TemplateStatus;
  memoryMib: number;
  /** Left as it is when omitted. */
  artifactKey?: string | null;
}

/** Creates the template by name or updates its status; its id and createdAt never change. */
export async function upsertTemplate(db: Kysely<Schema>, t: TemplateUpsert, opts: { clock?: Clock } = {}): Promise<TemplateRow> {
  const update = { status: t.status, memory_mib: t.memoryMib, ...(t.artifactKey === undefined ? {} : { artifact_key: t.artifactKey }) };
  await db
    .insertInto('templates')
    .values({ id: newId('tpl'), name: t.name, artifact_key: null, created_at: toIso((opts.clock ?? systemClock).nowMs()), ...update })
    .onConflict((oc) => oc.column('name').doUpdateSet(update))
    .execute();
  return db.selectFrom('templates').selectAll().where('name', '=', t.name).executeTakeFirstOrThrow();
}

export async function findTemplate(db: Kysely<Schema>, nameOrId: string): Promise<TemplateRow | undefined> {
  return db
    .selectFrom('templates')
    .selectAll()
    .where((eb) => eb.or([eb('name', '=', nameOrId), eb('id', '=', nameOrId)]))
    .executeTakeFirst();
}

export async function listTemplates(db: Kysely<Schema>): Promise<TemplateRow[]> {
  return db.selectFrom('templates').selectAll().orderBy('name').execute();
}

/** A snapshot in the chunk store, as the registry names it. */
export interface TemplateSnapshotRef {
  tenantId: string;
  snapshotId: string;
}

/**
 * The gateway's TemplateRegistry over the `template_snapshots` table: the first publication of a key holds, and every
 * node reads that one back. Insert-if-absent on the primary key, so two nodes racing both learn the same winner.
 */
export function dbTemplateRegistry(
  db: Kysely<Schema>,
  opts: { clock?: Clock } = {},
): {
  lookup(key: string): Promise<TemplateSnapshotRef | undefined>;
  publish(key: string, rec: TemplateSnapshotRef & { nodeId: string }): Promise<TemplateSnapshotRef>;
} {
  const lookup = async (key: string): Promise<TemplateSnapshotRef | undefined> => {
    const row = await db.selectFrom('template_snapshots').select(['tenant_id', 'snapshot_id']).where('key', '=', key).executeTakeFirst();
    return row && { tenantId: row.tenant_id, snapshotId: row.snapshot_id };
  };
  return {
    lookup,
    publish: async (key, rec) => {
      await db
        .insertInto('template_snapshots')
        .values({ key, tenant_id: rec.tenantId, snapshot_id: rec.snapshotId, node_id: rec.nodeId, created_at: toIso((opts.clock ?? systemClock).nowMs()) })
        .onConflict((oc) => oc.column('key').doNothing())
        .execute();
      const winner = await lookup(key);
      if (!winner) throw new Error(`template ${key} has no registry record right after it was published`);
      return winner;
    },
  };
}
