// The pipelined materializer: the same bytes as reading chunk by chunk, zero chunks as holes, the template image used only where ids match, corrupt chunks refused.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkStore, LocalDiskBackend, type TenantStore } from '@sandglass/chunkstore';
import { LocalKeyring } from '@sandglass/kms';
import {
  baseChunkIds,
  chunkDiskLayers,
  chunkMemory,
  chunkState,
  manifestRefs,
  materializeDisk,
  materializeMemory,
  materializeState,
  MEMORY_CHUNK_BYTES,
  readClusters,
  readQcow2Layer,
  writeQcow2Overlay,
  ZERO,
  type ManifestBody,
} from './index.js';

const CHUNK = MEMORY_CHUNK_BYTES;
const CHUNKS = 96;
let dir: string;
let tenant: TenantStore;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-materialize-'));
  tenant = await new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys: new LocalKeyring({ dir: join(dir, 'keys') }) }).tenant('t1');
});
afterEach(() => rm(dir, { recursive: true, force: true }));

/** A RAM image: every third chunk zero, the rest distinct (some compressible, some not). */
function ramImage(): Buffer {
  const ram = Buffer.alloc(CHUNKS * CHUNK);
  for (let i = 0; i < CHUNKS; i++) {
    if (i % 3 === 0) continue;
    const chunk = i % 2 ? randomBytes(CHUNK) : Buffer.alloc(CHUNK, `page ${i} `);
    chunk.copy(ram, i * CHUNK);
  }
  return ram;
}

async function snapshot(ram: Buffer): Promise<ManifestBody> {
  await writeFile(join(dir, 'ram'), ram);
  const lease = tenant.lease();
  const memory = await chunkMemory(tenant, lease, join(dir, 'ram'), ram.length, undefined);
  const state = await chunkState(tenant, lease, randomBytes(3 * 1024 * 1024 + 5));
  const disk = await writeDiskLayer();
  const clusters = await chunkDiskLayers(tenant, lease, [disk], new Map());
  const m = {
    version: 1,
    snapshotId: 'snap_1',
    sandboxId: 'sbx_1',
    tenantId: 't1',
    parentId: null,
    takenAt: new Date(0).toISOString(),
    reason: 'manual',
    name: null,
    pinned: false,
    vm: { memoryMib: 6, vcpus: 1, template: 'base', templateKey: 'k' },
    memory: { chunkBytes: CHUNK, sizeBytes: ram.length, chunks: memory.chunks },
    disk: { base: 'k', sizeBytes: clusters.sizeBytes, clusterBytes: clusters.clusterBytes, clusters: [...clusters.clusters.entries()] },
    state: { sizeBytes: 0, chunks: state.chunks },
    agent: { commands: [] },
    stats: { pausedMs: 0, newChunks: 0, storedBytes: 0, memoryChunks: 0, diskClusters: 0 },
  } satisfies ManifestBody;
  await tenant.putManifest(m.snapshotId, { refs: manifestRefs(m), body: m });
  lease.release();
  return m;
}

/** A standalone qcow2 layer with 40 data clusters and 3 zero ones, out of order. */
async function writeDiskLayer(): Promise<string> {
  const path = join(dir, 'layer.qcow2');
  const clusters = Array.from({ length: 43 }, (_, i) => ({ guestOffset: ((i * 37) % 200) * CHUNK, data: i < 3 ? ('zero' as const) : randomBytes(CHUNK) }));
  await writeQcow2Overlay(path, { sizeBytes: 200 * CHUNK, clusters });
  return path;
}

/** The chunk-by-chunk reading the pipelined path replaced: the oracle its output is compared with. */
async function sequentialMemory(m: ManifestBody, path: string): Promise<void> {
  const fh = await open(path, 'w');
  await fh.truncate(m.memory.sizeBytes);
  for (let i = 0; i < m.memory.chunks.length; i++) {
    if (m.memory.chunks[i] === ZERO) continue;
    const data = await tenant.get(m.memory.chunks[i]!);
    await fh.write(data, 0, data.length, i * CHUNK);
  }
  await fh.close();
}

async function chunkFiles(): Promise<string[]> {
  const out: string[] = [];
  const root = join(dir, 'store', 'chunks', 't1');
  for (const fan of await readdir(root)) for (const f of await readdir(join(root, fan))) out.push(join(root, fan, f));
  return out;
}

async function corrupt(id: string): Promise<void> {
  const file = (await chunkFiles()).find((f) => f.endsWith(id))!;
  const bytes = await readFile(file);
  bytes[bytes.length - 20]! ^= 0x01;
  await writeFile(file, bytes);
}

describe('materializeMemory', () => {
  it('writes the same image as chunk-by-chunk reading, zero chunks as holes', async () => {
    const ram = ramImage();
    const m = await snapshot(ram);
    await sequentialMemory(m, join(dir, 'old.img'));
    const stats = await materializeMemory(tenant, m, join(dir, 'new.img'), { concurrency: 7 });
    const image = await readFile(join(dir, 'new.img'));
    expect(image.equals(await readFile(join(dir, 'old.img')))).toBe(true);
    expect(image.equals(ram)).toBe(true);
    expect(stats).toEqual({ fromStore: 64, fromBase: 0, zero: 32 });
    // Holes: the file holds at most the non-zero chunks' blocks.
    expect((await stat(join(dir, 'new.img'))).blocks * 512).toBeLessThanOrEqual(64 * CHUNK);
  });

  it("copies the chunks it shares with the template's image from the image, and fetches the rest", async () => {
    const template = ramImage();
    const ram = Buffer.from(template);
    // The sandbox rewrote two chunks and zeroed one after the template was taken.
    randomBytes(CHUNK).copy(ram, 1 * CHUNK);
    randomBytes(CHUNK).copy(ram, 3 * CHUNK);
    ram.fill(0, 2 * CHUNK, 3 * CHUNK);
    const m = await snapshot(ram);
    await writeFile(join(dir, 'template.img'), template);
    const ids = await baseChunkIds(tenant, join(dir, 'template.img'), template.length, CHUNK);
    const stats = await materializeMemory(tenant, m, join(dir, 'new.img'), { base: { path: join(dir, 'template.img'), chunks: ids } });
    expect((await readFile(join(dir, 'new.img'))).equals(ram)).toBe(true);
    expect(stats).toEqual({ fromStore: 2, fromBase: 62, zero: 32 });
  });

  it('takes nothing from a base whose ids are not the snapshot chunks it would stand in for', async () => {
    const ram = ramImage();
    const m = await snapshot(ram);
    // A base image of other bytes: its ids match nothing, so every chunk comes from the store, verified.
    const other = randomBytes(CHUNKS * CHUNK);
    await writeFile(join(dir, 'other.img'), other);
    const ids = await baseChunkIds(tenant, join(dir, 'other.img'), other.length, CHUNK);
    const stats = await materializeMemory(tenant, m, join(dir, 'new.img'), { base: { path: join(dir, 'other.img'), chunks: ids } });
    expect(stats.fromBase).toBe(0);
    expect((await readFile(join(dir, 'new.img'))).equals(ram)).toBe(true);
  });

  it('refuses a corrupt chunk and leaves no image, not even a partial one', async () => {
    const m = await snapshot(ramImage());
    const bad = m.memory.chunks.filter((c) => c !== ZERO)[40]!;
    await corrupt(bad);
    await expect(materializeMemory(tenant, m, join(dir, 'new.img'), { concurrency: 4 })).rejects.toMatchObject({
      code: 'snapshot_corrupt',
      details: { chunk: bad },
    });
    expect(existsSync(join(dir, 'new.img'))).toBe(false);
    expect((await readdir(dir)).filter((f) => f.startsWith('new.img'))).toEqual([]);
  });

  it('refuses a snapshot with a missing chunk even where the template image could have supplied others', async () => {
    const template = ramImage();
    const ram = Buffer.from(template);
    randomBytes(CHUNK).copy(ram, 5 * CHUNK);
    const m = await snapshot(ram);
    await rm((await chunkFiles()).find((f) => f.endsWith(m.memory.chunks[5]!))!);
    await writeFile(join(dir, 'template.img'), template);
    const ids = await baseChunkIds(tenant, join(dir, 'template.img'), template.length, CHUNK);
    await expect(materializeMemory(tenant, m, join(dir, 'new.img'), { base: { path: join(dir, 'template.img'), chunks: ids } })).rejects.toMatchObject({
      code: 'snapshot_corrupt',
    });
    expect(existsSync(join(dir, 'new.img'))).toBe(false);
  });
});

describe('materializeState and materializeDisk', () => {
  it('rebuild the state stream in order and the disk delta cluster for cluster', async () => {
    const m = await snapshot(ramImage());
    const parts: Buffer[] = [];
    for (const id of m.state.chunks) parts.push(await tenant.get(id));
    await materializeState(tenant, m, join(dir, 'state.bin'), { concurrency: 2 });
    expect((await readFile(join(dir, 'state.bin'))).equals(Buffer.concat(parts))).toBe(true);

    await materializeDisk(tenant, m, join(dir, 'disk.qcow2'), undefined, { concurrency: 5 });
    const want = new Map<number, Buffer | 'zero'>();
    await readClusters(join(dir, 'layer.qcow2'), await readQcow2Layer(join(dir, 'layer.qcow2')), (o, d) => {
      want.set(o, d === 'zero' ? d : Buffer.from(d));
    });
    const got = new Map<number, Buffer | 'zero'>();
    await readClusters(join(dir, 'disk.qcow2'), await readQcow2Layer(join(dir, 'disk.qcow2')), (o, d) => {
      got.set(o, d === 'zero' ? d : Buffer.from(d));
    });
    expect(got).toEqual(want);
  });

  it('refuse a corrupt state or disk chunk', async () => {
    const m = await snapshot(ramImage());
    await corrupt(m.state.chunks[2]!);
    await expect(materializeState(tenant, m, join(dir, 'state.bin'))).rejects.toMatchObject({ code: 'snapshot_corrupt' });
    const cluster = m.disk.clusters.find(([, id]) => id !== ZERO)![1];
    await corrupt(cluster);
    await expect(materializeDisk(tenant, m, join(dir, 'disk.qcow2'))).rejects.toMatchObject({ code: 'snapshot_corrupt', details: { chunk: cluster } });
    expect(existsSync(join(dir, 'disk.qcow2'))).toBe(false);
  });
});
