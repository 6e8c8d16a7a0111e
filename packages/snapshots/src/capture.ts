// Turning a live capture's files (RAM copy, frozen disk layers, device state) into chunks, storing only what is new.
import { open, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { isZeroChunk, type CaptureLease, type TenantStore } from '@sandglass/chunkstore';
import { SandglassError } from '@sandglass/core';
import { readClusters, readQcow2Layer } from './qcow2.js';
import { DISK_CLUSTER_BYTES, MEMORY_CHUNK_BYTES, STATE_CHUNK_BYTES, ZERO } from './manifest.js';

/** Reads this much RAM per call and hashes it chunk by chunk. */
const READ_BYTES = 4 * 1024 * 1024;

export interface ChunkTally {
  newChunks: number;
  storedBytes: number;
}

function tally(): ChunkTally {
  return { newChunks: 0, storedBytes: 0 };
}

async function store(tenant: TenantStore, lease: CaptureLease, data: Buffer, t: ChunkTally, id = tenant.chunkId(data)): Promise<string> {
  lease.add(id);
  const r = await tenant.stage(data, id);
  if (r.isNew) {
    t.newChunks++;
    t.storedBytes += r.storedBytes;
  }
  return id;
}

/**
 * Chunks a copy of guest RAM. A chunk whose id equals the parent's at the same address is not looked up again
 * (most of an idle guest's memory); all-zero chunks are recorded as ZERO and never stored.
 */
export function chunkMemory(
  tenant: TenantStore,
  lease: CaptureLease,
  path: string,
  sizeBytes: number,
  parent: readonly string[] | undefined,
): Promise<{ chunks: string[] } & ChunkTally> {
  return chunkFlatImage(tenant, lease, path, sizeBytes, MEMORY_CHUNK_BYTES, parent);
}

/**
 * Chunks a flat image (guest RAM, a raw disk) at `chunkBytes`; past the file's end it reads as zeros. Chunks whose
 * index is in `shadowed` are left ZERO, never stored: a layer above holds them.
 */
async function chunkFlatImage(
  tenant: TenantStore,
  lease: CaptureLease,
  path: string,
  sizeBytes: number,
  chunkBytes: number,
  parent: readonly string[] | undefined,
  shadowed?: ReadonlySet<number>,
): Promise<{ chunks: string[] } & ChunkTally> {
  const t = tally();
  const chunks = new Array<string>(Math.ceil(sizeBytes / chunkBytes)).fill(ZERO);
  await forEachChunk(path, sizeBytes, chunkBytes, async (index, data) => {
    if (shadowed?.has(index)) return;
    const id = tenant.chunkId(data);
    if (parent?.[index] === id) {
      lease.add(id);
      chunks[index] = id;
      return;
    }
    chunks[index] = await store(tenant, lease, data, t, id);
  });
  return { chunks, ...t };
}

/**
 * Calls `visit` with each chunk of a flat image that is not all zeros, in order, past the file's end reading as zeros.
 * `data` is a view of a read buffer reused once `visit` returns (or its promise settles).
 */
export async function forEachChunk(
  path: string,
  sizeBytes: number,
  chunkBytes: number,
  visit: (index: number, data: Buffer) => void | Promise<void>,
): Promise<void> {
  const fh = await open(path, 'r');
  const buf = Buffer.allocUnsafe(READ_BYTES);
  try {
    for (let offset = 0; offset < sizeBytes; offset += READ_BYTES) {
      const want = Math.min(READ_BYTES, sizeBytes - offset);
      let got = 0;
      while (got < want) {
        const { bytesRead } = await fh.read(buf, got, want - got, offset + got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      // A RAM file shorter than the guest (never written at the end) reads as zeros there.
      if (got < want) buf.fill(0, got, want);
      for (let at = 0; at < want; at += chunkBytes) {
        const data = buf.subarray(at, Math.min(at + chunkBytes, want));
        if (isZeroChunk(data)) continue;
        // Awaited before the read buffer is reused for the next block.
        await visit((offset + at) / chunkBytes, data);
      }
    }
  } finally {
    await fh.close();
  }
}

/**
 * Chunks the clusters of frozen qcow2 layers (oldest first) over `base`, the map of the layer below them:
 * later layers win, zero clusters are kept as ZERO so they keep shadowing the template on restore.
 */
export async function chunkDiskLayers(
  tenant: TenantStore,
  lease: CaptureLease,
  layers: readonly string[],
  base: ReadonlyMap<number, string>,
): Promise<{ clusters: Map<number, string>; sizeBytes: number; clusterBytes: number } & ChunkTally> {
  const t = tally();
  const clusters = new Map(base);
  let sizeBytes = 0;
  let clusterBytes = 0;
  for (const path of layers) {
    const layer = await readQcow2Layer(path);
    sizeBytes = Math.max(sizeBytes, layer.sizeBytes);
    clusterBytes = layer.clusterBytes;
    await readClusters(path, layer, async (guestOffset, data) => {
      clusters.set(guestOffset, data === 'zero' || isZeroChunk(data) ? ZERO : await store(tenant, lease, data, t));
    });
  }
  return { clusters, sizeBytes, clusterBytes, ...t };
}

/**
 * Chunks the whole disk a qcow2 image shows its guest (its backing chain down to a raw image) relative to an empty
 * disk: every non-zero cluster, whichever layer holds it. What a template's disk is in the store, so a node that
 * never had the raw root image can rebuild it.
 */
export async function chunkFlatDisk(
  tenant: TenantStore,
  lease: CaptureLease,
  path: string,
): Promise<{ clusters: Map<number, string>; sizeBytes: number; clusterBytes: number } & ChunkTally> {
  const layers: string[] = [];
  let raw: string | undefined;
  for (let p: string | undefined = path; p !== undefined; ) {
    const layer = await readQcow2Layer(p);
    if (layer.clusterBytes !== DISK_CLUSTER_BYTES) throw flatDiskError(p, `has ${layer.clusterBytes}-byte clusters, not ${DISK_CLUSTER_BYTES}`);
    layers.unshift(p);
    if (layer.backingFile === undefined) break;
    // QEMU resolves a relative backing name against the directory of the image naming it.
    const backing = resolve(dirname(p), layer.backingFile);
    if (layer.backingFormat === 'raw') raw = backing;
    else if (layer.backingFormat !== 'qcow2') throw flatDiskError(p, `names its backing file without a format (${layer.backingFormat ?? 'none'})`);
    p = layer.backingFormat === 'qcow2' ? backing : undefined;
  }
  const base = new Map<number, string>();
  let rawTally = tally();
  if (raw !== undefined) {
    const shadowed = new Set<number>();
    for (const p of layers) for (const c of (await readQcow2Layer(p)).clusters) shadowed.add(c.guestOffset / DISK_CLUSTER_BYTES);
    const rawBytes = (await stat(raw)).size;
    const sizeBytes = Math.ceil(rawBytes / DISK_CLUSTER_BYTES) * DISK_CLUSTER_BYTES;
    const image = await chunkFlatImage(tenant, lease, raw, sizeBytes, DISK_CLUSTER_BYTES, undefined, shadowed);
    image.chunks.forEach((id, i) => {
      if (id !== ZERO) base.set(i * DISK_CLUSTER_BYTES, id);
    });
    rawTally = image;
  }
  const disk = await chunkDiskLayers(tenant, lease, layers, base);
  // Over an empty disk a zero cluster is no cluster at all.
  for (const [offset, id] of disk.clusters) if (id === ZERO) disk.clusters.delete(offset);
  return { ...disk, newChunks: disk.newChunks + rawTally.newChunks, storedBytes: disk.storedBytes + rawTally.storedBytes };
}

function flatDiskError(path: string, problem: string): SandglassError {
  return new SandglassError('internal', `flattening a disk: ${path} ${problem}`);
}

/** Chunks the device-state stream. */
export async function chunkState(tenant: TenantStore, lease: CaptureLease, data: Buffer): Promise<{ chunks: string[] } & ChunkTally> {
  const t = tally();
  const chunks: string[] = [];
  for (let at = 0; at < data.length; at += STATE_CHUNK_BYTES)
    chunks.push(await store(tenant, lease, Buffer.from(data.subarray(at, at + STATE_CHUNK_BYTES)), t));
  return { chunks, ...t };
}
