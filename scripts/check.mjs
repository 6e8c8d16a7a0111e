#!/usr/bin/env node
// The fast checks a reviewer would otherwise do by hand (`npm run check`; `npm test` runs them first): each step is
// named, timed, and the first failure stops the run with what to do about it.
// Plain Node without dependencies. Usage: node scripts/check.mjs [--keep-going] [step ...]   (steps: see STEPS)
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const bin = (name) => join(repo, 'node_modules', '.bin', name);
// Go must never reach the network here: the modules have no dependencies to download, and a newer `go` line in a
// go.mod must not fetch a toolchain (GOTOOLCHAIN, ignored by Go releases before 1.21).
const goEnv = { ...process.env, GOPROXY: 'off', GOFLAGS: '-buildvcs=false', GOTOOLCHAIN: 'local' };

/** Runs a command with the terminal attached; returns its exit status (127 when it cannot start). */
function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: repo, ...opts });
  if (r.error) {
    console.error(`cannot run ${cmd}: ${r.error.message}`);
    return 127;
  }
  return r.status ?? 1;
}

/** Directories holding a go.mod (the guest agent, the jailer, any later one), outside node_modules and hidden or build directories. */
function goModules(dir = repo, depth = 0, out = []) {
  const entries = readdirSync(dir, { withFileTypes: true });
  if (entries.some((e) => e.isFile() && e.name === 'go.mod')) out.push(dir);
  if (depth < 3) {
    for (const e of entries) {
      if (e.isDirectory() && e.name !== 'node_modules' && e.name !== 'build' && !e.name.startsWith('.')) goModules(join(dir, e.name), depth + 1, out);
    }
  }
  return out;
}

function goCheck() {
  const modules = goModules();
  if (modules.length === 0) return { status: 0, note: 'no Go modules' };
  for (const dir of modules) {
    const name = relative(repo, dir);
    const fmt = spawnSync('gofmt', ['-l', '.'], { cwd: dir, encoding: 'utf8', env: goEnv });
    if (fmt.error) return { status: 127, hint: `cannot run gofmt (${fmt.error.message}): install Go (node scripts/setup.mjs)` };
    if (fmt.status !== 0 || fmt.stdout.trim() !== '') {
      process.stdout.write(fmt.stdout);
      process.stderr.write(fmt.stderr);
      return { status: 1, hint: `gofmt lists files that are not formatted: gofmt -w ${name}` };
    }
    console.log(`gofmt: ${name} formatted`);
    if (run('go', ['vet', './...'], { cwd: dir, env: goEnv }) !== 0) return { status: 1, hint: `go vet found problems in ${name}` };
    console.log(`go vet: ${name} clean`);
    if (run('go', ['test', './...'], { cwd: dir, env: goEnv }) !== 0) return { status: 1, hint: `go test failed in ${name}` };
  }
  return { status: 0 };
}

/** In order, cheapest first, so the common mistakes fail within seconds. */
const STEPS = [
  {
    name: 'boundaries',
    what: 'allowed package edges, no import cycle or deep import, clocked code on its Clock, the architecture map current (scripts/check-boundaries.mjs)',
    run: () => ({ status: run(process.execPath, [join(repo, 'scripts/check-boundaries.mjs')]) }),
    hint: 'import through the package index (or an exported subpath) within the EDGES table of scripts/check-boundaries.mjs; take time and timers from the Clock; name files in docs/ARCHITECTURE.md where they are',
  },
  {
    name: 'deps',
    what: 'each package declares what it imports (scripts/check-deps.mjs)',
    run: () => ({ status: run(process.execPath, [join(repo, 'scripts/check-deps.mjs')]) }),
    hint: 'fix the package.json files named above, then `npm install --no-audit --no-fund` and commit package-lock.json',
  },
  {
    name: 'gen',
    what: 'generated files match spec/ (tsx scripts/gen.ts --check)',
    run: () => ({ status: run(bin('tsx'), [join(repo, 'scripts/gen.ts'), '--check']) }),
    hint: 'run `npm run gen` and commit what it writes',
  },
  {
    name: 'lint',
    what: 'Biome linter, warnings are errors (biome.jsonc)',
    run: () => ({ status: run(bin('biome'), ['lint', '--error-on-warnings', '.']) }),
    hint: 'fix the findings above; `npx biome lint --write <file>` applies the safe fixes',
  },
  {
    name: 'format',
    what: 'Biome formatter (biome.jsonc)',
    run: () => ({ status: run(bin('biome'), ['format', '.']) }),
    hint: 'run `npm run format` and commit the result',
  },
  {
    name: 'types',
    what: 'TypeScript type check of the whole tree (tsconfig.json) and of the web console (packages/console/tsconfig.json)',
    // Incremental: the build info under node_modules/.cache makes an unchanged tree a re-check of what changed only.
    run: () => ({
      status:
        run(bin('tsc'), ['-p', 'tsconfig.json', '--noEmit', '--incremental', '--tsBuildInfoFile', 'node_modules/.cache/sandglass/tsc.tsbuildinfo']) ||
        // Browser code (DOM types, JSX) under its own settings; vite's build strips types without checking them.
        run(bin('tsc'), [
          '-p',
          'packages/console/tsconfig.json',
          '--incremental',
          '--tsBuildInfoFile',
          'node_modules/.cache/sandglass/tsc-console.tsbuildinfo',
        ]),
    }),
    hint: 'fix the type errors above (`npm run typecheck` runs this step alone)',
  },
  {
    name: 'go',
    what: 'gofmt -l, go vet and go test for each Go module (agent/, jailer/)',
    run: goCheck,
    hint: 'see the Go output above',
  },
];

const args = process.argv.slice(2);
const keepGoing = args.includes('--keep-going');
const wanted = args.filter((a) => a !== '--keep-going');
for (const w of wanted) {
  if (!STEPS.some((s) => s.name === w)) {
    console.error(`unknown step ${w} (steps: ${STEPS.map((s) => s.name).join(', ')}; option: --keep-going)`);
    process.exit(2);
  }
}
const steps = wanted.length === 0 ? STEPS : STEPS.filter((s) => wanted.includes(s.name));

const started = performance.now();
const failed = [];
for (const [i, step] of steps.entries()) {
  console.log(`\n[check ${i + 1}/${steps.length}] ${step.name}: ${step.what}`);
  const t0 = performance.now();
  const result = step.run();
  const seconds = ((performance.now() - t0) / 1000).toFixed(1);
  if (result.status === 0) {
    console.log(`[check] ${step.name} passed in ${seconds}s${result.note ? ` (${result.note})` : ''}`);
    continue;
  }
  console.error(`[check] ${step.name} FAILED in ${seconds}s: ${result.hint ?? step.hint}`);
  failed.push(step.name);
  if (!keepGoing) {
    const skipped = steps.slice(i + 1).map((s) => s.name);
    if (skipped.length > 0) console.error(`[check] not run: ${skipped.join(', ')} (\`npm run check -- --keep-going\` runs every step)`);
    break;
  }
}
const total = ((performance.now() - started) / 1000).toFixed(1);
if (failed.length > 0) {
  console.error(`\n[check] failed: ${failed.join(', ')} (${total}s)`);
  process.exit(1);
}
console.log(`\n[check] all ${steps.length} checks passed in ${total}s`);
