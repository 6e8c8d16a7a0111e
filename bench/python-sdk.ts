// Part of `BENCH_ONLY=clients` (bench/clients.ts): the Python SDK's `commands.run('true')` next to the TypeScript SDK's
// on the same sandbox, round by round. The Python side is one long-lived interpreter (Debian's, the package from sdks/python/src)
// that times each call itself, as this process times its own, so neither figure holds a process start or a pipe hop.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Sandbox } from '@sandglass/sdk';

const src = fileURLToPath(new URL('../sdks/python/src', import.meta.url));
// Reads a line per call; answers the milliseconds commands.run('true') took.
const DRIVER = `
import sys, time
from sandglass import Sandbox
sbx = Sandbox.connect(sys.argv[1])
for _ in sys.stdin:
    t0 = time.perf_counter()
    sbx.commands.run("true")
    print((time.perf_counter() - t0) * 1000, flush=True)
`;

/** Milliseconds per call, both clients alternating round by round on one sandbox. */
export async function pythonSdkBench({ apiUrl, apiKey }: { apiUrl: string; apiKey: string }, rounds: number): Promise<{ ts: number[]; python: number[] }> {
  const sbx = await Sandbox.create({ apiUrl, apiKey, timeoutS: 900 });
  const py = spawn('/usr/bin/python3', ['-c', DRIVER, sbx.id], {
    env: { PATH: process.env.PATH ?? '', PYTHONPATH: src, SANDGLASS_URL: apiUrl, SANDGLASS_API_KEY: apiKey },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const answers = createInterface({ input: py.stdout })[Symbol.asyncIterator]();
  const viaPython = async (): Promise<number> => {
    py.stdin.write('run\n');
    const line = await answers.next();
    if (line.done) throw new Error('the Python driver exited');
    return Number(line.value);
  };
  const viaTs = async (): Promise<number> => {
    const t0 = performance.now();
    await sbx.commands.run('true');
    return performance.now() - t0;
  };
  try {
    // Warm both (each client's access grant and connection; TCG translates each new code path once).
    await viaPython();
    await viaTs();
    const python: number[] = [];
    const ts: number[] = [];
    // Interleaved, so both see the same host load.
    for (let i = 0; i < rounds; i++) {
      python.push(await viaPython());
      ts.push(await viaTs());
    }
    return { ts, python };
  } finally {
    py.stdin.end();
    await sbx.kill();
  }
}
