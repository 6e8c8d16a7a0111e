// A capture whose QEMU (a QMP double) names another VM's disk layer: refused with vm_reply_refused and an event, and
// not a byte of the other layer reaches the snapshot, nor is it merged or deleted.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import type { ChunkStore } from '@sandglass/chunkstore';
import { DEFAULT_RETENTION, writeQcow2Overlay } from '@sandglass/snapshots';
import type { Vm } from '@sandglass/vmm';
import { HostileAgent } from '@sandglass/agent-client/hostile-agent';
import { vmOnQmpDouble } from '@sandglass/vmm/qmp-double';
import type { GatewayEvent } from './events.js';
import type { RamFiles } from './ram.js';
import type { Sandbox } from './sandbox.js';
import { sandboxOnDouble } from './sandbox-double.js';
import { SnapshotManager } from './snapshots.js';
import type { TemplateSnapshot } from './templates.js';

const CLUSTER = 64 * 1024;
const MARKER = 'VICTIM-LAYER-BYTES';

let root: string;
let agent: HostileAgent | undefined;
let sandbox: Sandbox | undefined;
let vm: Vm | undefined;

afterEach(async () => {
  await sandbox?.end('killed');
  await agent?.close();
  vm?.kill();
  await vm?.exited;
  sandbox = agent = vm = undefined;
  rmSync(root, { recursive: true, force: true });
});

/** A qcow2 layer holding one cluster that starts with `text`. */
async function layer(path: string, text: string): Promise<void> {
  const data = Buffer.alloc(CLUSTER);
  data.write(text);
  await writeQcow2Overlay(path, { sizeBytes: 1 << 20, clusters: [{ guestOffset: 0, data }] });
}

/** Sandbox sbx_a on a QMP double, beside sbx_b's run directory; the store records every chunk staged into it. */
async function setup() {
  root = mkdtempSync(join(tmpdir(), 'sg-capture-chain-'));
  const dir = join(root, 'run', 'sbx_a');
  const otherDir = join(root, 'run', 'sbx_b');
  const ramRoot = join(root, 'shm');
  const templateDir = join(root, 'template-k');
  for (const d of [dir, otherDir, ramRoot, templateDir]) mkdirSync(d, { recursive: true });
  const own = join(dir, 'disk.qcow2');
  const victim = join(otherDir, 'disk.qcow2');
  const templateDisk = join(templateDir, 'disk.qcow2');
  await layer(own, 'own layer');
  await layer(victim, MARKER);
  await layer(templateDisk, 'template layer');
  const memPath = join(ramRoot, 'sbx_a.mem');
  writeFileSync(memPath, Buffer.alloc(1 << 20));
  const made = await vmOnQmpDouble({ id: 'sbx_a', dir, memPath, rootLayer: own, chain: [own, templateDisk] });
  vm = made.vm;
  agent = await HostileAgent.connect();
  agent.onCall = (call) => void agent!.reply(call.id, {});
  const sandboxEvents: GatewayEvent[] = [];
  const config = { memoryMib: 1, vcpus: 1, accel: 'tcg' as const };
  const template = { key: 'k', name: 'base', diskPath: templateDisk, config } as TemplateSnapshot;
  sandbox = await sandboxOnDouble(agent, { id: 'sbx_a', events: { append: (e) => void sandboxEvents.push(e) }, vm, template, dir });
  const staged: Buffer[] = [];
  const manifests: unknown[] = [];
  const tenant = {
    tenantId: 'ten_a',
    lease: () => ({ add: () => {}, release: () => {} }),
    chunkId: (d: Buffer) => createHash('sha256').update(d).digest('hex'),
    stage: async (d: Buffer) => {
      staged.push(Buffer.from(d));
      return { isNew: true, storedBytes: d.length };
    },
    flush: async () => {},
    putManifest: async (_id: string, m: unknown) => {
      manifests.push(m);
      return { storedBytes: 0 };
    },
  };
  const events: GatewayEvent[] = [];
  const snapshots = new SnapshotManager({
    store: { tenant: async () => tenant } as unknown as ChunkStore,
    ram: { root: ramRoot } as RamFiles,
    events: { append: (e) => void events.push(e) },
    accel: 'tcg',
    cpu: 'max',
    clock: new ManualClock(Date.UTC(2026, 0, 1)),
    logger: createLogger('test', 'silent'),
    retention: DEFAULT_RETENTION,
  });
  return { sbx: sandbox, qmp: made.qmp, snapshots, staged, manifests, events, own, victim, dir };
}

const victimBytesIn = (staged: Buffer[]) => staged.filter((c) => c.includes(MARKER)).length;

describe('a live snapshot checks the disk chain QEMU reports against the sandbox’s own layers', () => {
  it('reads its own layers when QEMU tells the truth (the double is a working QEMU)', async () => {
    const { sbx, snapshots, staged, manifests, events } = await setup();
    await snapshots.captureNow(sbx, 'manual');
    expect(manifests).toHaveLength(1);
    expect(staged.some((c) => c.includes('own layer'))).toBe(true);
    expect(victimBytesIn(staged)).toBe(0);
    expect(events.map((e) => e.type)).toEqual(['snapshot.taken']);
    await snapshots.stop();
  });

  it('refuses a chain naming another VM’s layer: nothing of it is read, merged or deleted', async () => {
    const { sbx, qmp, snapshots, staged, manifests, events, own, victim } = await setup();
    const victimBefore = readFileSync(victim);
    // A compromised QEMU: below the new active layer it claims the other VM's layer, then the sandbox's own, so a
    // host trusting it would read the victim into this tenant's snapshot and delete it after merging.
    qmp.on.set('blockdev-snapshot-sync', (args) => {
      qmp.chain = [String(args['snapshot-file']), victim, own, qmp.chain.at(-1)!];
      return {};
    });
    const outcome = await snapshots.captureNow(sbx, 'manual').catch((err: unknown) => err);
    expect(victimBytesIn(staged)).toBe(0);
    expect(qmp.commands.map((c) => c.execute)).not.toContain('block-commit');
    expect(existsSync(victim) && readFileSync(victim).equals(victimBefore)).toBe(true);
    expect(outcome).toMatchObject({ code: 'vm_reply_refused' });
    expect(staged).toHaveLength(0);
    expect(manifests).toHaveLength(0);
    expect(qmp.commands.at(-2)?.execute).toBe('cont');
    expect(events).toEqual([
      expect.objectContaining({ type: 'snapshot.failed', sandboxId: 'sbx_a', data: expect.objectContaining({ code: 'vm_reply_refused' }) }),
    ]);
    await snapshots.stop();
  });
});
