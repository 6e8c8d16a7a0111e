// The gc gate and cluster maintenance on both dialects: captures and sweeps exclude each other, and a chunk deduplicated on another node survives.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { ChunkStore, LocalDiskBackend, type TenantStore } from '@sandglass/chunkstore';
import { createLogger, ManualClock } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { createTestDatabase } from '@sandglass/db/test-postgres';
import { EventLog } from '@sandglass/events';
import { LocalKeyring, newNodeTransportKeys } from '@sandglass/kms';
import { DEFAULT_RETENTION } from '@sandglass/snapshots';
import { DEFAULT_CAPTURE_LEASE_MS, GC_LEASE, GcGate } from './gc-gate.js';
import { createTenant } from './keys.js';
import { Maintenance } from './maintenance.js';
import { NodeCredentials } from './node-credentials.js';
import { NodeDirectory } from './nodes.js';
import { createControlPlane } from './server.js';

const dialects = [
  { dialect: 'sqlite', url: async () => 'sqlite::memory:' },
  {
    dialect: 'postgres',
    url: async () => createTestDatabase(inject('postgresUrl'), `gc_${randomBytes(6).toString('hex')}`, { template: inject('postgresMigrated') }),
  },
];

const MINUTE = 60_000;
const snap = (n: number) => `snap_${'a'.repeat(19)}${'abcdefghijklmnopqrstuvwxyz234567'[n]}`;

const conflict = expect.objectContaining({ code: 'conflict' });

/** Polls until `cond` holds; the test fails by its own timeout if it never does (no assertion on how long it took). */
async function until(cond: () => Promise<boolean>): Promise<void> {
  while (!(await cond())) await new Promise((r) => setTimeout(r, 5));
}

describe.each(dialects)('gc gate and maintenance on $dialect', ({ url }) => {
  let database: Database;
  let clock: ManualClock;
  let gate: GcGate;
  let dir: string;
  let keys: LocalKeyring;
  let backend: LocalDiskBackend;
  let events: EventLog;
  let tenantId: string;

  beforeEach(async () => {
    database = await openDatabase({ url: await url() });
    // Far ahead of the files' real mtimes: every chunk written during the test is past GC's grace period.
    clock = new ManualClock(Date.now() + 24 * 60 * MINUTE);
    gate = new GcGate(database.db, clock);
    dir = mkdtempSync(join(tmpdir(), 'sg-gc-gate-'));
    keys = new LocalKeyring({ dir: join(dir, 'keys') });
    backend = new LocalDiskBackend(join(dir, 'store'));
    events = new EventLog(database.db);
    tenantId = (await createTenant(database.db, events, 'acme', { clock })).id;
  });
  afterEach(async () => {
    await database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const maintenance = (logLines: string[] = []) =>
    new Maintenance({
      db: database.db,
      events,
      // The control plane's own view of the store: a separate ChunkStore, as in a separate process.
      store: new ChunkStore({ backend, keys, clock }),
      retention: DEFAULT_RETENTION,
      clock,
      logger: pino({ level: 'info' }, { write: (line: string) => void logLines.push(line) }),
      intervalMs: 60 * MINUTE,
      pollMs: 5,
    });

  const gcHolder = async () => (await database.db.selectFrom('leases').select('holder').where('name', '=', GC_LEASE).executeTakeFirst())?.holder ?? '';

  it('refuses a capture lease while a sweep holds the gate, and grants it again once released', async () => {
    await gate.enterCapture(snap(0), 'node-a');
    expect(await gate.claimSweep('cp-1', 2 * MINUTE)).toBe(true);
    await expect(gate.enterCapture(snap(1), 'node-b')).rejects.toEqual(conflict);
    // The capture that came first is still counted: the sweep waits for it.
    expect(await gate.capturesInFlight()).toBe(1);
    expect(await gate.claimSweep('cp-2', 2 * MINUTE)).toBe(false);
    await gate.releaseSweep('cp-1');
    await gate.leaveCapture(snap(0), 'node-a');
    await expect(gate.enterCapture(snap(1), 'node-b')).resolves.toMatchObject({ ttlMs: DEFAULT_CAPTURE_LEASE_MS });
    expect(await gate.capturesInFlight()).toBe(1);
  });

  it('lets expired leases go: a dead capture stops blocking the sweep, a dead sweep stops blocking captures', async () => {
    await gate.enterCapture(snap(0), 'node-dead');
    expect(await gate.claimSweep('cp-dead', 2 * MINUTE)).toBe(true);
    clock.advance(2 * MINUTE);
    // The sweep's claim lapsed: it cannot renew it, a capture may start, and another replica may claim the gate.
    expect(await gate.renewSweep('cp-dead', 2 * MINUTE)).toBe(false);
    await gate.enterCapture(snap(1), 'node-b');
    expect(await gate.claimSweep('cp-2', 2 * MINUTE)).toBe(true);
    expect(await gate.capturesInFlight()).toBe(2);
    clock.advance(DEFAULT_CAPTURE_LEASE_MS);
    expect(await gate.capturesInFlight()).toBe(0);
  });

  it('a lease taken by another node for the same snapshot is refused; one node may take its own again', async () => {
    await gate.enterCapture(snap(0), 'node-a');
    await gate.enterCapture(snap(0), 'node-a');
    await expect(gate.enterCapture(snap(0), 'node-b')).rejects.toEqual(conflict);
    // Releasing someone else's lease does nothing.
    await gate.leaveCapture(snap(0), 'node-b');
    expect(await gate.capturesInFlight()).toBe(1);
  });

  it('a sweep that waited its bound for captures gives the round up and lets captures go on', async () => {
    await gate.enterCapture(snap(0), 'node-stuck');
    const m = new Maintenance({
      db: database.db,
      events,
      store: new ChunkStore({ backend, keys, clock }),
      retention: DEFAULT_RETENTION,
      clock,
      logger: createLogger('test', 'silent'),
      intervalMs: 60 * MINUTE,
      captureWaitMs: 0,
    });
    await expect(m.tick()).rejects.toEqual(conflict);
    expect(await gcHolder()).toBe('');
    await expect(gate.enterCapture(snap(1), 'node-b')).resolves.toBeDefined();
  });

  it('a sweep waits for expired capture leases no longer', async () => {
    await gate.enterCapture(snap(0), 'node-dead');
    clock.advance(DEFAULT_CAPTURE_LEASE_MS + 1);
    const r = await maintenance().tick();
    expect(r?.gc.manifests).toBe(0);
  });

  /**
   * The hazard: an old chunk no manifest references (its snapshot was thinned) is found already stored by a capture on
   * node B (global dedup: not written again). GC in the control plane must not delete it before B's manifest lands.
   */
  async function orphanAndDedup(): Promise<{ b: TenantStore; id: string }> {
    const storeB = new ChunkStore({ backend, keys, clock });
    const b = await storeB.tenant(tenantId);
    const data = randomBytes(64 * 1024);
    const { id } = await b.put(data);
    await b.putManifest(snap(0), { refs: [id], body: {} });
    await b.deleteManifest(snap(0));
    const again = await b.stage(data);
    expect(again).toMatchObject({ id, isNew: false });
    return { b, id };
  }

  it('keeps a chunk a capture on another node deduplicated: the sweep waits, and a second replica stays out', async () => {
    await gate.enterCapture(snap(1), 'node-b');
    const { b, id } = await orphanAndDedup();
    const log: string[] = [];
    let settled = false;
    const round = maintenance(log)
      .tick()
      .finally(() => {
        settled = true;
      });
    const waiting = () => log.some((l) => l.includes('gc sweep waiting for the captures in flight'));
    await until(async () => settled || waiting());
    // The round holds the gate and waits: it must not mark while B's capture holds its lease.
    expect(settled).toBe(false);
    expect(await gcHolder()).not.toBe('');
    expect(await b.has(id)).toBe(true);
    // Writer-preferring: no capture starts now, and the other replica does not run maintenance at all.
    await expect(gate.enterCapture(snap(2), 'node-c')).rejects.toEqual(conflict);
    expect(await maintenance().tick()).toBeUndefined();
    // B commits its capture and lets go; only then does the sweep mark (and finds the chunk referenced).
    await b.putManifest(snap(1), { refs: [id], body: {} });
    await gate.leaveCapture(snap(1), 'node-b');
    const r = await round;
    expect(r).toMatchObject({ gc: { manifests: 1, deletedChunks: 0 } });
    expect(await b.get(id)).toHaveLength(64 * 1024);
    expect(await gcHolder()).toBe('');
    await expect(gate.enterCapture(snap(2), 'node-c')).resolves.toBeDefined();
  });

  it('without the gate, GC in another process deletes the deduplicated chunk under the capture (the hazard itself)', async () => {
    const { b, id } = await orphanAndDedup();
    const gc = await new ChunkStore({ backend, keys, clock }).gc({ graceMs: 15 * MINUTE });
    expect(gc.deletedChunks).toBe(1);
    expect(await b.has(id)).toBe(false);
    await expect(b.putManifest(snap(1), { refs: [id], body: {} })).rejects.toEqual(expect.objectContaining({ code: 'snapshot_corrupt' }));
  });

  /** A sandbox with one rolling snapshot per age (ms before now), each with a manifest naming one shared chunk. */
  async function sandboxWithSnapshots(sandboxId: string, agesMs: readonly number[]) {
    const b = await new ChunkStore({ backend, keys, clock }).tenant(tenantId);
    const { id } = await b.put(randomBytes(1024));
    const created = {
      template: 'base',
      memoryMib: 256,
      vcpus: 1,
      timeoutS: 600,
      snapshotIntervalS: 60,
      metadata: {},
      gatewayId: 'node-b',
      gatewayUrl: 'http://x',
      secrets: [],
    };
    await events.append({ type: 'sandbox.created', tenantId, sandboxId, data: created }, { clock });
    for (const [n, ageMs] of agesMs.entries()) {
      await b.putManifest(snap(n), { refs: [id], body: {} });
      const data = {
        snapshotId: snap(n),
        takenAt: new Date(clock.nowMs() - ageMs).toISOString(),
        parentId: null,
        reason: 'rolling',
        name: null,
        pinned: false,
        sizeAddedBytes: 1,
        memoryMib: 256,
        vcpus: 1,
        template: 'base',
      };
      await events.append({ type: 'snapshot.taken', tenantId, sandboxId, data }, { clock });
    }
    return { b, id };
  }

  it('thins by the retention policy over the snapshots table: snapshot.deleted, then the manifest', async () => {
    // Two snapshots 30 days old and one now: the old ones age out, the newest stays.
    const { b, id } = await sandboxWithSnapshots(`sbx_${'b'.repeat(20)}`, [30 * 24 * 60 * MINUTE, 30 * 24 * 60 * MINUTE - MINUTE, 0]);
    const r = await maintenance().tick();
    expect(r?.deleted).toBe(2);
    expect(await b.listManifests()).toEqual([snap(2)]);
    const left = await database.db.selectFrom('snapshots').select('id').execute();
    expect(left.map((s) => s.id)).toEqual([snap(2)]);
    expect(await b.has(id)).toBe(true);
  });

  it('keeps a snapshot named after it was taken, and thins it again once its name is cleared', async () => {
    const sandboxId = `sbx_${'c'.repeat(20)}`;
    const old = 30 * 24 * 60 * MINUTE;
    const { b } = await sandboxWithSnapshots(sandboxId, [old, old, 0]);
    const name = (n: number, to: string | null, from: string | null) =>
      events.append({ type: 'snapshot.named', tenantId, sandboxId, data: { snapshotId: snap(n), name: to, previousName: from } }, { clock });
    await name(0, 'keep', null);
    await name(1, 'brief', null);
    await name(1, null, 'brief');
    expect((await maintenance().tick())?.deleted).toBe(1);
    expect((await b.listManifests()).sort()).toEqual([snap(0), snap(2)].sort());
    await name(0, null, 'keep');
    clock.advance(11 * MINUTE);
    expect((await maintenance().tick())?.deleted).toBe(1);
    expect(await b.listManifests()).toEqual([snap(2)]);
  });
});

describe('capture leases over the node API', () => {
  it('grants, refuses with a retryable-by-design conflict while a sweep runs, and releases only the caller’s own', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sg-gc-api-'));
    const clock = new ManualClock(Date.UTC(2026, 10, 30, 12));
    const database = await openDatabase({ url: 'sqlite::memory:' });
    const secret = Buffer.alloc(32, 9);
    const nodes = new NodeDirectory({ db: database.db, clock, deadAfterMs: 10_000, heartbeatIntervalMs: 1000 });
    const cp = createControlPlane({
      db: database.db,
      events: new EventLog(database.db),
      gateways: nodes,
      nodeSecret: secret,
      clock,
      logger: createLogger('test', 'silent'),
      keys: new LocalKeyring({ dir }),
      cluster: { nodes, failoverIntervalMs: 60_000 },
    });
    try {
      await cp.app.ready();
      const credentials = new NodeCredentials(database.db, clock);
      const nodeKeys = new Map<string, string>();
      for (const n of ['n1', 'n2']) {
        const { token } = await credentials.issueEnrolment(n);
        nodeKeys.set(n, (await credentials.enrol(n, token, newNodeTransportKeys().publicKey)).nodeKey);
      }
      const headers = (node: string) => ({ authorization: `Bearer ${nodeKeys.get(node)}`, 'x-sandglass-node': node });
      const take = (node: string, snapshotId: string) =>
        cp.app.inject({
          method: 'POST',
          url: '/node/v1/capture-leases',
          headers: { ...headers(node), 'content-type': 'application/json' },
          payload: { snapshotId },
        });
      const release = (node: string, snapshotId: string) =>
        cp.app.inject({ method: 'DELETE', url: `/node/v1/capture-leases/${snapshotId}`, headers: headers(node) });
      const gate = new GcGate(database.db, clock);

      const ok = await take('n1', snap(0));
      expect(ok.statusCode).toBe(200);
      expect(ok.json()).toEqual({ expiresAt: new Date(clock.nowMs() + DEFAULT_CAPTURE_LEASE_MS).toISOString(), ttlMs: DEFAULT_CAPTURE_LEASE_MS });
      expect((await take('n1', 'snap_../../x')).statusCode).toBe(400);
      expect(await gate.claimSweep('cp-1', MINUTE)).toBe(true);
      const refused = await take('n2', snap(1));
      expect(refused.statusCode).toBe(409);
      expect(refused.json().error.code).toBe('conflict');
      expect((await release('n2', snap(0))).statusCode).toBe(204);
      expect(await gate.capturesInFlight()).toBe(1);
      expect((await release('n1', snap(0))).statusCode).toBe(204);
      expect(await gate.capturesInFlight()).toBe(0);
      const unauthenticated = await cp.app.inject({
        method: 'POST',
        url: '/node/v1/capture-leases',
        headers: { 'x-sandglass-node': 'n1' },
        payload: { snapshotId: snap(2) },
      });
      expect(unauthenticated.statusCode).toBe(401);
    } finally {
      await cp.app.close();
      await database.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
