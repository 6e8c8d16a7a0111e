// The chunk store: round trips, per-tenant ids, dedupe, verified reads, manifests as the commit point, nothing readable at rest. On every backend.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decompress } from 'zstd-napi';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalKeyring, TenantKeys } from '@sandglass/kms';
import { ChunkStore, type ChunkBackend, type TenantStore } from './index.js';
import { BACKEND_KINDS, backendFixtures, type BackendFixture } from './store-fixtures.js';

const fixture = backendFixtures();

describe.each(BACKEND_KINDS)('chunk store on %s', (kind) => {
  let dir: string;
  let keys: LocalKeyring;
  let backend: ChunkBackend;
  let storedFiles: BackendFixture['files'];
  let store: ChunkStore;
  let a: TenantStore;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sg-chunks-'));
    keys = new LocalKeyring({ dir: join(dir, 'keys') });
    ({ backend, files: storedFiles } = await fixture(kind, dir));
    store = new ChunkStore({ backend, keys });
    a = await store.tenant('ten_a');
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  const chunkKey = (tenantId: string, id: string) => `chunks/${tenantId}/${id.slice(0, 2)}/${id}`;
  /** The stored (sealed) bytes of a key, which must exist. */
  const raw = async (key: string) => {
    const bytes = await backend.get(key);
    if (!bytes) throw new Error(`${key} is not stored`);
    return bytes;
  };

  describe('chunks', () => {
    it('round trips empty, small, compressible and multi-frame chunks', async () => {
      const samples = [Buffer.alloc(0), Buffer.from('hello'), Buffer.alloc(1 << 20, 'ab'), randomBytes(9 * 1024 * 1024)];
      for (const data of samples) {
        const put = await a.put(data);
        expect(put.id).toMatch(/^[0-9a-f]{64}$/);
        expect(put.id).toBe(a.chunkId(data));
        expect(put.isNew).toBe(true);
        expect(await a.has(put.id)).toBe(true);
        expect((await a.get(put.id)).equals(data)).toBe(true);
      }
      const compressible = await a.put(Buffer.alloc(1 << 20, 'xy'));
      expect(compressible.storedBytes).toBeLessThan(10_000);
    });

    it('gives the same data different ids and separate files in two tenants', async () => {
      const b = await store.tenant('ten_b');
      const data = Buffer.from('same bytes in two tenants');
      const [inA, inB] = [await a.put(data), await b.put(data)];
      expect(inA.id).not.toBe(inB.id);
      expect(await b.has(inA.id)).toBe(false);
      expect(await backend.has(chunkKey('ten_a', inA.id))).toBe(true);
      expect(await backend.has(chunkKey('ten_b', inB.id))).toBe(true);
      expect((await b.get(inB.id)).equals(data)).toBe(true);
    });

    it('dedupes: a second put of the same data writes nothing', async () => {
      const data = Buffer.from('dedupe me');
      const first = await a.put(data);
      const before = await raw(chunkKey('ten_a', first.id));
      const second = await a.put(data, first.id);
      expect(second).toEqual({ id: first.id, storedBytes: 0, isNew: false });
      expect((await raw(chunkKey('ten_a', first.id))).equals(before)).toBe(true);
    });

    it('refuses an id that is not the chunk id of the data, writing nothing', async () => {
      const other = a.chunkId(Buffer.from('other'));
      await expect(a.put(Buffer.from('data'), other)).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'id' } });
      expect(await a.has(other)).toBe(false);
    });

    it('a flipped byte anywhere in a stored chunk is snapshot_corrupt naming the chunk', async () => {
      const { id } = await a.put(Buffer.from('x'.repeat(1000)));
      const key = chunkKey('ten_a', id);
      const good = await raw(key);
      for (const at of [0, 5, Math.floor(good.length / 2), good.length - 1]) {
        const bad = Buffer.from(good);
        bad[at]! ^= 0x80;
        await backend.put(key, bad);
        await expect(a.get(id), `byte ${at}`).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { chunk: id } });
      }
    });

    it('a truncated, missing or swapped chunk is snapshot_corrupt', async () => {
      const one = await a.put(Buffer.from('one'.repeat(100)));
      const two = await a.put(Buffer.from('two'.repeat(100)));
      await backend.put(chunkKey('ten_a', one.id), await raw(chunkKey('ten_a', two.id)));
      await expect(a.get(one.id)).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { chunk: one.id } });
      await backend.put(chunkKey('ten_a', two.id), (await raw(chunkKey('ten_a', two.id))).subarray(0, 20));
      await expect(a.get(two.id)).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { chunk: two.id } });
      const missing = a.chunkId(Buffer.from('never stored'));
      await expect(a.get(missing)).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { chunk: missing } });
    });

    it('a chunk copied into another tenant does not open there', async () => {
      const b = await store.tenant('ten_b');
      const { id } = await a.put(Buffer.from('tenant a only'));
      await b.put(Buffer.from('placeholder'));
      await backend.put(chunkKey('ten_b', id), await raw(chunkKey('ten_a', id)));
      await expect(b.get(id)).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { chunk: id } });
    });

    it('validates ids and names the field', async () => {
      await expect(a.get('../../etc/passwd')).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'id' } });
      await expect(a.has('ABC')).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'id' } });
      await expect(store.tenant('../ten_a')).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'tenantId' } });
      await expect(a.getManifest('a/b')).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'snapshotId' } });
      await expect(a.putManifest('snap_1', { refs: ['nope'], body: {} })).rejects.toMatchObject({
        code: 'invalid_argument',
        details: { field: 'manifest.refs' },
      });
      expect(() => a.lease().add('zz')).toThrow(/chunk id/);
    });

    it('a revoked tenant cannot be opened', async () => {
      await keys.revoke('ten_a');
      await expect(store.tenant('ten_a')).rejects.toMatchObject({ code: 'key_revoked' });
    });
  });

  describe('manifests', () => {
    it('round trip, list and delete', async () => {
      const one = await a.put(Buffer.from('one'));
      const two = await a.put(Buffer.from('two'));
      const body = { sandboxId: 'sbx_1', memory: [one.id, null, two.id], note: 'ünïcode' };
      const { storedBytes } = await a.putManifest('snap_2', { refs: [one.id, two.id, one.id], body });
      expect(storedBytes).toBeGreaterThan(0);
      await a.putManifest('snap_1', { refs: [], body: null });
      expect(await a.getManifest('snap_2')).toEqual({ refs: [one.id, two.id, one.id], body });
      expect(await a.listManifests()).toEqual(['snap_1', 'snap_2']);
      expect(await (await store.tenant('ten_b')).listManifests()).toEqual([]);
      await a.deleteManifest('snap_2');
      await a.deleteManifest('snap_2');
      expect(await a.listManifests()).toEqual(['snap_1']);
      await expect(a.getManifest('snap_2')).rejects.toMatchObject({ code: 'snapshot_not_found' });
    });

    it('a tampered or truncated manifest is snapshot_corrupt naming it', async () => {
      await a.putManifest('snap_1', { refs: [], body: { big: 'x'.repeat(500) } });
      const key = 'manifests/ten_a/snap_1';
      const good = await raw(key);
      const bad = Buffer.from(good);
      bad[good.length - 20]! ^= 1;
      await backend.put(key, bad);
      await expect(a.getManifest('snap_1')).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { manifest: 'snap_1' } });
      await backend.put(key, good.subarray(0, 10));
      await expect(a.getManifest('snap_1')).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { manifest: 'snap_1' } });
    });

    it('refuses to commit a manifest with a missing ref, and writes nothing', async () => {
      const present = await a.put(Buffer.from('present'));
      const missing = a.chunkId(Buffer.from('missing'));
      await expect(a.putManifest('snap_1', { refs: [present.id, missing], body: {} })).rejects.toMatchObject({
        code: 'snapshot_corrupt',
        details: { chunk: missing },
      });
      expect(await a.listManifests()).toEqual([]);
    });

    it('refuses a body that is not JSON', async () => {
      await expect(a.putManifest('snap_1', { refs: [], body: { n: 1n } })).rejects.toMatchObject({
        code: 'invalid_argument',
        details: { field: 'manifest.body' },
      });
    });
  });

  describe('key rotation', () => {
    it('new writes use the new version, old chunks and manifests read back unchanged, ids and dedup stay', async () => {
      const tenantKeys = new TenantKeys({ dir: join(dir, 'keys'), keyring: keys });
      const rotating = new ChunkStore({ backend, keys: tenantKeys });
      const before = await rotating.tenant('ten_r');
      const old = Buffer.from('written before the rotation '.repeat(100));
      const { id: oldId } = await before.put(old);
      await before.putManifest('snap_old', { refs: [oldId], body: { n: 1 } });
      const oldBytes = await raw(chunkKey('ten_r', oldId));
      await tenantKeys.rotate('ten_r');
      const after = await rotating.tenant('ten_r');
      expect(after.chunkId(old)).toBe(oldId);
      // Deduplicated, not rewritten under the new key.
      expect(await after.put(old)).toMatchObject({ id: oldId, isNew: false, storedBytes: 0 });
      expect((await raw(chunkKey('ten_r', oldId))).equals(oldBytes)).toBe(true);
      const fresh = Buffer.from('written after the rotation '.repeat(100));
      const { id: newId } = await after.put(fresh);
      await after.putManifest('snap_new', { refs: [oldId, newId], body: { n: 2 } });
      const newBytes = await raw(chunkKey('ten_r', newId));
      expect([newBytes[0], newBytes.readUInt32BE(1)]).toEqual([0x80, 2]);
      for (const t of [
        after,
        await new ChunkStore({ backend, keys: new TenantKeys({ dir: join(dir, 'keys'), keyring: new LocalKeyring({ dir: join(dir, 'keys') }) }) }).tenant(
          'ten_r',
        ),
      ]) {
        expect((await t.get(oldId)).equals(old)).toBe(true);
        expect((await t.get(newId)).equals(fresh)).toBe(true);
        expect((await t.getManifest('snap_old')).body).toEqual({ n: 1 });
        expect((await t.getManifest('snap_new')).body).toEqual({ n: 2 });
      }
      // GC reads manifests of both versions: both chunks are live.
      expect(await rotating.gc({ graceMs: 0 })).toMatchObject({ deletedChunks: 0, undecidedTenants: [] });
      await tenantKeys.revoke('ten_r');
      await expect(rotating.tenant('ten_r')).rejects.toMatchObject({ code: 'key_revoked' });
      expect((await rotating.gc({ graceMs: 0 })).undecidedTenants).toEqual(['ten_r']);
    });
  });

  describe('at rest', () => {
    it('no file under the store holds a chunk or manifest in the clear, raw or zstd-decompressed', async () => {
      const marker = 'SANDGLASS-AT-REST-MARKER';
      const data = Buffer.from(marker.repeat(4000));
      const { id } = await a.put(data);
      await a.putManifest('snap_1', { refs: [id], body: { note: marker } });
      const keys: string[] = [];
      for await (const entry of backend.list('')) keys.push(entry.key);
      expect(keys).toHaveLength(2);
      const files = await storedFiles();
      expect(files.length).toBeGreaterThanOrEqual(2);
      for (const file of files) {
        const bytes = await readFile(file);
        expect(bytes.includes(marker), file).toBe(false);
        let opened: Buffer | undefined;
        try {
          opened = decompress(bytes);
        } catch {
          opened = undefined;
        }
        expect(opened?.includes(marker) ?? false, file).toBe(false);
        expect(bytes.length).toBeLessThan(data.length / 10);
      }
    });
  });
});
