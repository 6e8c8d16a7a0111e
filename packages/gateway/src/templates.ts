// Templates: a guest image booted once and snapshotted when its agent answers. Every sandbox restores one.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newId, processStartTime, SandglassError, type Logger } from '@sandglass/core';
import { bootVm, qemuVersion, chownToVm, sealTemplate, type SnapshotFiles, type Vm, type VmConfig, type Accel } from '@sandglass/vmm';
import type { ChunkStore, TenantStore } from '@sandglass/chunkstore';
import { materializeTemplate, parseManifestBody, storeTemplate, STATE_CHUNK_BYTES, type ManifestBody, type TemplateRecord } from '@sandglass/snapshots';
import { connectAgent, runToExit } from './agent-link.js';
import type { GuestImage } from '@sandglass/images';
import type { RamFiles } from './ram.js';
import type { RestoreSource } from './restore.js';
import { inProcessGate, type CaptureGate } from './capture-gate.js';

/** A node starting while a GC sweep runs waits for it rather than failing its start. */
const TEMPLATE_GATE_WAIT_MS = 10 * 60_000;

// Bump when the way a template is booted or snapshotted changes: old snapshots are then never reused.
const TEMPLATE_RECIPE = 4;

/**
 * At most this much free memory is written with zeros before a template's snapshot. The pages a boot dirtied and
 * freed (page cache, the unpacked initramfs) are what the fill is for, and they do not grow with the guest: a 1 GiB
 * guest's template image measured 79 MiB with no fill, 76 MiB with this much, 77 MiB with 640 MiB; filling all of
 * it took over 16 s under TCG and ran the guest out of memory (docs/design/sizes.md).
 */
export const TEMPLATE_ZERO_FILL_MIB = 192;

/**
 * Run in the template's guest after boot, right before its snapshot: what every sandbox restored from it starts
 * with. Dropping the page cache and then filling freed memory with zeros (a tmpfs written until full, then removed)
 * leaves freed pages all-zero, so the tmpfs copy of the template RAM (zero blocks become holes) and every VM's RAM
 * file hold only what the guest really uses; bash is read back so a first command finds it cached. The fill is
 * capped (TEMPLATE_ZERO_FILL_MIB), so a larger guest costs no more to prepare. Under TCG, address-space
 * randomization is turned off in the guest: every new process would otherwise place ld.so, libc and bash at fresh
 * addresses and QEMU would translate their code again (translated code is found by address).
 * SANDGLASS_TEMPLATE_PREP=off builds templates without it (the benchmark's baseline). See docs/design/density.md.
 */
export function templatePrep(accel: Accel, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.SANDGLASS_TEMPLATE_PREP === 'off') return undefined;
  const capKib = TEMPLATE_ZERO_FILL_MIB * 1024;
  return [
    ...(accel === 'tcg' ? ['echo 0 > /proc/sys/kernel/randomize_va_space'] : []),
    'sync',
    'echo 3 > /proc/sys/vm/drop_caches',
    "free_kib=$(awk '/^MemFree:/ { print $2 }' /proc/meminfo)",
    // 32 MiB stay free for the kernel; the write ends when the tmpfs is full.
    `fill_kib=$((free_kib > 65536 ? free_kib - 32768 : 32768))`,
    `mount -t tmpfs -o size=$((fill_kib < ${capKib} ? fill_kib : ${capKib}))k sandglass-zero /mnt`,
    '{ cat /dev/zero > /mnt/zero 2>/dev/null || true; }',
    'umount /mnt',
    'echo 3 > /proc/sys/vm/drop_caches',
    '/bin/bash -c true',
  ].join(' && ');
}

/** The store's tenant that owns every template: a platform resource, never a customer's (their ids are `ten_…`). */
export const TEMPLATE_TENANT = 'system';

export interface TemplateSnapshot extends SnapshotFiles {
  key: string;
  dir: string;
  name: string;
  /** How long the cold boot took on the node that built it. */
  bootMs: number;
  createdAt: string;
  /** Set when this node rebuilt the template from the store rather than booting it: how long that took. */
  materializeMs?: number;
}

/** A build (or fetch) of a template key in flight: what it is doing now, for a create that waits on it. */
export interface TemplateBuildStatus {
  key: string;
  memoryMib: number;
  vcpus: number;
  /** boot, sync, prep, snapshot, publish, fetch */
  phase: string;
  elapsedMs: number;
}

export interface TemplateProgress {
  step: string;
  message?: string;
}

/** A snapshot in the chunk store. */
export interface TemplateRef {
  tenantId: string;
  snapshotId: string;
}

/**
 * Which snapshot in the chunk store IS the template for a key. Every node must run the same template bytes (a
 * snapshot's disk delta and page cache are relative to them), so the first node to publish one wins and every other
 * node materializes that one.
 */
export interface TemplateRegistry {
  lookup(key: string): Promise<TemplateRef | undefined>;
  /** Records `rec` for `key` unless the key has one already; returns the record that holds (the winner). */
  publish(key: string, rec: TemplateRef & { nodeId: string }): Promise<TemplateRef>;
}

/** How a node shares templates with the others: the chunk store that holds them and the registry that names them. */
export interface TemplateSharing {
  store: ChunkStore;
  registry: TemplateRegistry;
  nodeId: string;
  /** Held while the template's chunks are stored, as a capture's are: against a GC sweep elsewhere. */
  gate?: CaptureGate;
  /** A cached template was replaced by the registry's: anything derived from the old files (its tmpfs RAM image) is stale. */
  onReplaced?: (key: string) => void;
}

export function templateKey(image: GuestImage, config: VmConfig, append: string): string {
  const prep = templatePrep(config.accel) ?? null;
  return createHash('sha256')
    .update(JSON.stringify({ recipe: TEMPLATE_RECIPE, image: image.key, config, append, qemu: qemuVersion(), prep }))
    .digest('hex')
    .slice(0, 16);
}

/**
 * Finds, builds or fetches template snapshots, keyed by everything that went into them: the image, the VM shape
 * (memory, vCPUs, accelerator), kernel arguments and the QEMU version. With sharing, `artifacts/template-<key>/` is
 * a cache of the snapshot the registry names: a node that never saw a key materializes it from the store, and a
 * node that builds one publishes it (and uses the winner's if another node published first).
 */
export class TemplateStore {
  /** ensure's answers, once obtained: the same template for the life of the process. */
  private ready = new Map<string, Promise<TemplateSnapshot>>();
  /** One operation on a key's directory at a time (a build, a materialization, a replacement). */
  private busy = new Map<string, Promise<unknown>>();

  /** Builds and fetches in flight, by key: their phase and start, and the VM a build boots (killed by close). */
  private inFlight = new Map<string, { config: VmConfig; phase: string; t0: number; vm?: Vm }>();
  private closed = false;

  private readonly artifactsDir: string;

  constructor(
    artifactsDir: string,
    private readonly image: GuestImage,
    private readonly kernelArgs: string,
    private readonly log: Logger,
    private readonly sharing?: TemplateSharing,
  ) {
    this.artifactsDir = realpathSync(artifactsDir);
    this.removeStaleTemporaries();
  }

  /**
   * Half-built or half-fetched template directories (`template-<key>.tmp-<pid>`) whose process is gone: a crash, a
   * SIGKILL or a power cut mid-build left them, and nothing else would ever remove them.
   */
  private removeStaleTemporaries(): void {
    for (const name of readdirSync(this.artifactsDir)) {
      const m = /^template-[0-9a-f]{16}\.tmp-(\d+)$/.exec(name);
      if (!m || (Number(m[1]) !== process.pid && processStartTime(Number(m[1])) !== undefined)) continue;
      rmSync(join(this.artifactsDir, name), { recursive: true, force: true });
      this.log.warn({ dir: name }, 'removed a template directory a stopped build left unfinished');
    }
  }

  /**
   * The key's build or fetch in flight, if any. A build runs on its own, whoever asked for it: a caller that stops
   * waiting leaves it running, and the next `ensure` of the same shape joins it.
   */
  building(config: VmConfig): TemplateBuildStatus | undefined {
    const key = templateKey(this.image, config, this.kernelArgs);
    const b = this.inFlight.get(key);
    return b && { key, memoryMib: b.config.memoryMib, vcpus: b.config.vcpus, phase: b.phase, elapsedMs: Math.round(performance.now() - b.t0) };
  }

  /**
   * Stops builds in flight (their VMs are killed, their temporary directories removed) and waits for every operation
   * on a template directory to end, so a stopped node leaves no `.tmp-` directory behind.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const b of this.inFlight.values()) b.vm?.kill();
    await Promise.all([...this.busy.values()].map((p) => p.catch(() => undefined)));
  }

  async ensure(name: string, config: VmConfig, onProgress?: (p: TemplateProgress) => void): Promise<TemplateSnapshot> {
    const key = templateKey(this.image, config, this.kernelArgs);
    const existing = this.ready.get(key);
    if (existing) return existing;
    if (this.closed) throw new SandglassError('gateway_unavailable', 'This node is stopping; it builds no more templates.');
    const promise = this.serially(key, () => this.tracked(key, config, () => this.obtain(name, key, config, onProgress)));
    this.ready.set(key, promise);
    promise.catch(() => this.ready.delete(key));
    return promise;
  }

  /**
   * The template a snapshot's manifest names, by key: the node's copy, else the registry's materialized from the
   * store (a snapshot taken on another node), else undefined.
   */
  async byKey(key: string): Promise<TemplateSnapshot | undefined> {
    if (!/^[0-9a-f]{16}$/.test(key)) return undefined;
    const cached = this.cached(key);
    if (cached) return cached;
    const sharing = this.sharing;
    if (!sharing) return undefined;
    return this.serially(key, async () => {
      const now = this.cached(key);
      if (now) return now;
      const ref = await sharing.registry.lookup(key);
      return ref ? this.materialize(key, ref, undefined, sharing) : undefined;
    });
  }

  private cached(key: string): TemplateSnapshot | undefined {
    const meta = this.readMeta(key);
    return meta ? this.load(meta.name, key) : undefined;
  }

  /** Runs a build or fetch of `key` with its phase visible to `building`. */
  private async tracked<T>(key: string, config: VmConfig, fn: () => Promise<T>): Promise<T> {
    if (this.cached(key)) return fn();
    this.inFlight.set(key, { config, phase: 'start', t0: performance.now() });
    try {
      return await fn();
    } finally {
      this.inFlight.delete(key);
    }
  }

  private phase(key: string, phase: string): void {
    const b = this.inFlight.get(key);
    if (b) b.phase = phase;
  }

  private serially<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.busy.get(key) ?? Promise.resolve()).catch(() => undefined).then(fn);
    this.busy.set(key, run);
    const forget = () => {
      if (this.busy.get(key) === run) this.busy.delete(key);
    };
    run.then(forget, forget);
    return run;
  }

  private async obtain(name: string, key: string, config: VmConfig, onProgress?: (p: TemplateProgress) => void): Promise<TemplateSnapshot> {
    const local = this.load(name, key);
    const sharing = this.sharing;
    if (!sharing) return local ?? this.install(key, await this.build(name, key, config, onProgress), name);
    const ref = await sharing.registry.lookup(key);
    if (local && ref && (await this.sameBuild(local, ref, sharing))) return local;
    if (ref) {
      if (local) this.log.warn({ key, snapshotId: ref.snapshotId }, "the cached template is not the registry's; replacing it with the registry's");
      onProgress?.({ step: 'template', message: `fetching ${name} from the store` });
      this.phase(key, 'fetch');
      return this.materialize(key, ref, name, sharing);
    }
    // No node has published this key. A cached template (built before templates were shared) is published as it is.
    const dir = local ? local.dir : await this.build(name, key, config, onProgress);
    // Once per key and cluster, but tens of seconds: the whole root image is chunked, so say what start-up waits for.
    onProgress?.({ step: 'template', message: `publishing ${name} to the store` });
    this.phase(key, 'publish');
    let winner: TemplateRef | undefined;
    try {
      winner = await this.publish(key, dir, sharing);
    } catch (err) {
      // Unpublished, the build must not serve: a snapshot taken on it could be resumed nowhere else.
      if (!local) rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    if (winner) {
      // Another node published first: its bytes are the template, ours go.
      if (!local) rmSync(dir, { recursive: true, force: true });
      return this.materialize(key, winner, name, sharing);
    }
    return local ?? this.install(key, dir, name);
  }

  /** Moves a finished template directory into place. */
  private install(key: string, tmp: string, name: string): TemplateSnapshot {
    const dir = join(this.artifactsDir, `template-${key}`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
    return this.load(name, key)!;
  }

  private readMeta(key: string): (TemplateRecord & { materializeMs?: number }) | undefined {
    const metaPath = join(this.artifactsDir, `template-${key}`, 'template.json');
    if (!existsSync(metaPath)) return undefined;
    return JSON.parse(readFileSync(metaPath, 'utf8')) as TemplateRecord;
  }

  private load(name: string, key: string): TemplateSnapshot | undefined {
    const dir = join(this.artifactsDir, `template-${key}`);
    const meta = this.readMeta(key);
    if (!meta) return undefined;
    // A template built before VMs had uids of their own belongs to the old shared VM user: take it back.
    sealTemplate(dir);
    return { ...meta, name, dir, memPath: join(dir, 'mem.raw'), statePath: join(dir, 'state.bin'), diskPath: join(dir, 'disk.qcow2') };
  }

  /**
   * Stores the template in `dir` and offers it to the registry. Returns the winner when another node's publication
   * holds (our manifest is then deleted, and GC frees what only it referenced), undefined when ours does.
   */
  private async publish(key: string, dir: string, sharing: TemplateSharing): Promise<TemplateRef | undefined> {
    const record = JSON.parse(readFileSync(join(dir, 'template.json'), 'utf8')) as TemplateRecord;
    const tenant = await sharing.store.tenant(TEMPLATE_TENANT);
    const snapshotId = newId('snap');
    const t0 = performance.now();
    const pass = await (sharing.gate ?? inProcessGate).enter(snapshotId, { waitMs: TEMPLATE_GATE_WAIT_MS });
    let stored: Awaited<ReturnType<typeof storeTemplate>>;
    try {
      stored = await storeTemplate(tenant, dir, record, { snapshotId, takenAt: new Date().toISOString() }, { beforeCommit: () => pass.check() });
    } finally {
      await pass.leave();
    }
    const winner = await sharing.registry.publish(key, { tenantId: TEMPLATE_TENANT, snapshotId, nodeId: sharing.nodeId });
    const won = winner.tenantId === TEMPLATE_TENANT && winner.snapshotId === snapshotId;
    this.log.info(
      { key, snapshotId, won, publishMs: Math.round(performance.now() - t0), storedBytes: stored.storedBytes, newChunks: stored.newChunks },
      'template published to the store',
    );
    if (won) return undefined;
    await tenant.deleteManifest(snapshotId);
    return winner;
  }

  /** Whether the cached template is the registry's: the device-state stream differs between any two boots. */
  private async sameBuild(local: TemplateSnapshot, ref: TemplateRef, sharing: TemplateSharing): Promise<boolean> {
    const { tenant, m } = await this.templateManifest(local.key, ref, sharing);
    const state = readFileSync(local.statePath);
    const ids: string[] = [];
    for (let at = 0; at < state.length; at += STATE_CHUNK_BYTES) ids.push(tenant.chunkId(state.subarray(at, at + STATE_CHUNK_BYTES)));
    return state.length === m.state.sizeBytes && ids.length === m.state.chunks.length && ids.every((id, i) => id === m.state.chunks[i]);
  }

  /** Reads and checks the manifest the registry names: a template's own snapshot, of this key, in the template tenant. */
  private async templateManifest(key: string, ref: TemplateRef, sharing: TemplateSharing): Promise<{ tenant: TenantStore; m: ManifestBody }> {
    // The registry chooses among templates, never among tenants' snapshots.
    if (ref.tenantId !== TEMPLATE_TENANT) {
      throw new SandglassError('snapshot_corrupt', `The registry names snapshot ${ref.snapshotId} of tenant ${ref.tenantId} as template ${key}; refused.`);
    }
    const tenant = await sharing.store.tenant(TEMPLATE_TENANT);
    let m: ManifestBody;
    try {
      m = parseManifestBody((await tenant.getManifest(ref.snapshotId)).body);
    } catch (err) {
      if (err instanceof SandglassError) throw err;
      throw new SandglassError('snapshot_corrupt', `Template ${key}'s manifest ${ref.snapshotId} is malformed: ${(err as Error).message}`, { cause: err });
    }
    if (m.reason !== 'template' || m.vm.templateKey !== key || m.template?.key !== key || m.tenantId !== TEMPLATE_TENANT) {
      throw new SandglassError('snapshot_corrupt', `Snapshot ${ref.snapshotId} is not template ${key}; it was not used.`, {
        details: { manifest: ref.snapshotId },
      });
    }
    return { tenant, m };
  }

  /** Rebuilds the registry's template from verified chunks into the cache, replacing whatever was there. */
  private async materialize(key: string, ref: TemplateRef, name: string | undefined, sharing: TemplateSharing): Promise<TemplateSnapshot> {
    const t0 = performance.now();
    const { tenant, m } = await this.templateManifest(key, ref, sharing);
    const dir = join(this.artifactsDir, `template-${key}`);
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    try {
      await materializeTemplate(tenant, m, tmp);
      const materializeMs = performance.now() - t0;
      writeFileSync(join(tmp, 'template.json'), JSON.stringify({ ...m.template, materializeMs }, null, 2));
      sealTemplate(tmp);
    } catch (err) {
      rmSync(tmp, { recursive: true, force: true });
      throw err;
    }
    // What was derived from the old files goes first: a crash before the rename leaves the old template, consistent.
    if (existsSync(dir)) sharing.onReplaced?.(key);
    const t = this.install(key, tmp, name ?? m.template!.name);
    this.log.info({ key, snapshotId: ref.snapshotId, materializeMs: Math.round(t.materializeMs!) }, 'template materialized from the store');
    return t;
  }

  /** Cold-boots the template into a sealed temporary directory and returns it; install or publish it next. */
  private async build(name: string, key: string, config: VmConfig, onProgress?: (p: TemplateProgress) => void): Promise<string> {
    const dir = join(this.artifactsDir, `template-${key}`);
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    const vmId = `tpl-${key}`;
    chownToVm(tmp, vmId);
    const shape = { key, name, memoryMib: config.memoryMib, vcpus: config.vcpus, accel: config.accel };
    onProgress?.({ step: 'template', message: `booting ${name} (${config.memoryMib} MiB, ${config.vcpus} vCPU, ${config.accel})` });
    this.log.info(shape, 'template build started');
    // Each phase's duration, logged with the build and kept in template.json: where a slow build spent its time.
    const phasesMs: Record<string, number> = {};
    let t = performance.now();
    const step = (phase: string) => {
      const now = performance.now();
      phasesMs[phase] = Math.round(now - t);
      t = now;
    };
    this.phase(key, 'boot');
    let vm: Vm | undefined;
    try {
      vm = await bootGuest(this.image, this.kernelArgs, { id: vmId, dir: tmp, config });
      const building = this.inFlight.get(key);
      if (building) building.vm = vm;
      if (this.closed) vm.kill();
      const agent = await connectAgent(vm, { timeoutMs: bootAgentTimeoutMs(config) });
      step('boot');
      const bootMs = phasesMs.boot!;
      this.phase(key, 'sync');
      // Flush the guest's dirty page cache so the frozen disk layer is consistent on its own.
      await runToExit(agent, ['/bin/sync'], { timeoutMs: 30_000 });
      step('sync');
      const prep = templatePrep(config.accel);
      if (prep !== undefined) {
        this.phase(key, 'prep');
        const code = await runToExit(agent, ['/bin/sh', '-c', prep], { timeoutMs: 120_000 });
        if (code !== 0) throw new SandglassError('vm_failed', `preparing the template's memory exited with code ${code}`);
        step('prep');
      }
      onProgress?.({ step: 'template', message: `agent ready after ${(bootMs / 1000).toFixed(1)} s; snapshotting` });
      this.phase(key, 'snapshot');
      // Snapshot with the host end still connected and the agent idle in its read: restores connect before
      // loading, so the guest never sees the port hang up (a hangup racing the snapshot could strand the agent).
      const saved = await vm.saveSnapshot(join(tmp, 'state.bin'));
      await agent.close();
      await vm.stop();
      step('snapshot');
      rmSync(join(tmp, 'qmp.sock'), { force: true });
      rmSync(join(tmp, 'agent.sock'), { force: true });
      rmSync(join(tmp, 'migrate.sock'), { force: true });
      const meta: TemplateRecord = { key, name, config, bootMs, createdAt: new Date().toISOString(), stateBytes: saved.stateBytes };
      writeFileSync(join(tmp, 'template.json'), JSON.stringify({ ...meta, phasesMs }, null, 2));
      // From here on the template belongs to the gateway: every VM backs onto its disk layer, none may change it.
      sealTemplate(tmp);
      this.log.info({ ...shape, phasesMs, pausedMs: Math.round(saved.pausedMs) }, 'template snapshot built');
      return tmp;
    } catch (err) {
      const tail = vm?.consoleTail(2048) ?? '';
      if (vm) {
        vm.kill();
        await vm.exited;
      }
      rmSync(tmp, { recursive: true, force: true });
      this.log.warn({ ...shape, phasesMs, err: (err as Error).message }, 'template build failed');
      const why = this.closed ? 'the node is stopping' : (err as Error).message;
      throw new SandglassError('vm_failed', `building template ${name} failed: ${why}\n--- console ---\n${tail}`, { cause: err });
    }
  }
}

/** A template as a restore source: its RAM copied to tmpfs once, a fresh overlay over its frozen disk per VM. */
export async function templateSource(t: TemplateSnapshot, ram: RamFiles): Promise<RestoreSource> {
  return { config: t.config, statePath: t.statePath, memImage: await ram.templateImage(t.key, t.memPath), disk: { backing: t.diskPath } };
}

/** Cold-boots the guest image with guest RAM in `dir/mem.raw`: how a template starts, and the benchmark's baseline. */
export function bootGuest(image: GuestImage, kernelArgs: string, vm: { id: string; dir: string; config: VmConfig }): Promise<Vm> {
  return bootVm({
    ...vm,
    kernelPath: image.kernelPath,
    initrdPath: image.initramfsPath,
    append: kernelArgs,
    // Real paths: qcow2 records its backing file by name, and a name through a symlinked home dies with that home.
    rootfsPath: realpathSync(image.rootfsPath),
    memPath: join(vm.dir, 'mem.raw'),
  });
}

/** How long a cold boot may take to a ready agent: TCG boots are an order of magnitude slower. */
export function bootAgentTimeoutMs(config: VmConfig): number {
  return config.accel === 'kvm' ? 30_000 : 120_000;
}

export function vmConfig(memoryMib: number, vcpus: number, accel: Accel, cpu: string): VmConfig {
  return { memoryMib, vcpus, accel, cpu };
}
