// A gateway in a cluster has no snapshot index: retention and GC run in the control plane, and maintain() says so.
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
