// Two restores of one snapshot whose RAM image is not cached must share one writer of it (found by the chaos suite:
// the second writer truncated the first's temp file, and one restore failed renaming it, or could map a half image).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { home as sharedHome } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
const home = mkdtempSync(join(tmpdir(), 'sg-restore-race-'));
symlinkSync(join(sharedHome, 'artifacts'), join(home, 'artifacts'));
const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 35;
let child: ChildProcess | undefined;

async function up(): Promise<{ apiUrl: string; apiKey: string }> {
  rmSync(join(home, 'server.json'), { force: true });
  const log = openSync(join(home, 'server.log'), 'a');
  child = spawn(bin, ['up', '--port', String(port)], {
    env: { ...process.env, SANDGLASS_HOME: home, SANDGLASS_WARM_POOL: '0', SANDGLASS_LOG_LEVEL: 'warn' },
    stdio: ['ignore', log, log],
  });
  while (!existsSync(join(home, 'server.json'))) {
    if (child.exitCode !== null) throw new Error(`the restore-race test server exited: ${readFileSync(join(home, 'server.log'), 'utf8').slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { apiUrl: `http://127.0.0.1:${port}`, apiKey: readFileSync(join(home, 'admin-key'), 'utf8').trim() };
}

async function down(): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child!.once('exit', r));
  child.kill('SIGTERM');
  await gone;
}

afterAll(async () => {
  await down();
  rmSync(home, { recursive: true, force: true });
});

describe('restore race', () => {
  it('forks one uncached snapshot twice at once', async () => {
    let cfg = await up();
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400, timeoutS: 1800 });
    await sbx.files.write('/root/state', 'kept');
    const snap = await sbx.snapshot({ name: 'twice' });
    await sbx.kill();
    // A restart empties the node's RAM image cache: both forks must build the image from the store.
    await down();
    cfg = await up();
    const forks = await Sandbox.fork(snap.id, { ...cfg, count: 2 });
    expect(forks).toHaveLength(2);
    for (const f of forks) {
      expect((await f.getInfo()).state).toBe('running');
      expect(await f.files.read('/root/state')).toBe('kept');
      await f.kill();
    }
  });
});
