// A host clock that steps back must not make resume pick an older snapshot than the pause's (found by the chaos suite:
// "latest" is read by taken-at time, so a pause stamped before an earlier snapshot lost the writes between them).
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { rawRequest } from '@sandglass/gateway/test-support';
import { OwnServer } from './own-server.js';

const server = new OwnServer('clock-jump');

afterAll(() => server.dispose());

describe('clock jump', () => {
  it('resume continues from the pause snapshot after the host clock stepped back', async () => {
    // A chaos node: the only kind on which a failpoint (here the clock jump) can be armed while it runs.
    const node = await server.up({ SANDGLASS_CHAOS: '1' });
    const cfg = node.config;
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400, timeoutS: 1800 });
    await sbx.files.write('/root/a', 'one');
    await sbx.snapshot({ name: 'before-the-jump' });

    const jump = await rawRequest({ socketPath: node.internalSocket }, 'POST', '/internal/v1/failpoints', {
      headers: { authorization: `Bearer ${node.internalBearer}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'clock.jump', spec: '-600000' }),
    });
    expect(jump.status).toBe(204);

    await sbx.files.write('/root/b', 'two');
    const paused = await sbx.pause();
    const resumed = await Sandbox.resume(sbx.id, cfg);
    expect((await resumed.getInfo()).state).toBe('running');
    expect(await resumed.files.read('/root/a')).toBe('one');
    expect(await resumed.files.read('/root/b')).toBe('two');
    // The pause is the newest snapshot of the timeline, though the clock said otherwise when it was taken.
    expect((await resumed.timeline()).at(-1)!.id).toBe(paused.id);
    await resumed.kill();
  });
});
