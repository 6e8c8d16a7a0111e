// Restoring a snapshot into a running VM with its agent linked: the one path creates, the warm pool, resumes and forks use.
import type { Socket } from 'node:net';
import { bootVm, restoreVm, resumeVm, createOverlay, prepareVmDir, releaseVmIdentity, type Vm, type VmConfig } from '@sandglass/vmm';
import type { AgentClient } from '@sandglass/agent-client';
import { connectAgent, openAgentSocket } from './agent-link.js';
import type { RamFiles } from './ram.js';
import { bootAgentTimeoutMs } from './templates.js';

export interface Restored {
  vm: Vm;
  agent: AgentClient;
}

/** What a restore starts from: a memory snapshot (a template's or a sandbox's), or a disk-only snapshot to boot. */
export type RestoreSource = MemorySource | DiskBootSource;

/** A template and a captured snapshot are the same thing to this function. */
export interface MemorySource {
  config: VmConfig;
  statePath: string;
  /** RAM image copied (sparsely) into the VM's own RAM file. */
  memImage: string;
  /** A new overlay over a frozen layer (templates), or an overlay already written for this VM (snapshots). */
  disk: { backing: string } | { prepared: string };
}

/** The guest's kernel and root image: what a cold boot starts from (a template build's, a disk-only snapshot's). */
export interface GuestBoot {
  kernelPath: string;
  initrdPath: string;
  append: string;
  rootfsPath: string;
}

/** A disk-only snapshot: its disk written for this VM, booted by the guest's kernel with empty RAM. */
export interface DiskBootSource {
  config: VmConfig;
  boot: GuestBoot;
  disk: { prepared: string };
}

/**
 * Restores `source` into a new VM named `id` in `dir`, resumes it and waits for the agent's hello. `check` runs
 * between steps so a caller can abandon a restore midway. On failure the VM and its RAM file are removed; the
 * caller cleans `dir`.
 */
export async function restoreSnapshot(source: RestoreSource, id: string, dir: string, ram: RamFiles, check: () => void = () => {}): Promise<Restored> {
  if ('boot' in source) return bootFromDisk(source, id, dir, ram, check);
  let socket: Socket | undefined;
  let vm: Vm | undefined;
  // The RAM copy and the disk overlay are made while the jail is built; QEMU starts once both are done.
  const { path: memPath, filled } = ram.createFrom(id, source.memImage);
  let overlay: Promise<void> = Promise.resolve();
  try {
    let diskPath: string;
    let diskBacking: string | undefined;
    if ('backing' in source.disk) {
      diskPath = prepareVmDir(dir, id).disk;
      diskBacking = source.disk.backing;
      overlay = createOverlay(diskPath, diskBacking, 'qcow2', id);
    } else {
      diskPath = source.disk.prepared;
    }
    const made = Promise.all([filled, overlay]).then(() => {});
    made.catch(() => {});
    vm = await restoreVm({
      id,
      dir,
      config: source.config,
      memPath,
      statePath: source.statePath,
      diskPath,
      diskBacking,
      filesReady: made,
      // Connected before the load: the port's migrated "host connected" state stays true, so the agent never sees a
      // hangup. Snapshots are taken with the host→agent direction quiesced (the agent's reader between frames), and
      // hello's resync marker drops any tail of agent output written before the snapshot.
      beforeLoad: async (v) => {
        socket = await openAgentSocket(v, 10_000);
      },
    });
    check();
    const running = vm;
    const agent = await connectAgent(running, { timeoutMs: 30_000, socket, beforeHello: () => resumeVm(running) });
    check();
    return { vm, agent };
  } catch (err) {
    socket?.destroy();
    if (vm) {
      vm.kill();
      await vm.exited;
    }
    // A failed overlay leaves the copy running, and the reverse: each ends before its file goes.
    await Promise.allSettled([filled, overlay]);
    ram.remove(memPath);
    // The VM's uid goes back with its files; the caller removes `dir` next, and nothing of this VM runs.
    releaseVmIdentity(id);
    throw err;
  }
}

/**
 * Cold-boots a disk-only snapshot: the guest's kernel over the snapshot's disk, with fresh RAM, up to the agent's
 * hello. The filesystem is the snapshot's (its journal replayed by the mount); no process of the old guest exists.
 */
async function bootFromDisk(source: DiskBootSource, id: string, dir: string, ram: RamFiles, check: () => void): Promise<Restored> {
  let vm: Vm | undefined;
  const memPath = ram.createEmpty(id);
  try {
    vm = await bootVm({
      id,
      dir,
      config: source.config,
      kernelPath: source.boot.kernelPath,
      initrdPath: source.boot.initrdPath,
      append: source.boot.append,
      // Not read: the prepared disk is there already, and bootVm boots it as it is.
      rootfsPath: source.boot.rootfsPath,
      memPath,
    });
    check();
    const agent = await connectAgent(vm, { timeoutMs: bootAgentTimeoutMs(source.config) });
    check();
    return { vm, agent };
  } catch (err) {
    if (vm) {
      vm.kill();
      await vm.exited;
    }
    ram.remove(memPath);
    releaseVmIdentity(id);
    throw err;
  }
}
