// `npx tsx --import ./bin/workspace-source.mjs bench/python-sdk.ts` against a running server (SANDGLASS_HOME or
// SANDGLASS_URL/SANDGLASS_API_KEY): the Python SDK's `commands.run('true')` next to the TypeScript SDK's on the same
// sandbox, round by round. The Python side is one long-lived interpreter (Debian's, the package from sdks/python/src)
// that times each call itself, as this process times its own, so neither figure holds a process start or a pipe hop.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import Table from 'cli-table3';
import { Sandbox, resolveConfig } from '@sandglass/sdk';

const ROUNDS = Number(process.env.BENCH_N ?? 30);
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

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const fmt = (x: number) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;

async function main(): Promise<void> {
  const { apiUrl, apiKey } = await resolveConfig();
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
    for (let i = 0; i < ROUNDS; i++) {
      python.push(await viaPython());
      ts.push(await viaTs());
    }
    const t = new Table({ head: ['what', 'n', 'p50', 'p95', 'ratio'] });
    t.push(["TypeScript SDK `commands.run('true')` (baseline)", ROUNDS, fmt(pct(ts, 50)), fmt(pct(ts, 95)), 'baseline']);
    t.push(["Python SDK `commands.run('true')`", ROUNDS, fmt(pct(python, 50)), fmt(pct(python, 95)), `${(pct(python, 50) / pct(ts, 50)).toFixed(2)}× (p50)`]);
    process.stdout.write(`${t.toString()}\n`);
  } finally {
    py.stdin.end();
    await sbx.kill();
  }
}

await main();
