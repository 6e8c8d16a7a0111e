#!/usr/bin/env node
// npm run bundle: one archive holding everything a host with no network needs to run Sandglass — this tree with its
// npm dependencies (native addons built), the Go binaries, the Node runtime, the Debian packages Sandglass and its
// tests need together with their dependencies, the built guest artifacts (kernel, initramfs, root filesystem, agent,
// and the debootstrap tree the root filesystem is made from), and SHA256SUMS over all of it. Run on a connected
// Debian 12 machine of the target's architecture. Plain Node ESM, no dependencies.
// Usage: node scripts/bundle.mjs [--out <file.tar>] [--home <dir with built artifacts>]
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, createReadStream, existsSync, mkdirSync, mkdtempSync, lstatSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { arch, homedir, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
function opt(name) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}
const version = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')).version;
const out = resolve(opt('--out') ?? join(repo, `sandglass-bundle-${version}-${arch()}.tar`));
const home = resolve(opt('--home') ?? process.env.SANDGLASS_HOME ?? join(homedir(), '.sandglass'));

function log(msg) {
  console.log(`[bundle] ${msg}`);
}
function run(cmd, cmdArgs, opts = {}) {
  const r = spawnSync(cmd, cmdArgs, { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', cwd: repo, maxBuffer: 256 * 1024 * 1024, ...opts });
  if (r.status !== 0) {
    console.error(`[bundle] ${cmd} ${cmdArgs.join(' ')} failed (exit ${r.status ?? r.signal})`);
    process.exit(1);
  }
  return r.stdout ?? '';
}

if (existsSync(join(repo, 'bundle/bundle.json'))) {
  console.error('[bundle] this tree is itself an offline bundle: make bundles on a connected machine from a clone');
  process.exit(1);
}

// 1. Everything installed and built here first: system packages, npm dependencies, the agent and the jailer.
log('setup (system packages, npm dependencies, Go binaries)');
run('node', [join(repo, 'scripts/setup.mjs'), '--test'], { stdio: 'inherit' });

const staging = mkdtempSync(join(tmpdir(), 'sg-bundle-'));
const bundleDir = join(staging, 'bundle');
mkdirSync(bundleDir);

// 2. The guest artifacts, built (or found) in the home, then copied: only the ones this tree's build uses.
log(`guest artifacts (building what is missing in ${home}/artifacts)`);
const image = JSON.parse(
  run(
    join(repo, 'node_modules/.bin/tsx'),
    ['-e', "import('@sandglass/images').then(async (m) => console.log(JSON.stringify(await m.ensureGuestImage({ home: process.env.SG_BUNDLE_HOME }))))"],
    { env: { ...process.env, SG_BUNDLE_HOME: home } },
  )
    .trim()
    .split('\n')
    .at(-1),
);
const artifactsDir = join(home, 'artifacts');
const used = new Set([image.kernelPath, image.initramfsPath, image.rootfsPath, image.agentPath].map((p) => relative(artifactsDir, p).split('/')[0]));
// The root filesystem is made from a debootstrap tree, and the image build checks for it first.
for (const name of readdirSync(artifactsDir)) if (name.startsWith('debootstrap-')) used.add(name);
used.add('kernel-package.json');
mkdirSync(join(bundleDir, 'artifacts'));
// cp keeps the root filesystem image sparse (about a fifth of its size is data), so tar can keep it sparse too.
for (const name of used) run('cp', ['-a', '--sparse=always', join(artifactsDir, name), join(bundleDir, 'artifacts', name)]);

// 3. Debian packages: what setup installs (and what the tests need), with every dependency, as .deb files.
const roots = JSON.parse(run('node', [join(repo, 'scripts/setup.mjs'), '--list-packages']));
log(`Debian packages: ${roots.join(' ')} and their dependencies`);
const closure = run('apt-cache', [
  'depends',
  '--recurse',
  '--no-recommends',
  '--no-suggests',
  '--no-conflicts',
  '--no-breaks',
  '--no-replaces',
  '--no-enhances',
  ...roots,
])
  .split('\n')
  .filter((l) => /^[a-z0-9]/.test(l))
  .map((l) => l.trim());
// Virtual names (no package of their own; apt-cache prints them in <angle brackets>) were left out above; what is
// left is asked once, and only names the archive has a file for are downloaded.
const names = [...new Set(closure)];
const shown = spawnSync('apt-cache', ['show', '--no-all-versions', ...names], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 }).stdout;
const real = [...new Set([...shown.matchAll(/^Package: (\S+)$/gm)].map((m) => m[1]))];
const debs = join(bundleDir, 'debs');
mkdirSync(debs);
// apt drops to user _apt for downloads, which cannot write into our private temp dir.
const sandbox = process.getuid?.() === 0 ? ['-o', 'APT::Sandbox::User=root'] : [];
run('apt-get', [...sandbox, 'download', ...real], { cwd: debs, stdio: ['ignore', 'ignore', 'inherit'] });

// 4. The Node runtime this tree runs on (Debian 12's own nodejs is too old).
const nodePrefix = dirname(dirname(process.execPath));
mkdirSync(join(bundleDir, 'node/bin'), { recursive: true });
cpSync(process.execPath, join(bundleDir, 'node/bin/node'));
if (existsSync(join(nodePrefix, 'lib/node_modules/npm'))) {
  cpSync(join(nodePrefix, 'lib/node_modules/npm'), join(bundleDir, 'node/lib/node_modules/npm'), { recursive: true, verbatimSymlinks: true });
  writeFileSync(join(bundleDir, 'node/bin/npm'), '#!/bin/sh\nexec "$(dirname "$0")/node" "$(dirname "$0")/../lib/node_modules/npm/bin/npm-cli.js" "$@"\n', {
    mode: 0o755,
  });
}

// 5. This tree: tracked files, plus what setup built (node_modules, the Go binaries).
const tracked = run('git', ['ls-files', '-z'])
  .split('\0')
  .filter((f) => f && existsSync(join(repo, f)));
const files = [...tracked, 'node_modules', 'agent/build', 'jailer/build'];
writeFileSync(
  join(bundleDir, 'bundle.json'),
  `${JSON.stringify(
    {
      format: 'sandglass-bundle/1',
      version,
      commit: run('git', ['rev-parse', 'HEAD']).trim(),
      createdAt: new Date().toISOString(),
      arch: arch(),
      node: process.version,
      debs: readdirSync(debs).sort(),
      artifacts: [...used].sort(),
    },
    null,
    2,
  )}\n`,
);

// 6. Checksums of every file, written last; setup checks them before it installs anything from the bundle.
log('checksums');
const listing = [];
function sha256(path) {
  return new Promise((res, rej) => {
    const h = createHash('sha256');
    createReadStream(path)
      .on('data', (d) => h.update(d))
      .on('end', () => res(h.digest('hex')))
      .on('error', rej);
  });
}
async function walk(base, rel) {
  const path = join(base, rel);
  // Links are archived as links (node_modules/.bin, the workspace packages): their targets are summed where they are.
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (!st) return;
  if (st.isDirectory()) {
    for (const n of readdirSync(path)) await walk(base, join(rel, n));
  } else if (st.isFile()) listing.push(`${await sha256(path)}  ${rel}`);
}
for (const f of files) await walk(repo, f);
for (const n of readdirSync(bundleDir)) await walk(staging, join('bundle', n));
writeFileSync(join(bundleDir, 'SHA256SUMS'), `${listing.sort((a, b) => a.slice(66).localeCompare(b.slice(66))).join('\n')}\n`);

// 7. One archive, everything under sandglass/ (the S flag leaves symlink targets, which are relative, as they are).
log(`writing ${out}`);
const list = join(staging, 'files.txt');
writeFileSync(list, `${files.join('\n')}\n`);
run('tar', ['-cf', out, '--sparse', '--hole-detection=raw', '--transform', 's,^,sandglass/,S', '-C', repo, '-T', list, '-C', staging, 'bundle'], {
  stdio: 'inherit',
});
const debCount = readdirSync(debs).length;
rmSync(staging, { recursive: true, force: true });
const mib = (statSync(out).size / 1024 ** 2).toFixed(0);
log(`done: ${out} (${mib} MiB, ${listing.length} files, ${debCount} Debian packages)`);
log('on the offline host: tar -xf <bundle> && cd sandglass && export PATH="$PWD/bundle/node/bin:$PATH" && npm start');
