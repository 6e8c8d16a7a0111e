// The templates table (the gateway's boot code registers each template's status; the API lists them), the lookups
// of tenants' template versions, and the registry of which stored snapshot is each template key's.
import type { Kysely, Transaction } from 'kysely';
import { newId, systemClock, type Clock } from '@sandglass/core';
import { toIso, type Schema, type TemplateRow, type TemplateStatus, type TemplateVersionRow } from '@sandglass/db';

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

/** The version a create names: a tenant template's newest version by name, or one version by its `tpl_…` id. */
export async function findTemplateVersion(db: Kysely<Schema>, tenantId: string, nameOrId: string): Promise<TemplateVersionRow | undefined> {
  const q = db.selectFrom('template_versions').selectAll().where('tenant_id', '=', tenantId);
  if (nameOrId.startsWith('tpl_')) {
    const byId = await q.where('id', '=', nameOrId).executeTakeFirst();
    if (byId) return byId;
  }
  return q.where('name', '=', nameOrId).orderBy('version', 'desc').limit(1).executeTakeFirst();
}

/**
 * A version of a template published for every tenant: by name its newest version, by `tpl_…` id that version, only
 * while its template is published.
 */
export async function findPublishedVersion(db: Kysely<Schema>, nameOrId: string): Promise<TemplateVersionRow | undefined> {
  const q = publishedVersionsQuery(db);
  if (nameOrId.startsWith('tpl_')) {
    const byId = await q.where('v.id', '=', nameOrId).executeTakeFirst();
    if (byId) return byId;
  }
  return q.where('v.name', '=', nameOrId).orderBy('v.version', 'desc').limit(1).executeTakeFirst();
}

/** Every version of every template published for every tenant, by name and newest version first. */
export function listPublishedVersions(db: Kysely<Schema>): Promise<TemplateVersionRow[]> {
  return publishedVersionsQuery(db).orderBy('v.name').orderBy('v.version', 'desc').execute();
}

function publishedVersionsQuery(db: Kysely<Schema>) {
  return db
    .selectFrom('template_versions as v')
    .innerJoin('published_templates as p', (j) => j.onRef('p.tenant_id', '=', 'v.tenant_id').onRef('p.name', '=', 'v.name'))
    .selectAll('v');
}

/** The tenant whose template `name` is published for every tenant, if one is. */
export async function publisherOf(db: Kysely<Schema> | Transaction<Schema>, name: string): Promise<string | undefined> {
  return (await db.selectFrom('published_templates').select('tenant_id').where('name', '=', name).executeTakeFirst())?.tenant_id;
}

/** The versions of one tenant's template `name`, newest first. */
export function templateVersions(db: Kysely<Schema>, tenantId: string, name: string): Promise<TemplateVersionRow[]> {
  return db.selectFrom('template_versions').selectAll().where('tenant_id', '=', tenantId).where('name', '=', name).orderBy('version', 'desc').execute();
}

/**
 * The version a create by this tenant names: one of its own templates first (a tenant's own name wins), else one the
 * operator published for every tenant. A version of another tenant is told apart by its `tenant_id`.
 */
export async function findUsableVersion(db: Kysely<Schema>, tenantId: string, nameOrId: string): Promise<TemplateVersionRow | undefined> {
  return (await findTemplateVersion(db, tenantId, nameOrId)) ?? (await findPublishedVersion(db, nameOrId));
}

/** The version that holds this snapshot, if any: such a snapshot is template data, not the sandbox's history. */
export async function versionHolding(db: Kysely<Schema> | Transaction<Schema>, tenantId: string, snapshotId: string): Promise<TemplateVersionRow | undefined> {
  return db.selectFrom('template_versions').selectAll().where('tenant_id', '=', tenantId).where('snapshot_id', '=', snapshotId).limit(1).executeTakeFirst();
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
