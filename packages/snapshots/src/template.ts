// A template as a snapshot in the chunk store: RAM, device state and its disk flattened, so any node can rebuild the same bytes.
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TenantStore } from '@sandglass/chunkstore';
import { SandglassError } from '@sandglass/core';
import { chunkFlatDisk, chunkMemory, chunkState } from './capture.js';
import { materializeDisk, materializeMemory, materializeState } from './materialize.js';
import { FLAT_DISK, MEMORY_CHUNK_BYTES, manifestRefs, type ManifestBody, type TemplateRecord } from './manifest.js';

/** A template's files, as the gateway keeps them in `artifacts/template-<key>/`. */
export const TEMPLATE_FILES = { memory: 'mem.raw', state: 'state.bin', disk: 'disk.qcow2' } as const;

export interface StoredTemplate {
  body: ManifestBody;
  /** Bytes written to the store by this call (chunks new to it, and the manifest). */
  storedBytes: number;
  newChunks: number;
}

/**
 * Stores the template in `dir` as snapshot `snapshotId` of `tenant`: RAM chunks, the device-state stream, and the disk
 * flattened (the raw root image and the template's overlay, every non-zero cluster), then the manifest, the commit
 * point. Chunks already in the store (another template of the same image) are not written again.
 */
export async function storeTemplate(
  tenant: TenantStore,
  dir: string,
  record: TemplateRecord,
  ids: { snapshotId: string; takenAt: string },
  opts: { beforeCommit?: () => void } = {},
): Promise<StoredTemplate> {
  const lease = tenant.lease();
  try {
    const memoryBytes = record.config.memoryMib * 1024 * 1024;
    const memory = await chunkMemory(tenant, lease, join(dir, TEMPLATE_FILES.memory), memoryBytes, undefined);
    const disk = await chunkFlatDisk(tenant, lease, join(dir, TEMPLATE_FILES.disk));
    const stateBuf = await readFile(join(dir, TEMPLATE_FILES.state));
    const state = await chunkState(tenant, lease, stateBuf);
    const body: ManifestBody = {
      version: 1,
      snapshotId: ids.snapshotId,
      sandboxId: `template-${record.key}`,
      tenantId: tenant.tenantId,
      parentId: null,
      takenAt: ids.takenAt,
      reason: 'template',
      name: record.name,
      pinned: true,
      vm: { memoryMib: record.config.memoryMib, vcpus: record.config.vcpus, template: record.name, templateKey: record.key },
      memory: { chunkBytes: MEMORY_CHUNK_BYTES, sizeBytes: memoryBytes, chunks: memory.chunks },
      disk: { base: FLAT_DISK, sizeBytes: disk.sizeBytes, clusterBytes: disk.clusterBytes, clusters: [...disk.clusters.entries()] },
      state: { sizeBytes: stateBuf.length, chunks: state.chunks },
      agent: { commands: [] },
      stats: {
        pausedMs: 0,
        newChunks: memory.newChunks + disk.newChunks + state.newChunks,
        storedBytes: memory.storedBytes + disk.storedBytes + state.storedBytes,
        memoryChunks: memory.chunks.filter((c) => c !== '').length,
        diskClusters: disk.clusters.size,
      },
      template: record,
    };
    await tenant.flush();
    // The caller's last word (a lapsed lease against a GC sweep throws): nothing is committed after it says no.
    opts.beforeCommit?.();
    const committed = await tenant.putManifest(ids.snapshotId, { refs: manifestRefs(body), body });
    return { body, storedBytes: body.stats.storedBytes + committed.storedBytes, newChunks: body.stats.newChunks };
  } finally {
    lease.release();
  }
}

/**
 * Writes template `m` into `dir` (created if missing): RAM (sparse), device state, and its flattened disk as a qcow2
 * image with no backing file. Every chunk is verified as it is read; a bad one throws snapshot_corrupt.
 */
export async function materializeTemplate(tenant: TenantStore, m: ManifestBody, dir: string): Promise<void> {
  if (m.reason !== 'template' || m.template === undefined || m.disk.base !== FLAT_DISK) {
    throw new SandglassError('snapshot_corrupt', `Snapshot ${m.snapshotId} is not a template's own snapshot; it was not used.`, {
      details: { manifest: m.snapshotId },
    });
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await materializeMemory(tenant, m, join(dir, TEMPLATE_FILES.memory));
  await materializeState(tenant, m, join(dir, TEMPLATE_FILES.state));
  await materializeDisk(tenant, m, join(dir, TEMPLATE_FILES.disk));
}
