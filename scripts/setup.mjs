#!/usr/bin/env node
// Prepares a machine to run Sandglass: system packages, npm dependencies, the guest agent and the jailer; idempotent and quick when all is in place.
// Plain Node ESM without dependencies: it runs on a fresh clone, before `npm ci`.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildCliBundle, buildServerBundle, cliBundleFresh, serverBundleFresh } from '../bin/cli-bundle.mjs';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
for (const a of args) {
  if (a !== '--test' && a !== '--list-packages') fail(`unknown option ${a} (usage: node scripts/setup.mjs [--test] [--list-packages])`);
}
const testing = args.includes('--test');
/** An offline bundle (npm run bundle) carries everything: nothing is downloaded, from apt or npm. */
const bundleDir = join(repo, 'bundle');
const bundled = existsSync(join(bundleDir, 'bundle.json'));

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
 * Needed to run the tests (`--test`) only: the unit run's throwaway PostgreSQL (packages/db/src/test-postgres.ts), the
 * multi-node test's load balancer and the BYOK tests' SoftHSM2. Each: what is looked for → its Debian package → whether it is there.
 */
const TEST_REQUIRED = [
  // Not a command on PATH: Debian keeps a server version's programs in a directory of their own.
  ['/usr/lib/postgresql/15/bin/initdb', 'postgresql-15', () => existsSync('/usr/lib/postgresql/15/bin/initdb')],
  ['haproxy', 'haproxy', () => hasCommand('haproxy')],
  // The PKCS#11 HSM of the BYOK tests (packages/kms, tests/byok.test.ts): its module and the token tool.
  ['/usr/lib/softhsm/libsofthsm2.so', 'softhsm2', () => existsSync('/usr/lib/softhsm/libsofthsm2.so') && hasCommand('softhsm2-util')],
  // The air-gap proof (tests/airgap.test.ts): every connect() of a session in a loopback-only namespace, recorded.
  ['strace', 'strace', () => hasCommand('strace')],
  // The web console's browser tests (tests/console.test.ts) drive Debian's Chromium through playwright-core.
  ['/usr/bin/chromium', 'chromium', () => existsSync('/usr/bin/chromium')],
  // The Python SDK's suite (tests/python-sdk.test.ts): Debian's pytest, and a virtual environment to pip-install
  // sdks/python into, offline, with Debian's setuptools. Debian's interpreter: `python3` on PATH may be another one.
  ['pytest (/usr/bin/python3 -m pytest)', 'python3-pytest', () => pythonHas('pytest')],
  ['ensurepip (/usr/bin/python3 -m venv)', 'python3-venv', () => pythonHas('ensurepip')],
  ['setuptools (/usr/bin/python3)', 'python3-setuptools', () => pythonHas('setuptools')],
  // The Python SDK reads sandglass.template.yaml with PyYAML; the drift test of its template builder runs it too.
  ['yaml (/usr/bin/python3)', 'python3-yaml', () => pythonHas('yaml')],
];
const isRoot = process.getuid?.() === 0;

/** Whether Debian's Python (/usr/bin/python3) can import a module. */
function pythonHas(module) {
  return spawnSync('/usr/bin/python3', ['-c', `import ${module}`], { stdio: 'ignore' }).status === 0;
}

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
  // From a bundle: every .deb it carries, resolved among themselves and what is installed, with no package lists
  // and no download (apt fails rather than fetch anything missing).
  const install = bundled
    ? [
        'apt-get',
        'install',
        '-y',
        '--no-install-recommends',
        '--no-download',
        '-o',
        'Dir::Etc::SourceList=/dev/null',
        '-o',
        'Dir::Etc::SourceParts=/dev/null',
        ...readdirSync(join(bundleDir, 'debs')).map((f) => join(bundleDir, 'debs', f)),
      ]
    : ['apt-get', 'install', '-y', '--no-install-recommends', ...packages];
  if (!isRoot) {
    console.error(`[setup] missing commands: ${missing.map(([c, p]) => `${c} (package ${p})`).join(', ')}`);
    console.error('[setup] install them as root, then run setup again:');
    console.error(`  ${bundled ? '' : 'sudo apt-get update && '}sudo DEBIAN_FRONTEND=noninteractive ${install.join(' ')}`);
    process.exit(1);
  }
  log(`installing ${packages.join(' ')} (missing: ${missing.map(([c]) => c).join(', ')})`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (!bundled) run('apt-get', ['update'], { env });
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
  if (bundled) fail('node_modules is missing or older than package-lock.json, and an offline bundle cannot run npm ci: unpack the bundle again');
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

/** The newest modification time of any file under a directory. */
function newestIn(d) {
  return Math.max(
    ...readdirSync(d, { withFileTypes: true }).map((e) => (e.isDirectory() ? newestIn(join(d, e.name)) : (mtimeMs(join(d, e.name)) ?? Infinity))),
  );
}

/** Builds the web console (packages/console) into its dist/ when a source is newer than the build; served under /console. */
function ensureConsole() {
  const dir = join(repo, 'packages/console');
  const built = mtimeMs(join(dir, 'dist/index.html'));
  const newest = Math.max(newestIn(join(dir, 'src')), ...['index.html', 'vite.config.ts', 'package.json'].map((f) => mtimeMs(join(dir, f)) ?? Infinity));
  if (built !== undefined && built >= newest) {
    log('web console up to date');
    return;
  }
  log('building the web console (packages/console, vite build)');
  run('npx', ['vite', 'build', '--logLevel', 'warn'], { cwd: dir });
}

/**
 * Compiles the TypeScript SDK (packages/sdk) into its dist/ when a source is newer: what `npm pack` ships to a project
 * outside this repository. The workspace itself runs the sources (the "@sandglass/source" export condition).
 */
function ensureSdk() {
  const dir = join(repo, 'packages/sdk');
  const built = mtimeMs(join(dir, 'dist/index.js'));
  const newest = Math.max(newestIn(join(dir, 'src')), ...['tsconfig.build.json', 'package.json'].map((f) => mtimeMs(join(dir, f)) ?? Infinity));
  if (built !== undefined && built >= newest) {
    log('TypeScript SDK up to date');
    return;
  }
  log('building the TypeScript SDK (packages/sdk, tsc -p tsconfig.build.json)');
  run(join(repo, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], { cwd: dir });
}

/**
 * Compiles the CLI into packages/cli/dist and the servers into packages/server/dist when a source is newer
 * (bin/cli-bundle.mjs); bin/sandglass runs them then.
 */
function ensureCli() {
  if (cliBundleFresh()) {
    log('compiled CLI up to date');
  } else {
    log('compiling the CLI (packages/cli/dist/sandglass.js, esbuild)');
    if (buildCliBundle() !== 0) fail('esbuild failed to bundle the CLI (its errors are above)');
  }
  if (serverBundleFresh()) {
    log('compiled servers up to date');
  } else {
    log('compiling the servers (packages/server/dist/server.js, esbuild)');
    if (buildServerBundle() !== 0) fail('esbuild failed to bundle the servers (its errors are above)');
  }
}

/** Checks the bundle's SHA256SUMS once, before anything from it is installed or run. */
function verifyBundle() {
  const stamp = join(bundleDir, '.verified');
  if (existsSync(stamp)) return;
  log('offline bundle: checking SHA256SUMS');
  const r = spawnSync('sha256sum', ['--check', '--quiet', '--strict', join(bundleDir, 'SHA256SUMS')], { stdio: 'inherit', cwd: repo });
  if (r.status !== 0) fail('the bundle does not match its SHA256SUMS (listed above): it is damaged or was altered; unpack a good copy');
  writeFileSync(stamp, `${new Date().toISOString()}\n`);
}

/** Puts the bundle's guest artifacts into the home, so the first start builds nothing that would need the network. */
function seedArtifacts() {
  const home = testing ? (process.env.SANDGLASS_TEST_HOME ?? join(repo, '.sandglass-test')) : (process.env.SANDGLASS_HOME ?? join(homedir(), '.sandglass'));
  const target = join(home, 'artifacts');
  for (const name of readdirSync(join(bundleDir, 'artifacts'))) {
    if (existsSync(join(target, name))) continue;
    mkdirSync(target, { recursive: true });
    // cp keeps the root filesystem image sparse, as it is in the bundle.
    run('cp', ['-a', '--sparse=always', join(bundleDir, 'artifacts', name), join(target, name)]);
  }
  log(`guest artifacts from the bundle in ${target}`);
}

// What an offline bundle must carry (scripts/bundle.mjs asks): every Debian package setup may install, tests included.
if (args.includes('--list-packages')) {
  console.log(JSON.stringify([...new Set([...REQUIRED, ...TEST_REQUIRED].map(([, pkg]) => pkg))]));
  process.exit(0);
}
if (bundled) verifyBundle();
ensureSystemPackages();
ensureNodeModules();
if (bundled) seedArtifacts();
ensureGoBinary('agent', 'sandglass-agent', 'guest agent');
ensureConsole();
ensureSdk();
ensureCli();
// Every VM starts through it when Sandglass runs as root (docs/design/jailer.md).
ensureGoBinary('jailer', 'sandglass-jailer', 'jailer');
if (!isRoot) log('not root: VMs will run without the jailer, as this user (docs/design/jailer.md)');
log('ready');
