// Rebuilding a snapshot's files from verified chunks: the RAM image, the device-state stream and a qcow2 disk overlay.
import { open, rename, rm, writeFile, type FileHandle } from 'node:fs/promises';
import type { TenantStore } from '@sandglass/chunkstore';
import { writeQcow2Overlay, type Qcow2Cluster } from './qcow2.js';
import { ZERO, type ManifestBody } from './manifest.js';
import { forEachChunk } from './capture.js';

/**
 * Chunk reads in flight at once: enough to hide a backend's latency (a file read on the thread pool, an S3 GET) behind
 * the decrypt, decompress and hash of the others, few enough that their buffers stay a few MiB.
 */
export const MATERIALIZE_CONCURRENCY = 16;
/** Runs of chunks copied from a local base image are read and written this much at a time. */
const COPY_RUN_BYTES = 4 * 1024 * 1024;

/**
 * The node's own RAM image of the template a snapshot was taken over, with the ids its chunks have in the snapshot's
 * tenant (baseChunkIds). A snapshot chunk whose id equals the base's at the same address is those very bytes (the id
 * is a keyed hash), so it is copied from the image instead of fetched, decrypted and decompressed.
 */
export interface LocalBase {
  path: string;
  chunks: readonly string[];
}

export interface MaterializeOptions {
  base?: LocalBase;
  concurrency?: number;
}

/** Where a RAM image's chunks came from. */
export interface MemoryStats {
  fromStore: number;
  fromBase: number;
  /** Left as holes. */
  zero: number;
}

/**
 * The ids `path` (a RAM image, holes reading as zeros) has in `tenant`'s store, chunk by chunk, ZERO for all-zero
 * chunks: what a manifest of that tenant records for the same bytes.
 */
export async function baseChunkIds(tenant: TenantStore, path: string, sizeBytes: number, chunkBytes: number): Promise<string[]> {
  const ids = new Array<string>(Math.ceil(sizeBytes / chunkBytes)).fill(ZERO);
  await forEachChunk(path, sizeBytes, chunkBytes, (index, data) => {
    ids[index] = tenant.chunkId(data);
  });
  return ids;
}

/**
 * Writes the guest RAM image of `m` to `path` (sparse: zero chunks stay holes). Chunks are fetched `concurrency` at a
 * time and each written at its offset as soon as the store has verified it; a bad one throws snapshot_corrupt and the
 * partial file is removed. Written under a temporary name and renamed, so a crash never leaves a half image that looks
 * whole, and nothing maps the image before every chunk of it has been verified.
 */
export async function materializeMemory(tenant: TenantStore, m: ManifestBody, path: string, opts: MaterializeOptions = {}): Promise<MemoryStats> {
  const { chunkBytes, chunks } = m.memory;
  const stats: MemoryStats = { fromStore: 0, fromBase: 0, zero: 0 };
  const fetch: number[] = [];
  const local: number[] = [];
  for (let i = 0; i < chunks.length; i++) {
    const id = chunks[i]!;
    if (id === ZERO) stats.zero++;
    else if (opts.base?.chunks[i] === id) local.push(i);
    else fetch.push(i);
  }
  stats.fromStore = fetch.length;
  stats.fromBase = local.length;
  const tmp = `${path}.tmp-${process.pid}`;
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.truncate(m.memory.sizeBytes);
    await Promise.all([
      opts.base ? copyRuns(opts.base.path, fh, local, chunkBytes) : undefined,
      forEachBounded(fetch, opts.concurrency ?? MATERIALIZE_CONCURRENCY, async (i) => {
        const data = await tenant.get(chunks[i]!);
        await fh.write(data, 0, data.length, i * chunkBytes);
      }),
    ]);
    await fh.close();
    await rename(tmp, path);
  } catch (err) {
    await fh.close().catch(() => {});
    await rm(tmp, { force: true });
    throw err;
  }
  return stats;
}

/** Copies chunks `indexes` (ascending) from the base image into `to` at the same offsets, contiguous runs at once. */
async function copyRuns(basePath: string, to: FileHandle, indexes: readonly number[], chunkBytes: number): Promise<void> {
  if (indexes.length === 0) return;
  const from = await open(basePath, 'r');
  const perRun = Math.max(1, Math.floor(COPY_RUN_BYTES / chunkBytes));
  const buf = Buffer.allocUnsafe(perRun * chunkBytes);
  try {
    for (let k = 0; k < indexes.length; ) {
      const first = indexes[k]!;
      let n = 1;
      while (n < perRun && indexes[k + n] === first + n) n++;
      const { bytesRead } = await from.read(buf, 0, n * chunkBytes, first * chunkBytes);
      // A base image shorter than its chunk list claims is not the image the ids were taken from.
      if (bytesRead < (n - 1) * chunkBytes + 1) throw new Error(`the base image ${basePath} ends before chunk ${first + n - 1}`);
      await to.write(buf, 0, bytesRead, first * chunkBytes);
      k += n;
    }
  } finally {
    await from.close();
  }
}

export async function materializeState(tenant: TenantStore, m: ManifestBody, path: string, opts: MaterializeOptions = {}): Promise<void> {
  const parts = new Array<Buffer>(m.state.chunks.length);
  await forEachBounded(
    m.state.chunks.map((_, i) => i),
    opts.concurrency ?? MATERIALIZE_CONCURRENCY,
    async (i) => {
      parts[i] = await tenant.get(m.state.chunks[i]!);
    },
  );
  await writeFile(path, Buffer.concat(parts), { mode: 0o600 });
}

/**
 * Writes a qcow2 overlay over `backingFile` (the template's frozen disk) holding the snapshot's disk delta; without
 * one (a template's flattened disk) a standalone image. The writer takes clusters in guest order; up to `concurrency`
 * of the next ones are fetched while it writes.
 */
export async function materializeDisk(tenant: TenantStore, m: ManifestBody, path: string, backingFile?: string, opts: MaterializeOptions = {}): Promise<void> {
  const sorted = [...m.disk.clusters].sort((a, b) => a[0] - b[0]);
  const ahead = opts.concurrency ?? MATERIALIZE_CONCURRENCY;
  async function* clusters(): AsyncGenerator<Qcow2Cluster> {
    const window: Array<Promise<Qcow2Cluster>> = [];
    let next = 0;
    const startNext = (): void => {
      const [guestOffset, id] = sorted[next++]!;
      const p = id === ZERO ? Promise.resolve<Qcow2Cluster>({ guestOffset, data: 'zero' }) : tenant.get(id).then((data) => ({ guestOffset, data }));
      // Rethrown where it is awaited; a fetch still in flight when the writer gives up must not be an unhandled rejection.
      p.catch(() => {});
      window.push(p);
    };
    while (next < sorted.length && window.length < ahead) startNext();
    while (window.length > 0) {
      const cluster = await window.shift()!;
      if (next < sorted.length) startNext();
      yield cluster;
    }
  }
  const backing = backingFile === undefined ? {} : { backingFile, backingFormat: 'qcow2' as const };
  await writeQcow2Overlay(path, { sizeBytes: m.disk.sizeBytes, ...backing, clusters: clusters() });
}

/**
 * Runs `fn` over `items` with at most `concurrency` in flight. After a failure no new item starts; it resolves or
 * rejects (with the first error) only once every started call has ended, so a caller's cleanup never races a write.
 */
async function forEachBounded<T>(items: readonly T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed: { err: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (failed === undefined && next < items.length) {
      const item = items[next++]!;
      try {
        await fn(item);
      } catch (err) {
        failed ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, concurrency), items.length) }, worker));
  if (failed) throw failed.err;
}
