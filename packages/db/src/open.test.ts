// openDatabase: migrations run on open (and again harmlessly), WAL and foreign keys are on.
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { GENESIS_HASH, openDatabase, toIso, fromIso } from './index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('openDatabase', () => {
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

  it('enforces foreign keys', async () => {
    const { db, close } = await openDatabase({ url: 'sqlite::memory:' });
    await expect(
      db
        .insertInto('api_keys')
        .values({ id: 'key_x', tenant_id: 'ten_missing', name: null, role: 'admin', key_hash: 'h', prefix: 'sg_', created_at: toIso(0) })
        .execute(),
    ).rejects.toThrow(/FOREIGN KEY/);
    await close();
  });

  it('keeps one secret per tenant and name, with a known approval mode', async () => {
    const { db, close } = await openDatabase({ url: 'sqlite::memory:' });
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
    await expect(db.insertInto('secrets').values(row).execute()).rejects.toThrow(/UNIQUE|PRIMARY KEY/);
    await expect(
      db
        .insertInto('secrets')
        .values({ ...row, name: 'OTHER', approval: 'maybe' as 'none' })
        .execute(),
    ).rejects.toThrow(/CHECK/);
    await expect(
      db
        .insertInto('secrets')
        .values({ ...row, tenant_id: 'ten_missing' })
        .execute(),
    ).rejects.toThrow(/FOREIGN KEY/);
    await close();
  });

  it('refuses URLs it cannot open', async () => {
    await expect(openDatabase({ url: 'postgres://localhost/sg' })).rejects.toThrow(/only sqlite/);
    await expect(openDatabase({ url: 'sqlite:' })).rejects.toThrow(/names no file/);
  });

  it('stores timestamps as ISO-8601 UTC text that round-trips', () => {
    expect(toIso(1_700_000_000_123)).toBe('2023-11-14T22:13:20.123Z');
    expect(fromIso(toIso(42))).toBe(42);
    expect(() => fromIso('yesterday')).toThrow();
  });
});
