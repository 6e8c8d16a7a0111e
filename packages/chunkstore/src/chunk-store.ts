// Per-tenant encrypted, content-addressed chunks and snapshot manifests over a ChunkBackend, with crash-safe mark-and-sweep GC.
import { createBLAKE3, type IHasher } from 'hash-wasm';
import { compress, decompress } from 'zstd-napi';
import { failpoint, invalidArgument, SandglassError, systemClock, type Clock } from '@sandglass/core';
import { seal, unseal, type KeyProvider } from '@sandglass/kms';
import type { ChunkBackend } from './backend.js';

const CHUNK_ID = /^[0-9a-f]{64}$/;
/** Tenant and snapshot ids become path segments of backend keys. */
const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** One compress call blocks the event loop; bigger chunks are compressed as a sequence of zstd frames this size. */
const MAX_COMPRESS_BYTES = 4 * 1024 * 1024;
const DEFAULT_ZSTD_LEVEL = 3;
const REF_CHECKS_IN_FLIGHT = 32;

export interface ChunkStoreOptions {
  backend: ChunkBackend;
  keys: KeyProvider;
  clock?: Clock;
  zstdLevel?: number;
}

export interface Manifest {
  /** Every chunk id the snapshot needs; GC keeps exactly these (and leased ones). */
  refs: string[];
  body: unknown;
}

export interface PutResult {
  id: string;
  /** Bytes this call wrote to the backend: 0 when the chunk was already there. */
  storedBytes: number;
  isNew: boolean;
}

/** Protects the chunks of a capture in flight from GC until its manifest is committed or the capture is abandoned. */
export interface CaptureLease {
  /** Call before put (or as soon as it returns), so a chunk deduplicated against an orphan is not swept before the manifest lands. */
  add(id: string): void;
  /** Idempotent; adding to a released lease throws. */
  release(): void;
}

export interface TenantStore {
  readonly tenantId: string;
  /** Keyed BLAKE3 (64 hex chars): the same data has unrelated ids in different tenants. */
  chunkId(data: Buffer): string;
  /** Writes the chunk unless it is already stored; a given id must be chunkId(data). Durable and visible on return. */
  put(data: Buffer, id?: string): Promise<PutResult>;
  /** Like put, but durable and visible only after the next flush (putManifest flushes first). */
  stage(data: Buffer, id?: string): Promise<PutResult>;
  flush(): Promise<void>;
  /** Verified read: a missing, unauthentic or mismatching chunk throws snapshot_corrupt naming it. */
  get(id: string): Promise<Buffer>;
  has(id: string): Promise<boolean>;
  /** The commit point of a snapshot: refused (snapshot_corrupt) unless every ref is stored, so no manifest points at a missing chunk. */
  putManifest(snapshotId: string, manifest: Manifest): Promise<{ storedBytes: number }>;
  getManifest(snapshotId: string): Promise<Manifest>;
  listManifests(): Promise<string[]>;
  deleteManifest(snapshotId: string): Promise<void>;
  lease(): CaptureLease;
}

export interface GcResult {
  manifests: number;
  liveChunks: number;
  deletedChunks: number;
  /** Chunk writes a crashed or failed capture staged and never published, removed. */
  abandonedWrites: number;
  freedBytes: number;
  /** Unreferenced chunks younger than the grace period: possibly a capture in flight elsewhere. */
  keptYoung: number;
  /** Tenants whose manifests could not all be read (key revoked, manifest damaged): none of their chunks were considered. */
  undecidedTenants: string[];
  durationMs: number;
}

/** What the ChunkStore and its TenantStores share: the backend, and the bookkeeping that keeps GC off chunks in use. */
interface Shared {
  backend: ChunkBackend;
  zstdLevel: number;
  /** Chunk keys held by unreleased leases, counted because two captures may hold the same chunk. */
  leased: Map<string, number>;
  /**
   * While a GC runs: every chunk key leased or put since it started. GC read the manifests at its start, so a chunk
   * leased, deduplicated or committed after that is kept even if its lease is released before the sweep reaches it.
   */
  gcProtected: Set<string> | undefined;
  /** Deletes the running GC has issued: a put of the same chunk waits for its delete, then finds it gone and writes it. */
  deleting: Map<string, Promise<void>>;
  /** Chunk keys staged but not yet flushed: a second put of one in the meantime is a duplicate, not a new write. */
  staged: Set<string>;
}

/** Use one ChunkStore per backend in a process: leases and GC coordinate through it. */
export class ChunkStore {
  readonly #keys: KeyProvider;
  readonly #clock: Clock;
  readonly #shared: Shared;

  constructor(opts: ChunkStoreOptions) {
    this.#keys = opts.keys;
    this.#clock = opts.clock ?? systemClock;
    this.#shared = {
      backend: opts.backend,
      zstdLevel: opts.zstdLevel ?? DEFAULT_ZSTD_LEVEL,
      leased: new Map(),
      gcProtected: undefined,
      deleting: new Map(),
      staged: new Set(),
    };
  }

  /**
   * Resolves the tenant's keys once: those of its current data key version for writes, older versions when a read
   * meets a blob sealed under one; key_unavailable and key_revoked propagate.
   */
  async tenant(tenantId: string): Promise<TenantStore> {
    checkSegment('tenantId', tenantId);
    const version = (await this.#keys.keyVersion?.(tenantId)) ?? 1;
    const [chunkIdKey, current] = await Promise.all([this.#keys.dataKey(tenantId, 'chunk-id'), this.#versionKeys(tenantId, version)]);
    // Keyed BLAKE3 (WASM): the hasher keeps the key and is re-initialised per chunk.
    const idHasher = await createBLAKE3(256, chunkIdKey);
    return new Tenant(this.#shared, tenantId, version, current, (v) => this.#versionKeys(tenantId, v), idHasher);
  }

  async #versionKeys(tenantId: string, version: number): Promise<VersionKeys> {
    const [chunkData, manifest] = await Promise.all([this.#keys.dataKey(tenantId, 'chunk-data', version), this.#keys.dataKey(tenantId, 'manifest', version)]);
    return { chunkData, manifest };
  }

  /**
   * Deletes every manifest and chunk of a tenant: how a revoked tenant's store, which nobody can read any more, is
   * reclaimed after its retention period. Needs no key (none exists); manifests go first, so no manifest ever points at a
   * deleted chunk.
   */
  async purgeTenant(tenantId: string): Promise<{ manifests: number; chunks: number; freedBytes: number }> {
    checkSegment('tenantId', tenantId);
    const backend = this.#shared.backend;
    const out = { manifests: 0, chunks: 0, freedBytes: 0 };
    for (const [prefix, field] of [
      [`manifests/${tenantId}/`, 'manifests'],
      [`chunks/${tenantId}/`, 'chunks'],
    ] as const) {
      const entries: Array<{ key: string; sizeBytes: number }> = [];
      for await (const e of backend.list(prefix)) entries.push(e);
      for (const e of entries) {
        await backend.delete(e.key);
        out[field]++;
        out.freedBytes += e.sizeBytes;
      }
    }
    return out;
  }

  /**
   * Mark: the refs of every committed manifest of every tenant, plus leased chunks. Sweep: unmarked chunks older than
   * graceMs, which covers captures in other processes and writes left behind by a crash. GC writes nothing, so one
   * killed half-way has only deleted chunks that nothing referenced. An aborted `signal` stops it before its next
   * delete: a caller whose exclusion of other processes' captures has lapsed (a cluster's gc lease) must not go on.
   */
  async gc(opts: { graceMs: number; signal?: AbortSignal }): Promise<GcResult> {
    if (!Number.isFinite(opts.graceMs) || opts.graceMs < 0) throw invalidArgument('graceMs', 'must be a non-negative number of milliseconds');
    const shared = this.#shared;
    if (shared.gcProtected) throw new SandglassError('conflict', 'A chunk store GC is already running in this process; wait for it to finish.');
    const startMs = this.#clock.nowMs();
    const protectedKeys = new Set(shared.leased.keys());
    shared.gcProtected = protectedKeys;
    try {
      const { live, undecided, manifests } = await this.#mark();
      let liveChunks = 0;
      let deletedChunks = 0;
      let freedBytes = 0;
      let keptYoung = 0;
      for await (const entry of shared.backend.list('chunks/')) {
        const tenantId = chunkTenant(entry.key);
        // Never delete what this code did not write, nor anything of a tenant whose references are unknown.
        if (tenantId === undefined || undecided.has(tenantId)) continue;
        if (live.has(entry.key) || protectedKeys.has(entry.key)) {
          liveChunks++;
          continue;
        }
        if (this.#clock.nowMs() - entry.mtimeMs < opts.graceMs) {
          keptYoung++;
          continue;
        }
        opts.signal?.throwIfAborted();
        // Registered in the same synchronous step as the check above, so a put of this chunk either protected it
        // first or waits for this delete.
        const deleting = shared.backend.delete(entry.key);
        shared.deleting.set(entry.key, deleting);
        try {
          await deleting;
        } finally {
          shared.deleting.delete(entry.key);
        }
        deletedChunks++;
        freedBytes += entry.sizeBytes;
      }
      opts.signal?.throwIfAborted();
      const abandoned = await shared.backend.sweepAbandoned(opts.graceMs);
      return {
        manifests,
        liveChunks,
        deletedChunks,
        abandonedWrites: abandoned.files,
        freedBytes: freedBytes + abandoned.bytes,
        keptYoung,
        undecidedTenants: [...undecided].sort(),
        durationMs: this.#clock.nowMs() - startMs,
      };
    } finally {
      shared.gcProtected = undefined;
    }
  }

  async #mark(): Promise<{ live: Set<string>; undecided: Set<string>; manifests: number }> {
    const backend = this.#shared.backend;
    const byTenant = new Map<string, string[]>();
    const undecided = new Set<string>();
    for await (const { key } of backend.list('manifests/')) {
      const [, tenantId, snapshotId, ...rest] = key.split('/');
      if (tenantId === undefined) continue;
      if (snapshotId === undefined || rest.length > 0 || !SEGMENT.test(tenantId) || !SEGMENT.test(snapshotId)) {
        undecided.add(tenantId);
        continue;
      }
      const ids = byTenant.get(tenantId);
      if (ids) ids.push(snapshotId);
      else byTenant.set(tenantId, [snapshotId]);
    }
    const live = new Set<string>();
    let manifests = 0;
    for (const [tenantId, snapshotIds] of byTenant) {
      if (undecided.has(tenantId)) continue;
      const sealKeys = new Map<number, Buffer>();
      const refs: string[] = [];
      let readable = true;
      for (const snapshotId of snapshotIds) {
        const stored = await backend.get(manifestKey(tenantId, snapshotId));
        // Deleted since the listing: it no longer protects anything.
        if (!stored) continue;
        try {
          const { version, sealed } = unwrapVersion(stored);
          let sealKey = sealKeys.get(version);
          if (!sealKey) {
            sealKey = await this.#keys.dataKey(tenantId, 'manifest', version);
            sealKeys.set(version, sealKey);
          }
          // A loop, not push(...refs): a big snapshot's refs would exceed the argument limit.
          for (const id of openManifest(sealKey, tenantId, snapshotId, sealed).refs) refs.push(id);
        } catch {
          readable = false;
          break;
        }
        manifests++;
      }
      if (!readable) {
        undecided.add(tenantId);
        continue;
      }
      for (const id of refs) live.add(chunkKey(tenantId, id));
    }
    return { live, undecided, manifests };
  }
}

/** A tenant's keys of one data key version. */
interface VersionKeys {
  chunkData: Buffer;
  manifest: Buffer;
}

class Tenant implements TenantStore {
  /** Keys of older versions met while reading, fetched once per TenantStore. */
  private readonly older = new Map<number, Promise<VersionKeys>>();

  constructor(
    private readonly shared: Shared,
    readonly tenantId: string,
    private readonly version: number,
    private readonly keys: VersionKeys,
    private readonly keysOf: (version: number) => Promise<VersionKeys>,
    private readonly idHasher: IHasher,
  ) {}

  /** The keys a stored blob was sealed under: this version's, or an older one's (written before a rotation). */
  private keysFor(version: number): Promise<VersionKeys> {
    if (version === this.version) return Promise.resolve(this.keys);
    let keys = this.older.get(version);
    if (!keys) {
      keys = this.keysOf(version);
      keys.catch(() => this.older.delete(version));
      this.older.set(version, keys);
    }
    return keys;
  }

  chunkId(data: Buffer): string {
    return this.idHasher.init().update(data).digest('hex');
  }

  /** Durable and visible when it resolves. */
  async put(data: Buffer, id?: string): Promise<PutResult> {
    const r = await this.stage(data, id);
    if (r.isNew) await this.flush();
    return r;
  }

  async flush(): Promise<void> {
    const keys = [...this.shared.staged];
    await this.shared.backend.flush();
    for (const k of keys) this.shared.staged.delete(k);
  }

  /**
   * Writes the chunk unless stored, but durable and visible only at the next flush (putManifest flushes first):
   * a capture staging hundreds of chunks pays for durability once.
   */
  async stage(data: Buffer, id?: string): Promise<PutResult> {
    const computed = this.chunkId(data);
    if (id !== undefined && id !== computed) throw invalidArgument('id', 'must be chunkId(data) of this tenant');
    const key = chunkKey(this.tenantId, computed);
    this.shared.gcProtected?.add(key);
    await this.shared.deleting.get(key)?.catch(() => undefined);
    if (this.shared.staged.has(key) || (await this.shared.backend.has(key))) return { id: computed, storedBytes: 0, isNew: false };
    const sealed = wrapVersion(this.version, seal(this.keys.chunkData, compressFrames(data, this.shared.zstdLevel), aad(this.tenantId, computed)));
    // Staged: durable and visible at the next flush, which putManifest does before it commits.
    this.shared.staged.add(key);
    try {
      failpoint('chunkstore.write');
      await this.shared.backend.stage(key, sealed);
    } catch (err) {
      this.shared.staged.delete(key);
      throw err;
    }
    return { id: computed, storedBytes: sealed.length, isNew: true };
  }

  async get(id: string): Promise<Buffer> {
    checkChunkId('id', id);
    const stored = await this.shared.backend.get(chunkKey(this.tenantId, id));
    if (!stored) throw corruptChunk(id, 'is missing');
    let data: Buffer;
    try {
      const { version, sealed } = unwrapVersion(stored);
      // A revoked or unreachable key is not corruption: its own error goes up.
      const keys = await this.keysFor(version).catch((err: unknown) => {
        throw new KeyError(err);
      });
      data = decompress(unseal(keys.chunkData, sealed, aad(this.tenantId, id)));
    } catch (err) {
      if (err instanceof KeyError) throw err.cause;
      throw corruptChunk(id, 'failed authentication or decompression', err);
    }
    if (this.chunkId(data) !== id) throw corruptChunk(id, 'does not hash to its id');
    return data;
  }

  async has(id: string): Promise<boolean> {
    checkChunkId('id', id);
    return this.shared.backend.has(chunkKey(this.tenantId, id));
  }

  async putManifest(snapshotId: string, manifest: Manifest): Promise<{ storedBytes: number }> {
    checkSegment('snapshotId', snapshotId);
    if (!Array.isArray(manifest?.refs)) throw invalidArgument('manifest.refs', 'must be an array of chunk ids');
    for (const ref of manifest.refs) checkChunkId('manifest.refs', ref);
    let json: string;
    try {
      json = JSON.stringify({ refs: manifest.refs, body: manifest.body });
    } catch (err) {
      throw new SandglassError('invalid_argument', `manifest.body: must be serialisable as JSON (${(err as Error).message})`, {
        details: { field: 'manifest.body', rule: 'must be serialisable as JSON' },
      });
    }
    await this.flush();
    const missing = await this.#firstMissing([...new Set(manifest.refs)]);
    if (missing !== undefined) throw corruptChunk(missing, `is missing, so manifest ${snapshotId} was not written`);
    const sealed = wrapVersion(
      this.version,
      seal(this.keys.manifest, compressFrames(Buffer.from(json), this.shared.zstdLevel), aad(this.tenantId, snapshotId)),
    );
    // A crash here leaves flushed chunks no manifest names: GC's to collect, never a half-written snapshot.
    failpoint('chunkstore.manifest_commit');
    await this.shared.backend.put(manifestKey(this.tenantId, snapshotId), sealed);
    return { storedBytes: sealed.length };
  }

  async getManifest(snapshotId: string): Promise<Manifest> {
    checkSegment('snapshotId', snapshotId);
    const sealed = await this.shared.backend.get(manifestKey(this.tenantId, snapshotId));
    if (!sealed) throw new SandglassError('snapshot_not_found', `No manifest ${snapshotId} exists for tenant ${this.tenantId}.`, { details: { snapshotId } });
    let opened: { version: number; sealed: Buffer };
    try {
      opened = unwrapVersion(sealed);
    } catch (err) {
      throw corruptManifest(snapshotId, 'has a malformed key version header', err);
    }
    return openManifest((await this.keysFor(opened.version)).manifest, this.tenantId, snapshotId, opened.sealed);
  }

  async listManifests(): Promise<string[]> {
    const prefix = `manifests/${this.tenantId}/`;
    const ids: string[] = [];
    for await (const { key } of this.shared.backend.list(prefix)) {
      const id = key.slice(prefix.length);
      if (SEGMENT.test(id)) ids.push(id);
    }
    return ids.sort();
  }

  async deleteManifest(snapshotId: string): Promise<void> {
    checkSegment('snapshotId', snapshotId);
    await this.shared.backend.delete(manifestKey(this.tenantId, snapshotId));
  }

  lease(): CaptureLease {
    const shared = this.shared;
    const held = new Set<string>();
    let released = false;
    return {
      add: (id) => {
        checkChunkId('id', id);
        if (released) throw new Error('CaptureLease.add after release: the chunk would not be protected from GC');
        const key = chunkKey(this.tenantId, id);
        shared.gcProtected?.add(key);
        if (held.has(key)) return;
        held.add(key);
        shared.leased.set(key, (shared.leased.get(key) ?? 0) + 1);
      },
      release: () => {
        if (released) return;
        released = true;
        for (const key of held) {
          const count = (shared.leased.get(key) ?? 1) - 1;
          if (count > 0) shared.leased.set(key, count);
          else shared.leased.delete(key);
        }
      },
    };
  }

  async #firstMissing(ids: string[]): Promise<string | undefined> {
    let next = 0;
    let missing: string | undefined;
    const worker = async (): Promise<void> => {
      while (missing === undefined && next < ids.length) {
        const id = ids[next++]!;
        if (!(await this.shared.backend.has(chunkKey(this.tenantId, id)))) missing ??= id;
      }
    };
    await Promise.all(Array.from({ length: Math.min(REF_CHECKS_IN_FLIGHT, ids.length) }, worker));
    return missing;
  }
}

function openManifest(key: Buffer, tenantId: string, snapshotId: string, sealed: Buffer): Manifest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(decompress(unseal(key, sealed, aad(tenantId, snapshotId))).toString('utf8'));
  } catch (err) {
    throw corruptManifest(snapshotId, 'failed authentication, decompression or parsing', err);
  }
  const { refs, body } = (parsed ?? {}) as Partial<Manifest>;
  if (!Array.isArray(refs) || !refs.every((r) => typeof r === 'string' && CHUNK_ID.test(r))) {
    throw corruptManifest(snapshotId, 'has no valid list of chunk ids');
  }
  return { refs, body };
}

/**
 * Blobs sealed under data key version 1 are the bare seal (its first byte is the seal format's version, 1), as before
 * versions existed; later versions are prefixed with KEY_VERSION_TAG and the version (u32 BE), so a reader picks the
 * key without trying each. A rotation leaves every stored blob as it is.
 */
const KEY_VERSION_TAG = 0x80;

function wrapVersion(version: number, sealed: Buffer): Buffer {
  if (version === 1) return sealed;
  const header = Buffer.alloc(5);
  header[0] = KEY_VERSION_TAG;
  header.writeUInt32BE(version, 1);
  return Buffer.concat([header, sealed]);
}

function unwrapVersion(stored: Buffer): { version: number; sealed: Buffer } {
  if (stored[0] !== KEY_VERSION_TAG) return { version: 1, sealed: stored };
  if (stored.length < 5) throw new Error('key version header is truncated');
  return { version: stored.readUInt32BE(1), sealed: stored.subarray(5) };
}

/** Carries a key provider's error through a read's corruption handling unchanged. */
class KeyError extends Error {
  constructor(override readonly cause: unknown) {
    super('key unavailable');
  }
}

/** Several zstd frames for big inputs: decompress reads concatenated frames back as one buffer. */
function compressFrames(data: Buffer, level: number): Buffer {
  if (data.length <= MAX_COMPRESS_BYTES) return compress(data, { compressionLevel: level });
  const frames: Buffer[] = [];
  for (let offset = 0; offset < data.length; offset += MAX_COMPRESS_BYTES) {
    frames.push(compress(data.subarray(offset, offset + MAX_COMPRESS_BYTES), { compressionLevel: level }));
  }
  return Buffer.concat(frames);
}

/** Binds each sealed blob to its tenant and name, so a file copied over another's fails authentication. */
function aad(tenantId: string, name: string): Buffer {
  return Buffer.from(`${tenantId}|${name}`);
}

function chunkKey(tenantId: string, id: string): string {
  return `chunks/${tenantId}/${id.slice(0, 2)}/${id}`;
}

function manifestKey(tenantId: string, snapshotId: string): string {
  return `manifests/${tenantId}/${snapshotId}`;
}

/** The tenant of a well-formed chunk key; undefined for anything else under chunks/. */
function chunkTenant(key: string): string | undefined {
  const [root, tenantId, fanout, id, ...rest] = key.split('/');
  if (root !== 'chunks' || tenantId === undefined || id === undefined || rest.length > 0) return undefined;
  return SEGMENT.test(tenantId) && CHUNK_ID.test(id) && fanout === id.slice(0, 2) ? tenantId : undefined;
}

function checkChunkId(field: string, id: string): void {
  if (typeof id !== 'string' || !CHUNK_ID.test(id)) throw invalidArgument(field, 'must be a chunk id: 64 lowercase hex characters');
}

function checkSegment(field: string, value: string): void {
  if (typeof value !== 'string' || !SEGMENT.test(value)) {
    throw invalidArgument(field, 'must be 1-128 letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
}

function corruptChunk(id: string, problem: string, cause?: unknown): SandglassError {
  return new SandglassError('snapshot_corrupt', `Chunk ${id} ${problem}; it was not used.`, { details: { chunk: id }, cause });
}

function corruptManifest(snapshotId: string, problem: string, cause?: unknown): SandglassError {
  return new SandglassError('snapshot_corrupt', `Manifest ${snapshotId} ${problem}; it was not used.`, { details: { manifest: snapshotId }, cause });
}
