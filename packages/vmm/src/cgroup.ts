// Per-VM cgroups with memory and CPU limits, on cgroup v2 or the v1 memory/cpu hierarchies, whichever the host has.
import { existsSync, mkdirSync, rmdirSync, writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface CgroupLimits {
  memoryBytes: number;
  /** CPU time allowed per period, as a number of CPUs (1 = one full core). */
  cpus: number;
}

export interface Cgroup {
  readonly kind: 'v1' | 'v2' | 'none';
  readonly reason?: string;
  /** The directories whose cgroup.procs a process joins (one on v2, one per controller on v1). */
  readonly dirs: string[];
  addProcess(pid: number): void;
  /** Peak memory use seen by the cgroup, where the kernel reports it. */
  memoryPeakBytes(): number | undefined;
  remove(): void;
}

const ROOT = '/sys/fs/cgroup';
const PERIOD_US = 100_000;

function write(path: string, value: string): void {
  writeFileSync(path, value);
}

class V2 implements Cgroup {
  readonly kind = 'v2';
  constructor(private readonly dir: string) {}
  get dirs(): string[] {
    return [this.dir];
  }
  addProcess(pid: number): void {
    write(join(this.dir, 'cgroup.procs'), String(pid));
  }
  memoryPeakBytes(): number | undefined {
    const f = join(this.dir, 'memory.peak');
    return existsSync(f) ? Number(readFileSync(f, 'utf8')) : undefined;
  }
  remove(): void {
    rmdirQuiet(this.dir);
  }
}

class V1 implements Cgroup {
  readonly kind = 'v1';
  constructor(readonly dirs: string[]) {}
  addProcess(pid: number): void {
    for (const d of this.dirs) write(join(d, 'cgroup.procs'), String(pid));
  }
  memoryPeakBytes(): number | undefined {
    const f = join(this.dirs[0]!, 'memory.max_usage_in_bytes');
    return existsSync(f) ? Number(readFileSync(f, 'utf8')) : undefined;
  }
  remove(): void {
    for (const d of this.dirs) rmdirQuiet(d);
  }
}

class None implements Cgroup {
  readonly kind = 'none';
  readonly dirs: string[] = [];
  constructor(readonly reason: string) {}
  addProcess(): void {}
  memoryPeakBytes(): undefined {
    return undefined;
  }
  remove(): void {}
}

function rmdirQuiet(dir: string): void {
  // The kernel refuses while the last process is still exiting; a few retries cover that window.
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      const until = Date.now() + 10;
      while (Date.now() < until);
    }
  }
}

/** No limits at all: only for SANDGLASS_CGROUPS=off (development), which says so at start. */
export function noCgroup(reason: string): Cgroup {
  return new None(reason);
}

/** Creates `sandglass/<name>` with the limits; returns a no-op cgroup (with the reason) where the host gives us none. */
export function createCgroup(name: string, limits: CgroupLimits): Cgroup {
  try {
    if (existsSync(join(ROOT, 'cgroup.controllers'))) {
      const parent = join(ROOT, 'sandglass');
      mkdirSync(parent, { recursive: true });
      const wanted = ['memory', 'cpu'].filter((c) => readFileSync(join(ROOT, 'cgroup.controllers'), 'utf8').split(/\s+/).includes(c));
      write(join(ROOT, 'cgroup.subtree_control'), wanted.map((c) => `+${c}`).join(' '));
      write(join(parent, 'cgroup.subtree_control'), wanted.map((c) => `+${c}`).join(' '));
      const dir = join(parent, name);
      mkdirSync(dir);
      write(join(dir, 'memory.max'), String(limits.memoryBytes));
      write(join(dir, 'memory.swap.max'), '0');
      write(join(dir, 'cpu.max'), `${Math.round(limits.cpus * PERIOD_US)} ${PERIOD_US}`);
      return new V2(dir);
    }
    if (existsSync(join(ROOT, 'memory')) && existsSync(join(ROOT, 'cpu'))) {
      const mem = join(ROOT, 'memory', 'sandglass', name);
      const cpu = join(ROOT, 'cpu', 'sandglass', name);
      mkdirSync(mem, { recursive: true });
      mkdirSync(cpu, { recursive: true });
      write(join(mem, 'memory.limit_in_bytes'), String(limits.memoryBytes));
      write(join(cpu, 'cpu.cfs_period_us'), String(PERIOD_US));
      write(join(cpu, 'cpu.cfs_quota_us'), String(Math.round(limits.cpus * PERIOD_US)));
      return new V1([mem, cpu]);
    }
    return new None('no cgroup v2 or v1 memory+cpu hierarchy mounted');
  } catch (err) {
    return new None(`cgroups unavailable: ${(err as Error).message}`);
  }
}
