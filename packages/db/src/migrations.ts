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

const snapshots: Migration = {
  async up(db: Kysely<any>) {
    // The sandboxes table is a projection; rebuilding it is how its CHECK constraint learns the paused state on both dialects.
    await db.schema
      .createTable('sandboxes_v2')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('template', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull().check(inList('state', ['starting', 'running', 'paused', 'ended', 'failed'])))
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
      .addColumn('snapshot_interval_s', 'integer', (c) => c.notNull().defaultTo(60))
      .addColumn('source_snapshot_id', 'text')
      .addColumn('paused_at', 'text')
      .execute();
    const cols = [
      'id',
      'tenant_id',
      'template',
      'state',
      'end_reason',
      'failure_reason',
      'memory_mib',
      'vcpus',
      'timeout_s',
      'metadata',
      'gateway_id',
      'gateway_url',
      'created_at',
      'started_at',
      'ended_at',
      'expires_at',
    ];
    await db.insertInto('sandboxes_v2').columns(cols).expression(db.selectFrom('sandboxes').select(cols)).execute();
    await db.schema.dropTable('sandboxes').execute();
    await db.schema.alterTable('sandboxes_v2').renameTo('sandboxes').execute();
    await db.schema.createIndex('sandboxes_tenant_created_v2').on('sandboxes').columns(['tenant_id', 'created_at']).execute();

    await db.schema
      .createTable('snapshots')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('sandbox_id', 'text', (c) => c.notNull())
      .addColumn('parent_id', 'text')
      .addColumn('taken_at', 'text', (c) => c.notNull())
      .addColumn('reason', 'text', (c) => c.notNull().check(inList('reason', ['rolling', 'manual', 'pause'])))
      .addColumn('name', 'text')
      .addColumn('pinned', 'integer', (c) => c.notNull())
      .addColumn('size_added_bytes', 'integer', (c) => c.notNull())
      .addColumn('memory_mib', 'integer', (c) => c.notNull())
      .addColumn('vcpus', 'integer', (c) => c.notNull())
      .addColumn('template', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('snapshots_sandbox_taken').on('snapshots').columns(['sandbox_id', 'taken_at']).execute();
    await db.schema.createIndex('snapshots_tenant').on('snapshots').columns(['tenant_id']).execute();
  },
};

const secrets: Migration = {
  async up(db: Kysely<any>) {
    // Tenant configuration, not a projection: rows are written directly, and secret.set / secret.removed are recorded beside them.
    await db.schema
      .createTable('secrets')
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('hosts', 'text', (c) => c.notNull())
      .addColumn('header', 'text')
      .addColumn('format', 'text')
      .addColumn('body_content_types', 'text', (c) => c.notNull())
      .addColumn('approval', 'text', (c) => c.notNull().check(inList('approval', ['none', 'required'])))
      .addColumn('value_sealed', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('secrets_pk', ['tenant_id', 'name'])
      .execute();

    // New columns need no new CHECK, so the projection is extended in place rather than rebuilt as in 0002.
    await db.schema.alterTable('sandboxes').addColumn('network', 'text').execute();
    await db.schema
      .alterTable('sandboxes')
      .addColumn('secrets', 'text', (c) => c.notNull().defaultTo('[]'))
      .execute();
  },
};

const apiKeyLifecycle: Migration = {
  async up(db: Kysely<any>) {
    // Rebuilt rather than altered: SQLite cannot change the role CHECK in place, and it must learn 'operator'.
    await db.schema
      .createTable('api_keys_v2')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('name', 'text')
      .addColumn('role', 'text', (c) => c.notNull().check(inList('role', ['member', 'admin', 'operator'])))
      .addColumn('key_hash', 'text', (c) => c.notNull().unique())
      .addColumn('prefix', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('created_by_key_id', 'text')
      .addColumn('expires_at', 'text')
      .addColumn('revoked_at', 'text')
      .addColumn('revoked_by_key_id', 'text')
      .addColumn('last_used_at', 'text')
      .execute();
    const cols = ['id', 'tenant_id', 'name', 'role', 'key_hash', 'prefix', 'created_at'];
    await db.insertInto('api_keys_v2').columns(cols).expression(db.selectFrom('api_keys').select(cols)).execute();
    await db.schema.dropTable('api_keys').execute();
    await db.schema.alterTable('api_keys_v2').renameTo('api_keys').execute();
    await db.schema.createIndex('api_keys_tenant_created').on('api_keys').columns(['tenant_id', 'created_at']).execute();
  },
};

const secretTransport: Migration = {
  async up(db: Kysely<any>) {
    // Opt-ins a secret needs to be sent in clear text or on a protocol upgrade; existing secrets get neither.
    await db.schema
      .alterTable('secrets')
      .addColumn('allow_plaintext', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema
      .alterTable('secrets')
      .addColumn('allow_upgrade', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
  },
};

const cluster: Migration = {
  async up(db: Kysely<any>) {
    // Gateways register and heartbeat; the old table was never written, so it is replaced rather than altered.
    await db.schema.dropTable('nodes').execute();
    await db.schema
      .createTable('nodes')
      .addColumn('id', 'text', (c) => c.primaryKey())
      // Base URL of the data plane SDKs are handed, and of the internal API the control plane calls.
      .addColumn('url', 'text', (c) => c.notNull())
      .addColumn('internal_url', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull().check(inList('state', ['alive', 'dead'])))
      // Bumped at every registration and when the node is declared dead: calls carrying an older epoch are fenced.
      .addColumn('epoch', 'integer', (c) => c.notNull())
      .addColumn('capacity_memory_mib', 'integer', (c) => c.notNull())
      .addColumn('free_memory_mib', 'integer', (c) => c.notNull())
      .addColumn('sandboxes', 'integer', (c) => c.notNull())
      // JSON text of the template keys the node has cached: placement prefers a node that needs no download.
      .addColumn('templates', 'text', (c) => c.notNull())
      .addColumn('registered_at', 'text', (c) => c.notNull())
      .addColumn('last_seen_at', 'text', (c) => c.notNull())
      .addColumn('dead_at', 'text')
      .execute();
    // Named, expiring claims decided in the database (node death, a move, a GC run, a template build), so several
    // control-plane replicas or gateways never do the same thing twice.
    await db.schema
      .createTable('leases')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('holder', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .execute();
    // A template is a snapshot in the chunk store like any other: the first node to build it publishes it here.
    await db.schema
      .createTable('template_snapshots')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('snapshot_id', 'text', (c) => c.notNull())
      .addColumn('node_id', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
  },
};

const postgresBigint: Migration = {
  async up(db: Kysely<any>) {
    // SQLite's integers are 64-bit already; PostgreSQL's integer is 32-bit, which a busy log's seq and a large memory
    // snapshot's size_added_bytes outgrow. Altering the identity column's type changes its sequence's type with it.
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    const widen = [
      ['events', 'seq'],
      ['event_chain_head', 'seq'],
      ['snapshots', 'size_added_bytes'],
    ] as const;
    for (const [table, column] of widen) {
      await db.schema
        .alterTable(table)
        .alterColumn(column, (c) => c.setDataType('bigint'))
        .execute();
    }
  },
};

const sandboxEnvs: Migration = {
  async up(db: Kysely<any>) {
    // Kept out of the event log (and so out of the sandboxes projection, which is rebuilt from it): environment values
    // are often credentials-like, and the log is append-only and read by every audit. Only their names are logged.
    await db.schema
      .createTable('sandbox_envs')
      .addColumn('sandbox_id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      // JSON text of a name → value map.
      .addColumn('envs', 'text', (c) => c.notNull())
      .execute();
  },
};

const sandboxSubChain: Migration = {
  async up(db: Kysely<any>) {
    // Each event naming a sandbox also links to the previous event of that sandbox, so one sandbox's events verify on
    // their own (an audit export cannot carry the other tenants' events between them). Null in events written before:
    // their hashes never covered the field. The (sandbox_id, seq) index of 0001 finds the previous event.
    await db.schema.alterTable('events').addColumn('sandbox_prev_hash', 'text').execute();
  },
};

const sandboxDisk: Migration = {
  async up(db: Kysely<any>) {
    // A projection column like the others: rebuilt from sandbox.created's diskMib (null when the event has none).
    await db.schema.alterTable('sandboxes').addColumn('disk_mib', 'integer').execute();
  },
};

const nodeCredentials: Migration = {
  async up(db: Kysely<any>) {
    // Each node speaks with a key of its own (issue 23): the cluster's shared node secret let any node claim any id.
    await db.schema
      .createTable('node_credentials')
      .addColumn('node_id', 'text', (c) => c.primaryKey())
      .addColumn('key_hash', 'text', (c) => c.notNull().unique())
      .addColumn('public_key', 'text', (c) => c.notNull())
      .addColumn('enrolled_at', 'text', (c) => c.notNull())
      .addColumn('revoked_at', 'text')
      .execute();
    await db.schema
      .createTable('node_enrolments')
      .addColumn('token_hash', 'text', (c) => c.primaryKey())
      .addColumn('node_id', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .addColumn('used_at', 'text')
      .execute();
  },
};

const customTemplates: Migration = {
  async up(db: Kysely<any>) {
    // A tenant's own templates (issue 24): each version names a snapshot of the tenant's, which sandboxes fork.
    await db.schema
      .createTable('template_versions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('version', 'integer', (c) => c.notNull())
      .addColumn('snapshot_id', 'text', (c) => c.notNull())
      .addColumn('memory_mib', 'integer', (c) => c.notNull())
      .addColumn('vcpus', 'integer', (c) => c.notNull())
      .addColumn('disk_mib', 'integer')
      .addColumn('envs', 'text', (c) => c.notNull())
      .addColumn('user', 'text')
      .addColumn('workdir', 'text')
      .addColumn('start', 'text')
      .addColumn('build_id', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('template_versions_name_version', ['tenant_id', 'name', 'version'])
      .execute();
    await db.schema.createIndex('template_versions_snapshot').on('template_versions').columns(['snapshot_id']).execute();
    await db.schema
      .createTable('template_cache')
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('snapshot_id', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('template_cache_pk', ['tenant_id', 'key'])
      .execute();
    await db.schema
      .createTable('template_builds')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('started_at', 'text', (c) => c.notNull())
      .addColumn('finished_at', 'text')
      .addColumn('reported_at', 'text', (c) => c.notNull())
      .addColumn('steps', 'text', (c) => c.notNull())
      .addColumn('lines', 'integer', (c) => c.notNull())
      .addColumn('version_id', 'text')
      .addColumn('error', 'text')
      .execute();
    // One running build per name, held by the database itself: two replicas racing both see who won.
    await db.schema
      .createIndex('template_builds_one_running')
      .on('template_builds')
      .columns(['tenant_id', 'name'])
      .unique()
      .where(sql<boolean>`status = 'running'`)
      .execute();
    await db.schema
      .createTable('template_build_lines')
      .addColumn('build_id', 'text', (c) => c.notNull())
      .addColumn('n', 'integer', (c) => c.notNull())
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('stream', 'text', (c) => c.notNull())
      .addColumn('text', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('template_build_lines_pk', ['build_id', 'n'])
      .execute();
  },
};

const nodeCaptureCapacity: Migration = {
  async up(db: Kysely<any>) {
    // Placement prefers a node that can keep the snapshot intervals asked of it (issue 31); null until it reports one.
    await db.schema.alterTable('nodes').addColumn('capture_capacity_per_min', 'integer').execute();
  },
};

const templateCacheUse: Migration = {
  async up(db: Kysely<any>) {
    // The step cache is bounded per tenant, least recently used first (issue 24): when each step was last looked up or
    // stored. Added nullable (ALTER TABLE cannot add a NOT NULL column without a default), then set on every row.
    await db.schema.alterTable('template_cache').addColumn('used_at', 'text').execute();
    await db
      .updateTable('template_cache')
      .set({ used_at: sql.ref('created_at') })
      .execute();
  },
};

const sandboxLifecycle: Migration = {
  async up(db: Kysely<any>) {
    // Projection columns rebuilt from sandbox.created's onTimeout and autoResume (absent in older events: kill, off).
    await db.schema
      .alterTable('sandboxes')
      .addColumn('on_timeout', 'text', (c) => c.notNull().defaultTo('kill'))
      .execute();
    await db.schema
      .alterTable('sandboxes')
      .addColumn('auto_resume', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
  },
};

const templatePools: Migration = {
  async up(db: Kysely<any>) {
    // A custom template's warm pool (issue 24): its size per (tenant, name), applying to the newest version, and the
    // node the control plane put it on (null until placed).
    await db.schema
      .createTable('template_pools')
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('size', 'integer', (c) => c.notNull())
      .addColumn('gateway_id', 'text')
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('template_pools_pk', ['tenant_id', 'name'])
      .execute();
  },
};

const publishedTemplates: Migration = {
  async up(db: Kysely<any>) {
    // A template the operator published for every tenant (issue 24): one per name across the platform, so a name
    // never resolves to two publishers; the versions stay the publishing tenant's rows in template_versions.
    await db.schema
      .createTable('published_templates')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('published_at', 'text', (c) => c.notNull())
      .execute();
  },
};

const diskOnlyPauses: Migration = {
  async up(db: Kysely<any>) {
    // Projection columns: sandbox.created's onTimeoutKeepMemory (absent: true) and snapshot.taken's memory (absent: true).
    await db.schema
      .alterTable('sandboxes')
      .addColumn('on_timeout_keep_memory', 'integer', (c) => c.notNull().defaultTo(1))
      .execute();
    await db.schema
      .alterTable('snapshots')
      .addColumn('memory', 'integer', (c) => c.notNull().defaultTo(1))
      .execute();
  },
};

function inList(column: string, values: string[]) {
  // Literal values from this file only, never from input: safe to inline in DDL on both dialects.
  return sql.raw(`${column} in (${values.map((v) => `'${v}'`).join(', ')})`);
}

export const migrationProvider: MigrationProvider = {
  getMigrations: async () => ({
    '0001_initial': initial,
    '0002_snapshots': snapshots,
    '0003_secrets': secrets,
    '0004_api_key_lifecycle': apiKeyLifecycle,
    '0005_secret_transport': secretTransport,
    '0006_cluster': cluster,
    '0007_postgres_bigint': postgresBigint,
    '0008_sandbox_envs': sandboxEnvs,
    '0009_sandbox_sub_chain': sandboxSubChain,
    '0010_sandbox_disk': sandboxDisk,
    '0011_node_credentials': nodeCredentials,
    '0012_custom_templates': customTemplates,
    '0013_node_capture_capacity': nodeCaptureCapacity,
    '0014_template_cache_use': templateCacheUse,
    '0015_sandbox_lifecycle': sandboxLifecycle,
    '0016_template_pools': templatePools,
    '0017_published_templates': publishedTemplates,
    '0018_disk_only_pauses': diskOnlyPauses,
  }),
};
