// What the E2B compatibility layer costs: the same sandbox driven through the unmodified `e2b` SDK and through
// `@sandglass/sdk`, alternating call by call so both see the same host load.
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox } from '@sandglass/sdk';

export interface E2bBenchRow {
  what: string;
  samplesMs: number[];
  note: string;
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** `apiUrl`/`gatewayUrl` are the server's own; the E2B SDK is pointed at their `/e2b` prefixes as a user would. */
export async function e2bBench(opts: { apiUrl: string; apiKey: string; gatewayUrl: string; quick: boolean }): Promise<E2bBenchRow[]> {
  const sg = await Sandbox.create({ apiUrl: opts.apiUrl, apiKey: opts.apiKey, timeoutS: 1800 });
  try {
    const e2b = await E2bSandbox.connect(sg.id, { apiKey: opts.apiKey, apiUrl: `${opts.apiUrl}/e2b`, sandboxUrl: `${opts.gatewayUrl}/e2b` });
    const n = opts.quick ? 10 : 40;
    const sgRun: number[] = [];
    const sgLogin: number[] = [];
    const e2bRun: number[] = [];
    // Warm both paths (TCG translates each new code path once).
    await sg.commands.run('true');
    await e2b.commands.run('true');
    for (let i = 0; i < n; i++) {
      sgRun.push(await timed(() => sg.commands.run('true')));
      // The same work the E2B SDK asks for: a login shell (`/bin/bash -l -c <cmd>`) as E2B's default user.
      sgLogin.push(await timed(() => sg.commands.exec(['/bin/bash', '-l', '-c', 'true'], { user: 'user' })));
      e2bRun.push(await timed(() => e2b.commands.run('true')));
    }

    const sizeBytes = 10 * 1024 * 1024;
    const data = randomBytes(sizeBytes);
    const want = sha256(data);
    const rounds = opts.quick ? 3 : 8;
    const sgWrite: number[] = [];
    const sgRead: number[] = [];
    const e2bWrite: number[] = [];
    const e2bRead: number[] = [];
    for (let i = 0; i < rounds; i++) {
      sgWrite.push(await timed(() => sg.files.write('/tmp/bench-sg.bin', Readable.from([data]))));
      e2bWrite.push(await timed(() => e2b.files.write('/tmp/bench-e2b.bin', new Uint8Array(data).buffer)));
      let back: Uint8Array = new Uint8Array();
      sgRead.push(await timed(async () => void (back = await sg.files.read('/tmp/bench-sg.bin', { format: 'bytes' }))));
      if (sha256(back) !== want) throw new Error('the Sandglass SDK read back other bytes');
      e2bRead.push(await timed(async () => void (back = await e2b.files.read('/tmp/bench-e2b.bin', { format: 'bytes' }))));
      if (sha256(back) !== want) throw new Error('the E2B SDK read back other bytes');
    }
    const mibps = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      return `${(sizeBytes / 1024 / 1024 / (s[Math.floor(s.length / 2)]! / 1000)).toFixed(0)} MiB/s`;
    };
    const ratio = (a: number[], b: number[]) => {
      const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
      return `${(med(a) / med(b)).toFixed(2)}× the Sandglass SDK (p50)`;
    };
    return [
      { what: "`commands.run('true')`, @sandglass/sdk (`bash -c`, baseline)", samplesMs: sgRun, note: '' },
      { what: '`/bin/bash -l -c true` as `user`, @sandglass/sdk (what the E2B SDK runs)', samplesMs: sgLogin, note: ratio(sgLogin, sgRun) },
      {
        what: "`commands.run('true')`, e2b SDK",
        samplesMs: e2bRun,
        note: `${ratio(e2bRun, sgLogin).replace('the Sandglass SDK', 'the same login shell via @sandglass/sdk')}`,
      },
      { what: 'write 10 MiB, @sandglass/sdk (baseline)', samplesMs: sgWrite, note: mibps(sgWrite) },
      { what: 'write 10 MiB, e2b SDK', samplesMs: e2bWrite, note: `${mibps(e2bWrite)}; ${ratio(e2bWrite, sgWrite)}` },
      { what: 'read 10 MiB, @sandglass/sdk (baseline)', samplesMs: sgRead, note: mibps(sgRead) },
      { what: 'read 10 MiB, e2b SDK', samplesMs: e2bRead, note: `${mibps(e2bRead)}; ${ratio(e2bRead, sgRead)}` },
    ];
  } finally {
    await sg.kill().catch(() => undefined);
  }
}
