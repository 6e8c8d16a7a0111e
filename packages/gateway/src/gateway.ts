// The node gateway: runs sandbox VMs restored from templates and serves their data plane (commands, files, PTYs).
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { totalmem } from 'node:os';
import { SandglassError, type Clock, type HomeLayout, type Logger } from '@sandglass/core';
import { detectAccel, type Accel } from '@sandglass/vmm';
import type { GuestImage } from '@sandglass/images';
import { Sandbox, sandboxDir, type HealthPolicy } from './sandbox.js';
import { TemplateStore, vmConfig, type TemplateProgress, type TemplateSnapshot } from './templates.js';
import { WarmPool } from './pool.js';
import type { GatewayEvents } from './events.js';

export const DEFAULT_WARM_POOL = 2;

function killStaleVms(runDir: string, log: Logger): void {
  const marker = `path=${runDir}/`;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return;
  }
  for (const pid of pids) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (!cmdline.startsWith('qemu-system') || !cmdline.includes(marker)) continue;
    try {
      process.kill(Number(pid), 'SIGKILL');
      log.warn({ pid: Number(pid) }, 'killed a VM left running by a previous gateway');
    } catch {
      // Gone already, or not ours to kill.
    }
  }
}

export interface GatewayOptions {
  home: HomeLayout;
  image: GuestImage;
  kernelArgs: string;
  events: GatewayEvents;
  /** Shared with the control plane: verifies data-plane tokens and authenticates the internal API. */
  nodeSecret: Buffer;
  clock: Clock;
  logger: Logger;
  accel?: Accel;
  /** Host memory the node may give to guests; default 75% of the host's RAM. */
  guestMemoryBudgetMib?: number;
  /** How a hung VM is told from a slow one. */
  health?: HealthPolicy;
  /** Restores of the base template kept running and warmed for instant creates; 0 turns the pool off. */
  warmPoolSize?: number;
}

export interface CreateSandboxRequest {
  id: string;
  tenantId: string;
  template: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
}

/** The templates this node knows by name; each is the guest image booted with the request's VM shape. */
export const BASE_TEMPLATE = { name: 'base', memoryMib: 256, vcpus: 1 } as const;

export class Gateway {
  readonly sandboxes = new Map<string, Sandbox>();
  readonly templates: TemplateStore;
  readonly accel: Accel;
  private readonly budgetMib: number;
  private baseStatus: { status: 'building' | 'ready' | 'failed'; key?: string; error?: string } = { status: 'building' };
  private pool?: WarmPool;

  constructor(readonly opts: GatewayOptions) {
    this.accel = opts.accel ?? detectAccel();
    this.templates = new TemplateStore(opts.home.artifacts, opts.image, opts.kernelArgs, opts.logger);
    this.budgetMib = opts.guestMemoryBudgetMib ?? Math.floor((totalmem() / 1024 / 1024) * 0.75);
    this.cleanStaleRunDirs();
  }

  /**
   * A previous gateway that was killed outright leaves its QEMU processes running (children outlive their parent):
   * stop every QEMU whose files live in our run directory, then drop the directories.
   */
  private cleanStaleRunDirs(): void {
    killStaleVms(this.opts.home.run, this.opts.logger);
    try {
      for (const name of readdirSync(this.opts.home.run)) rmSync(sandboxDir(this.opts.home.run, name), { recursive: true, force: true });
    } catch {
      // No run directory yet.
    }
  }

  async ensureBaseTemplate(onProgress?: (p: TemplateProgress) => void): Promise<TemplateSnapshot> {
    try {
      const t = await this.templates.ensure(BASE_TEMPLATE.name, vmConfig(BASE_TEMPLATE.memoryMib, BASE_TEMPLATE.vcpus, this.accel), onProgress);
      this.baseStatus = { status: 'ready', key: t.key };
      this.pool ??= new WarmPool(t, this.opts.warmPoolSize ?? DEFAULT_WARM_POOL, (id) => sandboxDir(this.opts.home.run, id), this.opts.logger);
      this.pool.refill();
      return t;
    } catch (err) {
      this.baseStatus = { status: 'failed', error: (err as Error).message };
      throw err;
    }
  }

  listTemplates(): Array<{ name: string; status: 'ready' | 'building' | 'failed'; key?: string; memoryMib: number; vcpus: number; error?: string }> {
    return [{ name: BASE_TEMPLATE.name, memoryMib: BASE_TEMPLATE.memoryMib, vcpus: BASE_TEMPLATE.vcpus, ...this.baseStatus }];
  }

  private committedMib(): number {
    let sum = 0;
    for (const s of this.sandboxes.values()) sum += s.template.config.memoryMib;
    return sum + this.warmAvailable * BASE_TEMPLATE.memoryMib;
  }

  async createSandbox(req: CreateSandboxRequest): Promise<Sandbox> {
    if (req.template !== BASE_TEMPLATE.name) {
      throw new SandglassError('template_not_found', `No template named ${JSON.stringify(req.template)} on this node.`, { details: { field: 'template' } });
    }
    if (this.baseStatus.status !== 'ready') {
      throw new SandglassError('template_not_ready', `Template ${req.template} is ${this.baseStatus.status}.`);
    }
    if (this.sandboxes.has(req.id)) throw new SandglassError('conflict', `Sandbox ${req.id} already exists on this node.`);
    if (this.committedMib() + req.memoryMib > this.budgetMib) {
      throw new SandglassError('capacity_exhausted', `This node has ${this.budgetMib - this.committedMib()} MiB of guest memory left; ${req.memoryMib} MiB asked.`);
    }
    // A VM shape other than the template's own is its own template snapshot, booted once and then reused.
    const template = await this.templates.ensure(req.template, vmConfig(req.memoryMib, req.vcpus, this.accel));
    const warm = this.baseStatus.key === template.key ? this.pool?.take() : undefined;
    const sbx = new Sandbox(
      req.id,
      req.tenantId,
      template,
      warm?.dir ?? sandboxDir(this.opts.home.run, req.id),
      req.timeoutS,
      this.opts.events,
      this.opts.clock,
      this.opts.logger,
      (s) => this.sandboxes.delete(s.id),
      this.opts.health,
    );
    this.sandboxes.set(req.id, sbx);
    const { restoreMs, pooled } = await sbx.start(warm);
    await this.opts.events.append({
      type: 'sandbox.started',
      tenantId: req.tenantId,
      sandboxId: req.id,
      // vmId names the QEMU process (`-name sandglass-<vmId>`): the sandbox id, or the warm-pool entry it came from.
      data: { pid: sbx.pid ?? null, vmId: warm?.id ?? req.id, restoreMs: Math.round(restoreMs * 10) / 10, pooled, template: template.key, accel: this.accel },
    });
    return sbx;
  }

  /** Warmed restores ready to hand out. */
  get warmAvailable(): number {
    return this.pool?.available ?? 0;
  }

  get(id: string): Sandbox {
    const sbx = this.sandboxes.get(id);
    if (!sbx) throw new SandglassError('sandbox_not_found', `No sandbox ${id} is running on this node.`, { details: { field: 'id' } });
    return sbx;
  }

  async killSandbox(id: string): Promise<void> {
    const sbx = this.sandboxes.get(id);
    if (sbx) await sbx.end('killed');
  }

  /** Stops every VM cleanly and records why. */
  async shutdown(): Promise<void> {
    await this.pool?.close();
    await Promise.all([...this.sandboxes.values()].map((s) => s.end('shutdown')));
  }
}
