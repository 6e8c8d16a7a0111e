// `npm run chaos -- --minutes N --seed S [--port P] [--workers W] [--artifacts DIR] [--dir DIR]`: one chaos run on a
// server of its own; prints the table and exits non-zero on any violated invariant or lost data.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chaosSecret, formatResult, offlineChecks, runChaos } from './chaos.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}

// `--check HOME --seed S`: only the offline invariants, on the home of a run whose server is stopped.
const checkHome = arg('check', '');
if (checkHome) {
  const dataLost: string[] = [];
  const results = await offlineChecks(checkHome, [], chaosSecret(Number(arg('seed', '0'))), dataLost);
  for (const r of results) console.log(`${r.ok ? 'ok      ' : 'VIOLATED'} ${r.name}: ${r.detail}`);
  process.exit(results.every((r) => r.ok) ? 0 : 1);
}

const minutes = Number(arg('minutes', '5'));
const seed = Number(arg('seed', String(Date.now() % 100000)));
if (!(minutes > 0) || !Number.isInteger(seed)) {
  console.error('usage: npm run chaos -- --minutes N --seed S [--port P] [--workers W] [--artifacts DIR] [--dir DIR]');
  process.exit(2);
}
const result = await runChaos({
  minutes,
  seed,
  port: Number(arg('port', '7600')),
  workers: Number(arg('workers', '2')),
  forkChecks: Number(arg('fork-checks', '8')),
  artifacts: arg('artifacts', join(process.env.SANDGLASS_TEST_HOME ?? join(root, '.sandglass-test'), 'artifacts')),
  workDir: arg('dir', process.env.TMPDIR ?? '/tmp'),
});
console.log(formatResult(result));
console.log(`\nreproduce: npm run chaos -- --minutes ${minutes} --seed ${seed}`);
process.exit(result.ok ? 0 : 1);
