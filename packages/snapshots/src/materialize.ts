// Rebuilding a snapshot's files from verified chunks: the RAM image, the device-state stream and a qcow2 disk overlay.
import { open, rename, rm, writeFile } from 'node:fs/promises';
import type { TenantStore } from '@sandglass/chunkstore';
import { writeQcow2Overlay, type Qcow2Cluster } from './qcow2.js';
import { ZERO, type ManifestBody } from './manifest.js';

/**
 * Writes the guest RAM image of `m` to `path` (sparse: zero chunks stay holes). Every chunk is verified by the
 * store; a bad one throws snapshot_corrupt and the partial file is removed. Written under a temporary name and
 * renamed, so a crash never leaves a half image that looks whole.
 */
export async function materializeMemory(tenant: TenantStore, m: ManifestBody, path: string): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.truncate(m.memory.sizeBytes);
    const { chunkBytes, chunks } = m.memory;
    for (let i = 0; i < chunks.length; i++) {
      const id = chunks[i]!;
      if (id === ZERO) continue;
      const data = await tenant.get(id);
      await fh.write(data, 0, data.length, i * chunkBytes);
    }
    await fh.close();
    await rename(tmp, path);
  } catch (err) {
    await fh.close().catch(() => {});
    await rm(tmp, { force: true });
    throw err;
  }
}

export async function materializeState(tenant: TenantStore, m: ManifestBody, path: string): Promise<void> {
  const parts: Buffer[] = [];
  for (const id of m.state.chunks) parts.push(await tenant.get(id));
  await writeFile(path, Buffer.concat(parts), { mode: 0o600 });
}

/**
 * Writes a qcow2 overlay over `backingFile` (the template's frozen disk) holding the snapshot's disk delta; without
 * one (a template's flattened disk) a standalone image.
 */
export async function materializeDisk(tenant: TenantStore, m: ManifestBody, path: string, backingFile?: string): Promise<void> {
  const sorted = [...m.disk.clusters].sort((a, b) => a[0] - b[0]);
  async function* clusters(): AsyncGenerator<Qcow2Cluster> {
    for (const [guestOffset, id] of sorted) yield { guestOffset, data: id === ZERO ? 'zero' : await tenant.get(id) };
  }
  const backing = backingFile === undefined ? {} : { backingFile, backingFormat: 'qcow2' as const };
  await writeQcow2Overlay(path, { sizeBytes: m.disk.sizeBytes, ...backing, clusters: clusters() });
}
