// The snapshot manifest: what a snapshot is made of, by chunk id. Written last; its presence is the commit point.

/** Guest RAM is chunked at 64 KiB: small enough that an idle guest's scattered writes dirty few chunks. */
export const MEMORY_CHUNK_BYTES = 64 * 1024;
/** Disk deltas are chunked per qcow2 cluster (64 KiB). */
export const DISK_CLUSTER_BYTES = 64 * 1024;
/** Device state (tens of KB) is stored as chunks of at most this size. */
export const STATE_CHUNK_BYTES = 1024 * 1024;
/** In memory and disk maps: a chunk that is all zeros, never stored. */
export const ZERO = '';

export type SnapshotReason = 'rolling' | 'manual' | 'pause';

export interface ManifestBody {
  version: 1;
  snapshotId: string;
  sandboxId: string;
  tenantId: string;
  parentId: string | null;
  takenAt: string;
  /** 'template': a template's own snapshot (see template.ts), never a sandbox's. */
  reason: SnapshotReason | 'template';
  name: string | null;
  pinned: boolean;
  vm: { memoryMib: number; vcpus: number; template: string; templateKey: string };
  /**
   * A disk-only snapshot (a pause that discards memory): no RAM and no device state (both lists empty). Restoring it
   * cold-boots the guest's kernel over its disk: files are kept, processes are not.
   */
  diskOnly?: true;
  /** Chunk id per 64 KiB of guest RAM, in address order; ZERO for all-zero chunks. */
  memory: { chunkBytes: number; sizeBytes: number; chunks: string[] };
  /**
   * Clusters that differ from the template's frozen disk, as [guest offset, chunk id]; ZERO marks a cluster the
   * guest zeroed or discarded (it must shadow the template's data on restore). `base` is the template's key, or
   * FLAT_DISK for a template's own disk: every non-zero cluster the guest sees, over nothing.
   */
  disk: { base: string; sizeBytes: number; clusterBytes: number; clusters: Array<[number, string]> };
  /** The device-state stream (QEMU migration with RAM excluded). */
  state: { sizeBytes: number; chunks: string[] };
  /** What the gateway knew about the guest's processes, so a resumed sandbox's commands can be re-attached. */
  agent: { commands: unknown[] };
  /** The sandbox's network (policy, secret names, placeholders; never a secret value), restored with it. */
  network?: unknown;
  /** The user and workdir the sandbox's calls default to (a template's), restored with it. */
  defaults?: unknown;
  stats: { pausedMs: number; newChunks: number; storedBytes: number; memoryChunks: number; diskClusters: number };
  /** A template's own snapshot: what its node recorded when it booted it. */
  template?: TemplateRecord;
}

/** In disk.base: the clusters are the whole disk, relative to an empty one. */
export const FLAT_DISK = '';

/** A template as its building node recorded it (the gateway's template.json). */
export interface TemplateRecord {
  key: string;
  name: string;
  config: { memoryMib: number; vcpus: number; accel: 'kvm' | 'tcg'; cpu?: string };
  bootMs: number;
  createdAt: string;
  stateBytes?: number;
}

/** Every chunk a manifest needs, once each. */
export function manifestRefs(body: Pick<ManifestBody, 'memory' | 'disk' | 'state'>): string[] {
  const refs = new Set<string>();
  for (const id of body.memory.chunks) if (id !== ZERO) refs.add(id);
  for (const [, id] of body.disk.clusters) if (id !== ZERO) refs.add(id);
  for (const id of body.state.chunks) refs.add(id);
  return [...refs];
}

/** Parses a manifest body read back from the store; anything unexpected is a corrupt snapshot, never half-used. */
export function parseManifestBody(body: unknown): ManifestBody {
  const b = body as Partial<ManifestBody> | undefined;
  if (!b || b.version !== 1 || !b.memory || !Array.isArray(b.memory.chunks) || !b.disk || !Array.isArray(b.disk.clusters) || !b.state || !b.vm) {
    throw new Error('manifest body has an unknown shape');
  }
  if (b.diskOnly !== undefined && (b.diskOnly !== true || b.memory.chunks.length > 0 || b.state.chunks.length > 0)) {
    throw new Error('a disk-only manifest names memory or device state');
  }
  return b as ManifestBody;
}
