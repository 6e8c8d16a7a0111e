// A capture that dies between committing its manifest and recording snapshot.taken leaves a manifest no snapshot in
// the log names; maintenance must delete it, or GC keeps every chunk it names forever (found by the chaos suite).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { deriveNodeKeys, loadNodeSecret } from '@sandglass/core';
import { rawRequest } from '../packages/gateway/src/test-support.js';
import { home as sharedHome } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
const home = mkdtempSync(join(tmpdir(), 'sg-orphans-'));
symlinkSync(join(sharedHome, 'artifacts'), join(home, 'artifacts'));
const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 25;
let child: ChildProcess | undefined;

async function up(failpoints = ''): Promise<{ apiUrl: string; apiKey: string }> {
  rmSync(join(home, 'server.json'), { force: true });
  child = spawn(bin, ['up', '--port', String(port)], {
    env: { ...process.env, SANDGLASS_HOME: home, SANDGLASS_WARM_POOL: '0', SANDGLASS_LOG_LEVEL: 'warn', SANDGLASS_FAILPOINTS: failpoints },
    // The server's output stays in its home (kept on failure), for the cause of a start that failed.
    stdio: ['ignore', openSync(join(home, 'server.log'), 'a'), openSync(join(home, 'server.log'), 'a')],
  });
  const until = Date.now() + 180_000;
  while (!existsSync(join(home, 'server.json'))) {
    if (Date.now() > until || child.exitCode !== null)
      throw new Error(`the orphan-manifest test server did not come up: ${readFileSync(join(home, 'server.log'), 'utf8').slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { apiUrl: `http://127.0.0.1:${port}`, apiKey: readFileSync(join(home, 'admin-key'), 'utf8').trim() };
}

/** Every snapshot manifest in the store, as tenant/id. */
function manifests(): string[] {
  const root = join(home, 'store', 'manifests');
  if (!existsSync(root)) return [];
  return readdirSync(root).flatMap((t) =>
    readdirSync(join(root, t))
      .filter((id) => id.startsWith('snap_') && t !== 'system')
      .map((id) => `${t}/${id}`),
  );
}

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    const gone = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await gone;
  }
  rmSync(home, { recursive: true, force: true });
});

describe('orphan manifests', () => {
  it('maintenance deletes the manifest of a capture killed before it recorded snapshot.taken', async () => {
    let cfg = await up('capture.after_manifest=kill@2');
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400, timeoutS: 1800 });
    const first = await sbx.snapshot({ name: 'kept' });
    const before = manifests();
    await expect(sbx.snapshot()).rejects.toThrow();
    await new Promise<void>((r) => (child!.exitCode !== null || child!.signalCode !== null ? r() : child!.once('exit', () => r())));
    expect(child!.signalCode).toBe('SIGKILL');
    const orphan = manifests().filter((m) => !before.includes(m));
    // The crashed capture's manifest is in the store, and no snapshot in the log names it.
    expect(orphan).toHaveLength(1);

    cfg = await up();
    const again = await Sandbox.connect(sbx.id, cfg);
    expect((await again.timeline()).map((t) => t.id)).toEqual([first.id]);
    const bearer = deriveNodeKeys(loadNodeSecret(join(home, 'node-secret'))).internalBearer.toString('hex');
    const res = await rawRequest({ socketPath: join(home, 'internal', 'gateway.sock') }, 'POST', '/internal/v1/maintenance', {
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      body: JSON.stringify({ gcGraceMs: 0 }),
    });
    expect(res.status).toBe(200);
    const after = manifests();
    expect(after).not.toContain(orphan[0]);
    // What the log names is kept, and still restores.
    expect(after.some((m) => m.endsWith(first.id))).toBe(true);
    const [fork] = await Sandbox.fork(first.id, cfg);
    expect((await fork!.commands.run('echo ok')).stdout).toBe('ok\n');
    await fork!.kill();
    await again.kill();
  });
});
