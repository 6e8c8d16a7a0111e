// The template registry over the database: the first publication of a key holds, racing publishers all learn the winner.
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { openDatabase, type Database } from '@sandglass/db';
import { dbTemplateRegistry } from './index.js';

// On PostgreSQL the unit run's server is shared: keys of this run's own keep the cases apart.
const dialects = [
  { dialect: 'sqlite', url: () => 'sqlite::memory:' },
  { dialect: 'postgres', url: () => inject('postgresUrl') },
];

describe.each(dialects)('dbTemplateRegistry on $dialect', ({ url }) => {
  let database: Database;
  let k: (n: number) => string;
  beforeEach(async () => {
    database = await openDatabase({ url: url() });
    const run = randomBytes(6).toString('hex');
    k = (n) => `${run}${n.toString(16).padStart(4, '0')}`;
  });
  afterEach(() => database.close());

  it('knows nothing of a key until it is published, then returns the first publication to everyone', async () => {
    const registry = dbTemplateRegistry(database.db);
    expect(await registry.lookup(k(1))).toBeUndefined();
    const first = await registry.publish(k(1), { tenantId: 'system', snapshotId: 'snap_a', nodeId: 'node_a' });
    expect(first).toEqual({ tenantId: 'system', snapshotId: 'snap_a' });
    const second = await registry.publish(k(1), { tenantId: 'system', snapshotId: 'snap_b', nodeId: 'node_b' });
    expect(second).toEqual({ tenantId: 'system', snapshotId: 'snap_a' });
    expect(await registry.lookup(k(1))).toEqual({ tenantId: 'system', snapshotId: 'snap_a' });
    const rows = await database.db.selectFrom('template_snapshots').selectAll().where('key', '=', k(1)).execute();
    expect(rows).toMatchObject([{ key: k(1), snapshot_id: 'snap_a', node_id: 'node_a' }]);
  });

  it('gives racing publishers one winner, and keeps keys apart', async () => {
    const registry = dbTemplateRegistry(database.db);
    const results = await Promise.all(
      ['a', 'b', 'c', 'd'].map((n) => registry.publish(k(2), { tenantId: 'system', snapshotId: `snap_${n}`, nodeId: `node_${n}` })),
    );
    expect(new Set(results.map((r) => r.snapshotId)).size).toBe(1);
    await registry.publish(k(3), { tenantId: 'system', snapshotId: 'snap_other', nodeId: 'node_a' });
    expect(await registry.lookup(k(3))).toEqual({ tenantId: 'system', snapshotId: 'snap_other' });
    expect(await registry.lookup(k(2))).toEqual(results[0]);
  });
});
