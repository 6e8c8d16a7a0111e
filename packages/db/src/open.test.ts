// openDatabase on SQLite and PostgreSQL: migrations run on open (and again harmlessly, and at once from several replicas),
// constraints hold, integers come back as numbers; on SQLite, WAL and foreign keys are on.
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { GENESIS_HASH, openDatabase, toIso, fromIso, isPostgres } from './index.js';
import { createTestDatabase } from './test-postgres.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('openDatabase on SQLite', () => {
  it('keeps the database and its WAL and shared-memory files readable by their owner only', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sg-db-'));
    dirs.push(dir);
    const file = join(dir, 'sandglass.db');
    const { db, close } = await openDatabase({ url: `sqlite:${file}` });
    await db
      .insertInto('tenants')
      .values({ id: 'ten_a', name: 'a', created_at: toIso(0) })
      .execute();
    for (const f of [file, `${file}-wal`, `${file}-shm`]) expect((statSync(f).mode & 0o777).toString(8), f).toBe('600');
    await close();
    // A database an older version left world-readable is narrowed on open.
    const old = join(dir, 'old.db');
    writeFileSync(old, '', { mode: 0o644 });
    const again = await openDatabase({ url: `sqlite:${old}` });
    expect((statSync(old).mode & 0o777).toString(8)).toBe('600');
    await again.close();
  });

  it('creates the schema in a new file, with WAL and foreign keys on, and reopens it unchanged', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sg-db-'));
    dirs.push(dir);
    const url = `sqlite:${join(dir, 'nested', 'sandglass.db')}`;
    const first = await openDatabase({ url });
    const mode = await sql<{ journal_mode: string }>`pragma journal_mode`.execute(first.db);
    expect(mode.rows[0]?.journal_mode).toBe('wal');
    const fk = await sql<{ foreign_keys: number }>`pragma foreign_keys`.execute(first.db);
    expect(fk.rows[0]?.foreign_keys).toBe(1);
    await first.db
      .insertInto('tenants')
      .values({ id: 'ten_a', name: 'a', created_at: toIso(0) })
      .execute();
    await first.close();

    const again = await openDatabase({ url });
    expect(await again.db.selectFrom('tenants').select('name').execute()).toEqual([{ name: 'a' }]);
    expect(await again.db.selectFrom('event_chain_head').selectAll().execute()).toEqual([{ id: 'main', seq: 0, hash: GENESIS_HASH }]);
    await again.close();
  });

  it('reuses prepared statements: each call gets its own values, after a stream left halfway and after a schema change', async () => {
    const { db, close } = await openDatabase({ url: 'sqlite::memory:' });
    try {
      for (const t of ['a', 'b', 'c']) {
        await db
          .insertInto('tenants')
          .values({ id: `ten_${t}`, name: t, created_at: toIso(0) })
          .execute();
      }
      const byId = (id: string) => db.selectFrom('tenants').selectAll().where('id', '=', id).executeTakeFirst();
      expect((await byId('ten_a'))?.name).toBe('a');
      expect((await byId('ten_b'))?.name).toBe('b');
      // A streamed query left halfway releases its statement for the next run of the same SQL.
      const names = () => db.selectFrom('tenants').select('name').orderBy('name').stream();
      for await (const row of names()) {
        expect(row.name).toBe('a');
        break;
      }
      const all: string[] = [];
      for await (const row of names()) all.push(row.name);
      expect(all).toEqual(['a', 'b', 'c']);
      await sql`alter table tenants add column extra text`.execute(db);
      expect(Object.keys((await byId('ten_c'))!)).toContain('extra');
    } finally {
      await close();
    }
  });

  it('refuses URLs it cannot open', async () => {
    await expect(openDatabase({ url: 'mysql://localhost/sg' })).rejects.toThrow(/use sqlite: or postgres:/);
    await expect(openDatabase({ url: 'sqlite:' })).rejects.toThrow(/names no file/);
  });

  it('stores timestamps as ISO-8601 UTC text that round-trips', () => {
    expect(toIso(1_700_000_000_123)).toBe('2023-11-14T22:13:20.123Z');
    expect(fromIso(toIso(42))).toBe(42);
    expect(() => fromIso('yesterday')).toThrow();
  });
});

let databases = 0;
/** A new, empty database of each dialect: in memory for SQLite, a database of its own on the unit run's PostgreSQL. */
const dialects = [
  { dialect: 'sqlite', fresh: async () => 'sqlite::memory:' },
  { dialect: 'postgres', fresh: () => createTestDatabase(inject('postgresUrl'), `open_test_${process.pid}_${++databases}`) },
];

describe.each(dialects)('openDatabase on $dialect', ({ dialect, fresh }) => {
  it('creates the schema, and reopens it unchanged', async () => {
    const url = await fresh();
    // A file for SQLite, so the second open finds what the first wrote.
    const reopenable = dialect === 'sqlite' ? `sqlite:${join(mkdtempSync(join(tmpdir(), 'sg-db-')), 'sandglass.db')}` : url;
    if (dialect === 'sqlite') dirs.push(reopenable.slice('sqlite:'.length, -'/sandglass.db'.length));
    const first = await openDatabase({ url: reopenable });
    expect(isPostgres(first.db)).toBe(dialect === 'postgres');
    await first.db
      .insertInto('tenants')
      .values({ id: 'ten_a', name: 'a', created_at: toIso(0) })
      .execute();
    await first.close();
    const again = await openDatabase({ url: reopenable });
    expect(await again.db.selectFrom('tenants').select('name').execute()).toEqual([{ name: 'a' }]);
    expect(await again.db.selectFrom('event_chain_head').selectAll().execute()).toEqual([{ id: 'main', seq: 0, hash: GENESIS_HASH }]);
    await again.close();
  });

  it('returns integers as numbers, 64-bit ones included, and counts changed rows as bigints', async () => {
    const { db, close } = await openDatabase({ url: await fresh() });
    const big = 5 * 2 ** 30; // a 5 GiB snapshot: past a 32-bit integer
    await db
      .insertInto('snapshots')
      .values({
        id: 'snap_1',
        tenant_id: 'ten_a',
        sandbox_id: 'sbx_1',
        parent_id: null,
        taken_at: toIso(0),
        reason: 'manual',
        name: null,
        pinned: 1,
        size_added_bytes: big,
        memory_mib: 512,
        vcpus: 1,
        template: 'base',
        memory: 1,
      })
      .execute();
    expect(await db.selectFrom('snapshots').select(['size_added_bytes', 'pinned', 'memory_mib']).executeTakeFirst()).toEqual({
      size_added_bytes: big,
      pinned: 1,
      memory_mib: 512,
    });
    const { n } = await db
      .selectFrom('snapshots')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    expect(n).toBe(1);
    const moved = await db
      .updateTable('event_chain_head')
      .set({ seq: 2 ** 40 })
      .where('id', '=', 'main')
      .executeTakeFirst();
    expect(moved.numUpdatedRows).toBe(1n);
    expect(await db.selectFrom('event_chain_head').select('seq').executeTakeFirst()).toEqual({ seq: 2 ** 40 });
    const gone = await db.deleteFrom('snapshots').where('id', '=', 'snap_nope').executeTakeFirst();
    expect(gone.numDeletedRows).toBe(0n);
    await close();
  });

  it('enforces foreign keys', async () => {
    const { db, close } = await openDatabase({ url: await fresh() });
    await expect(
      db
        .insertInto('api_keys')
        .values({ id: 'key_x', tenant_id: 'ten_missing', name: null, role: 'admin', key_hash: 'h', prefix: 'sg_', created_at: toIso(0) })
        .execute(),
    ).rejects.toThrow(/FOREIGN KEY|foreign key/);
    await close();
  });

  it('keeps one secret per tenant and name, with a known approval mode', async () => {
    const { db, close } = await openDatabase({ url: await fresh() });
    await db
      .insertInto('tenants')
      .values({ id: 'ten_a', name: 'a', created_at: toIso(0) })
      .execute();
    const row = {
      tenant_id: 'ten_a',
      name: 'TOKEN',
      hosts: '[]',
      header: null,
      format: null,
      body_content_types: '[]',
      approval: 'none' as const,
      value_sealed: 'AQ==',
      created_at: toIso(0),
      updated_at: toIso(0),
    };
    await db.insertInto('secrets').values(row).execute();
    await expect(db.insertInto('secrets').values(row).execute()).rejects.toThrow(/UNIQUE|duplicate key/);
    await expect(
      db
        .insertInto('secrets')
        .values({ ...row, name: 'OTHER', approval: 'maybe' as 'none' })
        .execute(),
    ).rejects.toThrow(/CHECK|check constraint/);
    await expect(
      db
        .insertInto('secrets')
        .values({ ...row, tenant_id: 'ten_missing' })
        .execute(),
    ).rejects.toThrow(/FOREIGN KEY|foreign key/);
    await close();
  });
});

describe('openDatabase on PostgreSQL', () => {
  it('migrates once when several replicas start at the same moment', async () => {
    const url = await dialects[1]!.fresh();
    const replicas = await Promise.all(Array.from({ length: 5 }, () => openDatabase({ url, poolSize: 2 })));
    const { db } = replicas[0]!;
    const applied = await db
      .selectFrom('kysely_migration' as 'tenants')
      .select('name')
      .execute();
    expect(applied.map((r) => r.name)).toEqual([
      '0001_initial',
      '0002_snapshots',
      '0003_secrets',
      '0004_api_key_lifecycle',
      '0005_secret_transport',
      '0006_cluster',
      '0007_postgres_bigint',
      '0008_sandbox_envs',
      '0009_sandbox_sub_chain',
      '0010_sandbox_disk',
      '0011_node_credentials',
      '0012_custom_templates',
      '0013_node_capture_capacity',
      '0014_template_cache_use',
      '0015_sandbox_lifecycle',
      '0016_template_pools',
      '0017_published_templates',
      '0018_disk_only_pauses',
    ]);
    expect(await db.selectFrom('event_chain_head').selectAll().execute()).toEqual([{ id: 'main', seq: 0, hash: GENESIS_HASH }]);
    await Promise.all(replicas.map((r) => r.close()));
  });
});
