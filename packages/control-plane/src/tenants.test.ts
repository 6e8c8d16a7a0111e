// Tenants created by replicas at once, on both dialects: one wins, the others hear `conflict`, bootstrap converges.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { ManualClock, SandglassError } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { createTestDatabase } from '@sandglass/db/test-postgres';
import { EventLog } from '@sandglass/events';
import { bootstrapLocal, createTenant } from './keys.js';

const dialects = [
  { dialect: 'sqlite', url: async () => 'sqlite::memory:' },
  {
    dialect: 'postgres',
    url: async () => createTestDatabase(inject('postgresUrl'), `tenants_${randomBytes(6).toString('hex')}`, { template: inject('postgresMigrated') }),
  },
];

describe.each(dialects)('tenants on $dialect', ({ url }) => {
  let databases: Database[];
  let dir: string;
  const clock = new ManualClock(Date.UTC(2026, 10, 30));
  beforeEach(async () => {
    const u = await url();
    // Three replicas: three pools over one PostgreSQL database (an in-memory SQLite database has one connection).
    databases = u === 'sqlite::memory:' ? [await openDatabase({ url: u })] : await Promise.all([1, 2, 3].map(() => openDatabase({ url: u })));
    dir = mkdtempSync(join(tmpdir(), 'sg-tenants-'));
  });
  afterEach(async () => {
    for (const d of databases) await d.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates one tenant of a name however many replicas try at once; the others hear conflict', async () => {
    const tries = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) => {
        const d = databases[i % databases.length]!;
        return createTenant(d.db, new EventLog(d.db), 'acme', { clock });
      }),
    );
    expect(tries.filter((t) => t.status === 'fulfilled')).toHaveLength(1);
    for (const t of tries.filter((t) => t.status === 'rejected')) {
      expect((t as PromiseRejectedResult).reason).toBeInstanceOf(SandglassError);
      expect(((t as PromiseRejectedResult).reason as SandglassError).code).toBe('conflict');
    }
  });

  it('lets replicas bootstrap at once onto one default tenant and one operator key', async () => {
    const keyFile = join(dir, 'admin-key');
    const keys = await Promise.all(databases.map((d) => bootstrapLocal({ db: d.db, events: new EventLog(d.db), keyFile, clock }).catch((e: unknown) => e)));
    const db = databases[0]!.db;
    expect(await db.selectFrom('tenants').select('id').where('name', '=', 'default').execute()).toHaveLength(1);
    expect(keys.filter((k) => typeof k === 'string').length).toBeGreaterThanOrEqual(1);
  });
});
