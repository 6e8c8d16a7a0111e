// `sandglass doctor`: what this host offers a VMM (KVM and the probe's verdict, cgroups, namespaces, QEMU, memory) and what Sandglass will use.
import { existsSync, readFileSync, readdirSync, statSync, statfsSync } from 'node:fs';
import { freemem, totalmem } from 'node:os';
import { homeLayout } from '@sandglass/core';
import { defaultKernelArgs, ensureGuestImage } from '@sandglass/images';
import { accelWithoutProbe, cachedAccel, probeCacheKey, qemuVersion, type AccelChoice } from '@sandglass/vmm';
import { hostSizes, type NodeSizes } from '@sandglass/gateway';
import { accelCacheFile, nodeAccel } from './accel.js';
import { progressPrinter } from './progress.js';

export interface DoctorReport {
  kvm: { device: string; present: boolean; mode?: string; owner?: string };
  accel: AccelChoice | { accel: 'unknown'; reason: string };
  cgroups: { version: 'v2' | 'v1' | 'none'; controllers: string[] };
  namespaces: string[];
  qemu: string;
  memory: { totalBytes: number; availableBytes: number };
  shm: { path: string; freeBytes?: number; totalBytes?: number };
  /** The sandbox sizes a node on this host serves (SANDGLASS_MEMORY_SIZES_MIB / SANDGLASS_VCPU_COUNTS, its budget, its cores). */
  sizes: NodeSizes;
}

function kvmDevice(path = '/dev/kvm'): DoctorReport['kvm'] {
  try {
    const st = statSync(path);
    return { device: path, present: true, mode: (st.mode & 0o7777).toString(8).padStart(4, '0'), owner: `${st.uid}:${st.gid}` };
  } catch {
    return { device: path, present: false };
  }
}

function cgroups(root = '/sys/fs/cgroup'): DoctorReport['cgroups'] {
  try {
    if (existsSync(`${root}/cgroup.controllers`)) {
      return { version: 'v2', controllers: readFileSync(`${root}/cgroup.controllers`, 'utf8').trim().split(/\s+/).filter(Boolean) };
    }
    const v1 = readFileSync('/proc/cgroups', 'utf8')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => l.split('\t'))
      .filter((f) => f[3] === '1' && existsSync(`${root}/${f[0]}`))
      .map((f) => f[0]!);
    return v1.length ? { version: 'v1', controllers: v1 } : { version: 'none', controllers: [] };
  } catch {
    return { version: 'none', controllers: [] };
  }
}

function memAvailable(): number {
  const m = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'));
  return m ? Number(m[1]) * 1024 : freemem();
}

function shm(path = '/dev/shm'): DoctorReport['shm'] {
  try {
    const s = statfsSync(path);
    return { path, freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize };
  } catch {
    return { path };
  }
}

/**
 * Gathers the report. `probe` runs the accelerator probe when no verdict is cached (it needs the guest image, which
 * is built first if missing); without it an uncached verdict is reported as unknown.
 */
export async function doctor(opts: { home?: string; probe?: boolean } = {}): Promise<DoctorReport> {
  const layout = homeLayout(opts.home);
  const qemu = qemuVersion();
  let accel: DoctorReport['accel'];
  if (opts.probe) {
    const progress = progressPrinter(process.stderr);
    const image = await ensureGuestImage({ home: layout.root, onProgress: (p) => progress.update(p) });
    progress.finish();
    accel = await nodeAccel(layout, image, defaultKernelArgs().join(' '));
  } else {
    // What the node would choose without a probe (a setting, no /dev/kvm), else its cached verdict.
    try {
      accel = accelWithoutProbe(process.env.SANDGLASS_ACCEL) ??
        cachedAccel(accelCacheFile(layout), probeCacheKey(qemu)) ?? {
          accel: 'unknown',
          reason: 'no verdict cached for this host boot and QEMU version: run `sandglass doctor` without --no-probe',
        };
    } catch (err) {
      accel = { accel: 'unknown', reason: (err as Error).message };
    }
  }
  return {
    kvm: kvmDevice(),
    accel,
    cgroups: cgroups(),
    namespaces: existsSync('/proc/self/ns') ? readdirSync('/proc/self/ns').sort() : [],
    qemu,
    memory: { totalBytes: totalmem(), availableBytes: memAvailable() },
    shm: shm(),
    sizes: hostSizes(),
  };
}

const mib = (n?: number) => (n === undefined ? '?' : `${Math.round(n / 1024 / 1024)} MiB`);

export function formatDoctor(r: DoctorReport): string {
  const a = r.accel;
  const lines = [
    ['KVM device', r.kvm.present ? `${r.kvm.device} (mode ${r.kvm.mode}, owner ${r.kvm.owner})` : `${r.kvm.device} absent`],
    ['KVM probe', 'attempts' in a && a.attempts.length ? a.attempts.map((t) => `-cpu ${t.cpu}: ${t.ok ? `ok in ${t.ms} ms` : t.error}`).join('; ') : 'not run'],
    ['cgroups', `${r.cgroups.version}${r.cgroups.controllers.length ? ` (${r.cgroups.controllers.join(' ')})` : ''}`],
    ['namespaces', r.namespaces.join(' ') || 'none'],
    ['QEMU', r.qemu],
    ['memory', `${mib(r.memory.availableBytes)} available of ${mib(r.memory.totalBytes)}`],
    ['/dev/shm', `${mib(r.shm.freeBytes)} free of ${mib(r.shm.totalBytes)}`],
    ['sizes', `memoryMib ${r.sizes.memoryMib.join(', ')}; vcpus ${r.sizes.vcpus.join(', ')}`],
    ['will use', a.accel === 'unknown' ? `unknown: ${a.reason}` : `${a.accel} with -cpu ${a.cpu}: ${a.reason}`],
  ];
  const w = Math.max(...lines.map(([k]) => k!.length));
  return lines.map(([k, v]) => `${k!.padEnd(w)}  ${v}`).join('\n') + '\n';
}
