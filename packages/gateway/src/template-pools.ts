// Warm pools of tenant template versions: VMs restored from a version's snapshot, bound to no sandbox, for its creates.
import { SandglassError, type Clock, type Logger } from '@sandglass/core';
import { WarmPool, type PoolVms, type Warm } from './pool.js';
import type { PreparedRestore } from './snapshots.js';
import type { ManifestBody } from '@sandglass/snapshots';
import type { RamFiles } from './ram.js';
import type { TemplateSnapshot } from './templates.js';

/** The most VMs one template's pool may hold on a node (the node's memory budget may allow fewer). */
export const MAX_TEMPLATE_POOL = 8;

export interface TemplatePoolView {
  tenantId: string;
  name: string;
  snapshotId: string | null;
  size: number;
  available: number;
}

export interface TemplatePoolsDeps {
  /** The snapshot's manifest, read under the tenant's key: a snapshot of another tenant is not found. */
  manifest: (tenantId: string, snapshotId: string) => Promise<ManifestBody>;
  template: (m: ManifestBody) => Promise<TemplateSnapshot>;
  /** Writes the snapshot into a run directory exactly as a fork's restore does. */
  prepare: (m: ManifestBody, dir: string, template: TemplateSnapshot) => Promise<PreparedRestore>;
  /** Every boot asks: a tenant whose key is revoked or unreachable gets no pooled VM either. */
  requireKey: (tenantId: string) => Promise<void>;
  /** Whether the node's guest memory admits one more VM of this size (the entry being warmed already counted). */
  room: () => boolean;
  runDir: (id: string) => string;
  ram: RamFiles;
  logger: Logger;
  clock: Clock;
  /** The entries' VMs; QEMU restores unless a unit test gives a double. */
  vms?: PoolVms;
}

interface Entry {
  tenantId: string;
  name: string;
  snapshotId: string;
  memoryMib: number;
  size: number;
  pool: WarmPool;
}

/**
 * One pool per (tenant, template name), holding restores of the version the control plane named last. A pooled VM
 * holds the tenant's decrypted memory and disk: it is handed only to a fork of the same snapshot stored under the same
 * tenant (its own create, or another tenant's create from the template it published for every tenant), taken at most
 * once (WarmPool.take removes it), and every path of it is wiped when the pool drains (a new version, size 0, the
 * tenant's key revoked).
 */
export class TemplatePools {
  readonly #entries = new Map<string, Entry>();
  #closed = false;

  constructor(private readonly deps: TemplatePoolsDeps) {}

  async set(req: { tenantId: string; name: string; snapshotId?: string; size: number }): Promise<TemplatePoolView> {
    if (!Number.isInteger(req.size) || req.size < 0 || req.size > MAX_TEMPLATE_POOL) {
      throw new SandglassError('invalid_argument', `size must be an integer from 0 to ${MAX_TEMPLATE_POOL}.`, { details: { field: 'size' } });
    }
    const key = `${req.tenantId}\u0000${req.name}`;
    const old = this.#entries.get(key);
    if (req.size === 0) {
      if (old) await this.#drain(key, old);
      return { tenantId: req.tenantId, name: req.name, snapshotId: null, size: 0, available: 0 };
    }
    if (req.snapshotId === undefined) {
      throw new SandglassError('invalid_argument', 'snapshotId is required for a pool of a size above 0.', { details: { field: 'snapshotId' } });
    }
    if (this.#closed) throw new SandglassError('gateway_unavailable', 'This node is shutting down.');
    await this.deps.requireKey(req.tenantId);
    if (old && old.snapshotId === req.snapshotId) {
      old.size = req.size;
      await old.pool.resize(req.size);
      return view(old);
    }
    const m = await this.deps.manifest(req.tenantId, req.snapshotId);
    const template = await this.deps.template(m);
    // A new version replaces the old one's pool: its VMs hold the old snapshot and no create will ask for them again.
    if (old) await this.#drain(key, old);
    const { deps } = this;
    const pool = new WarmPool(template, req.size, deps.runDir, deps.ram, deps.logger, deps.clock, {
      prepare: (dir) => deps.prepare(m, dir, template),
      admit: async () => {
        await deps.requireKey(req.tenantId);
        return deps.room();
      },
      ...(deps.vms ? { vms: deps.vms } : {}),
    });
    const entry: Entry = { tenantId: req.tenantId, name: req.name, snapshotId: req.snapshotId, memoryMib: m.vm.memoryMib, size: req.size, pool };
    this.#entries.set(key, entry);
    pool.refill();
    return view(entry);
  }

  /** A warmed VM of this tenant's snapshot, removed from its pool (refilled later), or undefined. */
  take(tenantId: string, snapshotId: string): { warm: Warm; drop: () => Promise<void> } | undefined {
    for (const e of this.#entries.values()) {
      if (e.tenantId !== tenantId || e.snapshotId !== snapshotId) continue;
      const warm = e.pool.take();
      if (warm) return { warm, drop: () => e.pool.drop(warm) };
    }
    return undefined;
  }

  list(): TemplatePoolView[] {
    return [...this.#entries.values()].map(view);
  }

  /** Guest memory the pools hold (entries warmed and being warmed). */
  committedMib(): number {
    let sum = 0;
    for (const e of this.#entries.values()) sum += e.pool.held * e.memoryMib;
    return sum;
  }

  tenants(): string[] {
    return [...new Set([...this.#entries.values()].map((e) => e.tenantId))];
  }

  /** The run directories and RAM files of the tenant's pooled VMs (its plaintext on this node). */
  paths(tenantId: string): string[] {
    return [...this.#entries.values()].filter((e) => e.tenantId === tenantId).flatMap((e) => e.pool.paths());
  }

  /** Stops and wipes every pooled VM of the tenant, waiting out restores in flight; the pools are forgotten. */
  async drainTenant(tenantId: string): Promise<void> {
    await Promise.all([...this.#entries].filter(([, e]) => e.tenantId === tenantId).map(([k, e]) => this.#drain(k, e)));
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#entries].map(([k, e]) => this.#drain(k, e)));
  }

  async #drain(key: string, e: Entry): Promise<void> {
    if (this.#entries.get(key) === e) this.#entries.delete(key);
    await e.pool.close();
  }
}

function view(e: Entry): TemplatePoolView {
  return { tenantId: e.tenantId, name: e.name, snapshotId: e.snapshotId, size: e.size, available: e.pool.available };
}
