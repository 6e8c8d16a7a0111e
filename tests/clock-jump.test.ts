// A host clock that steps back must not make resume pick an older snapshot than the pause's (found by the chaos suite:
// "latest" is read by taken-at time, so a pause stamped before an earlier snapshot lost the writes between them).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { deriveNodeKeys, loadNodeSecret } from '@sandglass/core';
import { rawRequest } from '../packages/gateway/src/test-support.js';
import { home as sharedHome } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
const home = mkdtempSync(join(tmpdir(), 'sg-clock-jump-'));
symlinkSync(join(sharedHome, 'artifacts'), join(home, 'artifacts'));
const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 30;
let child: ChildProcess | undefined;

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    const gone = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await gone;
  }
  rmSync(home, { recursive: true, force: true });
});

describe('clock jump', () => {
  it('resume continues from the pause snapshot after the host clock stepped back', async () => {
    const log = openSync(join(home, 'server.log'), 'a');
    // A chaos node: the only kind on which a failpoint (here the clock jump) can be armed while it runs.
    child = spawn(bin, ['up', '--port', String(port)], {
      env: { ...process.env, SANDGLASS_HOME: home, SANDGLASS_WARM_POOL: '0', SANDGLASS_LOG_LEVEL: 'warn', SANDGLASS_CHAOS: '1' },
      stdio: ['ignore', log, log],
    });
    while (!existsSync(join(home, 'server.json'))) {
      if (child.exitCode !== null) throw new Error(`the clock-jump test server exited: ${readFileSync(join(home, 'server.log'), 'utf8').slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const cfg = { apiUrl: `http://127.0.0.1:${port}`, apiKey: readFileSync(join(home, 'admin-key'), 'utf8').trim() };
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 86400, timeoutS: 1800 });
    await sbx.files.write('/root/a', 'one');
    await sbx.snapshot({ name: 'before-the-jump' });

    const bearer = deriveNodeKeys(loadNodeSecret(join(home, 'node-secret'))).internalBearer.toString('hex');
    const jump = await rawRequest({ socketPath: join(home, 'internal', 'gateway.sock') }, 'POST', '/internal/v1/failpoints', {
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
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
