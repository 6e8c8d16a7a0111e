// TemplateStore with a registry: a cached template is published once, the registry's template replaces a different
// one, a node with no cache materializes it, a lost publication race yields to the winner. No VM: nothing here boots.
import { execFileSync } from 'node:child_process';
import { createCipheriv, createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkStore, LocalDiskBackend, type ChunkStoreOptions } from '@sandglass/chunkstore';
import { createLogger } from '@sandglass/core';
import type { GuestImage } from '@sandglass/images';
import { storeTemplate, type TemplateRecord } from '@sandglass/snapshots';
import { TEMPLATE_TENANT, TemplateStore, templateKey, vmConfig, type TemplateRef, type TemplateRegistry } from './templates.js';

const config = vmConfig(4, 1, 'tcg', 'max');
// Paths that do not exist: a TemplateStore that tried to boot this image would fail.
const image: GuestImage = {
  key: 'img-test',
  kernelPath: '/nonexistent/vmlinuz',
  initramfsPath: '/nonexistent/initrd',
  rootfsPath: '/nonexistent/rootfs',
  agentPath: '/nonexistent/agent',
  kernelVersion: 'test',
};
const kernelArgs = 'console=ttyS0';
const key = templateKey(image, config, kernelArgs);
const log = createLogger('templates-test', 'silent');

/** Per-tenant keys derived from the name: enough for a store these tests open twice. */
const keys: ChunkStoreOptions['keys'] = {
  name: 'test',
  dataKey: async (tenantId, purpose) => createHash('sha256').update(`${tenantId}/${purpose}`).digest(),
  revoke: async () => {},
};

let dir: string;
let store: ChunkStore;

/** A registry in memory with the same first-publisher-wins rule as the database's. */
function memoryRegistry(): TemplateRegistry & { records: Map<string, TemplateRef> } {
  const records = new Map<string, TemplateRef>();
  return {
    records,
    lookup: async (k) => records.get(k),
    publish: async (k, rec) => {
      if (!records.has(k)) records.set(k, { tenantId: rec.tenantId, snapshotId: rec.snapshotId });
      return records.get(k)!;
    },
  };
}

/** A template directory as a build leaves it: RAM, device state (`seed` makes each "boot" different), disk over a raw image. */
function fakeBuild(artifacts: string, seed: number): string {
  const t = join(artifacts, `template-${key}`);
  mkdirSync(t, { recursive: true });
  const noise = (n: number) => createCipheriv('aes-128-ctr', Buffer.alloc(16, seed), Buffer.alloc(16)).update(Buffer.alloc(n));
  writeFileSync(join(t, 'mem.raw'), Buffer.concat([noise(256 * 1024), Buffer.alloc(config.memoryMib * 1024 * 1024 - 256 * 1024)]));
  writeFileSync(join(t, 'state.bin'), noise(60_000));
  const raw = join(dir, `rootfs-${seed}.ext4`);
  writeFileSync(raw, Buffer.concat([noise(128 * 1024), Buffer.alloc(2 * 1024 * 1024)]));
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', raw, join(t, 'disk.qcow2')]);
  const record: TemplateRecord = { key, name: 'base', config, bootMs: 1000 + seed, createdAt: new Date(seed * 1000).toISOString() };
  writeFileSync(join(t, 'template.json'), JSON.stringify(record));
  return t;
}

/** Another node's build, stored in the store as that node would publish it. */
async function publishedElsewhere(seed: number, snapshotId: string, tenantId = TEMPLATE_TENANT): Promise<void> {
  const other = join(dir, `node-${seed}`);
  const t = fakeBuild(other, seed);
  const record = JSON.parse(readFileSync(join(t, 'template.json'), 'utf8')) as TemplateRecord;
  await storeTemplate(await store.tenant(tenantId), t, record, { snapshotId, takenAt: record.createdAt });
}

function artifacts(name: string): string {
  const a = join(dir, name, 'artifacts');
  mkdirSync(a, { recursive: true });
  return a;
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'sg-templates-'));
  store = new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('TemplateStore with a registry', () => {
  it('publishes a cached template the registry does not know, and keeps using it', async () => {
    const a = artifacts('a');
    const built = fakeBuild(a, 1);
    const registry = memoryRegistry();
    const t = await new TemplateStore(a, image, kernelArgs, log, { store, registry, nodeId: 'node-a' }).ensure('base', config);
    expect(t).toMatchObject({ key, bootMs: 1001, dir: built });
    expect(t.materializeMs).toBeUndefined();
    const ref = registry.records.get(key)!;
    expect(ref.tenantId).toBe(TEMPLATE_TENANT);
    const { body } = await (await store.tenant(TEMPLATE_TENANT)).getManifest(ref.snapshotId);
    expect(body).toMatchObject({ reason: 'template', template: { key, bootMs: 1001 } });
    // Started again: the registry's snapshot is this cache, so nothing is published or fetched.
    const again = await new TemplateStore(a, image, kernelArgs, log, { store, registry, nodeId: 'node-a' }).ensure('base', config);
    expect(again.materializeMs).toBeUndefined();
    expect(await (await store.tenant(TEMPLATE_TENANT)).listManifests()).toEqual([ref.snapshotId]);
  });

  it('materializes the registry template on a node with no cache, for ensure and for byKey, without booting', async () => {
    await publishedElsewhere(2, 'snap_node2');
    const registry = memoryRegistry();
    await registry.publish(key, { tenantId: TEMPLATE_TENANT, snapshotId: 'snap_node2', nodeId: 'node-2' });
    const b = artifacts('b');
    const byKey = await new TemplateStore(b, image, kernelArgs, log, { store, registry, nodeId: 'node-b' }).byKey(key);
    expect(byKey).toMatchObject({ key, bootMs: 1002, name: 'base' });
    expect(byKey!.materializeMs).toBeGreaterThan(0);
    expect(readFileSync(byKey!.statePath).equals(readFileSync(join(dir, 'node-2', `template-${key}`, 'state.bin')))).toBe(true);
    // The disk stands alone: node 2's raw image is not needed here.
    expect(JSON.parse(execFileSync('qemu-img', ['info', '--output=json', byKey!.diskPath], { encoding: 'utf8' }))['backing-filename']).toBeUndefined();

    const c = artifacts('c');
    const t = await new TemplateStore(c, image, kernelArgs, log, { store, registry, nodeId: 'node-c' }).ensure('base', config);
    expect(t).toMatchObject({ key, bootMs: 1002 });
    // A key nobody published is unknown, not built.
    expect(await new TemplateStore(c, image, kernelArgs, log, { store, registry, nodeId: 'node-c' }).byKey('00000000000000ff')).toBeUndefined();
  });

  it("replaces a cached template that is not the registry's, and says so", async () => {
    await publishedElsewhere(3, 'snap_node3');
    const registry = memoryRegistry();
    await registry.publish(key, { tenantId: TEMPLATE_TENANT, snapshotId: 'snap_node3', nodeId: 'node-3' });
    const a = artifacts('a');
    fakeBuild(a, 4);
    const replaced: string[] = [];
    const t = await new TemplateStore(a, image, kernelArgs, log, { store, registry, nodeId: 'node-a', onReplaced: (k) => replaced.push(k) }).ensure(
      'base',
      config,
    );
    expect(replaced).toEqual([key]);
    expect(t.bootMs).toBe(1003);
    expect(readFileSync(t.statePath).equals(readFileSync(join(dir, 'node-3', `template-${key}`, 'state.bin')))).toBe(true);
  });

  it('yields to the winner when another node published first, and withdraws its own manifest', async () => {
    await publishedElsewhere(5, 'snap_winner');
    // A registry that had nothing when asked, and a winner by the time this node publishes.
    const registry: TemplateRegistry = {
      lookup: async () => undefined,
      publish: async () => ({ tenantId: TEMPLATE_TENANT, snapshotId: 'snap_winner' }),
    };
    const a = artifacts('a');
    fakeBuild(a, 6);
    const t = await new TemplateStore(a, image, kernelArgs, log, { store, registry, nodeId: 'node-a' }).ensure('base', config);
    expect(t.bootMs).toBe(1005);
    expect(await (await store.tenant(TEMPLATE_TENANT)).listManifests()).toEqual(['snap_winner']);
  });

  it("refuses a registry record that names a tenant's snapshot rather than a template", async () => {
    // Even a snapshot that is a template in every other respect.
    await publishedElsewhere(7, 'snap_node7', 'ten_victim');
    const registry = memoryRegistry();
    await registry.publish(key, { tenantId: 'ten_victim', snapshotId: 'snap_node7', nodeId: 'node-7' });
    const b = artifacts('b');
    await expect(new TemplateStore(b, image, kernelArgs, log, { store, registry, nodeId: 'node-b' }).ensure('base', config)).rejects.toMatchObject({
      code: 'snapshot_corrupt',
    });
  });
});
