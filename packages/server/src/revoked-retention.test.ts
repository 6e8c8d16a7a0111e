import { mkdtemp, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import { ChunkStore, LocalDiskBackend } from '@sandglass/chunkstore';
import { LocalKeyring, TenantKeys } from '@sandglass/kms';
import { purgeRevokedTenants } from './revoked-retention.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-revoked-retention-'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

describe('purgeRevokedTenants', () => {
  it("reclaims a revoked tenant's chunks and manifests after the retention period, and nothing else", async () => {
    const DAY_MS = 86_400_000;
    const clock = new ManualClock(Date.parse('2026-12-01T00:00:00Z'));
    const keys = new TenantKeys({ dir: join(dir, 'keys'), keyring: new LocalKeyring({ dir: join(dir, 'keys') }), clock });
    const backend = new LocalDiskBackend(join(dir, 'store'));
    const store = new ChunkStore({ backend, keys, clock });
    for (const t of ['ten_gone', 'ten_kept']) {
      const ts = await store.tenant(t);
      const { id } = await ts.put(Buffer.from(`data of ${t}`));
      await ts.putManifest('snap_1', { refs: [id], body: {} });
    }
    await keys.revoke('ten_gone');
    // The tombstone's time is the revocation's.
    await utimes(join(dir, 'keys', 'byok', 'ten_gone.revoked'), new Date(clock.nowMs()), new Date(clock.nowMs()));
    const events: Array<{ type: string; tenantId: string; data: Record<string, unknown> }> = [];
    const sweep = () =>
      purgeRevokedTenants({ keys, store, clock, retentionMs: 30 * DAY_MS, logger: createLogger('test'), events: { append: async (e) => void events.push(e) } });
    clock.advance(29 * DAY_MS);
    expect(await sweep()).toEqual([]);
    clock.advance(2 * DAY_MS);
    expect(await sweep()).toEqual(['ten_gone']);
    const left: string[] = [];
    for await (const e of backend.list('')) left.push(e.key.split('/').slice(0, 2).join('/'));
    expect([...new Set(left)].sort()).toEqual(['chunks/ten_kept', 'manifests/ten_kept']);
    expect(events).toEqual([{ type: 'tenant.data_purged', tenantId: 'ten_gone', data: expect.objectContaining({ manifests: 1, chunks: 1 }) }]);
    // Idempotent: nothing left to purge, nothing recorded.
    expect(await sweep()).toEqual([]);
    expect(events).toHaveLength(1);
  });
});
