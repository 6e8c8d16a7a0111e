// The replay phase's measurements: what recording costs an exec and a file write (one sandbox, recording on, then the
// same with recording off, in one run), and how fast a replay re-issues a recorded session.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';

export interface ReplayMeasure {
  what: string;
  samplesMs: number[];
  note: string;
}

/** Exec round trips and file writes of 1 and 10 MiB on one fresh sandbox of the server `config` points at. */
export async function inputCosts(config: ConnectionConfig, label: string, quick: boolean): Promise<ReplayMeasure[]> {
  const s = await Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 86400 });
  try {
    await s.commands.run('true');
    const exec: number[] = [];
    for (let i = 0; i < (quick ? 10 : 40); i++) {
      const t0 = performance.now();
      await s.commands.run('true');
      exec.push(performance.now() - t0);
    }
    const write = async (bytes: number, n: number) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        // New bytes each time: the store deduplicates repeated content, which would flatter the recording.
        const data = randomBytes(bytes);
        const t0 = performance.now();
        await s.files.write(`/root/bench-${i}.bin`, data);
        out.push(performance.now() - t0);
      }
      return out;
    };
    return [
      { what: `exec round trip (\`true\`), recording ${label}`, samplesMs: exec, note: '' },
      { what: `file write 1 MiB, recording ${label}`, samplesMs: await write(1024 * 1024, quick ? 5 : 20), note: '' },
      { what: `file write 10 MiB, recording ${label}`, samplesMs: await write(10 * 1024 * 1024, quick ? 3 : 8), note: '' },
    ];
  } finally {
    await s.kill();
  }
}

/** A recorded session of `inputs` inputs (commands, stdin, file writes) after a snapshot, then its replay; inputs per second. */
export async function replaySpeed(
  config: ConnectionConfig,
  quick: boolean,
): Promise<{ inputs: number; durationMs: number; inputsPerSecond: number; different: number }> {
  const s = await Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 86400 });
  try {
    await s.snapshot();
    const rounds = quick ? 3 : 6;
    for (let i = 0; i < rounds; i++) {
      await s.files.write(`/root/in-${i}.txt`, `input ${i}\n`);
      await s.commands.run(`cat /root/in-${i}.txt`);
      const h = await s.commands.exec(['head', '-n', '1'], { background: true, stdin: true });
      await h.sendStdin(`line ${i}\n`);
      await h.wait();
    }
    const report = await Sandbox.replay(s.id, config);
    return { inputs: report.inputs.length, durationMs: report.durationMs, inputsPerSecond: report.inputsPerSecond, different: report.counts.different };
  } finally {
    await s.kill();
  }
}
