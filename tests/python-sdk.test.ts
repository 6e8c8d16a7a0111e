// The Python SDK (sdks/python) against the real server and VMs: Debian's pytest runs its suite with the server's URL
// and key, the package installed into a fresh virtual environment from its pyproject.toml, offline; then the README's
// Python example runs as it is written. Its approvals test reaches a real HTTPS upstream on loopback through the egress proxy;
// its template builds leave steps in the cache that a build of the same spec through the TypeScript SDK then finds.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KNOWN_ERROR_CODES, Template } from '@sandglass/sdk';
import { startHttpsUpstream, type Upstream } from '@sandglass/egress/test-support';
import { adminKey, apiUrl } from './helpers.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
// Debian's interpreter, where python3-pytest is installed (setup --test); `python3` on PATH may be another one.
const PYTHON = '/usr/bin/python3';

describe('the Python SDK', () => {
  const venv = mkdtempSync(join(tmpdir(), 'sandglass-py-'));
  const py = join(venv, 'bin/python');
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: venv,
    PYTHONDONTWRITEBYTECODE: '1',
    SANDGLASS_URL: apiUrl,
    SANDGLASS_API_KEY: adminKey,
  };
  // The build context of sdks/python/tests/test_template_build.py: fresh each run, so no step of it is cached before.
  const templateContext = join(venv, 'template-context');
  const templateSpec = [
    'from: base',
    'steps:',
    '  - copy: { src: site, dest: /srv/site/ }',
    '  - run: cat /srv/site/hello.txt > /srv/site/built.txt && cat /srv/site/built.txt',
    'start:',
    '  cmd: python3 -m http.server 8000 --directory /srv/site',
    '  ready: { cmd: curl -sf http://127.0.0.1:8000/built.txt, intervalMs: 200 }',
    '',
  ].join('\n');
  let upstream: Upstream | undefined;
  const failure = (what: string) => (err: { stdout: string; stderr: string }) => {
    throw new Error(`${what} failed:\n${err.stdout}\n${err.stderr}`);
  };

  beforeAll(async () => {
    // --system-site-packages: pytest and setuptools come from Debian; pip fetches nothing (--no-index, no build isolation).
    await run(PYTHON, ['-m', 'venv', '--system-site-packages', venv]);
    await run(py, ['-m', 'pip', 'install', '--no-index', '--no-build-isolation', '--quiet', join(root, 'sdks/python')]);
    upstream = await startHttpsUpstream(inject('egressPki'), inject('egressUpstreamPorts')[0]);
    env.SANDGLASS_TEST_UPSTREAM = `api.example.test:${upstream.port}`;
    mkdirSync(join(templateContext, 'site'), { recursive: true });
    writeFileSync(join(templateContext, 'sandglass.template.yaml'), templateSpec);
    writeFileSync(join(templateContext, 'site/hello.txt'), `${randomUUID()}\n`);
    env.SANDGLASS_TEST_TEMPLATE_CONTEXT = templateContext;
  }, 300_000);
  afterAll(async () => {
    await upstream?.close();
    rmSync(venv, { recursive: true, force: true });
  });

  it("knows every catalogued code in the TypeScript SDK's family, with its status and retryable", async () => {
    const r = await run(py, ['-c', 'import json, sandglass; print(json.dumps(sandglass.KNOWN_ERROR_CODES))'], { cwd: venv, env });
    const ts = Object.fromEntries(Object.entries(KNOWN_ERROR_CODES).map(([code, c]) => [code, [c.family, c.status, c.retryable]]));
    expect(JSON.parse(r.stdout)).toEqual(ts);
  });

  it('passes its pytest suite against the test server, installed from its pyproject.toml', async () => {
    // From the venv's site-packages, not the source tree: pytest runs in the venv, beside no sandglass/ folder.
    const r = await run(py, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', join(root, 'sdks/python/tests')], { cwd: venv, env }).catch(failure('pytest'));
    expect(r.stdout).toMatch(/\d+ passed/);
    expect(r.stdout).not.toMatch(/failed|error/);
    // The whole suite in one process: dozens of sandboxes under TCG, one paused by its timeout.
  }, 900_000);

  it('builds from the steps the Python build cached, through the TypeScript SDK', async () => {
    // Every step found by the keys this SDK computes: no build sandbox, the Python build's last snapshot published.
    const built = await Template.build({
      name: 'ts-from-py',
      file: join(templateContext, 'sandglass.template.yaml'),
      context: templateContext,
      apiUrl,
      apiKey: adminKey,
    });
    expect(built.steps.map((s) => [s.index, s.cached])).toEqual([
      [0, true],
      [1, true],
      [2, true],
    ]);
    const fromPython = await Template.get('py-built', { apiUrl, apiKey: adminKey });
    expect(built.version.snapshotId).toBe(fromPython.versions[0]?.snapshotId);
  });

  it("runs the README's Python example", async () => {
    const example = /^```python\n([\s\S]*?)^```$/m.exec(readFileSync(join(root, 'README.md'), 'utf8'))?.[1];
    if (!example) throw new Error('README.md has no ```python block');
    writeFileSync(join(venv, 'agent.py'), example);
    const r = await run(py, ['agent.py'], { cwd: venv, env }).catch(failure('the README example'));
    expect(r.stdout).toBe('hello\n\ndone\n\n3\n');
  });
});
