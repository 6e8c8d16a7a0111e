// Schema migrations, written with Kysely's schema builder so the same steps run on SQLite and PostgreSQL.
import { PostgresAdapter, sql, type Kysely, type Migration, type MigrationProvider } from 'kysely';

/** The hash a chain starts from: the prev_hash of the first event. */
export const GENESIS_HASH = '0'.repeat(64);

const initial: Migration = {
  // Kysely<any>: a migration describes the schema as it was then, not the current Schema type.
  async up(db: Kysely<any>) {
    // The only dialect-specific line: an identity column is AUTOINCREMENT on SQLite, GENERATED … AS IDENTITY on PostgreSQL.
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;

    await db.schema
      .createTable('tenants')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('name', 'text', (c) => c.notNull().unique())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('api_keys')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('name', 'text')
      .addColumn('role', 'text', (c) => c.notNull().check(inList('role', ['member', 'admin'])))
      .addColumn('key_hash', 'text', (c) => c.notNull().unique())
      .addColumn('prefix', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('templates')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('name', 'text', (c) => c.notNull().unique())
      .addColumn('status', 'text', (c) => c.notNull().check(inList('status', ['ready', 'building', 'failed'])))
      .addColumn('memory_mib', 'integer', (c) => c.notNull())
      .addColumn('artifact_key', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('sandboxes')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('template', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull().check(inList('state', ['starting', 'running', 'ended', 'failed'])))
      .addColumn('end_reason', 'text')
      .addColumn('failure_reason', 'text')
      .addColumn('memory_mib', 'integer', (c) => c.notNull())
      .addColumn('vcpus', 'integer', (c) => c.notNull())
      .addColumn('timeout_s', 'integer', (c) => c.notNull())
      .addColumn('metadata', 'text', (c) => c.notNull())
      .addColumn('gateway_id', 'text')
      .addColumn('gateway_url', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('started_at', 'text')
      .addColumn('ended_at', 'text')
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('sandboxes_tenant_created').on('sandboxes').columns(['tenant_id', 'created_at']).execute();

    await db.schema
      .createTable('events')
      .addColumn('seq', 'integer', (c) => (postgres ? c.primaryKey().generatedAlwaysAsIdentity() : c.primaryKey().autoIncrement()))
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('sandbox_id', 'text')
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      // Unique: two appenders that read the same head cannot both link to it, so the chain never forks.
      .addColumn('prev_hash', 'text', (c) => c.notNull().unique())
      .addColumn('hash', 'text', (c) => c.notNull().unique())
      .execute();
    await db.schema.createIndex('events_sandbox_seq').on('events').columns(['sandbox_id', 'seq']).execute();
    await db.schema.createIndex('events_tenant_seq').on('events').columns(['tenant_id', 'seq']).execute();

    await db.schema
      .createTable('event_chain_head')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('seq', 'integer', (c) => c.notNull())
      .addColumn('hash', 'text', (c) => c.notNull())
      .execute();
    await db.insertInto('event_chain_head').values({ id: 'main', seq: 0, hash: GENESIS_HASH }).execute();

    await db.schema
      .createTable('nodes')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('url', 'text', (c) => c.notNull().unique())
      .addColumn('capacity_memory_mib', 'integer')
      .addColumn('capacity_vcpus', 'integer')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_seen_at', 'text')
      .execute();
  },
};

function inList(column: string, values: string[]) {
  // Literal values from this file only, never from input: safe to inline in DDL on both dialects.
  return sql.raw(`${column} in (${values.map((v) => `'${v}'`).join(', ')})`);
}

export const migrationProvider: MigrationProvider = {
  getMigrations: async () => ({ '0001_initial': initial }),
};
