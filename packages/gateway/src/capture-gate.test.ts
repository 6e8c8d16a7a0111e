// The gateway's side of the capture gate: waits only as told while a sweep runs, never commits past its lease, lets go once.
import { describe, expect, it } from 'vitest';
import { createLogger, SandglassError } from '@sandglass/core';
import { RemoteCaptureGate } from './capture-gate.js';
import type { NodeApiClient } from './node-api-client.js';

const SNAP = `snap_${'a'.repeat(20)}`;
const sweeping = () => new SandglassError('conflict', 'A chunk-store GC sweep is running.');

/** The two calls the gate makes, answering from a script: each take pops the next answer. */
function client(answers: Array<SandglassError | number>) {
  const calls = { take: 0, release: 0 };
  const c = {
    captureLeaseTake: async () => {
      calls.take++;
      const a = answers.shift();
      if (a instanceof SandglassError) throw a;
      return { expiresAt: new Date().toISOString(), ttlMs: a ?? 900_000 };
    },
    captureLeaseRelease: async () => {
      calls.release++;
      throw new SandglassError('internal', 'the control plane cannot be reached');
    },
  };
  return { client: c as unknown as NodeApiClient, calls };
}

const logger = createLogger('test', 'silent');

describe('RemoteCaptureGate', () => {
  it('refuses at once while a sweep runs when told not to wait (a rolling capture; the scheduler retries)', async () => {
    const { client: c, calls } = client([sweeping()]);
    await expect(new RemoteCaptureGate({ client: c, logger }).enter(SNAP, { waitMs: 0 })).rejects.toMatchObject({ code: 'conflict' });
    expect(calls.take).toBe(1);
  });

  it('waits and asks again while a sweep runs when it may (a pause)', async () => {
    const { client: c, calls } = client([sweeping(), 900_000]);
    const pass = await new RemoteCaptureGate({ client: c, logger }).enter(SNAP, { waitMs: 60_000 });
    expect(calls.take).toBe(2);
    expect(() => pass.check()).not.toThrow();
  });

  it('does not wait on other errors: an unreachable control plane fails the capture (closed)', async () => {
    const { client: c, calls } = client([new SandglassError('internal', 'unreachable'), 900_000]);
    await expect(new RemoteCaptureGate({ client: c, logger }).enter(SNAP, { waitMs: 60_000 })).rejects.toMatchObject({ code: 'internal' });
    expect(calls.take).toBe(1);
  });

  it('refuses to commit once the lease may have ended, and releases once however often asked, never throwing', async () => {
    // A lease no longer than the margin has ended, as far as this node can tell, the moment it is granted.
    const { client: c, calls } = client([60_000]);
    const pass = await new RemoteCaptureGate({ client: c, logger, marginMs: 60_000 }).enter(SNAP, { waitMs: 0 });
    expect(() => pass.check()).toThrowError(expect.objectContaining({ code: 'snapshot_failed' }));
    await pass.leave();
    await pass.leave();
    expect(calls.release).toBe(1);
  });
});
