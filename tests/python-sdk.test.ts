// The Python SDK (sdks/python) against the real server and VMs: Debian's pytest runs its suite with the server's URL
// and key, the package installed into a fresh virtual environment from its pyproject.toml, offline; then the README's
// Python example runs as it is written. Its approvals test reaches a real HTTPS upstream on loopback through the egress proxy.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KNOWN_ERROR_CODES } from '@sandglass/sdk';
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

  it("runs the README's Python example", async () => {
    const example = /^```python\n([\s\S]*?)^```$/m.exec(readFileSync(join(root, 'README.md'), 'utf8'))?.[1];
    if (!example) throw new Error('README.md has no ```python block');
    writeFileSync(join(venv, 'agent.py'), example);
    const r = await run(py, ['agent.py'], { cwd: venv, env }).catch(failure('the README example'));
    expect(r.stdout).toBe('hello\n\ndone\n\n3\n');
  });
});
