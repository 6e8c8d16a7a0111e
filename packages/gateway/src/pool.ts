// A small pool of template restores kept running and warmed, so a create is a hand-over instead of a restore.
import { randomBytes } from 'node:crypto';
import type { Clock, Logger } from '@sandglass/core';
import { runToExit } from './agent-link.js';
import { restoreSnapshot, type Restored, type RestoreSource } from './restore.js';
import { templateSource, type TemplateSnapshot } from './templates.js';
import type { RamFiles } from './ram.js';
import type { PreparedRestore } from './snapshots.js';
import { wipePath } from './revocation.js';

export interface Warm extends Restored {
  id: string;
  dir: string;
  template: TemplateSnapshot;
  /** A tenant template's pool: the snapshot restored into `dir`, which the sandbox it goes to adopts. */
  prepared?: PreparedRestore;
}

/**
 * What a pool restores: its template (the base pool), or a tenant snapshot written into the entry's run directory
 * first, exactly as a fork's restore writes it (`prepare`), with `admit` asked before each entry (memory budget, key).
 * `vms` starts and stops the entries' VMs: QEMU restores, unless a unit test of the pool's bookkeeping gives a double.
 */
export interface PoolSource {
  prepare?: (dir: string) => Promise<PreparedRestore>;
  admit?: () => Promise<boolean>;
  vms?: PoolVms;
}

/** How a pool's entries come to life and go: restored and warmed; stopped; their files emptied. */
export interface PoolVms {
  /** A VM restored into `dir` and warmed up; `check` throws once the pool is closed, ending the restore early. */
  start(id: string, dir: string, template: TemplateSnapshot, prepare: PoolSource['prepare'], check: () => void): Promise<Warm>;
  stop(w: Warm): Promise<void>;
  /** Empties the entry's run directory and RAM file (a tenant pool's files are the tenant's plaintext). */
  wipe(w: Warm): void;
}

/** The pool's VMs as QEMU restores: a template's or a prepared snapshot's, then WARMUP run in the guest. */
export function qemuPoolVms(ram: RamFiles): PoolVms {
  const wipe = (w: Warm) => {
    wipePath(w.dir);
    wipePath(w.vm.memPath);
    ram.remove(w.vm.memPath);
  };
  return {
    async start(id, dir, template, prepare, check) {
      const prepared = prepare ? await prepare(dir) : undefined;
      const source: RestoreSource = prepared ? prepared.source : await templateSource(template, ram);
      const r = await restoreSnapshot(source, id, dir, ram, check);
      for (const argv of WARMUP) await runToExit(r.agent, argv, { timeoutMs: 60_000 });
      return { ...r, id, dir, template, ...(prepared ? { prepared } : {}) };
    },
    async stop(w) {
      await w.agent.close();
      await w.vm.stop(1000);
      wipe(w);
    },
    wipe,
  };
}

// Under TCG a fresh QEMU has an empty translation cache: the first process a guest starts costs ~0.3 s and the
// first shell more. Running them once here moves that cost off the create path.
const WARMUP: string[][] = [['/bin/true'], ['/bin/bash', '-c', 'true']];
const REFILL_DELAY_MS = 1000;

/**
 * Keeps `size` restored VMs of one template ready. A pooled VM has never belonged to a tenant; it is handed out
 * at most once and never returned. Hand-out re-seeds entropy and sets the clock (the caller's `sync`), exactly as
 * a direct restore does. Refills run one at a time so a burst of creates is not slowed by its own refill.
 */
export class WarmPool {
  private readonly ready: Warm[] = [];
  private filling = false;
  private fillLoop?: Promise<void>;
  private closed = false;
  private failures = 0;
  private readonly vms: PoolVms;

  constructor(
    private readonly template: TemplateSnapshot,
    private size: number,
    private readonly runDir: (id: string) => string,
    ram: RamFiles,
    private readonly log: Logger,
    private readonly clock: Clock,
    private readonly from: PoolSource = {},
  ) {
    this.vms = from.vms ?? qemuPoolVms(ram);
  }

  /** Entries warmed or warming, for what the node's memory admission counts. */
  get held(): number {
    return this.ready.length + (this.filling ? 1 : 0);
  }

  /** Every path of the pool's entries: their run directories and guest RAM files. */
  paths(): string[] {
    return this.ready.flatMap((w) => [w.dir, w.vm.memPath]);
  }

  get available(): number {
    return this.ready.length;
  }

  /** A warmed VM, or undefined when the pool is empty (the caller restores directly). */
  take(): Warm | undefined {
    const w = this.ready.shift();
    // Refill a moment later: the sandbox just handed out runs its first commands without a restore competing for CPU.
    this.clock.setTimeout(() => this.refill(), REFILL_DELAY_MS);
    return w;
  }

  /** A new size: entries past it are discarded now, missing ones restored in the background. */
  async resize(size: number): Promise<void> {
    this.size = size;
    await Promise.all(this.ready.splice(size).map((w) => this.discard(w)));
    this.failures = 0;
    this.refill();
  }

  /** Stops a VM taken from this pool but not handed out after all (its create was refused): nobody else gets it. */
  async drop(w: Warm): Promise<void> {
    await this.discard(w);
  }

  refill(): void {
    if (this.filling || this.closed || this.size === 0) return;
    this.filling = true;
    this.fillLoop = (async () => {
      while (!this.closed && this.ready.length < this.size && this.failures < 3) {
        try {
          if (this.from.admit && !(await this.from.admit())) break;
          this.ready.push(await this.warmOne());
          this.failures = 0;
        } catch (err) {
          this.failures++;
          this.log.warn({ err: (err as Error).message }, 'warm pool: restore failed');
        }
      }
      this.filling = false;
    })();
  }

  private async warmOne(): Promise<Warm> {
    const id = `pool_${randomBytes(8).toString('hex')}`;
    const dir = this.runDir(id);
    try {
      const w = await this.vms.start(id, dir, this.template, this.from.prepare, () => {
        if (this.closed) throw new Error('pool closed while warming');
      });
      // A pooled VM that dies is simply dropped; nobody owns it yet.
      void w.vm.exited.then(() => {
        const i = this.ready.indexOf(w);
        if (i >= 0) {
          this.ready.splice(i, 1);
          this.vms.wipe(w);
          this.refill();
        }
      });
      if (this.closed) {
        await this.discard(w);
        throw new Error('pool closed while warming');
      }
      return w;
    } catch (err) {
      wipePath(dir);
      throw err;
    }
  }

  // Emptied, not only unlinked: a tenant pool's files are the tenant's plaintext (a revocation drains through here).
  private async discard(w: Warm): Promise<void> {
    await this.vms.stop(w);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.ready.splice(0).map((w) => this.discard(w)));
    // A restore in flight finishes, sees the pool closed and discards itself; never leave its QEMU behind.
    await this.fillLoop;
  }
}
