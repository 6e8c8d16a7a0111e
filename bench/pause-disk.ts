// Disk-only pause against a memory pause (BENCH_ONLY=pause-disk in bench/run.ts): bytes the pause snapshot stored,
// pause latency, and resume latency up to the first command's answer, on twin sandboxes with the same files, one run.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { type ConnectionConfig, Sandbox } from '@sandglass/sdk';

export interface PauseDiskRow {
  what: string;
  samplesMs: number[];
  note: string;
}

const MiB = 1024 * 1024;

/** Each round: two fresh sandboxes each write an 8 MiB file and start one background process, then pause and resume. */
export async function pauseDiskBench(config: ConnectionConfig, opts: { rounds: number }): Promise<PauseDiskRow[]> {
  // A resume that boots waits on a TCG cold boot: longer than the SDK's default request timeout on a busy host.
  const slow = { ...config, requestTimeoutMs: 600_000 };
  const t = {
    memory: { pause: [] as number[], resume: [] as number[], bytes: [] as number[] },
    disk: { pause: [] as number[], resume: [] as number[], bytes: [] as number[] },
  };
  for (let i = 0; i < opts.rounds; i++) {
    for (const kind of ['memory', 'disk'] as const) {
      // Fresh bytes per sandbox: the twins share a tenant, and the second would otherwise find the file's chunks stored.
      const data = randomBytes(8 * MiB);
      const s = await Sandbox.create({ ...config, timeoutS: 1800, snapshotIntervalS: 3600 });
      try {
        await s.files.write('/root/data.bin', data);
        await s.commands.run('sleep 100000', { background: true, timeoutMs: 0 });
        const t0 = performance.now();
        const snap = await s.pause({ keepMemory: kind === 'memory' });
        t[kind].pause.push(performance.now() - t0);
        t[kind].bytes.push(snap.sizeAddedBytes);
        const t1 = performance.now();
        const r = await Sandbox.resume(s.id, slow);
        await r.commands.run('true', { timeoutMs: 600_000 });
        t[kind].resume.push(performance.now() - t1);
      } finally {
        await s.kill().catch(() => undefined);
      }
    }
  }
  const mib = (xs: number[]) => `${(xs.reduce((a, b) => a + b, 0) / xs.length / MiB).toFixed(1)} MiB stored (mean)`;
  const ratio = (a: number[], b: number[]) => `${(median(a) / median(b)).toFixed(2)}× the memory row's p50`;
  return [
    { what: 'pause, memory kept (sandbox 256 MiB, 8 MiB file)', samplesMs: t.memory.pause, note: mib(t.memory.bytes) },
    { what: 'pause, keepMemory: false', samplesMs: t.disk.pause, note: `${mib(t.disk.bytes)}; ${ratio(t.disk.pause, t.memory.pause)}` },
    { what: 'resume → first exec, memory snapshot (restore)', samplesMs: t.memory.resume, note: 'processes continue' },
    { what: 'resume → first exec, disk-only snapshot (cold boot)', samplesMs: t.disk.resume, note: `${ratio(t.disk.resume, t.memory.resume)}; processes gone` },
  ];
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
}
