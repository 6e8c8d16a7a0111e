// A gateway in a cluster has no snapshot index: retention and GC run in the control plane, and maintain() says so; with
// one, maintain() thins by it and leaves a snapshot named since the plan read the index.
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import type { ChunkStore } from '@sandglass/chunkstore';
import { DEFAULT_RETENTION } from '@sandglass/snapshots';
import type { RamFiles } from './ram.js';
import { SnapshotManager } from './snapshots.js';

describe('SnapshotManager without a snapshot index', () => {
  it('refuses maintenance with conflict, touching nothing in the store', async () => {
    const store = new Proxy({}, { get: () => () => Promise.reject(new Error('the store was used')) }) as unknown as ChunkStore;
    const events: unknown[] = [];
    const m = new SnapshotManager({
      store,
      ram: {} as RamFiles,
      events: { append: (e) => events.push(e) },
      accel: 'tcg',
      cpu: 'max',
      clock: new ManualClock(),
      logger: createLogger('test', 'silent'),
      retention: DEFAULT_RETENTION,
    });
    await expect(m.maintain()).rejects.toMatchObject({ code: 'conflict', message: expect.stringMatching(/control plane/) });
    expect(events).toEqual([]);
    await m.stop();
  });
});

describe('SnapshotManager with a snapshot index', () => {
  it('re-reads each snapshot before thinning it: one named since the plan stays', async () => {
    const clock = new ManualClock(Date.UTC(2025, 6, 1));
    const deletedManifests: string[] = [];
    const tenant = { listManifests: async () => [], deleteManifest: async (id: string) => void deletedManifests.push(id) };
    const store = { tenant: async () => tenant, gc: async () => ({ deletedChunks: 0, freedBytes: 0 }) } as unknown as ChunkStore;
    const events: Array<{ type: string; data: Record<string, unknown> }> = [];
    const old = new Date(clock.nowMs() - 30 * 86_400_000).toISOString();
    const row = (id: string, takenAt: string) => ({ id, tenantId: 'ten_a', sandboxId: 'sbx_a', takenAt, pinned: false, sandboxState: 'ended' });
    const m = new SnapshotManager({
      store,
      ram: { root: tmpdir() } as RamFiles,
      events: { append: (e) => void events.push(e as (typeof events)[number]) },
      accel: 'tcg',
      cpu: 'max',
      clock,
      logger: createLogger('test', 'silent'),
      retention: DEFAULT_RETENTION,
      index: {
        all: async () => [row('snap_named_since', old), row('snap_plain', old)],
        // snap_named_since was named (so pinned) after all() read it.
        thinnable: async (id) => id !== 'snap_named_since',
      },
    });
    const r = await m.maintain();
    expect(r.deleted).toBe(1);
    expect(deletedManifests).toEqual(['snap_plain']);
    expect(events.filter((e) => e.type === 'snapshot.deleted').map((e) => e.data)).toEqual([{ snapshotId: 'snap_plain', why: 'retention' }]);
    await m.stop();
  });
});
