// Snapshot faults on a server of its own: kill -9 in the middle of a capture, a full store, a flipped byte in a chunk.
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox, SandglassError } from '@sandglass/sdk';
import { rawRequest } from '@sandglass/gateway/test-support';
import { OwnServer } from './own-server.js';

const server = new OwnServer('snapshot-faults');
const up = (failpoints = '') => server.up({ SANDGLASS_FAILPOINTS: failpoints });

function chunkFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (!name.startsWith('.')) out.push(p);
    }
  };
  walk(join(server.home, 'store', 'chunks'));
  return out;
}

afterAll(() => server.dispose());

describe('snapshot faults', () => {
  it('survives kill -9 mid-capture, reports a full store cleanly, and refuses a corrupt chunk', async () => {
    // 1. The second capture's chunks are written, its manifest is not: the process dies right there.
    let s = await up('capture.after_chunks=kill@2');
    const cfg = { apiUrl: s.apiUrl, apiKey: s.apiKey };
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400, timeoutS: 1800 });
    await sbx.files.write('/root/state', 'before');
    const first = await sbx.snapshot({ name: 'good' });
    await sbx.commands.run('head -c 8000000 /dev/urandom > /root/noise && sync');
    const dying = await sbx.snapshot().catch((e: unknown) => e);
    expect(dying).toBeInstanceOf(SandglassError);
    await server.exited();
    expect(server.child.signalCode).toBe('SIGKILL');

    // 2. Restarted: the partial snapshot does not exist; the sandbox is back at its last good snapshot, paused.
    s = await up('capture.chunks=enospc@1');
    const cfg2 = { apiUrl: s.apiUrl, apiKey: s.apiKey };
    const again = await Sandbox.connect(sbx.id, cfg2);
    expect((await again.getInfo()).state).toBe('paused');
    const timeline = await again.timeline();
    expect(timeline.map((t) => t.id)).toEqual([first.id]);
    // Every earlier snapshot restores.
    const resumed = await Sandbox.resume(sbx.id, cfg2);
    expect(await resumed.files.read('/root/state')).toBe('before');
    expect((await resumed.commands.run('test -e /root/noise && echo yes || echo no')).stdout.trim()).toBe('no');

    // 3. The store is full during a capture: a clean failure, recorded, and the sandbox keeps running.
    const full = await resumed.snapshot().catch((e: unknown) => e);
    expect((full as SandglassError).code).toBe('storage_full');
    const events = await resumed.events();
    expect(events.some((e) => e.type === 'snapshot.failed' && (e.data as { code: string }).code === 'storage_full')).toBe(true);
    expect((await resumed.commands.run('echo still here')).stdout).toBe('still here\n');
    const later = await resumed.snapshot();
    expect(later.parentId).toBe(first.id);

    // 4. GC removes the orphaned chunks of the crashed capture and keeps everything committed.
    const gc = await rawRequest({ socketPath: s.internalSocket }, 'POST', '/internal/v1/maintenance', {
      headers: { authorization: `Bearer ${s.internalBearer}`, 'content-type': 'application/json' },
      body: JSON.stringify({ gcGraceMs: 0 }),
    }).then((r) => JSON.parse(r.body) as { gc: { abandonedWrites: number; deletedChunks: number } });
    // The crashed capture had staged its chunks (written, never synced or published): GC removes them.
    expect(gc.gc.abandonedWrites).toBeGreaterThan(0);
    const [fork] = await Sandbox.fork(first.id, cfg2);
    expect(await fork!.files.read('/root/state')).toBe('before');
    await fork!.kill();

    // 5. One flipped byte in every stored chunk: restoring refuses with snapshot_corrupt naming a chunk.
    await resumed.kill();
    for (const f of chunkFiles()) {
      const b = readFileSync(f);
      const at = b.length >> 1;
      b.writeUInt8(b.readUInt8(at) ^ 0x01, at);
      writeFileSync(f, b);
    }
    const corrupt = await Sandbox.fork(later.id, cfg2).catch((e: unknown) => e);
    expect((corrupt as SandglassError).code).toBe('snapshot_corrupt');
    expect(JSON.stringify((corrupt as SandglassError).details ?? {})).toMatch(/[0-9a-f]{64}/);
  });
});
