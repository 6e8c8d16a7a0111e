import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from './clock.js';

describe('ManualClock timers', () => {
  it('fires timeouts and intervals inside advance, in due order, each at its own time', () => {
    const clock = new ManualClock(1000);
    const fired: Array<[string, number]> = [];
    clock.setTimeout(() => fired.push(['b', clock.nowMs()]), 300);
    clock.setTimeout(() => fired.push(['a', clock.nowMs()]), 100);
    const every = clock.setInterval(() => fired.push(['i', clock.nowMs()]), 150);
    clock.advance(99);
    expect(fired).toEqual([]);
    clock.advance(251);
    expect(fired).toEqual([
      ['a', 1100],
      ['i', 1150],
      ['b', 1300],
      ['i', 1300],
    ]);
    expect(clock.nowMs()).toBe(1350);
    every.cancel();
    clock.advance(1000);
    expect(fired).toHaveLength(4);
    expect(clock.pendingTimers).toBe(0);
  });

  it('fires a timer set by another timer within the same advance when it is due, and never a cancelled one', () => {
    const clock = new ManualClock();
    const fired: number[] = [];
    const cancelled = clock.setTimeout(() => fired.push(-1), 50);
    clock.setTimeout(() => {
      fired.push(clock.nowMs());
      clock.setTimeout(() => fired.push(clock.nowMs()), 10);
    }, 20);
    cancelled.cancel();
    cancelled.cancel();
    clock.advance(100);
    expect(fired).toEqual([20, 30]);
  });
});

describe('systemClock timers', () => {
  it('runs a timeout and lets a cancelled one go', async () => {
    let cancelledRan = false;
    systemClock.setTimeout(() => (cancelledRan = true), 1).cancel();
    await new Promise<void>((resolve) => systemClock.setTimeout(resolve, 1));
    expect(cancelledRan).toBe(false);
  });
});
