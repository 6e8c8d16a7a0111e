// The qcow2 reader and writer against real QEMU: images we write pass qemu-img check and read back as expected, and we read what qemu-io wrote.
import { execFile } from 'node:child_process';
import { createCipheriv, createHash } from 'node:crypto';
import { mkdtemp, open, readdir, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readClusters, readQcow2Layer, writeQcow2Overlay, type Qcow2Cluster } from './index.js';

const run = promisify(execFile);
const KIB = 1024;
const MIB = 1024 * KIB;
const CLUSTER = 64 * KIB;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sandglass-qcow2-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Deterministic pseudo-random bytes (AES-CTR over zeros), so a failing case reproduces. */
function noise(seed: number, lengthBytes: number): Buffer {
  const key = Buffer.alloc(16);
  key.writeUInt32BE(seed);
  return createCipheriv('aes-128-ctr', key, Buffer.alloc(16)).update(Buffer.alloc(lengthBytes));
}

async function check(image: string): Promise<{ 'check-errors': number; leaks?: number; corruptions?: number }> {
  const { stdout } = await run('qemu-img', ['check', '--output=json', image]);
  return JSON.parse(stdout);
}

async function expectClean(image: string): Promise<void> {
  const result = await check(image);
  expect(result['check-errors']).toBe(0);
  expect(result.leaks ?? 0).toBe(0);
  expect(result.corruptions ?? 0).toBe(0);
}

/** qemu-img compare exits 0 when the guest-visible contents are identical. */
async function expectSameContents(image: string, format: string, raw: string): Promise<void> {
  await expect(run('qemu-img', ['compare', '-f', format, '-F', 'raw', image, raw])).resolves.toBeDefined();
}

/** A raw file holding `base` with the clusters applied, built without QEMU. */
async function applyToRaw(base: string, clusters: Qcow2Cluster[], out: string, sizeBytes: number): Promise<void> {
  await run('cp', ['--sparse=always', base, out]);
  await truncate(out, sizeBytes);
  const fh = await open(out, 'r+');
  try {
    for (const c of clusters) await fh.write(c.data === 'zero' ? Buffer.alloc(CLUSTER) : c.data, 0, CLUSTER, c.guestOffset);
  } finally {
    await fh.close();
  }
}

/** Clusters as comparable strings: deep equality over 64 KiB Buffers byte by byte is needlessly slow. */
function digest(clusters: Qcow2Cluster[]): string[] {
  return clusters.map((c) => `${c.guestOffset}:${c.data === 'zero' ? 'zero' : createHash('sha256').update(c.data).digest('hex')}`);
}

async function collect(image: string): Promise<Qcow2Cluster[]> {
  const out: Qcow2Cluster[] = [];
  await readClusters(image, await readQcow2Layer(image), (guestOffset, data) => {
    out.push({ guestOffset, data: data === 'zero' ? 'zero' : Buffer.from(data) });
  });
  return out;
}

describe('writeQcow2Overlay', () => {
  const sizeBytes = 32 * MIB;
  const clusters = (): Qcow2Cluster[] => [
    { guestOffset: 0, data: noise(1, CLUSTER) },
    { guestOffset: 5 * CLUSTER, data: 'zero' },
    { guestOffset: 6 * CLUSTER, data: noise(2, CLUSTER) },
    { guestOffset: 7 * CLUSTER, data: Buffer.alloc(CLUSTER) },
    { guestOffset: 3 * CLUSTER, data: noise(3, CLUSTER) },
    { guestOffset: sizeBytes - CLUSTER, data: noise(4, CLUSTER) },
  ];

  it('writes an overlay qemu-img checks clean and reads as the base with the clusters applied', async () => {
    const base = join(dir, 'base.raw');
    await writeFile(base, noise(0, sizeBytes));
    const overlay = join(dir, 'overlay.qcow2');
    await writeQcow2Overlay(overlay, { sizeBytes, backingFile: base, backingFormat: 'raw', clusters: clusters() });

    await expectClean(overlay);
    const { stdout } = await run('qemu-img', ['info', '--output=json', overlay]);
    const info = JSON.parse(stdout);
    expect(info).toMatchObject({ 'virtual-size': sizeBytes, 'cluster-size': CLUSTER, 'backing-filename': base, 'backing-filename-format': 'raw' });
    expect(info['format-specific'].data).toMatchObject({ compat: '1.1', 'refcount-bits': 16, 'extended-l2': false });

    const expected = join(dir, 'expected.raw');
    await applyToRaw(base, clusters(), expected, sizeBytes);
    await expectSameContents(overlay, 'qcow2', expected);

    // QEMU keeps allocating into the image: its refcounts must have been right for this to stay clean.
    await run('qemu-io', ['-c', 'write -P 0xab 1M 64k', '-c', 'write -P 0xcd 6M 192k', overlay]);
    await expectClean(overlay);
    const fh = await open(expected, 'r+');
    await fh.write(Buffer.alloc(64 * KIB, 0xab), 0, 64 * KIB, 1 * MIB);
    await fh.write(Buffer.alloc(192 * KIB, 0xcd), 0, 192 * KIB, 6 * MIB);
    await fh.close();
    await expectSameContents(overlay, 'qcow2', expected);
  });

  it('stores zero clusters as the zero flag, without data clusters, and reads back what it wrote', async () => {
    const base = join(dir, 'base.raw');
    await writeFile(base, noise(0, sizeBytes));
    const overlay = join(dir, 'overlay.qcow2');
    await writeQcow2Overlay(overlay, { sizeBytes, backingFile: base, backingFormat: 'raw', clusters: clusters() });

    const layer = await readQcow2Layer(overlay);
    expect(layer.clusters.map((c) => [c.guestOffset / CLUSTER, c.zero])).toEqual([
      [0, false],
      [3, false],
      [5, true],
      [6, false],
      [7, true],
      [sizeBytes / CLUSTER - 1, false],
    ]);
    // header + 4 data clusters + L2 + L1 + refcount block + refcount table
    expect((await check(overlay)) as unknown).toMatchObject({ 'allocated-clusters': 4, 'image-end-offset': 9 * CLUSTER });
    const expected = new Map(clusters().map((c) => [c.guestOffset, c.data]));
    for (const c of await collect(overlay)) {
      const want = expected.get(c.guestOffset)!;
      if (c.data === 'zero') expect(want === 'zero' || want.equals(Buffer.alloc(CLUSTER))).toBe(true);
      else expect(c.data.equals(want as Buffer)).toBe(true);
    }
  });

  it('takes clusters from an async iterable and a qcow2 backing file', async () => {
    const base = join(dir, 'base.qcow2');
    await run('qemu-img', ['create', '-q', '-f', 'qcow2', base, String(sizeBytes)]);
    await run('qemu-io', ['-c', 'write -P 0x42 0 2M', base]);
    async function* stream(): AsyncIterable<Qcow2Cluster> {
      yield { guestOffset: CLUSTER, data: 'zero' };
      yield { guestOffset: 4 * MIB, data: noise(5, CLUSTER) };
    }
    const overlay = join(dir, 'overlay.qcow2');
    await writeQcow2Overlay(overlay, { sizeBytes, backingFile: base, backingFormat: 'qcow2', clusters: stream() });
    await expectClean(overlay);

    const baseRaw = join(dir, 'base.raw');
    await run('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', base, baseRaw]);
    const expected = join(dir, 'expected.raw');
    await applyToRaw(
      baseRaw,
      [
        { guestOffset: CLUSTER, data: 'zero' },
        { guestOffset: 4 * MIB, data: noise(5, CLUSTER) },
      ],
      expected,
      sizeBytes,
    );
    await expectSameContents(overlay, 'qcow2', expected);
  });

  it('writes a sparse 1 GiB overlay spanning two L2 tables that QEMU can grow', async () => {
    const size = 1024 * MIB;
    const base = join(dir, 'base.raw');
    await writeFile(base, '');
    await truncate(base, size);
    const fh = await open(base, 'r+');
    await fh.write(noise(9, 2 * MIB), 0, 2 * MIB, 700 * MIB);
    await fh.close();
    // 512 MiB per L2 table at 64 KiB clusters: these land in both.
    const given: Qcow2Cluster[] = [
      { guestOffset: 0, data: noise(10, CLUSTER) },
      { guestOffset: 511 * MIB + 15 * CLUSTER, data: noise(11, CLUSTER) },
      { guestOffset: 512 * MIB, data: noise(12, CLUSTER) },
      { guestOffset: 700 * MIB + CLUSTER, data: 'zero' },
      { guestOffset: size - CLUSTER, data: noise(13, CLUSTER) },
    ];
    const overlay = join(dir, 'overlay.qcow2');
    await writeQcow2Overlay(overlay, { sizeBytes: size, backingFile: base, backingFormat: 'raw', clusters: given });
    await expectClean(overlay);
    const expected = join(dir, 'expected.raw');
    await applyToRaw(base, given, expected, size);
    await expectSameContents(overlay, 'qcow2', expected);
    expect((await readQcow2Layer(overlay)).clusters.map((c) => c.guestOffset)).toEqual(given.map((c) => c.guestOffset));

    await run('qemu-io', ['-c', 'write -P 0xab 1M 64k', '-c', 'write -P 0xab 900M 64k', overlay]);
    await expectClean(overlay);
  });

  it('refuses bad input, naming the field, and leaves no file behind', async () => {
    const overlay = join(dir, 'overlay.qcow2');
    const data = noise(1, CLUSTER);
    const cases: Array<[Partial<Parameters<typeof writeQcow2Overlay>[1]>, string]> = [
      [{ sizeBytes: 1000 }, 'sizeBytes'],
      [{ sizeBytes: 0 }, 'sizeBytes'],
      [{ backingFile: '' }, 'backingFile'],
      [{ backingFile: 'x'.repeat(1024) }, 'backingFile'],
      [{ backingFormat: 'vmdk' as 'raw' }, 'backingFormat'],
      [{ backingFile: undefined }, 'backingFormat'],
      [{ clusters: [{ guestOffset: 512, data }] }, 'clusters[0].guestOffset'],
      [
        {
          clusters: [
            { guestOffset: 0, data },
            { guestOffset: -CLUSTER, data },
          ],
        },
        'clusters[1].guestOffset',
      ],
      [{ clusters: [{ guestOffset: 4 * MIB, data }] }, 'clusters[0].guestOffset'],
      [
        {
          clusters: [
            { guestOffset: CLUSTER, data },
            { guestOffset: CLUSTER, data: 'zero' },
          ],
        },
        'clusters[1].guestOffset',
      ],
      [{ clusters: [{ guestOffset: 0, data: data.subarray(1) }] }, 'clusters[0].data'],
    ];
    for (const [opts, field] of cases) {
      const write = writeQcow2Overlay(overlay, { sizeBytes: 4 * MIB, backingFile: '/base.raw', backingFormat: 'raw', clusters: [], ...opts });
      await expect(write).rejects.toMatchObject({ code: 'invalid_argument', details: { field } });
    }
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('readQcow2Layer and readClusters', () => {
  const sizeBytes = 8 * MIB;

  async function qemuOverlay(compat: '1.1' | '0.10', commands: string[]): Promise<{ base: string; overlay: string }> {
    const base = join(dir, 'base.raw');
    await writeFile(base, noise(0, sizeBytes));
    const overlay = join(dir, 'overlay.qcow2');
    await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-o', `compat=${compat}`, '-b', base, '-F', 'raw', overlay]);
    await run('qemu-io', [...commands.flatMap((c) => ['-c', c]), overlay]);
    return { base, overlay };
  }

  it('lists exactly the clusters qemu-io wrote into the layer, with their bytes', async () => {
    const { base, overlay } = await qemuOverlay('1.1', [
      'write -P 0x11 0 64k',
      'write -P 0x22 192k 192k',
      'write -z 1M 128k',
      'write -P 0x33 7M 64k',
      'write -P 0x44 4M 4k', // a partial write copies the rest of the cluster up from the base
    ]);
    const layer = await readQcow2Layer(overlay);
    expect(layer).toMatchObject({ sizeBytes, clusterBytes: CLUSTER, backingFile: base, backingFormat: 'raw' });
    expect(layer.clusters.map((c) => [c.guestOffset / KIB, c.zero])).toEqual([
      [0, false],
      [192, false],
      [256, false],
      [320, false],
      [1024, true],
      [1088, true],
      [4096, false],
      [7168, false],
    ]);
    expect(layer.clusters.filter((c) => c.zero).every((c) => c.hostOffset === 0)).toBe(true);

    const baseBytes = noise(0, sizeBytes);
    const want = new Map<number, Buffer | 'zero'>([
      [0, Buffer.alloc(CLUSTER, 0x11)],
      [192 * KIB, Buffer.alloc(CLUSTER, 0x22)],
      [256 * KIB, Buffer.alloc(CLUSTER, 0x22)],
      [320 * KIB, Buffer.alloc(CLUSTER, 0x22)],
      [1024 * KIB, 'zero'],
      [1088 * KIB, 'zero'],
      [4 * MIB, Buffer.concat([Buffer.alloc(4 * KIB, 0x44), baseBytes.subarray(4 * MIB + 4 * KIB, 4 * MIB + CLUSTER)])],
      [7 * MIB, Buffer.alloc(CLUSTER, 0x33)],
    ]);
    expect(digest(await collect(overlay))).toEqual(digest([...want].map(([guestOffset, data]) => ({ guestOffset, data }))));
  });

  // 3M..8M is one 80-cluster host run, longer than readClusters reads at once.
  it('round-trips: an overlay rebuilt from what was read has the same contents as the original', async () => {
    const { base, overlay } = await qemuOverlay('1.1', ['write -P 0x11 64k 256k', 'write -z 2M 64k', 'write -P 0x55 3M 5M']);
    const restored = join(dir, 'restored.qcow2');
    await writeQcow2Overlay(restored, { sizeBytes, backingFile: base, backingFormat: 'raw', clusters: await collect(overlay) });
    await expectClean(restored);
    await expect(run('qemu-img', ['compare', '-f', 'qcow2', '-F', 'qcow2', overlay, restored])).resolves.toBeDefined();
    expect(digest(await collect(restored))).toEqual(digest(await collect(overlay)));
  });

  it('reads version 2 images, where a zero write allocates a zeroed data cluster', async () => {
    const { overlay } = await qemuOverlay('0.10', ['write -P 0x11 0 64k', 'write -z 1M 64k']);
    expect(digest(await collect(overlay))).toEqual(
      digest([
        { guestOffset: 0, data: Buffer.alloc(CLUSTER, 0x11) },
        { guestOffset: 1 * MIB, data: Buffer.alloc(CLUSTER) },
      ]),
    );
  });

  it('reads an empty overlay as no clusters', async () => {
    const { base, overlay } = await qemuOverlay('1.1', ['flush']);
    expect(await readQcow2Layer(overlay)).toEqual({ sizeBytes, clusterBytes: CLUSTER, backingFile: base, backingFormat: 'raw', clusters: [] });
  });

  it.each([
    ['compressed clusters', ['-f', 'qcow2', 'img.qcow2', '1M'], 'write -c -P 1 0 64k', /compressed cluster/],
    ['extended L2 entries', ['-f', 'qcow2', '-o', 'extended_l2=on', 'img.qcow2', '1M'], undefined, /extended L2/],
    ['external data files', ['-f', 'qcow2', '-o', 'data_file=data.raw', 'img.qcow2', '1M'], undefined, /external data file/],
    [
      'encryption',
      ['--object', 'secret,id=s0,data=pw', '-f', 'qcow2', '-o', 'encrypt.format=aes,encrypt.key-secret=s0', 'img.qcow2', '1M'],
      undefined,
      /encrypted/,
    ],
  ])('refuses %s', async (_what, createArgs, write, message) => {
    await run('qemu-img', ['create', '-q', ...createArgs], { cwd: dir });
    if (write) await run('qemu-io', ['-c', write, 'img.qcow2'], { cwd: dir });
    await expect(readQcow2Layer(join(dir, 'img.qcow2'))).rejects.toMatchObject({ code: 'internal', message: expect.stringMatching(message) });
  });

  it('refuses a file that is not qcow2', async () => {
    await writeFile(join(dir, 'x.raw'), Buffer.alloc(CLUSTER));
    await expect(readQcow2Layer(join(dir, 'x.raw'))).rejects.toMatchObject({ code: 'internal', message: expect.stringMatching(/bad magic/) });
  });
});
