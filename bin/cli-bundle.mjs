// The compiled CLI (packages/cli/dist/sandglass.js, an esbuild bundle of the CLI and the SDK, with what only some
// commands load in dist/chunks/): where it is, whether it is older than any source it was built from, and how to build
// it. bin/sandglass asks the first two at every start (a few dozen stat calls), scripts/setup.mjs the last.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
export const CLI_BUNDLE = `${repo}packages/cli/dist/sandglass.js`;
/**
 * The commands whose action imports @sandglass/server, which the bundle leaves out: bin/sandglass runs them from the
 * sources (packages/cli/src/launcher.test.ts keeps this list equal to the commands that import it).
 */
export const SERVER_COMMANDS = new Set(['up', 'doctor', 'gateway', 'control-plane']);
/** What the bundle is made of: a change to any of them makes it stale. */
const SOURCE_DIRS = ['packages/cli/src', 'packages/sdk/src'];
const SOURCE_FILES = ['packages/cli/package.json', 'packages/sdk/package.json', 'package-lock.json', 'bin/cli-bundle.mjs'];

function newestIn(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = `${dir}/${e.name}`;
    newest = Math.max(newest, e.isDirectory() ? newestIn(p) : statSync(p).mtimeMs);
  }
  return newest;
}

/** True when the bundle exists and no source is newer; a missing source reads as newer (rebuild, or run the sources). */
export function cliBundleFresh() {
  try {
    const built = statSync(CLI_BUNDLE).mtimeMs;
    const newest = Math.max(...SOURCE_DIRS.map((d) => newestIn(`${repo}${d}`)), ...SOURCE_FILES.map((f) => statSync(`${repo}${f}`).mtimeMs));
    return built >= newest;
  } catch {
    return false;
  }
}

/**
 * Bundles the CLI with esbuild: the SDK from its TypeScript sources (the "@sandglass/source" condition), npm packages
 * inlined (ws and cli-table3 are CommonJS: the banner gives their require() one), @sandglass/server left out; the
 * commands that run a server load it from its sources through tsx (bin/sandglass). A dynamic import becomes a chunk of
 * its own (`mcp` loads the MCP SDK that way), so no command parses code only another needs. Returns esbuild's status.
 */
export function buildCliBundle() {
  // Beside dist/, at its depth, so the source map's relative paths hold once the files move into dist/.
  const staging = `${repo}packages/cli/.dist-${process.pid}`;
  const esbuild = `${repo}node_modules/.bin/esbuild`;
  const args = [
    `sandglass=${repo}packages/cli/src/main.ts`,
    '--bundle',
    '--splitting',
    '--chunk-names=chunks/[name]-[hash]',
    '--platform=node',
    '--format=esm',
    '--target=node20',
    '--conditions=@sandglass/source',
    '--external:@sandglass/server',
    '--sourcemap',
    '--log-level=warning',
    "--banner:js=import { createRequire as __sandglassRequire } from 'node:module'; const require = __sandglassRequire(import.meta.url);",
    `--outdir=${staging}`,
  ];
  try {
    const status = spawnSync(esbuild, args, { stdio: 'inherit' }).status;
    if (status !== 0) return status;
    // Chunks first (their names carry a content hash, so they sit beside the old ones), then the entry, map first: a
    // CLI starting meanwhile reads the old bundle or the new one, never half of one. Then the old chunks go.
    const chunks = `${dirname(CLI_BUNDLE)}/chunks`;
    mkdirSync(chunks, { recursive: true });
    const fresh = new Set(readdirSync(`${staging}/chunks`));
    for (const name of fresh) renameSync(`${staging}/chunks/${name}`, `${chunks}/${name}`);
    renameSync(`${staging}/sandglass.js.map`, `${CLI_BUNDLE}.map`);
    renameSync(`${staging}/sandglass.js`, CLI_BUNDLE);
    for (const name of readdirSync(chunks)) if (!fresh.has(name)) rmSync(`${chunks}/${name}`, { force: true });
    return 0;
  } finally {
    if (existsSync(staging)) rmSync(staging, { recursive: true, force: true });
  }
}
