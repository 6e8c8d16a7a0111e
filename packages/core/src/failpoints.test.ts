import { describe, expect, it, vi } from 'vitest';
import { armedFailpoints, armFailpoint, chaosEnabled, disarmFailpoints, failpoint, failpointClockJumpMs, firedFailpoints } from './failpoints.js';
import { systemClock } from './clock.js';
import { SandglassError } from './errors.js';

describe('failpoints', () => {
  it('do nothing unarmed, fire once on the N-th pass, and are recorded', () => {
    disarmFailpoints();
    expect(failpoint('chunkstore.write')).toBeUndefined();
    armFailpoint('chunkstore.write', 'enospc@2');
    expect(armedFailpoints()).toEqual(['chunkstore.write']);
    expect(failpoint('chunkstore.write')).toBeUndefined();
    const err = (() => {
      try {
        failpoint('chunkstore.write');
      } catch (e) {
        return e;
      }
    })();
    expect((err as SandglassError).code).toBe('storage_full');
    // Once: the next pass is a no-op again.
    expect(failpoint('chunkstore.write')).toBeUndefined();
    expect(firedFailpoints().at(-1)).toMatchObject({ name: 'chunkstore.write', action: 'enospc' });
  });

  it('answer the site-handled actions instead of throwing', () => {
    armFailpoint('agent.frame', 'drop');
    expect(failpoint('agent.frame')).toBe('drop');
    armFailpoint('events.append', 'error');
    expect(() => failpoint('events.append')).toThrow(SandglassError);
  });

  it('refuse unknown names, actions and passes', () => {
    expect(() => armFailpoint('no.such', 'error')).toThrow(/No failpoint/);
    expect(() => armFailpoint('s3.put', 'explode')).toThrow(/not one of/);
    expect(() => armFailpoint('s3.put', 'error@0')).toThrow(/positive integer/);
    expect(() => armFailpoint('clock.jump', 'soon')).toThrow(/milliseconds/);
  });

  it('jump the system clock by the armed offset', () => {
    const before = failpointClockJumpMs();
    armFailpoint('clock.jump', '-30000');
    expect(failpointClockJumpMs()).toBe(before - 30_000);
    const now = vi.spyOn(Date, 'now').mockReturnValue(1_000_000);
    expect(systemClock.nowMs()).toBe(1_000_000 + before - 30_000);
    now.mockRestore();
    armFailpoint('clock.jump', '30000');
  });

  it('are not armable at run time unless SANDGLASS_CHAOS=1', () => {
    const saved = process.env.SANDGLASS_CHAOS;
    delete process.env.SANDGLASS_CHAOS;
    expect(chaosEnabled()).toBe(false);
    process.env.SANDGLASS_CHAOS = 'true';
    expect(chaosEnabled()).toBe(false);
    process.env.SANDGLASS_CHAOS = '1';
    expect(chaosEnabled()).toBe(true);
    if (saved === undefined) delete process.env.SANDGLASS_CHAOS;
    else process.env.SANDGLASS_CHAOS = saved;
  });
});
