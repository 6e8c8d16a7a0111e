// The compiled CLI (packages/cli/dist/sandglass.js, an esbuild bundle of the CLI and the SDK, with what only some
// commands load in dist/chunks/) and the compiled servers (packages/server/dist/server.js): where they are, whether
// one is older than any source it was built from, and how to build them. bin/sandglass asks the first two at every
// start (a few dozen stat calls; the server bundle's a few hundred, only for a command that runs a server),
// scripts/setup.mjs the last.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
export const CLI_BUNDLE = `${repo}packages/cli/dist/sandglass.js`;
/**
 * The servers compiled (@sandglass/server and every workspace package it imports, npm packages left to node_modules).
 * It sits at the depth of a package's `src/` file, so the paths the sources take from `import.meta.url`
 * (`../../../spec/…`, `../../console/dist`, `../../kms/src/…`) name the same files from the bundle.
 */
export const SERVER_BUNDLE = `${repo}packages/server/dist/server.js`;
/**
 * The commands whose action imports @sandglass/server, which the CLI bundle leaves out: they run compiled when the
 * server bundle is fresh too, else from the sources (packages/cli/src/launcher.test.ts keeps this list equal to the
 * commands that import it).
 */
export const SERVER_COMMANDS = new Set(['up', 'doctor', 'gateway', 'control-plane']);
/** What the CLI bundle is made of: a change to any of them makes it stale. */
const SOURCE_DIRS = ['packages/cli/src', 'packages/sdk/src'];
const SOURCE_FILES = ['packages/cli/package.json', 'packages/sdk/package.json', 'package-lock.json', 'bin/cli-bundle.mjs'];
/** The server bundle's: every package but the console (its own build) and the CLI (the other bundle). */
const SERVER_PACKAGES = readdirSync(`${repo}packages`).filter((p) => p !== 'console' && p !== 'cli' && existsSync(`${repo}packages/${p}/src`));
const SERVER_SOURCE_DIRS = SERVER_PACKAGES.map((p) => `packages/${p}/src`);
const SERVER_SOURCE_FILES = [...SERVER_PACKAGES.map((p) => `packages/${p}/package.json`), 'package-lock.json', 'bin/cli-bundle.mjs'];

function newestIn(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = `${dir}/${e.name}`;
    newest = Math.max(newest, e.isDirectory() ? newestIn(p) : statSync(p).mtimeMs);
  }
  return newest;
}

/** True when `bundle` exists and no source is newer; a missing source reads as newer (rebuild, or run the sources). */
function fresh(bundle, dirs, files) {
  try {
    const built = statSync(bundle).mtimeMs;
    const newest = Math.max(...dirs.map((d) => newestIn(`${repo}${d}`)), ...files.map((f) => statSync(`${repo}${f}`).mtimeMs));
    return built >= newest;
  } catch {
    return false;
  }
}

export function cliBundleFresh() {
  return fresh(CLI_BUNDLE, SOURCE_DIRS, SOURCE_FILES);
}

export function serverBundleFresh() {
  return fresh(SERVER_BUNDLE, SERVER_SOURCE_DIRS, SERVER_SOURCE_FILES);
}

/**
 * Bundles the CLI with esbuild: the SDK from its TypeScript sources (the "@sandglass/source" condition), npm packages
 * inlined (ws and cli-table3 are CommonJS: the banner gives their require() one), @sandglass/server left out (the
 * commands that run a server import it: the server bundle, or its sources through tsx; bin/sandglass). A dynamic import becomes a chunk of
 * its own (`mcp` loads the MCP SDK that way), so no command parses code only another needs. Returns esbuild's status.
 */
export function buildCliBundle() {
  const args = [
    `sandglass=${repo}packages/cli/src/main.ts`,
    '--splitting',
    '--chunk-names=chunks/[name]-[hash]',
    '--external:@sandglass/server',
    "--banner:js=import { createRequire as __sandglassRequire } from 'node:module'; const require = __sandglassRequire(import.meta.url);",
  ];
  return esbuild('packages/cli', args, (staging) => {
    // Chunks first (their names carry a content hash, so they sit beside the old ones), then the entry, map first: a
    // CLI starting meanwhile reads the old bundle or the new one, never half of one. Then the old chunks go.
    const chunks = `${dirname(CLI_BUNDLE)}/chunks`;
    mkdirSync(chunks, { recursive: true });
    const fresh = new Set(readdirSync(`${staging}/chunks`));
    for (const name of fresh) renameSync(`${staging}/chunks/${name}`, `${chunks}/${name}`);
    renameSync(`${staging}/sandglass.js.map`, `${CLI_BUNDLE}.map`);
    renameSync(`${staging}/sandglass.js`, CLI_BUNDLE);
    for (const name of readdirSync(chunks)) if (!fresh.has(name)) rmSync(`${chunks}/${name}`, { force: true });
  });
}

/**
 * Runs esbuild with what both bundles share (ESM for Node 20 from the TypeScript sources, source maps) plus `args`,
 * into a staging folder beside the package's dist/, at its depth, so the source map's relative paths hold once
 * `install` has moved the files into dist/; the staging folder goes either way. Returns esbuild's status.
 */
function esbuild(pkgDir, args, install) {
  const staging = `${repo}${pkgDir}/.dist-${process.pid}`;
  const common = ['--bundle', '--platform=node', '--format=esm', '--target=node20', '--conditions=@sandglass/source', '--sourcemap', '--log-level=warning'];
  try {
    const status = spawnSync(`${repo}node_modules/.bin/esbuild`, [...args, ...common, `--outdir=${staging}`], { stdio: 'inherit' }).status;
    if (status !== 0) return status;
    install(staging);
    return 0;
  } finally {
    if (existsSync(staging)) rmSync(staging, { recursive: true, force: true });
  }
}

/** Every npm package a server package names (its dependencies stay in node_modules: native addons, pino's workers). */
function npmDependencies() {
  const names = new Set();
  for (const p of SERVER_PACKAGES) {
    const pkg = JSON.parse(readFileSync(`${repo}packages/${p}/package.json`, 'utf8'));
    for (const field of ['dependencies', 'optionalDependencies', 'peerDependencies']) {
      for (const name of Object.keys(pkg[field] ?? {})) if (!name.startsWith('@sandglass/')) names.add(name);
    }
  }
  return [...names].sort();
}

/**
 * Bundles the servers with esbuild into SERVER_BUNDLE: @sandglass/server and the workspace packages it imports from
 * their TypeScript sources, every npm package external. Written beside dist/ and renamed into place, map first, so a
 * server starting meanwhile loads the old bundle or the new one. Returns esbuild's status.
 */
export function buildServerBundle() {
  const external = npmDependencies().flatMap((name) => [`--external:${name}`, `--external:${name}/*`]);
  return esbuild('packages/server', [`server=${repo}packages/server/src/index.ts`, ...external], (staging) => {
    mkdirSync(dirname(SERVER_BUNDLE), { recursive: true });
    renameSync(`${staging}/server.js.map`, `${SERVER_BUNDLE}.map`);
    renameSync(`${staging}/server.js`, SERVER_BUNDLE);
  });
}
