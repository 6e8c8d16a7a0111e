// A capture that dies between committing its manifest and recording snapshot.taken leaves a manifest no snapshot in
// the log names; maintenance must delete it, or GC keeps every chunk it names forever (found by the chaos suite).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { rawRequest } from '@sandglass/gateway/test-support';
import { OwnServer } from './own-server.js';

const server = new OwnServer('orphan-manifests');
const up = (failpoints = '') => server.up({ SANDGLASS_FAILPOINTS: failpoints });

/** Every snapshot manifest in the store, as tenant/id. */
function manifests(): string[] {
  const root = join(server.home, 'store', 'manifests');
  if (!existsSync(root)) return [];
  return readdirSync(root).flatMap((t) =>
    readdirSync(join(root, t))
      .filter((id) => id.startsWith('snap_') && t !== 'system')
      .map((id) => `${t}/${id}`),
  );
}

afterAll(() => server.dispose());

describe('orphan manifests', () => {
  it('maintenance deletes the manifest of a capture killed before it recorded snapshot.taken', async () => {
    let cfg = (await up('capture.after_manifest=kill@2')).config;
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400, timeoutS: 1800 });
    const first = await sbx.snapshot({ name: 'kept' });
    const before = manifests();
    await expect(sbx.snapshot()).rejects.toThrow();
    await server.exited();
    expect(server.child.signalCode).toBe('SIGKILL');
    const orphan = manifests().filter((m) => !before.includes(m));
    // The crashed capture's manifest is in the store, and no snapshot in the log names it.
    expect(orphan).toHaveLength(1);

    const node = await up();
    cfg = node.config;
    const again = await Sandbox.connect(sbx.id, cfg);
    expect((await again.timeline()).map((t) => t.id)).toEqual([first.id]);
    const res = await rawRequest({ socketPath: node.internalSocket }, 'POST', '/internal/v1/maintenance', {
      headers: { authorization: `Bearer ${node.internalBearer}`, 'content-type': 'application/json' },
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
