// `npx tsx bench/server-start.ts` (BENCH_N rounds, default 15): what compiling the servers saves a `sandglass up`,
// `gateway`, `control-plane` or `doctor` before it does anything — loading @sandglass/server — compiled
// (packages/server/dist/server.js, built by setup) against the sources through tsx (its transform cache warm, as on
// every start after the first), with a bare `node -e 0` as the baseline. One fresh Node process per measurement, the
// three kinds taking turns round by round so load from other work falls on each alike. Needs no server.
import { spawnSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import Table from 'cli-table3';
import { buildServerBundle, SERVER_BUNDLE, serverBundleFresh } from '../bin/cli-bundle.mjs';

const ROUNDS = Number(process.env.BENCH_N ?? 15);
const repo = fileURLToPath(new URL('..', import.meta.url));

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** Wall time of one Node process running `code` as a module, from spawn to exit. */
function run(args: string[]): number {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { cwd: repo, stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`node ${args.join(' ')} failed: ${r.stderr}`);
  return ms;
}

const KINDS: Array<{ name: string; args: string[] }> = [
  { name: '`node -e 0` (baseline)', args: ['-e', '0'] },
  { name: 'compiled (`packages/server/dist`)', args: ['--input-type=module', '-e', `await import(${JSON.stringify(pathToFileURL(SERVER_BUNDLE).href)})`] },
  {
    name: 'sources through tsx',
    args: ['--import', './bin/workspace-source.mjs', '--import', 'tsx/esm', '--input-type=module', '-e', "await import('@sandglass/server')"],
  },
];

if (!serverBundleFresh() && buildServerBundle() !== 0) throw new Error('esbuild failed to bundle the servers');
// One untimed round: tsx's transform cache filled, the files in the page cache.
for (const k of KINDS) run(k.args);
const times = KINDS.map(() => [] as number[]);
for (let i = 0; i < ROUNDS; i++) for (const [j, k] of KINDS.entries()) times[j]!.push(run(k.args));

const base = pct(times[0]!, 50);
const table = new Table({ head: ['load @sandglass/server', 'p50', 'p95', 'p50 − baseline'] });
for (const [j, k] of KINDS.entries()) {
  const p50 = pct(times[j]!, 50);
  table.push([k.name, `${p50.toFixed(0)} ms`, `${pct(times[j]!, 95).toFixed(0)} ms`, j === 0 ? '—' : `${(p50 - base).toFixed(0)} ms`]);
}
console.log(table.toString());
const [compiled, sources] = [pct(times[1]!, 50) - base, pct(times[2]!, 50) - base];
console.log(`${ROUNDS} rounds; compiled loads in ${(sources / compiled).toFixed(2)}× less time than the sources (over the baseline)`);
