// Part of `BENCH_ONLY=clients` (bench/clients.ts): what compiling the servers saves a `sandglass up`, `gateway`,
// `control-plane` or `doctor` before it does anything — loading @sandglass/server — compiled
// (packages/server/dist/server.js, built by setup) against the sources through tsx (its transform cache warm, as on
// every start after the first), with a bare `node -e 0` as the baseline. One fresh Node process per measurement, the
// kinds taking turns round by round so load from other work falls on each alike. Needs no server.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildServerBundle, SERVER_BUNDLE, serverBundleFresh } from '../bin/cli-bundle.mjs';

const repo = fileURLToPath(new URL('..', import.meta.url));

/**
 * Wall time of one process, from spawn to exit; a failure throws with its stderr. Never spawnSync: the server being
 * measured against may run in this very process, and a blocked event loop would leave its requests unanswered.
 */
export async function timedSpawn(command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const t0 = performance.now();
  const child = spawn(command, args, { cwd: repo, env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const code = await new Promise<number | null>((resolve, reject) => child.on('error', reject).on('close', resolve));
  const ms = performance.now() - t0;
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${stderr}`);
  return ms;
}

/** Runs each kind once untimed (caches warm), then `rounds` rounds of all kinds in turn: milliseconds per kind. */
export async function interleaved(kinds: Array<() => Promise<number>>, rounds: number): Promise<number[][]> {
  for (const k of kinds) await k();
  const times = kinds.map(() => [] as number[]);
  for (let i = 0; i < rounds; i++) for (const [j, k] of kinds.entries()) times[j]!.push(await k());
  return times;
}

export async function serverStartBench(rounds: number): Promise<{ baseline: number[]; compiled: number[]; sources: number[] }> {
  if (!serverBundleFresh() && buildServerBundle() !== 0) throw new Error('esbuild failed to bundle the servers');
  const node = (args: string[]) => () => timedSpawn(process.execPath, args);
  const [baseline, compiled, sources] = await interleaved(
    [
      node(['-e', '0']),
      node(['--input-type=module', '-e', `await import(${JSON.stringify(pathToFileURL(SERVER_BUNDLE).href)})`]),
      node(['--import', './bin/workspace-source.mjs', '--import', 'tsx/esm', '--input-type=module', '-e', "await import('@sandglass/server')"]),
    ],
    rounds,
  );
  return { baseline: baseline!, compiled: compiled!, sources: sources! };
}
