// A gateway killed outright (kill -9) and started again: the VMs it left behind are stopped and their sandboxes recorded
// as failed. And a gateway stopped cleanly gives its tmpfs back.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { home as sharedHome } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
// A home of its own (its own database and run directory) that reuses the suite's built artifacts.
const home = mkdtempSync(join(tmpdir(), 'sg-restart-'));
symlinkSync(join(sharedHome, 'artifacts'), join(home, 'artifacts'));
const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 10;
/** The home's RAM directory on tmpfs (guest RAM files and the node's image caches). */
const shmDir = join('/dev/shm', `sandglass-${createHash('sha256').update(home).digest('hex').slice(0, 12)}`);
let child: ChildProcess | undefined;

async function up(): Promise<{ url: string; key: string }> {
  rmSync(join(home, 'server.json'), { force: true });
  child = spawn(bin, ['up', '--port', String(port)], {
    env: { ...process.env, SANDGLASS_HOME: home, SANDGLASS_WARM_POOL: '0', SANDGLASS_LOG_LEVEL: 'warn' },
    stdio: 'ignore',
  });
  const until = Date.now() + 120_000;
  while (!existsSync(join(home, 'server.json'))) {
    if (Date.now() > until || child.exitCode !== null) throw new Error('the second server did not come up');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url: `http://127.0.0.1:${port}`, key: readFileSync(join(home, 'admin-key'), 'utf8').trim() };
}

afterAll(async () => {
  if (child && child.exitCode === null) {
    const gone = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await gone;
  }
  rmSync(home, { recursive: true, force: true });
});

describe('restart after kill -9', () => {
  it('stops orphaned VMs and records their sandboxes as failed', async () => {
    const first = await up();
    // No rolling snapshot before the kill: a sandbox with one would come back paused at it (see snapshots-faults).
    const sbx = await Sandbox.create({ apiUrl: first.url, apiKey: first.key, snapshotIntervalS: 86400 });
    const started = (await sbx.events()).find((e) => e.type === 'sandbox.started')!;
    const pid = (started.data as { pid: number }).pid;
    const gone = new Promise((r) => child!.once('exit', r));
    child!.kill('SIGKILL');
    await gone;
    // QEMU outlives its parent…
    expect(existsSync(`/proc/${pid}`)).toBe(true);
    const second = await up();
    // …until the next gateway starts on the same home and kills it.
    const alive = () => {
      try {
        return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 10_000;
    while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(alive()).toBe(false);
    const info = await Sandbox.connect(sbx.id, { apiUrl: second.url, apiKey: second.key }).then((s) => s.getInfo());
    expect(info.state).toBe('failed');
    expect(info.failureReason).toMatch(/node restarted/);
    // The dead server's RAM files and caches went too.
    expect(readdirSync(shmDir).filter((n) => n !== 'owner.json')).toEqual([]);
  });

  it('gives its tmpfs (guest RAM and the image caches) back when stopped cleanly', async () => {
    // The server the first test started again, or a fresh one when this test runs alone.
    const { url, key } =
      child && child.exitCode === null ? { url: `http://127.0.0.1:${port}`, key: readFileSync(join(home, 'admin-key'), 'utf8').trim() } : await up();
    const sbx = await Sandbox.create({ apiUrl: url, apiKey: key, snapshotIntervalS: 86400 });
    await sbx.snapshot();
    expect(readdirSync(shmDir).some((n) => n.endsWith('.img'))).toBe(true);
    const gone = new Promise((r) => child!.once('exit', r));
    child!.kill('SIGTERM');
    await gone;
    expect(existsSync(shmDir)).toBe(false);
  });
});
