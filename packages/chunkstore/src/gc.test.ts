// GC: orphans past the grace period go; referenced, leased and young chunks stay; an undecidable tenant loses nothing. On every backend.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '@sandglass/core';
import { LocalKeyring } from '@sandglass/kms';
import { ChunkStore, type ChunkBackend, type TenantStore } from './index.js';
import { BACKEND_KINDS, backendFixtures, type BackendFixture } from './store-fixtures.js';

const HOUR_MS = 60 * 60 * 1000;
const fixture = backendFixtures();

describe.each(BACKEND_KINDS)('gc on %s', (kind) => {
  let dir: string;
  let keys: LocalKeyring;
  let backend: ChunkBackend;
  let backdate: BackendFixture['backdate'];
  let store: ChunkStore;
  let a: TenantStore;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sg-gc-'));
    keys = new LocalKeyring({ dir: join(dir, 'keys') });
    ({ backend, backdate } = await fixture(kind, dir));
    store = new ChunkStore({ backend, keys });
    a = await store.tenant('ten_a');
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  /** Puts a chunk and backdates it, as if written long ago. */
  async function oldChunk(tenant: TenantStore, text: string, ageMs = 2 * HOUR_MS): Promise<string> {
    const { id } = await tenant.put(Buffer.from(text));
    await backdate(`chunks/${tenant.tenantId}/${id.slice(0, 2)}/${id}`, ageMs);
    return id;
  }

  it('deletes old orphans and keeps referenced, leased and young chunks', async () => {
    const referenced = await oldChunk(a, 'referenced');
    const orphan = await oldChunk(a, 'orphan');
    const leased = await oldChunk(a, 'leased');
    const young = (await a.put(Buffer.from('young'))).id;
    await a.putManifest('snap_1', { refs: [referenced], body: {} });
    const lease = a.lease();
    lease.add(leased);

    const result = await store.gc({ graceMs: HOUR_MS });
    expect(result).toMatchObject({ manifests: 1, liveChunks: 2, deletedChunks: 1, keptYoung: 1, undecidedTenants: [] });
    expect(result.freedBytes).toBeGreaterThan(0);
    expect(await a.has(orphan)).toBe(false);
    for (const id of [referenced, leased, young]) expect(await a.has(id)).toBe(true);
    expect((await a.get(referenced)).toString()).toBe('referenced');

    lease.release();
    lease.release();
    expect(() => lease.add(leased)).toThrow(/after release/);
    expect(await store.gc({ graceMs: HOUR_MS })).toMatchObject({ deletedChunks: 1, liveChunks: 1, keptYoung: 1 });
    expect(await a.has(leased)).toBe(false);
  });

  it('keeps a chunk while any lease holding it is unreleased', async () => {
    const id = await oldChunk(a, 'shared by two captures');
    const first = a.lease();
    const second = a.lease();
    first.add(id);
    second.add(id);
    first.release();
    await store.gc({ graceMs: HOUR_MS });
    expect(await a.has(id)).toBe(true);
    second.release();
    await store.gc({ graceMs: HOUR_MS });
    expect(await a.has(id)).toBe(false);
  });

  it('a chunk of a deleted manifest is collected once past the grace period', async () => {
    const id = await oldChunk(a, 'was referenced');
    await a.putManifest('snap_1', { refs: [id], body: {} });
    await a.deleteManifest('snap_1');
    expect(await store.gc({ graceMs: HOUR_MS })).toMatchObject({ manifests: 0, deletedChunks: 1 });
  });

  it('deletes nothing of a tenant whose key is revoked, and still collects other tenants', async () => {
    const b = await store.tenant('ten_b');
    const bOrphan = await oldChunk(b, 'b orphan');
    const bReferenced = await oldChunk(b, 'b referenced');
    await b.putManifest('snap_1', { refs: [bReferenced], body: {} });
    const aOrphan = await oldChunk(a, 'a orphan');
    await keys.revoke('ten_b');

    const result = await store.gc({ graceMs: HOUR_MS });
    expect(result).toMatchObject({ deletedChunks: 1, undecidedTenants: ['ten_b'] });
    expect(await a.has(aOrphan)).toBe(false);
    expect(await b.has(bOrphan)).toBe(true);
    expect(await b.has(bReferenced)).toBe(true);
  });

  it('deletes nothing of a tenant with a damaged manifest', async () => {
    const orphan = await oldChunk(a, 'orphan');
    const referenced = await oldChunk(a, 'referenced');
    await a.putManifest('snap_1', { refs: [referenced], body: {} });
    await backend.put('manifests/ten_a/snap_1', Buffer.from('garbage'));
    expect(await store.gc({ graceMs: HOUR_MS })).toMatchObject({ deletedChunks: 0, undecidedTenants: ['ten_a'] });
    expect(await a.has(orphan)).toBe(true);
    expect(await a.has(referenced)).toBe(true);
  });

  it('leaves files it did not write alone', async () => {
    const { id } = await a.put(Buffer.from('x'));
    const readme = `chunks/ten_a/${id.slice(0, 2)}/README`;
    await backend.put(readme, Buffer.from('not a chunk'));
    await backdate(readme, 2 * HOUR_MS);
    expect(await store.gc({ graceMs: 0 })).toMatchObject({ deletedChunks: 1 });
    expect(await backend.has(readme)).toBe(true);
  });

  it('a capture deduplicating against an orphan while GC runs keeps its chunk', async () => {
    const orphans = await Promise.all(Array.from({ length: 50 }, (_, i) => oldChunk(a, `orphan ${i}`)));
    const running = store.gc({ graceMs: HOUR_MS });
    const lease = a.lease();
    for (const [i, id] of orphans.entries()) {
      if (i % 2) continue;
      lease.add(id);
      await a.put(Buffer.from(`orphan ${i}`), id);
    }
    await running;
    await a.putManifest('snap_1', { refs: orphans.filter((_, i) => i % 2 === 0), body: {} });
    lease.release();
    for (const [i, id] of orphans.entries()) if (i % 2 === 0) expect((await a.get(id)).toString()).toBe(`orphan ${i}`);
  });

  it('refuses a second GC in the same process and a bad grace period', async () => {
    const running = store.gc({ graceMs: HOUR_MS });
    await expect(store.gc({ graceMs: HOUR_MS })).rejects.toMatchObject({ code: 'conflict' });
    await running;
    await expect(store.gc({ graceMs: -1 })).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'graceMs' } });
  });

  it('reports its duration on the given clock', async () => {
    const clock = new ManualClock(Date.now());
    const timed = new ChunkStore({ backend, keys, clock });
    expect((await timed.gc({ graceMs: HOUR_MS })).durationMs).toBe(0);
  });
});
