// What the event log's tests share: a new database of each dialect with two tenants, and a sandbox.created event.
import { inject } from 'vitest';
import { ManualClock } from '@sandglass/core';
import { openDatabase, toIso, type Database } from '@sandglass/db';
import { createTestDatabase } from '@sandglass/db/test-postgres';
import { EventLog, type AppendInput } from './index.js';

let databases = 0;

/** A new, empty database of each dialect: in memory for SQLite, a database of its own on the unit run's PostgreSQL. */
export function dialects(name: string): Array<{ dialect: string; fresh: () => Promise<string> }> {
  return [
    { dialect: 'sqlite', fresh: async () => 'sqlite::memory:' },
    {
      dialect: 'postgres',
      fresh: () => createTestDatabase(inject('postgresUrl'), `${name}_${process.pid}_${++databases}`, { template: inject('postgresMigrated') }),
    },
  ];
}

/** An event log on a new database of that URL, tenants ten_a and ten_b in it, and a clock at 2025-01-01. */
export async function openTestLog(url: string): Promise<{ database: Database; log: EventLog; clock: ManualClock }> {
  const database = await openDatabase({ url });
  for (const t of ['ten_a', 'ten_b'])
    await database.db
      .insertInto('tenants')
      .values({ id: t, name: t, created_at: toIso(0) })
      .execute();
  return { database, log: new EventLog(database.db), clock: new ManualClock(Date.UTC(2025, 0, 1)) };
}

/** sandbox.created for a sandbox of that tenant. */
export const created = (sandboxId: string, tenantId = 'ten_a', timeoutS = 300): AppendInput => ({
  type: 'sandbox.created',
  tenantId,
  sandboxId,
  data: { template: 'base', memoryMib: 256, vcpus: 1, timeoutS, metadata: { b: '2', a: '1' }, gatewayId: 'node_1', gatewayUrl: 'http://127.0.0.1:7071' },
});
