// The node's time machine: rolling live snapshots of running sandboxes into the chunk store, restores for resume and fork, retention and GC.
import { constants as fsc, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { failpoint, newId, SandglassError, systemRandom, type Clock, type Logger, type Random } from '@sandglass/core';
import type { ChunkStore, TenantStore } from '@sandglass/chunkstore';
import {
  baseChunkIds,
  CaptureScheduler,
  chunkDiskLayers,
  chunkMemory,
  chunkState,
  manifestRefs,
  materializeDisk,
  materializeMemory,
  materializeState,
  parseManifestBody,
  planRetention,
  MEMORY_CHUNK_BYTES,
  type Cadence,
  type LocalBase,
  type ManifestBody,
  type MemoryStats,
  type RetentionPolicy,
  type SnapshotReason,
} from '@sandglass/snapshots';
import { chownToVm, prepareVmDir, type Accel } from '@sandglass/vmm';
import { inProcessGate, type CaptureGate } from './capture-gate.js';
import { CaptureTimes } from './capture-times.js';
import type { GatewayEvents } from './events.js';
import { defaultImageCacheBytes, heldBytes, markUsed, type RamFiles } from './ram.js';
import type { GuestBoot, RestoreSource } from './restore.js';
import { checkDefaults, type CaptureBase, type CommandRecord, type Sandbox, type SandboxDefaults } from './sandbox.js';
import { TEMPLATE_TENANT, type TemplateSnapshot } from './templates.js';
import type { NetworkSpec } from './network.js';
import { recordingManifestId } from './recording.js';

export const MIN_SNAPSHOT_INTERVAL_S = 5;
/** (tenant, template) pairs whose template-image chunk ids a node keeps (~0.3 MiB each for a 256 MiB template). */
const BASE_IDS_KEPT = 16;
export const DEFAULT_SNAPSHOT_INTERVAL_S = 60;

/** What a restore of a snapshot starts from, and what the restored sandbox continues with. */
export interface PreparedRestore {
  source: RestoreSource;
  base: CaptureBase;
  commands: CommandRecord[];
  network?: NetworkSpec;
  defaults?: SandboxDefaults;
}

/** A sandbox's snapshot cadence in seconds: asked for, and achieved over the last window (null: not measured yet). */
export interface SnapshotCadence {
  intervalS: number;
  achievedIntervalS: number | null;
  windowS: number;
  takenInWindow: number;
  behind: boolean;
}

function seconds(ms: number): number {
  return Math.round(ms / 100) / 10;
}

function cadenceData(c: Cadence): Omit<SnapshotCadence, 'behind'> {
  return {
    intervalS: seconds(c.intervalMs),
    achievedIntervalS: c.achievedIntervalMs === null ? null : seconds(c.achievedIntervalMs),
    windowS: seconds(c.windowMs),
    takenInWindow: c.takenInWindow,
  };
}

/** A committed snapshot as the APIs show it. */
export interface SnapshotInfo {
  id: string;
  sandboxId: string;
  parentId: string | null;
  takenAt: string;
  reason: SnapshotReason;
  name: string | null;
  pinned: boolean;
  sizeAddedBytes: number;
  memoryMib: number;
  vcpus: number;
  template: string;
  /** false: disk-only; its restore is a cold boot. */
  memory: boolean;
}

/** What retention needs to know about the snapshots on record (read from the shared database by the deployment). */
export interface SnapshotIndex {
  /** Every committed snapshot with its sandbox's state. */
  all(): Promise<Array<{ id: string; tenantId: string; sandboxId: string; takenAt: string; pinned: boolean; sandboxState: string }>>;
  /** Whether the snapshot is still on record and still unpinned: named since `all` read it (PATCH /v1/snapshots), it stays. */
  thinnable(snapshotId: string): Promise<boolean>;
}

export interface SnapshotManagerOptions {
  store: ChunkStore;
  ram: RamFiles;
  events: GatewayEvents;
  /** Absent in a cluster: retention and GC run in the control plane, which holds the index. */
  index?: SnapshotIndex;
  accel: Accel;
  /** The node's `-cpu` model: a snapshot restores under this node's accelerator, not the one it was taken under. */
  cpu: string;
  clock: Clock;
  random?: Random;
  logger: Logger;
  /** Captures running at once on this node. */
  concurrency?: number;
  retention: RetentionPolicy;
  /**
   * Ceiling on the node's tmpfs caches: template RAM images (always kept) plus restored snapshot RAM images for fast
   * forks and resumes (least recently used dropped first).
   */
  imageCacheBytes?: number;
  /** Unreferenced chunks younger than this survive GC (a capture in another process may be about to commit them). */
  gcGraceMs?: number;
  /** Excludes captures and a cluster's GC sweep; default in-process (the store's own leases suffice in one process). */
  gate?: CaptureGate;
  /** How long a pause or manual snapshot waits for a running sweep; a rolling capture never waits (the next run retries). */
  gateWaitMs?: number;
  /**
   * Where restored disk deltas are kept on the node's disk (emptied at start): a fork of a snapshot with a large disk
   * delta (a custom template's) copies the node's file instead of decrypting the delta from the store again.
   */
  diskCacheDir?: string;
  /** Ceiling on that cache (least recently used dropped first). */
  diskCacheBytes?: number;
  /** The guest's kernel and root image, which a disk-only snapshot boots; without it such a snapshot is not restored. */
  guest?: GuestBoot;
}

/** A disk delta smaller than this is written from the store each time: the copy would save next to nothing. */
const DISK_CACHE_MIN_BYTES = 8 * 1024 * 1024;
const DEFAULT_DISK_CACHE_BYTES = 8 * 1024 * 1024 * 1024;

interface Pending {
  reason: SnapshotReason;
  name: string | null;
  resolve(info: SnapshotInfo): void;
  reject(err: unknown): void;
}

/**
 * Capture is a short stop of the guest (freeze the disk's active qcow2 layer, migrate ~60 KB of device state, sparse
 * copy of the RAM file tmpfs to tmpfs) followed, with the guest running again, by chunking the copies: keyed BLAKE3
 * per 64 KiB, compared with the parent snapshot's ids at the same address, only new chunks compressed, encrypted
 * and written. The manifest goes last; it is the commit point. A capture that fails leaves the sandbox running and
 * its leased chunks to GC.
 */
export class SnapshotManager {
  readonly scheduler: CaptureScheduler;
  private readonly pending = new Map<string, Pending[]>();
  /** Snapshot ids of the captures running now: their manifests may be committed before their snapshot.taken is. */
  private readonly capturing = new Set<string>();
  /**
   * Per sandbox, when its last snapshot was taken (ms). "Latest" is read by taken-at time (resume, reconcile), so a
   * capture is never stamped before its predecessor, even when the host clock steps back.
   */
  private readonly lastTakenMs = new Map<string, number>();
  /** RAM images being written from the store, by path: two restores of one snapshot share one writer. */
  private readonly materializing = new Map<string, Promise<MemoryStats>>();
  private readonly random: Random;
  private readonly imageCacheBytes: number;
  /** The tenant of every snapshot image named since start (the cache's files are removed at start and stop). */
  private readonly imageTenants = new Map<string, string>();
  /** Restores being prepared (each settles, never rejects), with the tenants whose plaintext each writes. */
  private readonly preparing = new Map<Promise<void>, string[]>();
  private readonly captureTimes = new CaptureTimes(MIN_SNAPSHOT_INTERVAL_S);
  /**
   * Per tenant and template key, the ids the node's template RAM image has under the tenant's chunk-id key: a restore
   * copies the chunks a snapshot shares with its template from the image instead of the store. Oldest dropped first.
   */
  /** Disk deltas being written into the disk cache: concurrent restores of one snapshot wait on one writer. */
  private readonly diskMaking = new Map<string, Promise<true>>();
  private readonly baseIds = new Map<string, Promise<string[]>>();

  constructor(private readonly opts: SnapshotManagerOptions) {
    this.random = opts.random ?? systemRandom;
    this.imageCacheBytes = opts.imageCacheBytes ?? defaultImageCacheBytes();
    // An earlier process's files have no tenant on record here, so a revocation could not find them: they go now.
    if (opts.diskCacheDir) {
      rmSync(opts.diskCacheDir, { recursive: true, force: true });
      mkdirSync(opts.diskCacheDir, { recursive: true, mode: 0o700 });
    }
    this.scheduler = new CaptureScheduler({ clock: opts.clock, random: this.random, concurrency: opts.concurrency ?? 2 });
  }

  /** Starts rolling snapshots of a running sandbox. */
  track(sbx: Sandbox): void {
    this.scheduler.add(sbx.id, sbx.snapshotIntervalS * 1000, () => this.runCapture(sbx), {
      onFailure: (err, attempt, willRetry) => {
        const e = err instanceof SandglassError ? err : new SandglassError('snapshot_failed', String((err as Error)?.message ?? err));
        this.opts.logger.warn({ sandboxId: sbx.id, code: e.code, err: e.message, attempt, willRetry }, 'snapshot failed');
      },
      // A user who asked for a snapshot every N seconds must learn when they are not getting one: once when the
      // sandbox falls behind, once when it catches up (the scheduler's hysteresis keeps it from flapping).
      onBehind: (r) => this.cadenceEvent(sbx, 'snapshot.behind', { ...cadenceData(r), lateS: seconds(r.lateMs), why: r.why }),
      onCaughtUp: (r) => this.cadenceEvent(sbx, 'snapshot.caught_up', { ...cadenceData(r), behindForS: seconds(r.behindForMs) }),
    });
  }

  private cadenceEvent(sbx: Sandbox, type: 'snapshot.behind' | 'snapshot.caught_up', data: Record<string, unknown>): void {
    this.opts.logger.warn({ sandboxId: sbx.id, ...data }, type);
    void Promise.resolve(this.opts.events.append({ type, tenantId: sbx.tenantId, sandboxId: sbx.id, data })).catch((err: unknown) =>
      this.opts.logger.warn({ sandboxId: sbx.id, err: (err as Error).message }, `recording ${type} failed`),
    );
  }

  /** A running sandbox's asked and achieved snapshot cadence on this node; undefined when it is not scheduled here. */
  cadence(sandboxId: string): SnapshotCadence | undefined {
    const c = this.scheduler.cadence(sandboxId);
    return c && { ...cadenceData(c), behind: c.behind };
  }

  async untrack(id: string): Promise<void> {
    await this.scheduler.remove(id);
    for (const p of this.pending.get(id) ?? []) p.reject(new SandglassError('sandbox_not_running', `Sandbox ${id} stopped before its snapshot was taken.`));
    this.pending.delete(id);
  }

  setInterval(sbx: Sandbox, intervalS: number, opts: { bestEffort?: boolean } = {}): void {
    this.checkInterval(sbx.template.config.memoryMib, intervalS, opts);
    sbx.setSnapshotInterval(intervalS);
    this.scheduler.setInterval(sbx.id, intervalS * 1000);
  }

  /** Refuses an interval this node can never keep for guests of `memoryMib` (CaptureTimes.check). */
  checkInterval(memoryMib: number, intervalS: number, opts: { bestEffort?: boolean } = {}): void {
    this.captureTimes.check(memoryMib, intervalS, opts);
  }

  /** Takes a snapshot now (through the scheduler, so never two of one sandbox at once) and returns it once committed. */
  snapshotNow(sbx: Sandbox, reason: 'manual' | 'pause', name: string | null = null): Promise<SnapshotInfo> {
    return new Promise<SnapshotInfo>((resolve, reject) => {
      const list = this.pending.get(sbx.id) ?? [];
      list.push({ reason, name, resolve, reject });
      this.pending.set(sbx.id, list);
      this.scheduler.runNow(sbx.id).catch(() => {
        // The run's own request was settled by runCapture; a cancelled run leaves it pending, rejected by untrack.
      });
    });
  }

  /**
   * Captures outside the schedule; the caller has untracked the sandbox (a pause). `memory: false` captures the disk
   * alone (a disk-only pause): the guest syncs its files, the disk's layer is frozen, and no RAM or device state is
   * stored.
   */
  captureNow(sbx: Sandbox, reason: SnapshotReason, opts: { memory?: boolean } = {}): Promise<SnapshotInfo> {
    return this.capture(sbx, reason, null, opts.memory !== false);
  }

  private async runCapture(sbx: Sandbox): Promise<void> {
    const req = this.pending.get(sbx.id)?.shift();
    try {
      const info = await this.capture(sbx, req?.reason ?? 'rolling', req?.name ?? null);
      req?.resolve(info);
    } catch (err) {
      req?.reject(err);
      throw err;
    }
  }

  private async capture(sbx: Sandbox, reason: SnapshotReason, name: string | null, keepMemory = true): Promise<SnapshotInfo> {
    const vm = sbx.vm;
    if (sbx.state !== 'running' || !vm) throw new SandglassError('sandbox_not_running', `Sandbox ${sbx.id} is ${sbx.state}.`);
    const { ram, events, clock } = this.opts;
    const id = newId('snap', this.random.bytes);
    const memCopy = join(ram.root, `${id}.capture`);
    // Beside the RAM copy, not in the run directory: the VM can write there, and could swap the file for a link before
    // the host reads it back.
    const statePath = join(ram.root, `${id}.state`);
    const newLayer = join(sbx.dir, `layer-${id}.qcow2`);
    const tenant = await this.opts.store.tenant(sbx.tenantId);
    // Before the guest stops and before any chunk is staged: a chunk found already stored (deduplicated) must not be
    // swept by a GC elsewhere before this manifest references it.
    const pass = await (this.opts.gate ?? inProcessGate).enter(id, { waitMs: reason === 'rolling' ? 0 : (this.opts.gateWaitMs ?? 5 * 60_000) });
    const startedMs = clock.nowMs();
    const lease = tenant.lease();
    const takenAtMs = Math.max(clock.nowMs(), (this.lastTakenMs.get(sbx.id) ?? 0) + 1);
    const takenAt = new Date(takenAtMs).toISOString();
    this.capturing.add(id);
    try {
      let cap: { stateBytes: number; pausedMs: number; copyMs: number; stateMs: number };
      if (keepMemory) {
        // The agent's reader must be between frames when the guest stops: restoring, the host starts a fresh frame.
        const release = await sbx.requireRunning().quiesce({ timeoutMs: 15_000 });
        try {
          // QEMU dies mid-capture (the OOM killer, a crash): the capture must fail cleanly and the sandbox with it.
          if (failpoint('capture.qemu') === 'kill-qemu') process.kill(vm.pid, 'SIGKILL');
          // /dev/shm full while the RAM image is copied out.
          failpoint('shm.write');
          cap = await vm.captureLive({ statePath, memCopyPath: memCopy, newLayerPath: newLayer });
        } finally {
          release();
        }
      } else {
        // The guest's page cache dies with its memory: written out first, so the frozen layer holds every file.
        await sbx.runInternal(['/bin/sync'], 60_000);
        cap = { ...(await vm.freezeDisk(newLayer)), stateBytes: 0, copyMs: 0, stateMs: 0 };
      }
      failpoint('capture.after_pause');
      // Private layers of this sandbox, oldest first, the new active one left out: the host's own record of them,
      // checked against what QEMU reports (a mismatch reads and deletes nothing).
      const own = (await vm.ownDiskLayers(sbx.template.diskPath)).slice(1).reverse();
      const base = sbx.captureBase;
      const incremental = base?.baseLayer !== undefined && own[0] === base.baseLayer;
      failpoint('capture.chunks');
      const none = { chunks: [] as string[], newChunks: 0, storedBytes: 0 };
      const memory = keepMemory ? await chunkMemory(tenant, lease, memCopy, sbx.template.config.memoryMib * 1024 * 1024, base?.memory) : none;
      const disk = await chunkDiskLayers(tenant, lease, incremental ? own.slice(1) : own, incremental ? base!.disk : new Map());
      const state = keepMemory ? await chunkState(tenant, lease, readFileSync(statePath)) : none;
      failpoint('capture.after_chunks');
      const body: ManifestBody = {
        version: 1,
        snapshotId: id,
        sandboxId: sbx.id,
        tenantId: sbx.tenantId,
        parentId: base?.snapshotId ?? null,
        takenAt,
        reason,
        name,
        pinned: name !== null,
        ...(keepMemory ? {} : { diskOnly: true as const }),
        vm: { memoryMib: sbx.template.config.memoryMib, vcpus: sbx.template.config.vcpus, template: sbx.template.name, templateKey: sbx.template.key },
        memory: { chunkBytes: MEMORY_CHUNK_BYTES, sizeBytes: sbx.template.config.memoryMib * 1024 * 1024, chunks: memory.chunks },
        disk: { base: sbx.template.key, sizeBytes: disk.sizeBytes, clusterBytes: disk.clusterBytes, clusters: [...disk.clusters.entries()] },
        state: { sizeBytes: cap.stateBytes, chunks: state.chunks },
        agent: { commands: [...sbx.commands.values()] },
        ...(sbx.network ? { network: sbx.network } : {}),
        ...(Object.keys(sbx.defaults).length > 0 ? { defaults: sbx.defaults } : {}),
        stats: {
          pausedMs: Math.round(cap.pausedMs * 10) / 10,
          newChunks: memory.newChunks + disk.newChunks + state.newChunks,
          storedBytes: memory.storedBytes + disk.storedBytes + state.storedBytes,
          memoryChunks: memory.chunks.filter((c) => c !== '').length,
          diskClusters: disk.clusters.size,
        },
      };
      await tenant.flush();
      pass.check();
      const committed = await tenant.putManifest(id, { refs: manifestRefs(body), body });
      lease.release();
      await pass.leave();
      failpoint('capture.after_manifest');
      const info: SnapshotInfo = {
        id,
        sandboxId: sbx.id,
        parentId: body.parentId,
        takenAt,
        reason,
        name,
        pinned: body.pinned,
        sizeAddedBytes: body.stats.storedBytes + committed.storedBytes,
        memoryMib: body.vm.memoryMib,
        vcpus: body.vm.vcpus,
        template: body.vm.template,
        memory: keepMemory,
      };
      await events.append({
        type: 'snapshot.taken',
        tenantId: sbx.tenantId,
        sandboxId: sbx.id,
        data: {
          snapshotId: id,
          takenAt,
          parentId: info.parentId,
          reason,
          name,
          pinned: info.pinned,
          sizeAddedBytes: info.sizeAddedBytes,
          memoryMib: info.memoryMib,
          vcpus: info.vcpus,
          template: info.template,
          pausedMs: body.stats.pausedMs,
          copyMs: Math.round(cap.copyMs),
          stateMs: Math.round(cap.stateMs),
          newChunks: body.stats.newChunks,
          ...(keepMemory ? {} : { memory: false }),
        },
      });
      this.lastTakenMs.set(sbx.id, takenAtMs);
      sbx.captureCommitted({ snapshotId: id, memory: memory.chunks, disk: disk.clusters, baseLayer: own[0] });
      // A disk-only capture ends its sandbox (a pause): there is no RAM copy to keep, nor a cadence to learn from it.
      if (!keepMemory) return info;
      this.captureTimes.record(body.vm.memoryMib, clock.nowMs() - startedMs);
      // The copy is exactly this snapshot's RAM: keep it as the node's image of it for forks and resumes.
      renameSync(memCopy, this.imagePath(id, sbx.tenantId));
      this.trimImageCache();
      await this.mergeLayers(sbx, own);
      return info;
    } catch (err) {
      lease.release();
      await pass.leave();
      rmSync(memCopy, { force: true });
      const e =
        err instanceof SandglassError ? err : new SandglassError('snapshot_failed', `snapshot of ${sbx.id} failed: ${(err as Error).message}`, { cause: err });
      await Promise.resolve(
        events.append({ type: 'snapshot.failed', tenantId: sbx.tenantId, sandboxId: sbx.id, data: { reason: e.message, code: e.code, snapshotId: id } }),
      ).catch(() => {});
      throw e;
    } finally {
      rmSync(statePath, { force: true });
      this.capturing.delete(id);
    }
  }

  /** Folds the layers read by a capture into the lowest one, so the chain stays template ← base ← active. */
  private async mergeLayers(sbx: Sandbox, own: string[]): Promise<void> {
    if (own.length < 2 || !sbx.vm) return;
    try {
      await sbx.vm.commitLayer(own[own.length - 1]!, own[0]!);
      for (const layer of own.slice(1)) rmSync(layer, { force: true });
    } catch (err) {
      // Harmless: the layers stay in the chain and the next capture reads and merges them again.
      this.opts.logger.warn({ sandboxId: sbx.id, err: (err as Error).message }, 'merging disk layers failed');
    }
  }

  /** Reads and verifies a tenant's manifest; another tenant's snapshot is indistinguishable from a missing one. */
  async manifest(tenantId: string, snapshotId: string): Promise<ManifestBody> {
    const tenant = await this.opts.store.tenant(tenantId);
    let body: unknown;
    try {
      ({ body } = await tenant.getManifest(snapshotId));
    } catch (err) {
      if (err instanceof SandglassError && (err.code === 'snapshot_not_found' || err.code === 'invalid_argument')) {
        throw new SandglassError('snapshot_not_found', `No snapshot ${snapshotId} exists for your tenant.`, { details: { field: 'snapshotId' } });
      }
      throw err;
    }
    let m: ManifestBody;
    try {
      m = parseManifestBody(body);
    } catch (err) {
      throw new SandglassError('snapshot_corrupt', `Manifest of ${snapshotId} is malformed: ${(err as Error).message}`, { details: { manifest: snapshotId } });
    }
    if (m.tenantId !== tenantId) throw new SandglassError('snapshot_not_found', `No snapshot ${snapshotId} exists for your tenant.`);
    return m;
  }

  /**
   * Prepares a restore of `m` into `dir`: the RAM image (from the node's cache or rebuilt from verified chunks), the
   * device state and a disk overlay over `template`'s frozen layer (the template the manifest names). Returns the
   * source and the capture base the restored sandbox continues from.
   */
  prepareRestore(m: ManifestBody, dir: string, template: TemplateSnapshot, opts: { forTenant?: string } = {}): Promise<PreparedRestore> {
    const run = this.writeRestore(m, dir, template);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    // A create from a template another tenant published writes the publisher's snapshot into the new tenant's run
    // directory: a revocation of either waits for it.
    this.preparing.set(settled, [m.tenantId, ...(opts.forTenant === undefined ? [] : [opts.forTenant])]);
    void settled.then(() => this.preparing.delete(settled));
    return run;
  }

  /**
   * Resolves once every restore of the tenant being prepared now has written its files or failed: a revocation
   * waits for them, or a RAM image or overlay written after its wipe would stay behind.
   */
  async settle(tenantId: string): Promise<void> {
    await Promise.all([...this.preparing].filter(([, ts]) => ts.includes(tenantId)).map(([p]) => p));
  }

  private async writeRestore(m: ManifestBody, dir: string, template: TemplateSnapshot): Promise<PreparedRestore> {
    // A resumed sandbox's next snapshot comes after this one, whatever the clock says now.
    this.lastTakenMs.set(m.sandboxId, Math.max(this.lastTakenMs.get(m.sandboxId) ?? 0, Date.parse(m.takenAt)));
    const t0 = performance.now();
    const tenant = await this.opts.store.tenant(m.tenantId);
    if (m.diskOnly) return this.writeDiskRestore(tenant, m, dir, template);
    const image = this.imagePath(m.snapshotId, m.tenantId);
    // The VM restored here is named like its run directory (the sandbox id).
    const vmId = basename(dir);
    const paths = prepareVmDir(dir, vmId);
    const statePath = join(dir, 'state.bin');
    const ms: Record<string, number> = {};
    const timed = async <T>(phase: string, p: Promise<T>): Promise<T> => {
      const v = await p;
      ms[phase] = Math.round(performance.now() - t0);
      return v;
    };
    // The three files are independent: written side by side, each pipelining its own chunk reads. All three end before
    // this does, so a failed restore leaves no writer behind it (settle and a revocation's wipe rely on that).
    const settled = await Promise.allSettled([
      timed('memoryMs', this.restoreImage(tenant, m, image, template)),
      timed('stateMs', materializeState(tenant, m, statePath)),
      timed('diskMs', this.restoreDisk(tenant, m, paths.disk, template)),
    ]);
    for (const r of settled) if (r.status === 'rejected') throw r.reason;
    const memory = settled[0] as PromiseFulfilledResult<MemoryStats>;
    this.opts.logger.info({ snapshotId: m.snapshotId, ...ms, ...memory.value }, 'restore prepared');
    chownToVm(paths.disk, vmId);
    return {
      source: {
        config: { memoryMib: m.vm.memoryMib, vcpus: m.vm.vcpus, accel: this.opts.accel, cpu: this.opts.cpu },
        statePath,
        memImage: image,
        disk: { prepared: paths.disk },
      },
      base: { snapshotId: m.snapshotId, memory: m.memory.chunks, disk: new Map(m.disk.clusters) },
      commands: m.agent.commands as CommandRecord[],
      network: m.network as NetworkSpec | undefined,
      ...(m.defaults === undefined ? {} : { defaults: checkDefaults(m.defaults as SandboxDefaults) }),
    };
  }

  /** A disk-only snapshot's restore: its disk alone, booted by the guest's kernel; its old commands are gone with their guest. */
  private async writeDiskRestore(tenant: TenantStore, m: ManifestBody, dir: string, template: TemplateSnapshot): Promise<PreparedRestore> {
    const boot = this.opts.guest;
    if (!boot) throw new SandglassError('internal', `Snapshot ${m.snapshotId} is disk-only, and this node was not told the guest kernel to boot it with.`);
    const vmId = basename(dir);
    const paths = prepareVmDir(dir, vmId);
    await this.restoreDisk(tenant, m, paths.disk, template);
    chownToVm(paths.disk, vmId);
    return {
      source: { config: { memoryMib: m.vm.memoryMib, vcpus: m.vm.vcpus, accel: this.opts.accel, cpu: this.opts.cpu }, boot, disk: { prepared: paths.disk } },
      base: { snapshotId: m.snapshotId, memory: [], disk: new Map(m.disk.clusters) },
      commands: [],
      network: m.network as NetworkSpec | undefined,
      ...(m.defaults === undefined ? {} : { defaults: checkDefaults(m.defaults as SandboxDefaults) }),
    };
  }

  /**
   * The snapshot's disk delta (a qcow2 over the template's disk) at `path`: written from the store, or — for a large
   * delta, forked again and again like a custom template's — copied from the node's cache of it, which is written from
   * the store once (one writer per snapshot, under a temporary name until every cluster is verified).
   */
  private async restoreDisk(tenant: TenantStore, m: ManifestBody, path: string, template: TemplateSnapshot): Promise<void> {
    const dir = this.opts.diskCacheDir;
    if (dir === undefined || m.disk.clusters.length * m.disk.clusterBytes < DISK_CACHE_MIN_BYTES) {
      return materializeDisk(tenant, m, path, template.diskPath);
    }
    const cached = this.diskCachePath(m.snapshotId, m.tenantId);
    const tmp = `${cached}.tmp-${newId('req')}`;
    const written = await cachedFile(this.diskMaking, cached, () =>
      materializeDisk(tenant, m, tmp, template.diskPath).then(
        () => {
          renameSync(tmp, cached);
          return true as const;
        },
        (err: unknown) => {
          rmSync(tmp, { force: true });
          throw err;
        },
      ),
    );
    if (written !== undefined) this.trimDiskCache();
    // A reflink where the file system has them; else a plain copy of the delta's allocated clusters.
    copyFileSync(cached, path, fsc.COPYFILE_FICLONE);
  }

  /** Noted with its tenant like a RAM image, so a revocation finds it (imagesOf). */
  private diskCachePath(snapshotId: string, tenantId: string): string {
    this.imageTenants.set(snapshotId, tenantId);
    return join(this.opts.diskCacheDir!, `snap-${snapshotId}.qcow2`);
  }

  private trimDiskCache(): void {
    const dir = this.opts.diskCacheDir!;
    const files = readdirSync(dir)
      .filter((n) => n.startsWith('snap-') && n.endsWith('.qcow2'))
      .map((n) => {
        const st = statSync(join(dir, n), { throwIfNoEntry: false });
        return { p: join(dir, n), bytes: st ? st.blocks * 512 : 0, used: st?.mtimeMs ?? 0 };
      })
      .sort((a, b) => b.used - a.used);
    let total = 0;
    for (const f of files) {
      total += f.bytes;
      if (total > (this.opts.diskCacheBytes ?? DEFAULT_DISK_CACHE_BYTES)) rmSync(f.p, { force: true });
    }
  }

  /**
   * The snapshot's RAM image in the node's cache, written from the store unless there; returns where its chunks came
   * from (all zero when it was cached).
   */
  private async restoreImage(tenant: TenantStore, m: ManifestBody, image: string, template: TemplateSnapshot): Promise<MemoryStats> {
    const stats = await cachedFile(this.materializing, image, () =>
      this.localBase(tenant, m, template).then((base) => materializeMemory(tenant, m, image, { base })),
    );
    if (stats === undefined) return { fromStore: 0, fromBase: 0, zero: 0 };
    this.trimImageCache();
    return stats;
  }

  /**
   * The node's tmpfs image of the snapshot's template with its ids under the tenant's key (computed once per tenant
   * and template, then kept), or none when the template's RAM is not laid out like the snapshot's. The image is what
   * every create on this node restores from unverified; a snapshot chunk is taken from it only where its keyed hash
   * is the id the manifest names.
   */
  private async localBase(tenant: TenantStore, m: ManifestBody, template: TemplateSnapshot): Promise<LocalBase | undefined> {
    if (m.memory.chunkBytes !== MEMORY_CHUNK_BYTES || template.config.memoryMib * 1024 * 1024 !== m.memory.sizeBytes) return undefined;
    const path = await this.opts.ram.templateImage(template.key, template.memPath);
    const key = `${m.tenantId}/${template.key}`;
    let ids = this.baseIds.get(key);
    if (!ids) {
      ids = baseChunkIds(tenant, path, m.memory.sizeBytes, MEMORY_CHUNK_BYTES);
      ids.catch(() => this.baseIds.delete(key));
      this.baseIds.set(key, ids);
      while (this.baseIds.size > BASE_IDS_KEPT) this.baseIds.delete(this.baseIds.keys().next().value!);
    }
    return { path, chunks: await ids };
  }

  /** Deletes a snapshot: the record first (so it is never offered again), then its manifest; GC frees its chunks. */
  async delete(tenantId: string, sandboxId: string, snapshotId: string, why: 'user' | 'retention'): Promise<void> {
    await this.opts.events.append({ type: 'snapshot.deleted', tenantId, sandboxId, data: { snapshotId, why } });
    await (await this.opts.store.tenant(tenantId)).deleteManifest(snapshotId);
    rmSync(this.imagePath(snapshotId, tenantId), { force: true });
    if (this.opts.diskCacheDir) rmSync(join(this.opts.diskCacheDir, `snap-${snapshotId}.qcow2`), { force: true });
    this.imageTenants.delete(snapshotId);
  }

  /**
   * Thins every sandbox's history by the retention policy (pinned snapshots stay), then collects chunks no manifest
   * references. A sandbox that still exists keeps its newest snapshot whatever its age, so it can always be resumed.
   */
  async maintain(opts: { graceMs?: number } = {}): Promise<{ deleted: number; gc: Awaited<ReturnType<ChunkStore['gc']>> }> {
    if (!this.opts.index) {
      throw new SandglassError('conflict', 'This gateway runs in a cluster: snapshot retention and GC run in the control plane, not on the node.');
    }
    const all = await this.opts.index.all();
    // An ended sandbox takes no more snapshots; a paused one is re-seeded from its manifest when it resumes.
    for (const s of all) if (s.sandboxState === 'ended' || s.sandboxState === 'failed') this.lastTakenMs.delete(s.sandboxId);
    const drop = new Set(
      planRetention(
        all.map((s) => ({
          id: s.id,
          sandboxId: s.sandboxId,
          takenAtMs: Date.parse(s.takenAt),
          pinned: s.pinned,
          sandboxEnded: s.sandboxState === 'ended' || s.sandboxState === 'failed',
        })),
        this.opts.clock.nowMs(),
        this.opts.retention,
      ),
    );
    let deleted = 0;
    for (const s of all) {
      if (!drop.has(s.id)) continue;
      if (!(await this.opts.index.thinnable(s.id))) {
        drop.delete(s.id);
        continue;
      }
      await this.delete(s.tenantId, s.sandboxId, s.id, 'retention');
      deleted++;
    }
    // An ended sandbox's recording lives as long as a snapshot a replay could start from; its chunks go in this GC.
    const replayable = new Set(all.filter((s) => !drop.has(s.id)).map((s) => s.sandboxId));
    const done = new Set<string>();
    for (const s of all) {
      if (replayable.has(s.sandboxId) || done.has(s.sandboxId) || (s.sandboxState !== 'ended' && s.sandboxState !== 'failed')) continue;
      done.add(s.sandboxId);
      await (await this.opts.store.tenant(s.tenantId)).deleteManifest(recordingManifestId(s.sandboxId)).catch(() => undefined);
    }
    const orphans = await this.dropOrphanManifests(new Set(all.map((s) => s.tenantId)));
    if (orphans > 0) this.opts.logger.warn({ orphans }, 'deleted manifests no snapshot in the log names (captures that died before recording them)');
    const gc = await this.opts.store.gc({ graceMs: opts.graceMs ?? this.opts.gcGraceMs ?? 15 * 60_000 });
    await this.opts.events.append({ type: 'gc.completed', tenantId: 'system', data: { thinned: deleted, ...gc } });
    return { deleted, gc };
  }

  /**
   * Deletes the manifests of captures that died between committing the manifest and recording snapshot.taken (a crash,
   * a failed append): no API reaches them, yet GC would keep every chunk they name forever. Listed first, then the
   * running captures, then the log: a capture that finished after the listing recorded its event before leaving
   * `capturing`, so the index read last names it; one still running is in `capturing`.
   */
  private async dropOrphanManifests(tenants: Set<string>): Promise<number> {
    const listed: Array<{ tenantId: string; id: string }> = [];
    for (const tenantId of tenants) {
      if (tenantId === TEMPLATE_TENANT) continue;
      for (const id of await (await this.opts.store.tenant(tenantId)).listManifests()) if (id.startsWith('snap_')) listed.push({ tenantId, id });
    }
    const capturing = new Set(this.capturing);
    const known = new Set((await this.opts.index!.all()).map((s) => s.id));
    let dropped = 0;
    for (const m of listed) {
      if (capturing.has(m.id) || known.has(m.id)) continue;
      await (await this.opts.store.tenant(m.tenantId)).deleteManifest(m.id);
      dropped++;
    }
    return dropped;
  }

  /** Noted with its tenant when named, so a revocation finds every cached image of the tenant (imagesOf). */
  private imagePath(snapshotId: string, tenantId: string): string {
    this.imageTenants.set(snapshotId, tenantId);
    return join(this.opts.ram.root, `snap-${snapshotId}.img`);
  }

  /**
   * The snapshot RAM images and disk deltas of a tenant this node has cached or is making (plaintext of its guests'
   * memory and disks). A cache file being written is under a temporary name: a revocation waits for it (settle).
   */
  imagesOf(tenantId: string): string[] {
    const paths: string[] = [];
    for (const [snapshotId, t] of this.imageTenants) {
      if (t !== tenantId) continue;
      paths.push(join(this.opts.ram.root, `snap-${snapshotId}.img`));
      if (this.opts.diskCacheDir) paths.push(join(this.opts.diskCacheDir, `snap-${snapshotId}.qcow2`));
    }
    return paths;
  }

  /** Keeps the tmpfs caches under their ceiling: template images count first, then snapshot images by recent use. */
  private trimImageCache(): void {
    const names = readdirSync(this.opts.ram.root);
    const images = names
      .filter((n) => n.startsWith('snap-') && n.endsWith('.img'))
      .map((n) => {
        const p = join(this.opts.ram.root, n);
        return { p, bytes: heldBytes(p), used: statSync(p, { throwIfNoEntry: false })?.mtimeMs ?? 0 };
      })
      .sort((a, b) => b.used - a.used);
    let total = 0;
    for (const n of names) if (n.startsWith('template-') && n.endsWith('.img')) total += heldBytes(join(this.opts.ram.root, n));
    for (const img of images) {
      total += img.bytes;
      if (total > this.imageCacheBytes) {
        rmSync(img.p, { force: true });
        this.imageTenants.delete(basename(img.p).slice('snap-'.length, -'.img'.length));
      }
    }
  }

  async stop(): Promise<void> {
    await this.scheduler.stop();
  }
}

/**
 * A node cache file made by one writer: a second writer would truncate the first's temporary file under it, and the
 * first could rename a half-written file into place, so concurrent restores of one snapshot wait on the one in
 * `writers`. Answers what the write answered, or undefined when the file was there already (its use time touched).
 */
async function cachedFile<T>(writers: Map<string, Promise<T>>, path: string, write: () => Promise<T>): Promise<T | undefined> {
  let making = writers.get(path);
  if (!making && !existsSync(path)) {
    const writing = write();
    writing.finally(() => writers.delete(path)).catch(() => {});
    writers.set(path, writing);
    making = writing;
  }
  if (making) return making;
  markUsed(path);
  return undefined;
}
