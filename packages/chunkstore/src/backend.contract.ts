// The behaviour every ChunkBackend must have; each implementation's test file runs this suite against it.
import { describe, expect, it } from 'vitest';
import type { BackendEntry, ChunkBackend } from './backend.js';

export function describeBackendContract(name: string, make: () => Promise<{ backend: ChunkBackend; cleanup: () => Promise<void> }>): void {
  describe(`ChunkBackend contract: ${name}`, () => {
    const withBackend = (fn: (backend: ChunkBackend) => Promise<void>) => async () => {
      const { backend, cleanup } = await make();
      try {
        await fn(backend);
      } finally {
        await cleanup();
      }
    };

    it(
      'puts, gets, replaces and deletes blobs',
      withBackend(async (b) => {
        expect(await b.get('chunks/t/ab/x')).toBeUndefined();
        expect(await b.has('chunks/t/ab/x')).toBe(false);
        await b.put('chunks/t/ab/x', Buffer.from('one'));
        expect(await b.has('chunks/t/ab/x')).toBe(true);
        expect(await b.get('chunks/t/ab/x')).toEqual(Buffer.from('one'));
        await b.put('chunks/t/ab/x', Buffer.from('two'));
        expect(await b.get('chunks/t/ab/x')).toEqual(Buffer.from('two'));
        await b.put('chunks/t/ab/empty', Buffer.alloc(0));
        expect(await b.get('chunks/t/ab/empty')).toEqual(Buffer.alloc(0));
        await b.delete('chunks/t/ab/x');
        await b.delete('chunks/t/ab/x');
        await b.delete('never/written');
        expect(await b.has('chunks/t/ab/x')).toBe(false);
        expect(await b.has('chunks/t/ab')).toBe(false);
      }),
    );

    it(
      'lists by plain string prefix, with sizes and modification times',
      withBackend(async (b) => {
        const beforeMs = Date.now() - 5_000;
        for (const key of ['manifests/ten_a/s1', 'manifests/ten_a/s2', 'manifests/ten_ab/s1', 'chunks/ten_a/00/c']) await b.put(key, Buffer.from(key));
        const keys = async (prefix: string) => {
          const out: BackendEntry[] = [];
          for await (const entry of b.list(prefix)) out.push(entry);
          return out.map((e) => e.key).sort();
        };
        expect(await keys('manifests/ten_a/')).toEqual(['manifests/ten_a/s1', 'manifests/ten_a/s2']);
        expect(await keys('manifests/ten_a')).toEqual(['manifests/ten_a/s1', 'manifests/ten_a/s2', 'manifests/ten_ab/s1']);
        expect(await keys('manifests/ten_a/s2')).toEqual(['manifests/ten_a/s2']);
        expect(await keys('manifests/')).toHaveLength(3);
        expect(await keys('')).toHaveLength(4);
        expect(await keys('nothing/here/')).toEqual([]);
        for await (const entry of b.list('chunks/')) {
          expect(entry).toMatchObject({ key: 'chunks/ten_a/00/c', sizeBytes: 'chunks/ten_a/00/c'.length });
          expect(entry.mtimeMs).toBeGreaterThan(beforeMs);
        }
      }),
    );

    it(
      'rejects keys that could escape the store or collide with temporary names',
      withBackend(async (b) => {
        for (const bad of ['', '/abs', '../x', 'a/../b', 'a//b', 'a/', '.tmp-x', 'a/.b', 'a\\b', 'a/b c']) {
          await expect(b.put(bad, Buffer.from('x')), bad).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'key' } });
          await expect(b.get(bad), bad).rejects.toMatchObject({ code: 'invalid_argument' });
        }
        await expect(async () => {
          for await (const entry of b.list('../')) expect(entry).toBeUndefined();
        }).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'prefix' } });
      }),
    );
  });
}
