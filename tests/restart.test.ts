// A gateway killed outright (kill -9) and started again: the VMs it left behind are stopped and their sandboxes recorded
// as failed. And a gateway stopped cleanly gives its tmpfs back.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { OwnServer } from './own-server.js';

const server = new OwnServer('restart');
/** The home's RAM directory on tmpfs (guest RAM files and the node's image caches). */
const shmDir = join('/dev/shm', `sandglass-${createHash('sha256').update(server.home).digest('hex').slice(0, 12)}`);
const up = async () => (await server.up()).config;

afterAll(() => server.dispose());

describe('restart after kill -9', () => {
  it('stops orphaned VMs and records their sandboxes as failed', async () => {
    const first = await up();
    // No rolling snapshot before the kill: a sandbox with one would come back paused at it (see snapshots-faults).
    const sbx = await Sandbox.create({ ...first, snapshotIntervalS: 86400 });
    const started = (await sbx.events()).find((e) => e.type === 'sandbox.started')!;
    const pid = (started.data as { pid: number }).pid;
    await server.down('SIGKILL');
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
    const info = await Sandbox.connect(sbx.id, second).then((s) => s.getInfo());
    expect(info.state).toBe('failed');
    expect(info.failureReason).toMatch(/node restarted/);
    // The dead server's RAM files and caches went too.
    expect(readdirSync(shmDir).filter((n) => n !== 'owner.json')).toEqual([]);
  });

  it('gives its tmpfs (guest RAM and the image caches) back when stopped cleanly', async () => {
    // The server the first test started again, or a fresh one when this test runs alone.
    const cfg = server.running
      ? { apiUrl: `http://127.0.0.1:${server.port}`, apiKey: readFileSync(join(server.home, 'admin-key'), 'utf8').trim() }
      : await up();
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400 });
    await sbx.snapshot();
    expect(readdirSync(shmDir).some((n) => n.endsWith('.img'))).toBe(true);
    await server.down();
    expect(existsSync(shmDir)).toBe(false);
  });
});

describe('restart with a paused sandbox', () => {
  it('opens its public guest port again when it is resumed after the restart', async () => {
    if (server.running) await server.down();
    const first = await server.up();
    const sbx = await Sandbox.create({ ...first.config, snapshotIntervalS: 86400 });
    await sbx.files.write('/tmp/www/hi.txt', 'public across a restart');
    await sbx.commands.run('cd /tmp/www && exec python3 -m http.server 8088 --bind 127.0.0.1', { background: true, timeoutMs: 0 });
    while (!(await sbx.ports.list()).some((p) => p.port === 8088)) await new Promise((r) => setTimeout(r, 200));
    await sbx.ports.setPublic(8088, true);
    const open = async (gatewayUrl: string) => {
      const res = await fetch(`${gatewayUrl}/v1/sandboxes/${sbx.id}/ports/8088/hi.txt`);
      return [res.status, await res.text()];
    };
    expect(await open(first.gatewayUrl)).toEqual([200, 'public across a restart']);
    await sbx.pause();
    await server.down();
    const second = await server.up();
    await Sandbox.resume(sbx.id, second.config);
    // The gateway that runs it now never saw the port opened: the control plane told it with the resume.
    expect(await open(second.gatewayUrl)).toEqual([200, 'public across a restart']);
    await Sandbox.kill(sbx.id, second.config);
    await server.down();
  });
});
