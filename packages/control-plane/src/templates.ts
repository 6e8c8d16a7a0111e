// The templates table: the gateway's boot code registers each template's status; the API lists them.
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
