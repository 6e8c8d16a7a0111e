// Templates: a guest image booted once and snapshotted when its agent answers. Every sandbox restores one.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandglassError, type Logger } from '@sandglass/core';
import { bootVm, qemuVersion, chownToVm, sealTemplate, type SnapshotFiles, type Vm, type VmConfig, type Accel } from '@sandglass/vmm';
import { connectAgent, runToExit } from './agent-link.js';
import type { GuestImage } from '@sandglass/images';
import type { RamFiles } from './ram.js';
import type { RestoreSource } from './restore.js';

// Bump when the way a template is booted or snapshotted changes: old snapshots are then never reused.
const TEMPLATE_RECIPE = 3;

export interface TemplateSnapshot extends SnapshotFiles {
  key: string;
  dir: string;
  name: string;
  bootMs: number;
  createdAt: string;
}

export interface TemplateProgress {
  step: string;
  message?: string;
}

export function templateKey(image: GuestImage, config: VmConfig, append: string): string {
  return createHash('sha256')
    .update(JSON.stringify({ recipe: TEMPLATE_RECIPE, image: image.key, config, append, qemu: qemuVersion() }))
    .digest('hex')
    .slice(0, 16);
}

/**
 * Builds (once) and finds template snapshots, keyed by everything that went into them: the image,
 * the VM shape (memory, vCPUs, accelerator), kernel arguments and the QEMU version.
 */
export class TemplateStore {
  private inflight = new Map<string, Promise<TemplateSnapshot>>();

  private readonly artifactsDir: string;

  constructor(
    artifactsDir: string,
    private readonly image: GuestImage,
    private readonly kernelArgs: string,
    private readonly log: Logger,
  ) {
    this.artifactsDir = realpathSync(artifactsDir);
  }

  async ensure(name: string, config: VmConfig, onProgress?: (p: TemplateProgress) => void): Promise<TemplateSnapshot> {
    const key = templateKey(this.image, config, this.kernelArgs);
    const existing = this.inflight.get(key);
    if (existing) return existing;
    const p = this.load(name, key) ?? this.build(name, key, config, onProgress);
    const promise = Promise.resolve(p);
    this.inflight.set(key, promise);
    promise.catch(() => this.inflight.delete(key));
    return promise;
  }

  /** A template built earlier on this node, by key (what a snapshot's manifest names). */
  byKey(key: string): TemplateSnapshot | undefined {
    if (!/^[0-9a-f]{16}$/.test(key)) return undefined;
    const dir = join(this.artifactsDir, `template-${key}`);
    if (!existsSync(join(dir, 'template.json'))) return undefined;
    const meta = JSON.parse(readFileSync(join(dir, 'template.json'), 'utf8')) as TemplateSnapshot;
    return this.load(meta.name, key);
  }

  private load(name: string, key: string): TemplateSnapshot | undefined {
    const dir = join(this.artifactsDir, `template-${key}`);
    const metaPath = join(dir, 'template.json');
    if (!existsSync(metaPath)) return undefined;
    const meta = JSON.parse(readFileSync(metaPath, 'utf8')) as TemplateSnapshot;
    // A template built before VMs had uids of their own belongs to the old shared VM user: take it back.
    sealTemplate(dir);
    return { ...meta, name, dir, memPath: join(dir, 'mem.raw'), statePath: join(dir, 'state.bin'), diskPath: join(dir, 'disk.qcow2') };
  }

  private async build(name: string, key: string, config: VmConfig, onProgress?: (p: TemplateProgress) => void): Promise<TemplateSnapshot> {
    const dir = join(this.artifactsDir, `template-${key}`);
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    const vmId = `tpl-${key}`;
    chownToVm(tmp, vmId);
    onProgress?.({ step: 'template', message: `booting ${name} (${config.memoryMib} MiB, ${config.vcpus} vCPU, ${config.accel})` });
    const t0 = performance.now();
    const vm = await bootGuest(this.image, this.kernelArgs, { id: vmId, dir: tmp, config });
    try {
      const agent = await connectAgent(vm, { timeoutMs: bootAgentTimeoutMs(config) });
      const bootMs = performance.now() - t0;
      // Flush the guest's dirty page cache so the frozen disk layer is consistent on its own.
      await runToExit(agent, ['/bin/sync'], { timeoutMs: 30_000 });
      onProgress?.({ step: 'template', message: `agent ready after ${(bootMs / 1000).toFixed(1)} s; snapshotting` });
      // Snapshot with the host end still connected and the agent idle in its read: restores connect before
      // loading, so the guest never sees the port hang up (a hangup racing the snapshot could strand the agent).
      const saved = await vm.saveSnapshot(join(tmp, 'state.bin'));
      await agent.close();
      await vm.stop();
      rmSync(join(tmp, 'qmp.sock'), { force: true });
      rmSync(join(tmp, 'agent.sock'), { force: true });
      rmSync(join(tmp, 'migrate.sock'), { force: true });
      const meta = { key, name, config, bootMs, createdAt: new Date().toISOString(), stateBytes: saved.stateBytes };
      writeFileSync(join(tmp, 'template.json'), JSON.stringify(meta, null, 2));
      // From here on the template belongs to the gateway: every VM backs onto its disk layer, none may change it.
      sealTemplate(tmp);
      rmSync(dir, { recursive: true, force: true });
      renameSync(tmp, dir);
      this.log.info({ key, name, bootMs: Math.round(bootMs), pausedMs: Math.round(saved.pausedMs) }, 'template snapshot built');
      return this.load(name, key)!;
    } catch (err) {
      const tail = vm.consoleTail(2048);
      vm.kill();
      await vm.exited;
      rmSync(tmp, { recursive: true, force: true });
      throw new SandglassError('vm_failed', `building template ${name} failed: ${(err as Error).message}\n--- console ---\n${tail}`, { cause: err });
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
