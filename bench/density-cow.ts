// Density probe (part of BENCH_ONLY=density): VMs mapping the template's RAM image privately, and a capture of one.
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, readSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { type AgentClient, connectUnixSocket } from '@sandglass/agent-client';
import { connectAgent } from '@sandglass/gateway';
import type { Running } from '@sandglass/server';
import { configureJail, copySparse, createOverlay, prepareVmDir, releaseVmIdentity, restoreVm, resumeVm, type Vm } from '@sandglass/vmm';

const PAGE = 4096;

/** One idle VM of the probe: its QEMU's PSS and RSS, and how much of its RAM mapping it has written (its own pages). */
export interface CowVm {
  pss: number;
  rss: number;
  /** Pages this QEMU alone maps (Private_Clean + Private_Dirty): what PSS tends to as the VMs sharing the rest grow. */
  privateBytes: number;
  cowBytes: number;
  /** Pages of the template image this VM maps (shared with the others). */
  mappedImageBytes: number;
}

export interface CowProbe {
  vms: CowVm[];
  /** Tmpfs bytes of the one template image every probe VM maps. */
  imageBytes: number;
  capture: { pausedMs: number; stateBytes: number; cowBytes: number; intact: boolean; trueExit: number | null };
}

/** `/bin/true` started through the agent and awaited: proof that a guest runs, and its cost. */
export async function agentTrue(agent: AgentClient): Promise<{ ms: number; exitCode: number | null }> {
  const id = `bench_${randomBytes(6).toString('hex')}`;
  let onEvent: ((ev: { event: string; id?: string; exitCode?: number | null }) => void) | undefined;
  const exited = new Promise<number | null>((resolve) => {
    onEvent = (ev) => {
      if (ev.event === 'proc.exit' && ev.id === id) resolve(ev.exitCode ?? null);
    };
    agent.on('event', onEvent as never);
  });
  const t0 = performance.now();
  try {
    await agent.procStart({ id, argv: ['/bin/true'], env: {}, stdin: false });
    const exitCode = await exited;
    return { ms: performance.now() - t0, exitCode };
  } finally {
    agent.off('event', onEvent as never);
    await agent.procForget(id).catch(() => {});
  }
}

/** The smaps block of `path`'s mapping in process `pid`. */
export function smapsOf(pid: number, path: string): string {
  const text = readFileSync(`/proc/${pid}/smaps`, 'utf8');
  const at = text.indexOf(` ${path}\n`);
  if (at < 0) return '';
  const next = text.slice(at + path.length + 2).search(/^[0-9a-f]+-[0-9a-f]+ /m);
  return text.slice(at, next < 0 ? undefined : at + path.length + 2 + next);
}

const kib = (text: string, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;

/** A process's pages no other process maps, from its smaps_rollup text. */
export const privateBytes = (rollup: string) => kib(rollup, 'Private_Clean') + kib(rollup, 'Private_Dirty');

interface ProbeVm {
  vm: Vm;
  agent: AgentClient;
  dir: string;
  disk: string;
}

/** Restores a template-shaped snapshot outside the jail, as restore.ts does, and waits for the agent's hello. */
async function restoreProbe(
  id: string,
  dir: string,
  source: { memPath: string; statePath: string; disk: string; privateRam: boolean },
  config: Vm['config'],
): Promise<ProbeVm> {
  let socket: Socket | undefined;
  const vm = await restoreVm({
    id,
    dir,
    config,
    memPath: source.memPath,
    statePath: source.statePath,
    diskPath: source.disk,
    privateRam: source.privateRam,
    beforeLoad: async (v) => {
      socket = await connectUnixSocket(v.paths.agentSocket, { timeoutMs: 10_000 });
    },
  });
  const agent = await connectAgent(vm, { timeoutMs: 60_000, socket, beforeHello: () => resumeVm(vm) });
  return { vm, agent, dir, disk: source.disk };
}

/**
 * Device state as `migrate-incoming` reads it, from QEMU's RAM-less `xen-save-devices-state` stream: that stream
 * lacks the configuration section (machine type, the x-ignore-shared capability) a migration stream carries after its
 * 8-byte header, so the template's own section goes in there. The template's state came from the same QEMU and
 * machine; its configuration section ends where its first section (RAM's, id string "ram") starts.
 */
export function withConfiguration(deviceState: Buffer, templateState: Buffer): Buffer {
  const QEMU_VM_CONFIGURATION = 0x07;
  const QEMU_VM_SECTION_START = 0x01;
  const ram = templateState.indexOf(Buffer.from('\x03ram', 'latin1'), 8) - 5;
  if (templateState[8] !== QEMU_VM_CONFIGURATION || ram < 9 || templateState[ram] !== QEMU_VM_SECTION_START) {
    throw new Error('the template state has no configuration section followed by the RAM section');
  }
  return Buffer.concat([deviceState.subarray(0, 8), templateState.subarray(8, ram), deviceState.subarray(8)]);
}

/**
 * The pages of `vm`'s private RAM mapping that the guest has written (pagemap: present and not file-backed, or
 * swapped), read from /proc/<qemu>/mem in runs and written at their offsets over `out`, a copy of the image.
 */
function writeOwnPages(vm: Vm, image: string, out: string): number {
  const line = readFileSync(`/proc/${vm.pid}/maps`, 'utf8')
    .split('\n')
    .find((l) => l.endsWith(` ${image}`));
  if (!line) throw new Error(`QEMU ${vm.pid} does not map ${image}`);
  const [lo, hi] = line
    .split(' ')[0]!
    .split('-')
    .map((h) => Number.parseInt(h, 16)) as [number, number];
  const pages = (hi - lo) / PAGE;
  const map = Buffer.alloc(pages * 8);
  const pm = openSync(`/proc/${vm.pid}/pagemap`, 'r');
  try {
    readSync(pm, map, 0, map.length, (lo / PAGE) * 8);
  } finally {
    closeSync(pm);
  }
  const own = (i: number) => {
    const e = map.readBigUInt64LE(i * 8);
    return ((e >> 63n) & 1n && !((e >> 61n) & 1n)) || (e >> 62n) & 1n;
  };
  const mem = openSync(`/proc/${vm.pid}/mem`, 'r');
  const fd = openSync(out, 'r+');
  let ownBytes = 0;
  try {
    const buf = Buffer.alloc(1024 * PAGE);
    for (let i = 0; i < pages; ) {
      if (!own(i)) {
        i++;
        continue;
      }
      let j = i + 1;
      while (j < pages && j - i < 1024 && own(j)) j++;
      const len = (j - i) * PAGE;
      readSync(mem, buf, 0, len, lo + i * PAGE);
      writeSync(fd, buf, 0, len, i * PAGE);
      ownBytes += len;
      i = j;
    }
  } finally {
    closeSync(mem);
    closeSync(fd);
  }
  return ownBytes;
}

/**
 * `n` idle VMs restored from the base template with its tmpfs RAM image mapped privately (QEMU outside the jail:
 * see RestoreSpec.privateRam), measured like the server's sandboxes; then a capture of one of them the way
 * docs/design/density.md proposes (device state without RAM, the guest's own pages by pagemap, the rest from the
 * image), restored into an ordinary VM and checked for an 8 MiB file the guest held in its tmpfs.
 */
export async function cowProbe(running: Running, home: string, n: number): Promise<CowProbe> {
  const t = await running.gateway.ensureBaseTemplate();
  const image = await running.gateway.ram.templateImage(t.key, t.memPath);
  const saved = process.env.SANDGLASS_JAIL;
  process.env.SANDGLASS_JAIL = 'off';
  configureJail({ recordDir: join(home, 'vms') });
  const vms: ProbeVm[] = [];
  const ids: string[] = [];
  const composed = join(running.gateway.ram.root, 'cow-probe-composed.mem');
  try {
    for (let i = 0; i < n; i++) {
      const id = `cowprobe${i}${randomBytes(3).toString('hex')}`;
      ids.push(id);
      const dir = join(home, 'run', id);
      const disk = prepareVmDir(dir, id).disk;
      await createOverlay(disk, t.diskPath, 'qcow2', id);
      vms.push(await restoreProbe(id, dir, { memPath: image, statePath: t.statePath, disk, privateRam: true }, t.config));
      for (let k = 0; k < 3; k++) await agentTrue(vms[i]!.agent);
    }
    await new Promise((r) => setTimeout(r, 3000));
    const out: CowProbe = { vms: [], imageBytes: 0, capture: { pausedMs: 0, stateBytes: 0, cowBytes: 0, intact: false, trueExit: null } };
    out.imageBytes = statSync(image).blocks * 512;
    for (const p of vms) {
      const roll = readFileSync(`/proc/${p.vm.pid}/smaps_rollup`, 'utf8');
      const ram = smapsOf(p.vm.pid, image);
      out.vms.push({
        pss: kib(roll, 'Pss'),
        rss: kib(roll, 'Rss'),
        privateBytes: privateBytes(roll),
        cowBytes: kib(ram, 'Anonymous'),
        mappedImageBytes: kib(ram, 'Rss') - kib(ram, 'Anonymous'),
      });
    }

    // The capture: a copy of the image made while the guest runs (the image never changes), then, stopped, the
    // device state and the guest's own pages over it.
    const src = vms[0]!;
    const data = randomBytes(8 * 1024 * 1024);
    await src.agent.writeFile('/dev/shm/cow-probe', data);
    await copySparse(image, composed);
    const qmp = src.vm.requireQmp();
    const stateRaw = join(src.dir, 'devices.state');
    const t0 = performance.now();
    await qmp.execute('stop');
    await qmp.execute('xen-save-devices-state', { filename: stateRaw, live: false });
    out.capture.cowBytes = writeOwnPages(src.vm, image, composed);
    out.capture.pausedMs = performance.now() - t0;
    src.vm.kill();
    await src.vm.exited;
    vms.shift();
    const state = withConfiguration(readFileSync(stateRaw), readFileSync(t.statePath));
    out.capture.stateBytes = state.length;
    const statePath = join(src.dir, 'spliced.state');
    writeFileSync(statePath, state);
    const id = `cowprobe-r${randomBytes(3).toString('hex')}`;
    ids.push(id);
    const back = await restoreProbe(id, join(home, 'run', id), { memPath: composed, statePath, disk: src.disk, privateRam: false }, t.config);
    vms.push(back);
    const read = await back.agent.readFileCapped('/dev/shm/cow-probe', 16 * 1024 * 1024);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    out.capture.intact = sha(read) === sha(data);
    out.capture.trueExit = (await agentTrue(back.agent)).exitCode;
    return out;
  } finally {
    for (const p of vms) {
      p.vm.kill();
      await p.vm.exited;
    }
    for (const id of ids) {
      rmSync(join(home, 'run', id), { recursive: true, force: true });
      releaseVmIdentity(id);
    }
    rmSync(composed, { force: true });
    saved === undefined ? delete process.env.SANDGLASS_JAIL : (process.env.SANDGLASS_JAIL = saved);
    configureJail({ recordDir: join(home, 'vms') });
  }
}
