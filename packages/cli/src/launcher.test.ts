// The launcher's choice (bin/sandglass): the compiled CLI, and the compiled servers for the commands that run one.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { buildCliBundle, buildServerBundle, CLI_BUNDLE, cliBundleFresh, SERVER_BUNDLE, SERVER_COMMANDS, serverBundleFresh } from '../../../bin/cli-bundle.mjs';

const commandsDir = fileURLToPath(new URL('./commands/', import.meta.url));
const BIN = fileURLToPath(new URL('../../../bin/sandglass', import.meta.url));

describe('the compiled CLI', () => {
  it('leaves to the sources exactly the commands whose action imports @sandglass/server', () => {
    const importing = readdirSync(commandsDir)
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
      .map((f) => readFileSync(`${commandsDir}${f}`, 'utf8'))
      .filter((text) => text.includes("import('@sandglass/server')"))
      .flatMap((text) => [...text.matchAll(/\.command\('([\w-]+)/g)].map((m) => m[1]));
    expect(new Set(importing)).toEqual(SERVER_COMMANDS);
  });

  it('builds, is fresh afterwards, and runs from the bundle with the same answers', async () => {
    expect(buildCliBundle()).toBe(0);
    expect(cliBundleFresh()).toBe(true);
    const { stdout } = await promisify(execFile)(BIN, ['--version']);
    const { version } = JSON.parse(readFileSync(fileURLToPath(new URL('../../../package.json', import.meta.url)), 'utf8')) as { version: string };
    expect(stdout).toBe(`${version}\n`);
    // The bundle carries the SDK compiled in and leaves the server out.
    const bundle = readFileSync(CLI_BUNDLE, 'utf8');
    expect(bundle).toContain('import("@sandglass/server")');
    expect(bundle).not.toMatch(/from ["']@sandglass\/sdk["']/);
    // The MCP SDK is a chunk that only `mcp` loads: the entry every command parses holds none of it.
    expect(bundle).not.toContain('StdioServerTransport');
    const chunks = readdirSync(new URL('chunks/', pathToFileURL(CLI_BUNDLE)));
    expect(
      chunks
        .filter((f) => f.endsWith('.js'))
        .some((f) => readFileSync(new URL(`chunks/${f}`, pathToFileURL(CLI_BUNDLE)), 'utf8').includes('StdioServerTransport')),
    ).toBe(true);
  }, 120_000);
});

describe('the compiled servers', () => {
  it('build, are fresh afterwards, and load under plain node with every workspace package compiled in', async () => {
    expect(buildServerBundle()).toBe(0);
    expect(serverBundleFresh()).toBe(true);
    // Plain node cannot load TypeScript: an import left pointing at a package's sources would fail here.
    const probe = `const m = await import(${JSON.stringify(pathToFileURL(SERVER_BUNDLE).href)}); console.log(Object.keys(m).sort().join(','));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', probe]);
    expect(stdout.trim().split(',')).toEqual(expect.arrayContaining(['controlPlaneNode', 'doctor', 'formatDoctor', 'gatewayNode', 'up']));
    const bundle = readFileSync(SERVER_BUNDLE, 'utf8');
    expect(bundle).not.toMatch(/from ["']@sandglass\//);
    expect(bundle).not.toMatch(/import\(["']@sandglass\//);
    // What the CLI's `import('@sandglass/server')` gets without the sources' export condition: this bundle.
    const resolved = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', "console.log(import.meta.resolve('@sandglass/server'))"], {
      cwd: fileURLToPath(new URL('../', import.meta.url)),
    });
    expect(resolved.stdout.trim()).toBe(pathToFileURL(SERVER_BUNDLE).href);
  }, 120_000);
});
