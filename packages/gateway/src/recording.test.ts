// The recording of a sandbox's inputs: content ids, parts, streaming, the cap, and GC keeping recorded chunks alive.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkStore, LocalDiskBackend, type ChunkStoreOptions } from '@sandglass/chunkstore';
import { createLogger } from '@sandglass/core';
import { CONTENT_PART_BYTES, readContent, Recorder, recordingManifestId } from './recording.js';

const keys: ChunkStoreOptions['keys'] = {
  name: 'test',
  dataKey: async (tenantId, purpose) => createHash('sha256').update(`${tenantId}/${purpose}`).digest(),
  revoke: async () => {},
};
const logger = createLogger('recording-test', 'silent');

let dir: string;
let store: ChunkStore;
let capped: Array<{ capBytes: number; recordedBytes: number }>;

const open = (capBytes = 64 * 1024 * 1024) =>
  Recorder.open({ store, tenantId: 'ten_a', sandboxId: 'sbx_1', capBytes, logger, onCapped: (d) => capped.push(d) });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'sg-recording-'));
  store = new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys });
  capped = [];
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('Recorder', () => {
  it('names content at once and stores it behind the call; the manifest keeps it through GC', async () => {
    const rec = await open();
    const small = Buffer.from('print(input())\n');
    const big = randomBytes(CONTENT_PART_BYTES * 2 + 100);
    const a = rec.content(small);
    const b = rec.content(big);
    expect(a).toEqual({ contentId: expect.stringMatching(/^[0-9a-f]{64}$/), sizeBytes: small.length });
    await rec.close();
    const tenant = await store.tenant('ten_a');
    const gc = await store.gc({ graceMs: 0 });
    expect(gc.deletedChunks).toBe(0);
    expect(await readContent(tenant, { contentId: a.contentId!, sizeBytes: a.sizeBytes })).toEqual(small);
    expect((await readContent(tenant, { contentId: b.contentId!, sizeBytes: b.sizeBytes })).equals(big)).toBe(true);
    expect((await tenant.getManifest(recordingManifestId('sbx_1'))).body).toMatchObject({ kind: 'recording', recordedBytes: small.length + big.length });
  });

  it('records a stream as it passes, in parts, without changing it', async () => {
    const rec = await open();
    const data = randomBytes(CONTENT_PART_BYTES + 12345);
    const tee = rec.tee();
    const out: Buffer[] = [];
    await pipeline(
      Readable.from([data.subarray(0, 1000), data.subarray(1000, CONTENT_PART_BYTES + 7), data.subarray(CONTENT_PART_BYTES + 7)]),
      tee.stream,
      new Writable({
        write(c: Buffer, _e, cb) {
          out.push(c);
          cb();
        },
      }),
    );
    expect(Buffer.concat(out).equals(data)).toBe(true);
    const ref = tee.ref();
    await rec.flush();
    expect(ref.sizeBytes).toBe(data.length);
    expect((await readContent(await store.tenant('ten_a'), { contentId: ref.contentId!, sizeBytes: ref.sizeBytes })).equals(data)).toBe(true);
  });

  it('stops at the cap, says so once, and names nothing after it', async () => {
    const rec = await open(1000);
    expect(rec.content(Buffer.alloc(600, 1)).contentId).not.toBeNull();
    expect(rec.content(Buffer.alloc(600, 2))).toEqual({ contentId: null, sizeBytes: 600 });
    expect(rec.content(Buffer.alloc(10, 3)).contentId).toBeNull();
    expect(capped).toEqual([{ capBytes: 1000, recordedBytes: 600 }]);
    await rec.close();
    // A resumed sandbox continues the same recording, still capped.
    const again = await open(1000);
    expect(again.capped).toBe(true);
    expect(again.content(Buffer.from('x')).contentId).toBeNull();
  });

  it('a resumed sandbox keeps what it recorded before', async () => {
    const first = await open();
    const before = first.content(Buffer.from('before'));
    await first.close();
    const second = await open();
    second.content(Buffer.from('after'));
    await second.close();
    await store.gc({ graceMs: 0 });
    expect((await (await store.tenant('ten_a')).get(before.contentId!)).toString()).toBe('before');
  });

  it('a discarded recording leaves its chunks to GC', async () => {
    const rec = await open();
    const ref = rec.content(Buffer.from('gone'));
    await rec.discard();
    const gc = await store.gc({ graceMs: 0 });
    expect(gc.deletedChunks).toBe(1);
    await expect((await store.tenant('ten_a')).has(ref.contentId!)).resolves.toBe(false);
  });
});
