// Turning a live capture's files (RAM copy, frozen disk layers, device state) into chunks, storing only what is new.
import { open } from 'node:fs/promises';
import { isZeroChunk, type CaptureLease, type TenantStore } from '@sandglass/chunkstore';
import { readClusters, readQcow2Layer } from './qcow2.js';
import { MEMORY_CHUNK_BYTES, STATE_CHUNK_BYTES, ZERO } from './manifest.js';

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
export async function chunkMemory(
  tenant: TenantStore,
  lease: CaptureLease,
  path: string,
  sizeBytes: number,
  parent: readonly string[] | undefined,
): Promise<{ chunks: string[] } & ChunkTally> {
  const t = tally();
  const count = Math.ceil(sizeBytes / MEMORY_CHUNK_BYTES);
  const chunks = new Array<string>(count).fill(ZERO);
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
      for (let at = 0; at < want; at += MEMORY_CHUNK_BYTES) {
        const index = (offset + at) / MEMORY_CHUNK_BYTES;
        const data = buf.subarray(at, Math.min(at + MEMORY_CHUNK_BYTES, want));
        if (isZeroChunk(data)) continue;
        const id = tenant.chunkId(data);
        if (parent?.[index] === id) {
          lease.add(id);
          chunks[index] = id;
          continue;
        }
        // Awaited before the read buffer is reused for the next block.
        chunks[index] = await store(tenant, lease, data, t, id);
      }
    }
  } finally {
    await fh.close();
  }
  return { chunks, ...t };
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

/** Chunks the device-state stream. */
export async function chunkState(tenant: TenantStore, lease: CaptureLease, data: Buffer): Promise<{ chunks: string[] } & ChunkTally> {
  const t = tally();
  const chunks: string[] = [];
  for (let at = 0; at < data.length; at += STATE_CHUNK_BYTES)
    chunks.push(await store(tenant, lease, Buffer.from(data.subarray(at, at + STATE_CHUNK_BYTES)), t));
  return { chunks, ...t };
}
