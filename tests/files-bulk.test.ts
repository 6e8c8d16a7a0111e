// Bulk transfers through a real VM: a big file round trip hashed end to end with the gateway's memory sampled, and a
// source tree of 10,000 files up and down as tar streams, extraction confined to its directory.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { checkResponsesAgainstSpec, config, home } from './helpers.js';

checkResponsesAgainstSpec();

// 1 GiB by default; SANDGLASS_TEST_BULK_MIB sets another size (the disk is grown to fit it).
const bulkMib = Number(process.env.SANDGLASS_TEST_BULK_MIB ?? 1024);
const FILES = 10_000;
const MiB = 1024 * 1024;
// The template's disk has about 1 GiB free: the sandbox asks for a larger one, with room for the file and the tree.
const DISK_MIB = Math.max(1024, Math.ceil((bulkMib + 1536) / 1024) * 1024);

let sbx: Sandbox;
let work: string;

beforeAll(async () => {
  sbx = await Sandbox.create({ ...config(), timeoutS: 1800, diskMib: DISK_MIB });
  work = mkdtempSync(join(tmpdir(), 'sandglass-bulk-'));
});

afterAll(async () => {
  await sbx?.kill();
  if (work) rmSync(work, { recursive: true, force: true });
});

/** The server's resident memory (the gateway runs in it), sampled until stop(). */
function sampleServerRss(): { stop(): { baselineBytes: number; peakBytes: number } } {
  const { pid } = JSON.parse(readFileSync(join(home, 'server.json'), 'utf8')) as { pid: number };
  const rss = () => Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
  const baselineBytes = rss();
  let peakBytes = baselineBytes;
  const timer = setInterval(() => {
    peakBytes = Math.max(peakBytes, rss());
  }, 100);
  return {
    stop: () => {
      clearInterval(timer);
      return { baselineBytes, peakBytes: Math.max(peakBytes, rss()) };
    },
  };
}

/** `mib` MiB of pseudo-random bytes, generated as they are sent (never held whole), hashed on the way. */
function generated(mib: number): { stream: Readable; sha256(): string } {
  const hash = createHash('sha256');
  const block = randomBytes(1024 * 1024);
  let i = 0;
  const stream = Readable.from(
    (function* () {
      for (; i < mib; i++) {
        // A different MiB each time: the counter goes into the first bytes.
        const chunk = Buffer.from(block);
        chunk.writeUInt32BE(i, 0);
        hash.update(chunk);
        yield chunk;
      }
    })(),
  );
  return { stream, sha256: () => hash.digest('hex') };
}

/** The root filesystem's size in bytes, as the guest's `df` reports it. */
async function rootFsBytes(s: Sandbox): Promise<number> {
  return Number((await s.commands.run('df -B1 --output=size / | tail -n 1')).stdout.trim());
}

describe('a grown root disk', () => {
  it('is the size asked for, and keeps it and its files through pause, resume and fork', async () => {
    const grown = await rootFsBytes(sbx);
    // ext4 keeps a few per cent for its own metadata; the template's filesystem is about 1.5 GiB.
    expect(grown).toBeGreaterThan(DISK_MIB * MiB * 0.95);
    expect(grown).toBeLessThanOrEqual(DISK_MIB * MiB);
    // More than the template's whole filesystem could hold (fallocate takes real blocks, not a sparse hole).
    await sbx.commands.run('fallocate -l 1700M /root/past-the-old-end && sync');
    const paused = await sbx.pause();
    const back = await Sandbox.resume(sbx.id, config());
    expect(await rootFsBytes(back)).toBe(grown);
    const [fork] = await Sandbox.fork(paused.id, { ...config(), timeoutS: 600 });
    try {
      const listed = await Sandbox.list(config());
      // The size asked for is on the sandbox, and on its fork, whose disk is the snapshot's.
      expect(listed.find((s) => s.id === sbx.id)?.diskMib).toBe(DISK_MIB);
      expect(listed.find((s) => s.id === fork!.id)?.diskMib).toBe(DISK_MIB);
      expect(await rootFsBytes(fork!)).toBe(grown);
      expect((await fork!.files.stat('/root/past-the-old-end')).sizeBytes).toBe(1700 * MiB);
    } finally {
      await fork?.kill();
    }
    expect((await back.files.stat('/root/past-the-old-end')).sizeBytes).toBe(1700 * MiB);
    await back.files.remove('/root/past-the-old-end');
  });

  // The node refuses a disk larger than its free space (runs where the host has under 64 GiB free, as CI's does).
  const freeMib = (() => {
    const fs = statfsSync(home);
    return Math.floor((fs.bavail * fs.bsize) / MiB);
  })();
  it.skipIf(freeMib >= 65536)('is refused when the node has less disk free than asked, naming the field', async () => {
    const live = async () =>
      (await Sandbox.list(config()))
        .filter((s) => s.state === 'running' || s.state === 'starting')
        .map((s) => s.id)
        .sort();
    const before = await live();
    const err = await Sandbox.create({ ...config(), diskMib: 65536 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'capacity_exhausted', details: { field: 'diskMib' } });
    // Refused before any VM was taken: nothing more runs.
    expect(await live()).toEqual(before);
  });

  it('refuses a size out of range, naming the field, and creates nothing', async () => {
    const before = (await Sandbox.list(config())).length;
    const err = await Sandbox.create({ ...config(), diskMib: 100 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'invalid_argument', details: { field: 'diskMib' } });
    expect((await Sandbox.list(config())).length).toBe(before);
  });
});

describe('a big file', () => {
  it(`makes a ${bulkMib} MiB round trip intact, with the gateway's memory bounded`, async () => {
    const src = generated(bulkMib);
    const rss = sampleServerRss();
    const t0 = performance.now();
    const w = await sbx.files.write('/root/bulk.bin', src.stream);
    const writeMs = performance.now() - t0;
    expect(w.sizeBytes).toBe(bulkMib * 1024 * 1024);
    const guestSum = (await sbx.commands.run('sha256sum /root/bulk.bin', { timeoutMs: 600_000 })).stdout.split(' ')[0];
    expect(guestSum).toBe(src.sha256());

    const t1 = performance.now();
    const body = await sbx.files.read('/root/bulk.bin', { format: 'stream' });
    const back = createHash('sha256');
    let bytes = 0;
    for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
      back.update(chunk);
      bytes += chunk.length;
    }
    const readMs = performance.now() - t1;
    const { baselineBytes, peakBytes } = rss.stop();
    expect(bytes).toBe(bulkMib * 1024 * 1024);
    expect(back.digest('hex')).toBe(guestSum);
    console.log(
      `${bulkMib} MiB: write ${(writeMs / 1000).toFixed(1)} s, read ${(readMs / 1000).toFixed(1)} s; server RSS ${(baselineBytes / 2 ** 20).toFixed(0)} → peak ${(peakBytes / 2 ** 20).toFixed(0)} MiB`,
    );
    // Bounded: the transfer goes through in windows, so the server never holds a large part of the file. The peak also
    // counts transferred buffers V8 has not collected yet, which grows with the transfer rate: 39–136 MiB over the
    // baseline on a loaded host, 165 MiB on an idle one (read at 65 MiB/s). The bound is below the file (a quarter of
    // it with SANDGLASS_TEST_BULK_MIB=1024) and far above a window.
    expect(peakBytes - baselineBytes).toBeLessThan(Math.min(256, bulkMib * 0.9) * 1024 * 1024);
    await sbx.files.remove('/root/bulk.bin');
  });
});

/** A ustar header and body by hand: the host's tar refuses to write the names an attacker would. */
function tarEntry(name: string, body: string, typeflag = '0', linkname = ''): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100);
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(`${Buffer.byteLength(body).toString(8).padStart(11, '0')}\0`, 124);
  h.write('00000000000\0', 136);
  h.write('        ', 148);
  h.write(typeflag, 156);
  h.write(linkname, 157, 100);
  h.write('ustar\0' + '00', 257);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  const data = Buffer.alloc(Math.ceil(Buffer.byteLength(body) / 512) * 512);
  data.write(body);
  return Buffer.concat([h, data]);
}

const tarOf = (...entries: Buffer[]) => Buffer.concat([...entries, Buffer.alloc(1024)]);

/** One line per file: its path relative to `dir` and the sha256 of its content, sorted. */
function hostListing(dir: string): string {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(r);
      else
        out.push(
          `${createHash('sha256')
            .update(readFileSync(join(dir, r)))
            .digest('hex')}  ./${r}`,
        );
    }
  };
  walk('');
  return `${out.sort().join('\n')}\n`;
}

const guestListing = async (dir: string) =>
  (await sbx.commands.run(`cd ${dir} && find . -type f -print0 | xargs -0 sha256sum | LC_ALL=C sort`, { timeoutMs: 600_000 })).stdout;

describe('a source tree as a tar stream', () => {
  it(`uploads and downloads ${FILES} files with their contents`, async () => {
    const src = join(work, 'src');
    for (let d = 0; d < FILES / 100; d++) {
      mkdirSync(join(src, `pkg${d}`, 'lib'), { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(src, `pkg${d}`, 'lib', `mod${f}.ts`), randomBytes(50 + ((d * 100 + f) % 1500)).toString('base64'));
    }
    const tarFile = join(work, 'src.tar');
    execFileSync('tar', ['-cf', tarFile, '-C', src, '.']);
    const expected = hostListing(src);

    const up = await sbx.files.writeTar('/root/tree', createReadStream(tarFile));
    expect(up.entries).toBe(FILES + 2 * (FILES / 100) + 1);
    expect(up.archiveBytes).toBe(readFileSync(tarFile).length);
    expect(await guestListing('/root/tree')).toBe(expected);

    const tar = await sbx.files.readTar('/root/tree', { format: 'bytes' });
    const back = join(work, 'back');
    mkdirSync(back);
    writeFileSync(join(work, 'back.tar'), tar);
    execFileSync('tar', ['-xf', join(work, 'back.tar'), '-C', back]);
    expect(hostListing(back)).toBe(expected);
  });

  it('never writes outside the target directory', async () => {
    await sbx.commands.run('mkdir -p /root/jail /root/outside && echo keep > /root/outside/victim && ln -sfn /root/outside /root/jail/link');
    const attempts = [
      tarOf(tarEntry('../outside/escape', 'x')),
      tarOf(tarEntry('/root/outside/escape', 'x')),
      tarOf(tarEntry('link/escape', 'x')),
      tarOf(tarEntry('made-link', '', '2', '/root/outside'), tarEntry('made-link/escape', 'x')),
    ];
    for (const tar of attempts) {
      await expect(sbx.files.writeTar('/root/jail', tar)).rejects.toMatchObject({ code: 'invalid_argument' });
    }
    // A symlink where a file goes is replaced, not written through.
    await sbx.commands.run('ln -sfn /root/outside/victim /root/jail/f');
    await sbx.files.writeTar('/root/jail', tarOf(tarEntry('f', 'new')));
    const r = await sbx.commands.run('ls /root/outside; cat /root/outside/victim; test -L /root/jail/f || cat /root/jail/f');
    expect(r.stdout).toBe('victim\nkeep\nnew');
  });
});
