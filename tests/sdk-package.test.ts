// The packed TypeScript SDK works outside this repository: `npm pack` in packages/sdk, installed offline into a
// project under the system's temporary directory, runs the README's example with plain `node` (no tsx) against the
// test server, and installs no server package.
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminKey, apiUrl } from './helpers.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const npm = 'npm';

/** The README's SDK example: the `js` block that imports @sandglass/sdk. */
function readmeExample(): string {
  const blocks = [...readFileSync(join(root, 'README.md'), 'utf8').matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? '');
  const example = blocks.find((b) => b.includes("from '@sandglass/sdk'"));
  if (!example) throw new Error('README.md has no ```js block importing @sandglass/sdk');
  return example;
}

/** Every package under a node_modules directory, scoped ones as `@scope/name`. */
function installed(nodeModules: string): string[] {
  return readdirSync(nodeModules)
    .filter((n) => !n.startsWith('.'))
    .flatMap((n) => (n.startsWith('@') ? readdirSync(join(nodeModules, n)).map((s) => `${n}/${s}`) : [n]))
    .sort();
}

describe('the packed SDK in a project of its own', () => {
  let project: string;
  let files: string[] = [];
  // No variable of this run leaks in: no NODE_OPTIONS (a loader), no npm configuration pointing at the workspace.
  const env = { PATH: process.env.PATH ?? '', HOME: '', npm_config_cache: join(tmpdir(), 'unused') };

  beforeAll(async () => {
    project = mkdtempSync(join(tmpdir(), 'sandglass-sdk-consumer-'));
    env.HOME = project;
    env.npm_config_cache = join(project, '.npm');
    // ws comes from the workspace's own copy, packed too: the install fetches nothing. yaml, an optional peer, is left out.
    const packed = JSON.parse((await run(npm, ['pack', '--json', '--pack-destination', project], { cwd: join(root, 'packages/sdk'), env })).stdout) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    const deps: string[] = [];
    for (const dep of ['ws']) {
      const [tarball] = JSON.parse(
        (await run(npm, ['pack', '--json', '--pack-destination', project, join(root, 'node_modules', dep)], { cwd: project, env })).stdout,
      ) as Array<{
        filename: string;
      }>;
      if (!tarball) throw new Error(`npm pack gave no tarball of ${dep}`);
      deps.push(join(project, tarball.filename));
    }
    const sdk = packed[0];
    if (!sdk) throw new Error('npm pack gave no tarball');
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    await run(npm, ['install', '--offline', '--no-audit', '--no-fund', ...deps, join(project, sdk.filename)], { cwd: project, env });
    files = sdk.files.map((f) => f.path);
  }, 300_000);

  afterAll(() => {
    if (project) rmSync(project, { recursive: true, force: true });
  });

  it('ships compiled JavaScript, types and source maps, and no tests', () => {
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/index.js.map', 'dist/index.d.ts.map', 'dist/sandbox.js', 'src/sandbox.ts'])
      expect(files).toContain(f);
    expect(files.filter((f) => f.endsWith('.test.ts') || f.includes('test-server'))).toEqual([]);
  });

  it('installs ws and nothing of the server', () => {
    expect(installed(join(project, 'node_modules'))).toEqual(['@sandglass/sdk', 'ws']);
    const types = readdirSync(join(project, 'node_modules/@sandglass/sdk/dist'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.d.ts'));
    const core = types.filter((f) => readFileSync(join(project, 'node_modules/@sandglass/sdk/dist', f), 'utf8').includes('@sandglass/core'));
    expect(core).toEqual([]);
  });

  it("runs the README's example under plain node", async () => {
    writeFileSync(join(project, 'agent.mjs'), readmeExample());
    const { stdout } = await run(process.execPath, ['agent.mjs'], { cwd: project, env: { ...env, SANDGLASS_URL: apiUrl, SANDGLASS_API_KEY: adminKey } });
    expect(stdout.split('\n')).toEqual(['hello', 'done 0', 'content', '']);
  });

  it('type-checks a TypeScript project against the shipped .d.ts', async () => {
    writeFileSync(join(project, 'agent.ts'), readmeExample());
    const tsconfig = {
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        types: ['node'],
        typeRoots: [join(root, 'node_modules/@types')],
      },
      files: ['agent.ts'],
    };
    writeFileSync(join(project, 'tsconfig.json'), JSON.stringify(tsconfig));
    await run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: project, env });
  });
});
