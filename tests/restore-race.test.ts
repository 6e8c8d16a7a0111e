// Two restores of one snapshot whose RAM image is not cached must share one writer of it (found by the chaos suite:
// the second writer truncated the first's temp file, and one restore failed renaming it, or could map a half image).
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { OwnServer } from './own-server.js';

const server = new OwnServer('restore-race');
const up = async () => (await server.up()).config;
const down = () => server.down();

afterAll(() => server.dispose());

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
