// The template pools' bookkeeping, with the VMs replaced by a double: who may take an entry, when pools fill, shrink
// and drain, and that nothing is left running. The QEMU side is tests/template-pool.test.ts (real VMs).
import { describe, expect, it, vi } from 'vitest';
import { createLogger, ManualClock, SandglassError } from '@sandglass/core';
import type { AgentClient } from '@sandglass/agent-client';
import type { ManifestBody } from '@sandglass/snapshots';
import type { Vm } from '@sandglass/vmm';
import type { PoolVms, Warm } from './pool.js';
import type { RamFiles } from './ram.js';
import type { PreparedRestore } from './snapshots.js';
import { MAX_TEMPLATE_POOL, TemplatePools } from './template-pools.js';
import type { TemplateSnapshot } from './templates.js';

/** VMs that start at once (or when `hold` is released), record what happened to them, and can be made to fail or die. */
class VmsDouble implements PoolVms {
  readonly running = new Set<string>();
  readonly wiped: string[] = [];
  readonly prepared: string[] = [];
  failNext = 0;
  hold?: Promise<void>;
  readonly #exit = new Map<string, () => void>();

  async start(id: string, dir: string, template: TemplateSnapshot, prepare: ((dir: string) => Promise<PreparedRestore>) | undefined, check: () => void) {
    if (prepare) await prepare(dir);
    await this.hold;
    check();
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('restore failed');
    }
    const exited = new Promise<void>((resolve) => this.#exit.set(id, resolve));
    this.running.add(id);
    const vm = { memPath: `${dir}.ram`, exited } as unknown as Vm;
    return { id, dir, template, vm, agent: {} as AgentClient } satisfies Warm;
  }

  async stop(w: Warm): Promise<void> {
    this.running.delete(w.id);
    this.wipe(w);
  }

  wipe(w: Warm): void {
    this.wiped.push(w.id);
  }

  /** The VM dies on its own (QEMU crashed, the OOM killer). */
  die(id: string): void {
    this.running.delete(id);
    this.#exit.get(id)?.();
  }
}

function setup(opts: { room?: () => boolean; requireKey?: (tenantId: string) => Promise<void> } = {}) {
  const vms = new VmsDouble();
  const clock = new ManualClock(0);
  const manifests: Array<[string, string]> = [];
  const pools = new TemplatePools({
    manifest: async (tenantId, snapshotId) => {
      manifests.push([tenantId, snapshotId]);
      return { vm: { memoryMib: 256 } } as unknown as ManifestBody;
    },
    template: async () => ({ key: 'tpl-key', name: 'base' }) as unknown as TemplateSnapshot,
    prepare: async (_m, dir) => {
      vms.prepared.push(dir);
      return {} as PreparedRestore;
    },
    requireKey: opts.requireKey ?? (async () => {}),
    room: opts.room ?? (() => true),
    runDir: (id) => `/run/${id}`,
    ram: {} as RamFiles,
    logger: createLogger('test'),
    clock,
    vms,
  });
  return { pools, vms, clock, manifests };
}

const codeOf = async (p: Promise<unknown>) => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SandglassError);
  return { code: (err as SandglassError).code, field: (err as SandglassError).details?.field };
};

const filled = (pools: TemplatePools, name: string, n: number) => vi.waitFor(() => expect(pools.list().find((p) => p.name === name)?.available).toBe(n));

describe('TemplatePools', () => {
  it('refuses a size outside 0..MAX or a pool without its snapshot, naming the field, and starts nothing', async () => {
    const { pools, vms, manifests } = setup();
    for (const size of [-1, MAX_TEMPLATE_POOL + 1, 1.5, Number.NaN]) {
      expect(await codeOf(pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size }))).toEqual({ code: 'invalid_argument', field: 'size' });
    }
    expect(await codeOf(pools.set({ tenantId: 't1', name: 'web', size: 2 }))).toEqual({ code: 'invalid_argument', field: 'snapshotId' });
    expect(pools.list()).toEqual([]);
    expect(manifests).toEqual([]);
    expect(vms.running.size).toBe(0);
  });

  it('hands an entry only to its own tenant and snapshot, once, and refills after the delay', async () => {
    const { pools, vms, clock } = setup();
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 2 });
    await filled(pools, 'web', 2);
    expect(vms.prepared).toHaveLength(2);
    expect(pools.committedMib()).toBe(512);

    expect(pools.take('t2', 'snap_a')).toBeUndefined();
    expect(pools.take('t1', 'snap_b')).toBeUndefined();
    const first = pools.take('t1', 'snap_a');
    const second = pools.take('t1', 'snap_a');
    expect(first && second).toBeTruthy();
    expect(first?.warm.id).not.toBe(second?.warm.id);
    expect(pools.take('t1', 'snap_a')).toBeUndefined();
    expect(pools.list()[0]?.available).toBe(0);

    // Taken entries are no longer the pool's: they do not count, and the pool starts no restore until the delay passes.
    expect(pools.committedMib()).toBe(0);
    expect(vms.running.size).toBe(2);
    clock.advance(1000);
    await filled(pools, 'web', 2);
    expect(vms.running.size).toBe(4);
  });

  it('a create that is refused after taking an entry drops it: stopped and wiped, never offered again', async () => {
    const { pools, vms } = setup();
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 });
    await filled(pools, 'web', 1);
    const taken = pools.take('t1', 'snap_a');
    await taken?.drop();
    expect(vms.running.has(taken?.warm.id ?? '')).toBe(false);
    expect(vms.wiped).toContain(taken?.warm.id);
    expect(pools.take('t1', 'snap_a')).toBeUndefined();
  });

  it('a new version drains the old one, size 0 drains the pool, and a resize keeps the version', async () => {
    const { pools, vms, manifests } = setup();
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 3 });
    await filled(pools, 'web', 3);

    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 });
    expect(pools.list()[0]).toMatchObject({ snapshotId: 'snap_a', size: 1, available: 1 });
    expect(vms.running.size).toBe(1);
    expect(manifests).toHaveLength(1);

    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_b', size: 2 });
    await filled(pools, 'web', 2);
    expect(pools.take('t1', 'snap_a')).toBeUndefined();
    expect(vms.running.size).toBe(2);
    expect(vms.wiped).toHaveLength(3);

    expect(await pools.set({ tenantId: 't1', name: 'web', size: 0 })).toMatchObject({ size: 0, available: 0, snapshotId: null });
    expect(pools.list()).toEqual([]);
    expect(vms.running.size).toBe(0);
    expect(vms.wiped).toHaveLength(5);
  });

  it('a tenant without its key gets no pool, and a key lost later stops the filling', async () => {
    let revoked = false;
    const requireKey = async () => {
      if (revoked) throw new SandglassError('key_revoked', 'revoked');
    };
    const { pools, vms, clock } = setup({ requireKey });
    revoked = true;
    expect((await codeOf(pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 2 }))).code).toBe('key_revoked');
    expect(pools.list()).toEqual([]);

    revoked = false;
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 2 });
    await filled(pools, 'web', 2);
    revoked = true;
    pools.take('t1', 'snap_a');
    clock.advance(1000);
    await vi.waitFor(() => expect(vms.running.size).toBe(2));
    expect(pools.list()[0]?.available).toBe(1);
  });

  it('fills only while the node has room', async () => {
    let room = 1;
    const { pools } = setup({ room: () => room-- > 0 });
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 3 });
    await filled(pools, 'web', 1);
    await new Promise((r) => setTimeout(r, 20));
    expect(pools.list()[0]?.available).toBe(1);
  });

  it('draining a tenant stops its pools only, and lists only its paths', async () => {
    const { pools, vms } = setup();
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 });
    await pools.set({ tenantId: 't2', name: 'web', snapshotId: 'snap_c', size: 1 });
    await vi.waitFor(() => expect(pools.list().map((p) => p.available)).toEqual([1, 1]));
    expect(pools.tenants().sort()).toEqual(['t1', 't2']);
    const t1Paths = pools.paths('t1');
    expect(t1Paths).toHaveLength(2);
    expect(pools.paths('t2').some((p) => t1Paths.includes(p))).toBe(false);

    await pools.drainTenant('t1');
    expect(pools.list().map((p) => p.tenantId)).toEqual(['t2']);
    expect(pools.paths('t1')).toEqual([]);
    expect(vms.running.size).toBe(1);
    expect(pools.take('t2', 'snap_c')).toBeDefined();
  });

  it('a pooled VM that dies is wiped and replaced; three failed restores in a row stop the refills until a resize', async () => {
    const { pools, vms } = setup();
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 });
    await filled(pools, 'web', 1);
    const [dead] = [...vms.running];
    vms.failNext = 3;
    vms.die(dead ?? '');
    await vi.waitFor(() => expect(vms.wiped).toContain(dead));
    await vi.waitFor(() => expect(vms.failNext).toBe(0));
    await new Promise((r) => setTimeout(r, 20));
    expect(pools.list()[0]?.available).toBe(0);

    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 });
    await filled(pools, 'web', 1);
  });

  it('closing waits out a restore in flight and leaves no VM running; a closed node takes no new pool', async () => {
    const { pools, vms } = setup();
    let release!: () => void;
    vms.hold = new Promise((r) => (release = r));
    await pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 });
    await vi.waitFor(() => expect(vms.prepared).toHaveLength(1));
    expect(pools.committedMib()).toBe(256);
    const closing = pools.close();
    release();
    await closing;
    expect(vms.running.size).toBe(0);
    expect(pools.list()).toEqual([]);
    expect((await codeOf(pools.set({ tenantId: 't1', name: 'web', snapshotId: 'snap_a', size: 1 }))).code).toBe('gateway_unavailable');
  });
});
