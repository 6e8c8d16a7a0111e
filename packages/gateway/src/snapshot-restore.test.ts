// A restore's prepare on a node without the snapshot's RAM image: the template's chunks from the node's image, the rest verified from the store.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import { ChunkStore, LocalDiskBackend } from '@sandglass/chunkstore';
import { LocalKeyring } from '@sandglass/kms';
import { chunkMemory, chunkState, DEFAULT_RETENTION, manifestRefs, MEMORY_CHUNK_BYTES, writeQcow2Overlay, type ManifestBody } from '@sandglass/snapshots';
import { RamFiles } from './ram.js';
import { SnapshotManager } from './snapshots.js';
import type { TemplateSnapshot } from './templates.js';

const CHUNK = MEMORY_CHUNK_BYTES;
const MEMORY_MIB = 4;
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function setup() {
  const dir = mkdtempSync(join(tmpdir(), 'sg-restore-'));
  dirs.push(dir);
  const keys = new LocalKeyring({ dir: join(dir, 'keys') });
  const store = new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys });
  const tenant = await store.tenant('ten_a');
  // The template's RAM: half its chunks data, half zero; the sandbox's: the same with chunk 1 rewritten.
  const templateRam = Buffer.alloc(MEMORY_MIB << 20);
  for (let i = 0; i < templateRam.length / CHUNK; i += 2) randomBytes(CHUNK).copy(templateRam, i * CHUNK);
  const ram = Buffer.from(templateRam);
  randomBytes(CHUNK).copy(ram, 1 * CHUNK);
  writeFileSync(join(dir, 'template.mem'), templateRam);
  writeFileSync(join(dir, 'sandbox.mem'), ram);
  await writeQcow2Overlay(join(dir, 'template.qcow2'), { sizeBytes: 1 << 20, clusters: [] });
  const lease = tenant.lease();
  const memory = await chunkMemory(tenant, lease, join(dir, 'sandbox.mem'), ram.length, undefined);
  const state = await chunkState(tenant, lease, randomBytes(1000));
  const m = {
    version: 1,
    snapshotId: 'snap_a',
    sandboxId: 'sbx_a',
    tenantId: 'ten_a',
    parentId: null,
    takenAt: new Date(0).toISOString(),
    reason: 'manual',
    name: null,
    pinned: false,
    vm: { memoryMib: MEMORY_MIB, vcpus: 1, template: 'base', templateKey: 'k' },
    memory: { chunkBytes: CHUNK, sizeBytes: ram.length, chunks: memory.chunks },
    disk: { base: 'k', sizeBytes: 1 << 20, clusterBytes: CHUNK, clusters: [] },
    state: { sizeBytes: 1000, chunks: state.chunks },
    agent: { commands: [] },
    stats: { pausedMs: 0, newChunks: 0, storedBytes: 0, memoryChunks: 0, diskClusters: 0 },
  } satisfies ManifestBody;
  await tenant.putManifest(m.snapshotId, { refs: manifestRefs(m), body: m });
  lease.release();
  const template = {
    key: 'k',
    name: 'base',
    memPath: join(dir, 'template.mem'),
    diskPath: join(dir, 'template.qcow2'),
    config: { memoryMib: MEMORY_MIB, vcpus: 1, accel: 'tcg' },
  } as TemplateSnapshot;
  const snapshots = new SnapshotManager({
    store,
    ram: new RamFiles(join(dir, 'home'), dir),
    diskCacheDir: join(dir, 'disk-cache'),
    events: { append: () => {} },
    accel: 'tcg',
    cpu: 'max',
    clock: new ManualClock(Date.UTC(2026, 0, 1)),
    logger: createLogger('test', 'silent'),
    retention: DEFAULT_RETENTION,
  });
  const chunkFile = (id: string) => join(dir, 'store', 'chunks', 'ten_a', id.slice(0, 2), id);
  return { dir, m, ram, template, snapshots, chunkFile, tenant, store };
}

it("takes the chunks a snapshot shares with its template from the node's image, and only those", async () => {
  const { dir, m, ram, template, snapshots, chunkFile } = await setup();
  // Gone from the store: a chunk the template image holds too. The restore never asks the store for it.
  rmSync(chunkFile(m.memory.chunks[2]!));
  const prepared = await snapshots.prepareRestore(m, join(dir, 'run', 'sbx_a'), template);
  expect('memImage' in prepared.source && readFileSync(prepared.source.memImage).equals(ram)).toBe(true);
  await snapshots.stop();
});

it('refuses a corrupt chunk the template does not share, and leaves no RAM image behind', async () => {
  const { dir, m, template, snapshots, chunkFile } = await setup();
  const file = chunkFile(m.memory.chunks[1]!);
  const bytes = readFileSync(file);
  bytes[bytes.length - 1]! ^= 1;
  writeFileSync(file, bytes);
  await expect(snapshots.prepareRestore(m, join(dir, 'run', 'sbx_a'), template)).rejects.toMatchObject({
    code: 'snapshot_corrupt',
    details: { chunk: m.memory.chunks[1] },
  });
  const ramRoot = readdirSync(dir).find((n) => n.startsWith('sandglass-'))!;
  expect(readdirSync(join(dir, ramRoot)).filter((n) => n.startsWith('snap-'))).toEqual([]);
  expect(existsSync(join(dir, ramRoot, 'snap-snap_a.img'))).toBe(false);
  await snapshots.stop();
});

it("keeps a large disk delta on the node's disk: a second restore copies it, a revocation finds it, a delete drops it", async () => {
  const { dir, m, template, snapshots, chunkFile, tenant } = await setup();
  // 10 MiB of written clusters: past the size under which a delta is written from the store each time.
  const clusters: Array<[number, string]> = [];
  for (let i = 0; i < 160; i++) clusters.push([i * CHUNK, (await tenant.put(randomBytes(CHUNK))).id]);
  const big = { ...m, snapshotId: 'snap_big', disk: { ...m.disk, sizeBytes: 16 << 20, clusters } } satisfies ManifestBody;
  const first = await snapshots.prepareRestore(big, join(dir, 'run', 'sbx_1'), template);
  const cached = join(dir, 'disk-cache', 'snap-snap_big.qcow2');
  expect(existsSync(cached)).toBe(true);
  expect(snapshots.imagesOf('ten_a')).toContain(cached);
  expect(snapshots.imagesOf('ten_other')).toEqual([]);
  // Gone from the store now: the second restore never asks it for the disk.
  for (const [, id] of clusters) rmSync(chunkFile(id));
  const second = await snapshots.prepareRestore(big, join(dir, 'run', 'sbx_2'), template);
  const disk = (p: typeof first) => readFileSync((p.source.disk as { prepared: string }).prepared);
  expect(disk(second).equals(disk(first))).toBe(true);
  await snapshots.delete('ten_a', 'sbx_a', 'snap_big', 'user');
  expect(existsSync(cached)).toBe(false);
  await snapshots.stop();
});

it('writes a small disk delta from the store each time, and empties the disk cache an earlier process left', async () => {
  const { dir, m, template, snapshots } = await setup();
  await snapshots.prepareRestore(m, join(dir, 'run', 'sbx_1'), template);
  expect(readdirSync(join(dir, 'disk-cache'))).toEqual([]);
  writeFileSync(join(dir, 'disk-cache', 'snap-snap_old.qcow2'), 'an earlier process');
  await snapshots.stop();
  const again = new SnapshotManager({
    store: (snapshots as unknown as { opts: { store: ChunkStore } }).opts.store,
    ram: new RamFiles(join(dir, 'home'), dir),
    diskCacheDir: join(dir, 'disk-cache'),
    events: { append: () => {} },
    accel: 'tcg',
    cpu: 'max',
    clock: new ManualClock(Date.UTC(2026, 0, 1)),
    logger: createLogger('test', 'silent'),
    retention: DEFAULT_RETENTION,
  });
  expect(readdirSync(join(dir, 'disk-cache'))).toEqual([]);
  await again.stop();
});
