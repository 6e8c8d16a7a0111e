// Templates in the chunk store: what one node stores, another rebuilds byte for byte (its disk with no raw image), and GC keeps.
import { execFile } from 'node:child_process';
import { createCipheriv } from 'node:crypto';
import { mkdtemp, open, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkStore, LocalDiskBackend, type TenantStore } from '@sandglass/chunkstore';
import { LocalKeyring } from '@sandglass/kms';
import { FLAT_DISK, materializeTemplate, storeTemplate, TEMPLATE_FILES, type TemplateRecord } from './index.js';

const run = promisify(execFile);
const MIB = 1024 * 1024;

function noise(seed: number, lengthBytes: number): Buffer {
  const key = Buffer.alloc(16);
  key.writeUInt32BE(seed);
  return createCipheriv('aes-128-ctr', key, Buffer.alloc(16)).update(Buffer.alloc(lengthBytes));
}

async function writeAt(path: string, offset: number, data: Buffer): Promise<void> {
  const fh = await open(path, 'r+');
  await fh.write(data, 0, data.length, offset);
  await fh.close();
}

let dir: string;
let store: ChunkStore;
let tenant: TenantStore;
const record: TemplateRecord = {
  key: '0123456789abcdef',
  name: 'base',
  config: { memoryMib: 4, vcpus: 1, accel: 'tcg', cpu: 'max' },
  bootMs: 1234.5,
  createdAt: '2026-01-01T00:00:00.000Z',
};

/** A template as a gateway builds one: RAM file, device state, a qcow2 overlay over a raw root image. */
async function builtTemplate(): Promise<string> {
  const tpl = join(dir, 'built');
  await run('mkdir', ['-p', tpl]);
  const mem = join(tpl, TEMPLATE_FILES.memory);
  await writeFile(mem, Buffer.alloc(0));
  await run('truncate', ['-s', `${record.config.memoryMib}M`, mem]);
  await writeAt(mem, 64 * 1024, noise(1, 200 * 1024));
  await writeFile(join(tpl, TEMPLATE_FILES.state), noise(2, 61_000));
  // A raw root image not a whole number of clusters long, mostly holes, data at both ends.
  const rootfs = join(dir, 'rootfs.ext4');
  await writeFile(rootfs, Buffer.alloc(0));
  await run('truncate', ['-s', String(8 * MIB + 4096), rootfs]);
  await writeAt(rootfs, 0, noise(3, 300 * 1024));
  await writeAt(rootfs, 8 * MIB, noise(4, 4096));
  await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', rootfs, join(tpl, TEMPLATE_FILES.disk)]);
  // The guest's writes during boot: new data over the image, a zeroed range over its data.
  await run('qemu-io', ['-c', 'write -P 0x5a 1M 128k', '-c', 'write -z 0 64k', join(tpl, TEMPLATE_FILES.disk)]);
  return tpl;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-template-'));
  store = new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys: new LocalKeyring({ dir: join(dir, 'keys') }) });
  tenant = await store.tenant('system');
});
afterEach(() => rm(dir, { recursive: true, force: true }));

describe('storeTemplate and materializeTemplate', () => {
  it('rebuild the same RAM, device state and guest-visible disk, with no backing file', async () => {
    const built = await builtTemplate();
    const stored = await storeTemplate(tenant, built, record, { snapshotId: 'snap_tpl1', takenAt: record.createdAt });
    expect(stored.body).toMatchObject({ reason: 'template', tenantId: 'system', template: record, vm: { templateKey: record.key }, disk: { base: FLAT_DISK } });
    // Flattened: no cluster of it is a zero marker, and the zeroed first cluster of the image is simply absent.
    expect(stored.body.disk.clusters.every(([, id]) => id !== '')).toBe(true);
    expect(stored.body.disk.clusters.map(([o]) => o)).not.toContain(0);
    expect(stored.storedBytes).toBeGreaterThan(0);

    // Another node: a fresh store handle, and nothing of the built template or its raw image.
    await rm(join(dir, 'rootfs.ext4'));
    const fresh = await new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys: new LocalKeyring({ dir: join(dir, 'keys') }) }).tenant(
      'system',
    );
    const { body } = await fresh.getManifest('snap_tpl1');
    const out = join(dir, 'materialized');
    await materializeTemplate(fresh, body as typeof stored.body, out);
    expect((await readdir(out)).sort()).toEqual([TEMPLATE_FILES.disk, TEMPLATE_FILES.memory, TEMPLATE_FILES.state].sort());
    expect((await readFile(join(out, TEMPLATE_FILES.memory))).equals(await readFile(join(built, TEMPLATE_FILES.memory)))).toBe(true);
    expect((await readFile(join(out, TEMPLATE_FILES.state))).equals(await readFile(join(built, TEMPLATE_FILES.state)))).toBe(true);
    const info = JSON.parse((await run('qemu-img', ['info', '--output=json', join(out, TEMPLATE_FILES.disk)])).stdout);
    expect(info['backing-filename']).toBeUndefined();
    await run('qemu-img', ['check', join(out, TEMPLATE_FILES.disk)]);
  });

  it('reads as the original disk, guest byte for guest byte', async () => {
    const built = await builtTemplate();
    const stored = await storeTemplate(tenant, built, record, { snapshotId: 'snap_tpl2', takenAt: record.createdAt });
    const out = join(dir, 'materialized');
    await materializeTemplate(tenant, stored.body, out);
    // qemu-img compare exits non-zero when the guest-visible contents differ (the raw image is still there for it).
    await run('qemu-img', ['compare', '-f', 'qcow2', '-F', 'qcow2', join(out, TEMPLATE_FILES.disk), join(built, TEMPLATE_FILES.disk)]);
  });

  it('is kept by GC, and a damaged chunk stops the rebuild', async () => {
    const built = await builtTemplate();
    const stored = await storeTemplate(tenant, built, record, { snapshotId: 'snap_tpl3', takenAt: record.createdAt });
    const gc = await store.gc({ graceMs: 0 });
    expect(gc).toMatchObject({ deletedChunks: 0, manifests: 1, undecidedTenants: [] });
    const victim = stored.body.disk.clusters[0]![1];
    await writeFile(join(dir, 'store', 'chunks', 'system', victim.slice(0, 2), victim), Buffer.from('not the chunk'));
    await expect(materializeTemplate(tenant, stored.body, join(dir, 'bad'))).rejects.toMatchObject({ code: 'snapshot_corrupt' });
  });

  it('refuses to materialize a sandbox snapshot as a template', async () => {
    const built = await builtTemplate();
    const stored = await storeTemplate(tenant, built, record, { snapshotId: 'snap_tpl4', takenAt: record.createdAt });
    await expect(materializeTemplate(tenant, { ...stored.body, reason: 'rolling' }, join(dir, 'x'))).rejects.toMatchObject({ code: 'snapshot_corrupt' });
  });
});
