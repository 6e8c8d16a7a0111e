// The files phase's measurements (issue 15): cp and files.write/read of 64 MiB (and 1 GiB) both ways, and a tree of
// 10,000 files as a tar stream both ways, each next to its host baseline and the guest's own ceiling, in one run.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';

export interface FilesRow {
  what: string;
  samplesMs: number[];
  note: string;
}

const MiB = 1024 * 1024;
const TREE_FILES = 10_000;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const rate = (bytes: number, ms: number) => bytes / MiB / (ms / 1000);

/** CPU seconds of a process (user + system), from /proc: QEMU runs the guest, so its CPU is the guest's work. */
function cpuMsOf(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** One timed run of fn, with this process's CPU (gateway, SDK and bench share it) and QEMU's over the same span. */
async function measured(qemuPid: number | undefined, fn: () => Promise<unknown>): Promise<{ ms: number; nodeCpuMs: number; qemuCpuMs: number }> {
  const q0 = qemuPid ? cpuMsOf(qemuPid) : 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { ms, nodeCpuMs: (c.user + c.system) / 1000, qemuCpuMs: qemuPid ? cpuMsOf(qemuPid) - q0 : 0 };
}

/** `sizeBytes` of random bytes as a stream of 1 MiB chunks, generated as sent: 1 GiB is never held whole. */
function randomStream(sizeBytes: number): Readable {
  const block = randomBytes(MiB);
  return Readable.from(
    (function* () {
      for (let i = 0; i < sizeBytes / MiB; i++) {
        const chunk = Buffer.from(block);
        chunk.writeUInt32BE(i, 0);
        yield chunk;
      }
    })(),
  );
}

/** MiB/s a guest command moved `bytes` at, timed inside the guest (the guest's own ceiling, no channel involved). */
async function guestRate(s: Sandbox, cmd: string, bytes: number): Promise<number> {
  const r = await s.commands.run(`s=$(date +%s%N); ${cmd}; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))`, { timeoutMs: 600_000 });
  return rate(bytes, Number(r.stdout.trim().split('\n').pop()));
}

/**
 * Rows for the files phase on one fresh sandbox of the server `config` points at. `home` holds the host-side files;
 * `bigMib` > 0 adds the large-file rows; the sandbox then asks for a root disk with room for two copies (a write
 * replaces the file only once it is whole).
 */
export async function filesBench(config: ConnectionConfig, opts: { home: string; quick: boolean; bigMib: number }): Promise<FilesRow[]> {
  const rows: FilesRow[] = [];
  const work = mkdtempSync(join(opts.home, 'bench-files-'));
  const diskMib = opts.bigMib > 0 ? Math.ceil((2 * opts.bigMib + 1024) / 1024) * 1024 : undefined;
  const s = await Sandbox.create({ ...config, timeoutS: 3600, snapshotIntervalS: 86400, diskMib });
  try {
    const started = (await s.events()).find((e) => e.type === 'sandbox.started');
    const qemuPid = (started?.data as { pid?: number } | undefined)?.pid;
    const n = opts.quick ? 1 : 3;

    for (const mib of [64, ...(opts.bigMib > 0 ? [opts.bigMib] : [])]) {
      const bytes = mib * MiB;
      const label = mib >= 1024 ? `${mib / 1024} GiB` : `${mib} MiB`;
      // Host baseline: the same bytes written to a host file, as a stream of the same chunks.
      const hostFile = join(work, 'host.bin');
      const host: number[] = [];
      for (let i = 0; i < n; i++) {
        host.push((await measured(undefined, () => pipeline(randomStream(bytes), createWriteStream(hostFile)))).ms);
      }
      const hostRate = rate(bytes, median(host));
      rows.push({ what: `host file write ${label} (baseline)`, samplesMs: host, note: `${hostRate.toFixed(0)} MiB/s` });
      // The guest's own ceiling: dd to its disk with fsync (file.write syncs too) and reading the file back.
      const ddWrite = await guestRate(s, `dd if=/dev/zero of=/root/dd.bin bs=1M count=${mib} conv=fsync 2>/dev/null`, bytes);
      const ddRead = await guestRate(s, 'echo 3 > /proc/sys/vm/drop_caches; cat /root/dd.bin > /dev/null', bytes);
      await s.commands.run('rm -f /root/dd.bin');

      const note = (what: string, xs: { ms: number; nodeCpuMs: number; qemuCpuMs: number }[], guestMiBs: number) => {
        const r = rate(bytes, median(xs.map((x) => x.ms)));
        const nodeCpu = median(xs.map((x) => x.nodeCpuMs)) / mib;
        const qemuCpu = median(xs.map((x) => x.qemuCpuMs)) / mib;
        return (
          `${r.toFixed(1)} MiB/s = ${((100 * r) / hostRate).toFixed(0)} % of host (target ≥ 50 %); guest alone ${what} ` +
          `${guestMiBs.toFixed(0)} MiB/s; CPU per MiB: node ${nodeCpu.toFixed(0)} ms, QEMU ${qemuCpu.toFixed(0)} ms`
        );
      };
      const writes: Awaited<ReturnType<typeof measured>>[] = [];
      const reads: Awaited<ReturnType<typeof measured>>[] = [];
      const cpIn: Awaited<ReturnType<typeof measured>>[] = [];
      const cpOut: Awaited<ReturnType<typeof measured>>[] = [];
      await pipeline(randomStream(bytes), createWriteStream(hostFile));
      for (let i = 0; i < n; i++) {
        writes.push(await measured(qemuPid, () => s.files.write('/root/bench.bin', randomStream(bytes))));
        reads.push(
          await measured(qemuPid, async () => {
            const body = await s.files.read('/root/bench.bin', { format: 'stream' });
            for await (const _ of body as unknown as AsyncIterable<Uint8Array>);
          }),
        );
        // cp is the CLI's path: a host file streamed up, and down into a host file.
        cpIn.push(await measured(qemuPid, () => s.files.write('/root/bench.bin', createReadStream(hostFile))));
        cpOut.push(
          await measured(qemuPid, async () => {
            const body = Readable.fromWeb((await s.files.read('/root/bench.bin', { format: 'stream' })) as WebReadableStream<Uint8Array>);
            await pipeline(body, createWriteStream(join(work, 'back.bin')));
          }),
        );
      }
      await s.files.remove('/root/bench.bin');
      rows.push({ what: `files.write ${label} into the guest`, samplesMs: writes.map((x) => x.ms), note: note('dd (fsync)', writes, ddWrite) });
      rows.push({ what: `files.read ${label} from the guest`, samplesMs: reads.map((x) => x.ms), note: note('cat', reads, ddRead) });
      rows.push({ what: `cp ${label} host → guest`, samplesMs: cpIn.map((x) => x.ms), note: note('dd (fsync)', cpIn, ddWrite) });
      rows.push({ what: `cp ${label} guest → host`, samplesMs: cpOut.map((x) => x.ms), note: note('cat', cpOut, ddRead) });
      rmSync(hostFile, { force: true });
      rmSync(join(work, 'back.bin'), { force: true });
    }

    // A source tree: 100 packages of 100 files of 50 B–1.5 KiB (base64 text), as one tar.
    const src = join(work, 'src');
    for (let d = 0; d < TREE_FILES / 100; d++) {
      mkdirSync(join(src, `pkg${d}`, 'lib'), { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(src, `pkg${d}`, 'lib', `mod${f}.ts`), randomBytes(50 + ((d * 100 + f) % 1100)).toString('base64'));
    }
    const tarFile = join(work, 'src.tar');
    execFileSync('tar', ['-cf', tarFile, '-C', src, '.']);
    const tarBytes = readFileSync(tarFile).length;
    const hostUnpack: number[] = [];
    const up: Awaited<ReturnType<typeof measured>>[] = [];
    const down: Awaited<ReturnType<typeof measured>>[] = [];
    const guestUnpack: number[] = [];
    for (let i = 0; i < n; i++) {
      const dst = join(work, `unpacked-${i}`);
      mkdirSync(dst);
      hostUnpack.push((await measured(undefined, async () => execFileSync('tar', ['-xf', tarFile, '-C', dst]))).ms);
      rmSync(dst, { recursive: true, force: true });
      await s.commands.run('rm -rf /root/tree');
      up.push(await measured(qemuPid, () => s.files.writeTar('/root/tree', createReadStream(tarFile))));
      down.push(
        await measured(qemuPid, async () => {
          const body = Readable.fromWeb((await s.files.readTar('/root/tree')) as WebReadableStream<Uint8Array>);
          await pipeline(body, createWriteStream(join(work, 'back.tar')));
        }),
      );
      // The guest's own ceiling: its tar unpacking the same archive from its own disk.
      await s.files.write('/root/src.tar', createReadStream(tarFile));
      const r = await s.commands.run(
        'rm -rf /root/t2 && mkdir /root/t2 && s=$(date +%s%N); tar -xf /root/src.tar -C /root/t2; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))',
        {
          timeoutMs: 600_000,
        },
      );
      guestUnpack.push(Number(r.stdout.trim()));
    }
    await s.commands.run('rm -rf /root/tree /root/t2 /root/src.tar');
    const hostMs = median(hostUnpack);
    rows.push({ what: `host tar -x of ${TREE_FILES} files (baseline)`, samplesMs: hostUnpack, note: `${(tarBytes / MiB).toFixed(1)} MiB tar` });
    rows.push({ what: `guest tar -x of the same tar (the guest alone)`, samplesMs: guestUnpack, note: `×${(median(guestUnpack) / hostMs).toFixed(1)} host` });
    const ratio = (xs: { ms: number }[]) => median(xs.map((x) => x.ms)) / hostMs;
    rows.push({
      what: `files.writeTar ${TREE_FILES} files into the guest`,
      samplesMs: up.map((x) => x.ms),
      note: `×${ratio(up).toFixed(1)} host tar -x (target ≤ ×3)`,
    });
    rows.push({
      what: `files.readTar ${TREE_FILES} files from the guest`,
      samplesMs: down.map((x) => x.ms),
      note: `×${ratio(down).toFixed(1)} host tar -x (target ≤ ×3)`,
    });
    return rows;
  } finally {
    await s.kill().catch(() => undefined);
    rmSync(work, { recursive: true, force: true });
  }
}
