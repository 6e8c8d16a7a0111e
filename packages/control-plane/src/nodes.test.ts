// Membership on both dialects: epochs and fencing, death decided once across replicas, placement, leases.
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { ManualClock, newId, SandglassError } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { createTestDatabase } from '@sandglass/db/test-postgres';
import { EventLog } from '@sandglass/events';
import { createTenant } from './keys.js';
import { claimLease, NodeDirectory, releaseLease, type Heartbeat } from './nodes.js';

const dialects = [
  { dialect: 'sqlite', url: async () => 'sqlite::memory:' },
  {
    dialect: 'postgres',
    url: async () => createTestDatabase(inject('postgresUrl'), `nodes_${randomBytes(6).toString('hex')}`, { template: inject('postgresMigrated') }),
  },
];

const beat = (over: Partial<Heartbeat> = {}): Heartbeat => ({
  epoch: null,
  url: 'http://127.0.0.1:9001',
  internalUrl: 'http://127.0.0.1:9002',
  capacityMemoryMib: 1024,
  freeMemoryMib: 1024,
  sandboxes: [],
  templates: [],
  ...over,
});

describe.each(dialects)('NodeDirectory on $dialect', ({ url }) => {
  let database: Database;
  let clock: ManualClock;
  let nodes: NodeDirectory;
  let events: EventLog;
  let tenantId: string;
  beforeEach(async () => {
    database = await openDatabase({ url: await url() });
    clock = new ManualClock(Date.parse('2026-11-30T12:00:00Z'));
    nodes = new NodeDirectory({ db: database.db, clock, deadAfterMs: 10_000, heartbeatIntervalMs: 1000 });
    events = new EventLog(database.db);
    tenantId = (await createTenant(database.db, events, 'nodes-test', { clock })).id;
  });
  afterEach(() => database.close());

  /** A sandbox the log places on `node` (what sandbox.created records before the gateway is called). */
  async function placed(node: string, memoryMib = 256, snapshotIntervalS = 60): Promise<string> {
    const id = newId('sbx');
    const data = {
      template: 'base',
      memoryMib,
      vcpus: 1,
      timeoutS: 600,
      snapshotIntervalS,
      metadata: {},
      gatewayId: node,
      gatewayUrl: 'http://x',
      secrets: [],
    };
    await events.append({ type: 'sandbox.created', tenantId, sandboxId: id, data }, { clock });
    return id;
  }

  it('gives each registration a new epoch and fences heartbeats of an older one', async () => {
    expect((await nodes.heartbeat('n1', beat())).epoch).toBe(1);
    expect((await nodes.heartbeat('n1', beat({ epoch: 1 }))).epoch).toBe(1);
    expect((await nodes.heartbeat('n1', beat())).epoch).toBe(2);
    const fenced = await nodes.heartbeat('n1', beat({ epoch: 1 })).catch((e: unknown) => e);
    expect(fenced).toBeInstanceOf(SandglassError);
    expect((fenced as SandglassError).code).toBe('node_fenced');
    await expect(nodes.heartbeat('n1', beat({ epoch: 2 }))).resolves.toMatchObject({ epoch: 2 });
  });

  it('declares a silent node dead exactly once across replicas, and fences it until it registers again', async () => {
    await nodes.heartbeat('n1', beat());
    await nodes.heartbeat('n2', beat());
    clock.advance(5_000);
    await nodes.heartbeat('n2', beat({ epoch: 1 }));
    clock.advance(6_000);
    // Three replicas over one database, racing.
    const replicas = [nodes, ...[1, 2].map(() => new NodeDirectory({ db: database.db, clock, deadAfterMs: 10_000, heartbeatIntervalMs: 1000 }))];
    const decided = (await Promise.all(replicas.map((r) => r.declareDead()))).flat();
    expect(decided).toEqual(['n1']);
    expect((await nodes.all()).map((n) => n.id)).toEqual(['n2']);
    await expect(nodes.heartbeat('n1', beat({ epoch: 1 }))).rejects.toMatchObject({ code: 'node_fenced' });
    const back = await nodes.heartbeat('n1', beat());
    expect(back.epoch).toBe(3);
    expect((await nodes.all()).map((n) => n.id)).toEqual(['n1', 'n2']);
  });

  it('places by uncommitted memory, so sandboxes spread, and refuses when no node has room', async () => {
    for (const id of ['n1', 'n2', 'n3']) await nodes.heartbeat(id, beat());
    const counts = new Map<string, number>();
    for (let i = 0; i < 12; i++) {
      const node = (await nodes.pick({ tenantId: 'default', memoryMib: 256, vcpus: 1 })).id;
      await placed(node);
      counts.set(node, (counts.get(node) ?? 0) + 1);
    }
    expect(Object.fromEntries(counts)).toEqual({ n1: 4, n2: 4, n3: 4 });
    await expect(nodes.pick({ tenantId: 'default', memoryMib: 256, vcpus: 1 })).rejects.toMatchObject({ code: 'capacity_exhausted' });
  });

  it('prefers a node with the template cached, never an excluded or silent one', async () => {
    await nodes.heartbeat('n1', beat());
    await nodes.heartbeat('n2', beat({ templates: ['00112233445566ff'], capacityMemoryMib: 512, freeMemoryMib: 512 }));
    expect((await nodes.pick({ tenantId: 't', memoryMib: 256, vcpus: 1, templateKey: '00112233445566ff' })).id).toBe('n2');
    expect((await nodes.pick({ tenantId: 't', memoryMib: 256, vcpus: 1 })).id).toBe('n1');
    expect((await nodes.pick({ tenantId: 't', memoryMib: 256, vcpus: 1, templateKey: '00112233445566ff', exclude: ['n2'] })).id).toBe('n1');
    clock.advance(10_001);
    await nodes.heartbeat('n2', beat({ epoch: 1 }));
    // n1 has not been declared dead yet, but it is silent: no new work goes there.
    expect((await nodes.pick({ tenantId: 't', memoryMib: 256, vcpus: 1 })).id).toBe('n2');
    expect(await nodes.get('n1')).toBeUndefined();
  });

  it("prefers the node holding the template's warm pool while it fits, over a cached template and more room", async () => {
    await nodes.heartbeat('n1', beat({ templates: ['00112233445566ff'], capacityMemoryMib: 4096, freeMemoryMib: 4096 }));
    await nodes.heartbeat('n2', beat({ capacityMemoryMib: 512, freeMemoryMib: 512 }));
    const pick = (memoryMib: number) => nodes.pick({ tenantId: 't', memoryMib, vcpus: 1, templateKey: '00112233445566ff', preferNode: 'n2' });
    expect((await pick(256)).id).toBe('n2');
    // One that does not fit there goes where it fits.
    expect((await pick(1024)).id).toBe('n1');
  });

  it('prefers a node whose capture capacity takes the snapshots asked of it, over a cached template, but excludes none', async () => {
    // n1 has the template and the most room, but sustains 24 captures a minute; n2 has not measured yet.
    await nodes.heartbeat('n1', beat({ templates: ['00112233445566ff'], capacityMemoryMib: 4096, freeMemoryMib: 4096, captureCapacityPerMin: 24.9 }));
    await nodes.heartbeat('n2', beat({ capacityMemoryMib: 2048, freeMemoryMib: 2048 }));
    const pick = (snapshotIntervalS?: number) => nodes.pick({ tenantId: 't', memoryMib: 256, vcpus: 1, templateKey: '00112233445566ff', snapshotIntervalS });
    // Each asks 12 a minute: the first two fit n1's 24.
    for (let i = 0; i < 2; i++) {
      expect((await pick(5)).id).toBe('n1');
      await placed('n1', 256, 5);
    }
    expect((await pick(5)).id).toBe('n2');
    // Once n2 has measured and is full too, the one with the most room takes it: a late snapshot is reported, not refused.
    await nodes.heartbeat('n2', beat({ epoch: 1, capacityMemoryMib: 2048, freeMemoryMib: 2048, captureCapacityPerMin: 6 }));
    expect((await pick(5)).id).toBe('n1');
    // A sandbox that asks for one an hour fits n2's 6 a minute, not n1's full 24; one whose interval is unknown adds nothing.
    expect((await pick(3600)).id).toBe('n2');
    expect((await pick()).id).toBe('n1');
    // An older gateway's heartbeat has no capacity: unknown again.
    await nodes.heartbeat('n1', beat({ epoch: 1, templates: ['00112233445566ff'], capacityMemoryMib: 4096, freeMemoryMib: 4096 }));
    expect(
      (await database.db.selectFrom('nodes').select('capture_capacity_per_min').where('id', '=', 'n1').executeTakeFirstOrThrow()).capture_capacity_per_min,
    ).toBeNull();
  });

  it('tells a node which of its VMs are not its own, and what a registration left behind', async () => {
    await nodes.heartbeat('n1', beat());
    await nodes.heartbeat('n2', beat());
    const mine = await placed('n1');
    const theirs = await placed('n2');
    const unknown = newId('sbx');
    // Moved here and being resumed: paused in the log until the node's sandbox.resumed arrives, yet its VM runs here.
    const resuming = await placed('n2');
    await events.append(
      {
        type: 'sandbox.moved',
        tenantId,
        sandboxId: resuming,
        data: {
          fromGatewayId: 'n2',
          gatewayId: 'n1',
          gatewayUrl: 'http://x',
          reason: 'node_dead',
          snapshotId: 'snap_x',
          snapshotTakenAt: '2026-11-30T12:00:00.000Z',
        },
      },
      { clock },
    );
    const reply = await nodes.heartbeat('n1', beat({ epoch: 1, sandboxes: [mine, theirs, unknown, resuming] }));
    expect(reply.stop.sort()).toEqual([theirs, unknown].sort());
    // n1 restarts: its VM of `mine` died with it.
    const again = await nodes.heartbeat('n1', beat({ sandboxes: [] }));
    expect(again.orphaned).toEqual([mine]);
  });

  it('grants a lease to one holder at a time, again once it expired or was released', async () => {
    const name = `move:${newId('sbx')}`;
    const wins = await Promise.all(['a', 'b', 'c'].map((h) => claimLease(database.db, name, h, 5_000, clock)));
    expect(wins.filter(Boolean)).toHaveLength(1);
    expect(await claimLease(database.db, name, 'd', 5_000, clock)).toBe(false);
    clock.advance(5_000);
    expect(await claimLease(database.db, name, 'd', 5_000, clock)).toBe(true);
    await releaseLease(database.db, name, 'someone else');
    expect(await claimLease(database.db, name, 'e', 5_000, clock)).toBe(false);
    await releaseLease(database.db, name, 'd');
    expect(await claimLease(database.db, name, 'e', 5_000, clock)).toBe(true);
  });
});
