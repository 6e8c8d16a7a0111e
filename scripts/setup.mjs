#!/usr/bin/env node
// Prepares a machine to run Sandglass: system packages, npm dependencies, the guest agent and the jailer; idempotent and quick when all is in place.
// Plain Node ESM without dependencies: it runs on a fresh clone, before `npm ci`.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, readdirSync, statSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
for (const a of args) {
  if (a !== '--test') fail(`unknown option ${a} (usage: node scripts/setup.mjs [--test])`);
}
const testing = args.includes('--test');

/** Command that must be on the machine → Debian package that provides it. */
const REQUIRED = [
  ['qemu-system-x86_64', 'qemu-system-x86'],
  ['qemu-img', 'qemu-utils'],
  ['debootstrap', 'debootstrap'],
  ['mkfs.ext4', 'e2fsprogs'],
  ['go', 'golang-go'],
  ['cpio', 'cpio'],
  ['zstd', 'zstd'],
  // The gateway's sparse-copy helper (packages/vmm/helpers): copies guest RAM without a fork per copy.
  ['python3', 'python3'],
];
/**
 * Needed to run the tests (`--test`) only: the unit run's throwaway PostgreSQL (packages/db/src/test-postgres.ts) and the
 * multi-node test's load balancer. Each: what is looked for → its Debian package → whether it is there.
 */
const TEST_REQUIRED = [
  // Not a command on PATH: Debian keeps a server version's programs in a directory of their own.
  ['/usr/lib/postgresql/15/bin/initdb', 'postgresql-15', () => existsSync('/usr/lib/postgresql/15/bin/initdb')],
  ['haproxy', 'haproxy', () => hasCommand('haproxy')],
];
const isRoot = process.getuid?.() === 0;

function log(msg) {
  console.log(`[setup] ${msg}`);
}

function fail(msg) {
  console.error(`[setup] ${msg}`);
  process.exit(1);
}

/** Runs a command with the terminal attached; exits setup when it fails. */
function run(cmd, cmdArgs, opts = {}) {
  const r = spawnSync(cmd, cmdArgs, { stdio: 'inherit', cwd: repo, ...opts });
  if (r.error) fail(`cannot run ${cmd}: ${r.error.message}`);
  if (r.status !== 0) fail(`${cmd} ${cmdArgs.join(' ')} failed (exit status ${r.status ?? r.signal})`);
}

// sbin directories are searched too: a non-root PATH often lacks them, yet debootstrap and mkfs.ext4 live there.
const searchPath = [...(process.env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/sbin', '/sbin'].filter(Boolean);
function hasCommand(name) {
  return searchPath.some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

function ensureSystemPackages() {
  const required = [...REQUIRED.map(([cmd, pkg]) => [cmd, pkg, () => hasCommand(cmd)]), ...(testing ? TEST_REQUIRED : [])];
  const missing = required.filter(([, , present]) => !present());
  if (missing.length === 0) {
    log(`system tools present (${required.map(([c]) => c).join(', ')})`);
    return;
  }
  const packages = [...new Set(missing.map(([, pkg]) => pkg))];
  const install = ['apt-get', 'install', '-y', '--no-install-recommends', ...packages];
  if (!isRoot) {
    console.error(`[setup] missing commands: ${missing.map(([c, p]) => `${c} (package ${p})`).join(', ')}`);
    console.error('[setup] install them as root, then run setup again:');
    console.error(`  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive ${install.join(' ')}`);
    process.exit(1);
  }
  log(`installing ${packages.join(' ')} (missing: ${missing.map(([c]) => c).join(', ')})`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  run('apt-get', ['update'], { env });
  run(install[0], install.slice(1), { env });
  const still = required.filter(([, , present]) => !present());
  if (still.length > 0) fail(`still missing after apt-get install: ${still.map(([c]) => c).join(', ')}`);
}

function mtimeMs(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

function ensureNodeModules() {
  const installed = mtimeMs(join(repo, 'node_modules/.package-lock.json'));
  const lock = mtimeMs(join(repo, 'package-lock.json'));
  if (installed !== undefined && lock !== undefined && installed >= lock) {
    log('npm dependencies up to date');
    return;
  }
  log(installed === undefined ? 'installing npm dependencies (npm ci)' : 'package-lock.json changed: npm ci');
  run('npm', ['ci', '--no-audit', '--no-fund']);
}

/** Builds a static Go binary of this repository (agent/, jailer/) with its build.sh when its sources are newer. */
function ensureGoBinary(dirName, binaryName, what) {
  const srcDir = join(repo, dirName);
  const binary = join(srcDir, 'build', binaryName);
  const built = mtimeMs(binary);
  const sources = readdirSync(srcDir).filter((f) => f.endsWith('.go') || f === 'go.mod' || f === 'go.sum' || f === 'build.sh');
  const newest = Math.max(...sources.map((f) => mtimeMs(join(srcDir, f)) ?? Infinity));
  if (built !== undefined && built >= newest) {
    log(`${what} up to date`);
    return;
  }
  log(`building the ${what} (${dirName}/build.sh)`);
  run('bash', [join(srcDir, 'build.sh'), binary], { stdio: ['ignore', 'ignore', 'inherit'] });
}

ensureSystemPackages();
ensureNodeModules();
ensureGoBinary('agent', 'sandglass-agent', 'guest agent');
// Every VM starts through it when Sandglass runs as root (docs/design/jailer.md).
ensureGoBinary('jailer', 'sandglass-jailer', 'jailer');
if (!isRoot) log('not root: VMs will run without the jailer, as this user (docs/design/jailer.md)');
log('ready');
