// The capture scheduler on fake time: bounded concurrency, spread first runs, the retry sequence, remove and runNow
// semantics, fairness under load, and the behind/caught-up reports.
import { createCipheriv } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock, type Clock, type Random, type Timer } from '@sandglass/core';
import { achievedCadence, CaptureScheduler, type BehindReport, type CaptureSchedulerOptions, type CaughtUpReport } from './index.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;

/** A Clock on a ManualClock whose advance() fires due callbacks in time order and lets the promises they start settle. */
class FakeTimers implements Clock {
  private readonly pending = new Map<number, { atMs: number; fn: () => void }>();
  private nextId = 1;
  constructor(readonly clock: ManualClock) {}

  nowMs(): number {
    return this.clock.nowMs();
  }

  setTimeout(fn: () => void, ms: number): Timer {
    const id = this.nextId++;
    this.pending.set(id, { atMs: this.clock.nowMs() + ms, fn });
    return { cancel: () => this.pending.delete(id) };
  }

  setInterval(fn: () => void, ms: number): Timer {
    let next: Timer;
    const arm = () => {
      next = this.setTimeout(() => (arm(), fn()), ms);
    };
    arm();
    return { cancel: () => next.cancel() };
  }

  /** A promise that resolves after `ms` of fake time: a capture that takes a while. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.setTimeout(resolve, ms));
  }

  async advance(ms: number): Promise<void> {
    const untilMs = this.clock.nowMs() + ms;
    await settle();
    for (;;) {
      let next: [number, { atMs: number; fn: () => void }] | undefined;
      for (const e of this.pending) if (e[1].atMs <= untilMs && (!next || e[1].atMs < next[1].atMs)) next = e;
      if (!next) break;
      this.pending.delete(next[0]);
      this.clock.advance(next[1].atMs - this.clock.nowMs());
      next[1].fn();
      await settle();
    }
    this.clock.advance(untilMs - this.clock.nowMs());
  }
}

/** Lets every promise chain that is ready run to completion. */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Deterministic Random (AES-CTR keystream), so the spread and jitter reproduce. */
function seededRandom(seed: number): Random {
  const key = Buffer.alloc(16);
  key.writeUInt32BE(seed);
  const stream = createCipheriv('aes-128-ctr', key, Buffer.alloc(16));
  return { bytes: (n) => stream.update(Buffer.alloc(n)) };
}

function deferred(): { promise: Promise<void>; resolve(): void; reject(err: unknown): void } {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

let clock: ManualClock;
let timers: FakeTimers;
const START = Date.UTC(2025, 0, 1);

beforeEach(() => {
  clock = new ManualClock(START);
  timers = new FakeTimers(clock);
  // The scheduler must read time and randomness only from what it is given.
  vi.spyOn(Date, 'now').mockImplementation(() => {
    throw new Error('Date.now called');
  });
  vi.spyOn(Math, 'random').mockImplementation(() => {
    throw new Error('Math.random called');
  });
});
afterEach(() => {
  vi.restoreAllMocks();
});

function scheduler(opts: Partial<CaptureSchedulerOptions> = {}): CaptureScheduler {
  return new CaptureScheduler({ clock: timers, random: seededRandom(7), concurrency: 4, ...opts });
}

describe('CaptureScheduler', () => {
  it('never runs more than `concurrency` captures at once across 50 keys, and queues the rest in order', async () => {
    const s = scheduler({ concurrency: 4 });
    let runningNow = 0;
    let maxRunning = 0;
    const started: string[] = [];
    const runs = new Map<string, number>();
    for (let i = 0; i < 50; i++) {
      const key = `sbx_${i}`;
      s.add(key, 30 * SECOND, async () => {
        started.push(key);
        maxRunning = Math.max(maxRunning, ++runningNow);
        await timers.sleep(5 * SECOND);
        runningNow--;
        runs.set(key, (runs.get(key) ?? 0) + 1);
      });
    }
    const manual = Array.from({ length: 50 }, (_, i) => s.runNow(`sbx_${i}`));
    await settle();
    expect([s.running, s.queued]).toEqual([4, 46]);
    expect(started).toEqual(['sbx_0', 'sbx_1', 'sbx_2', 'sbx_3']);
    await timers.advance(5 * SECOND);
    expect(started.slice(4, 8)).toEqual(['sbx_4', 'sbx_5', 'sbx_6', 'sbx_7']);
    await timers.advance(30 * MINUTE);
    await Promise.all(manual);
    // 5 s captures, 4 at a time, 50 keys: 40 captures a minute at most, against ~100 asked for; the queue stays busy.
    expect(maxRunning).toBe(4);
    expect([...runs.values()].reduce((a, b) => a + b, 0)).toBeGreaterThan(30 * 40 * 0.95);
    expect(Math.min(...runs.values())).toBeGreaterThan(10);
    // The captures under way still need fake time to finish.
    const stopping = s.stop();
    await timers.advance(5 * SECOND);
    await stopping;
    expect([s.running, s.queued]).toEqual([0, 0]);
  });

  it('spreads the first runs of keys added together over one interval', async () => {
    const s = scheduler({ concurrency: 50 });
    const firstRunMs = new Map<string, number>();
    for (let i = 0; i < 50; i++) {
      const key = `sbx_${i}`;
      s.add(key, MINUTE, async () => {
        if (!firstRunMs.has(key)) firstRunMs.set(key, clock.nowMs() - START);
      });
    }
    await timers.advance(3 * MINUTE);
    const offsets = [...firstRunMs.values()].sort((a, b) => a - b);
    expect(offsets).toHaveLength(50);
    // uniform in [0, interval)
    expect(offsets[0]!).toBeGreaterThanOrEqual(0);
    expect(offsets.at(-1)!).toBeLessThan(MINUTE);
    expect(offsets.at(-1)! - offsets[0]!).toBeGreaterThan(45 * SECOND);
    const perSecond = new Map<number, number>();
    for (const ms of offsets) perSecond.set(Math.floor(ms / SECOND), (perSecond.get(Math.floor(ms / SECOND)) ?? 0) + 1);
    expect(Math.max(...perSecond.values())).toBeLessThanOrEqual(4);
    await s.stop();
  });

  it('waits a jittered interval between runs', async () => {
    const s = scheduler({ jitterFraction: 0.2 });
    const atMs: number[] = [];
    s.add('sbx_a', MINUTE, async () => {
      atMs.push(clock.nowMs());
    });
    await timers.advance(60 * MINUTE);
    const gaps = atMs.slice(1).map((t, i) => t - atMs[i]!);
    expect(gaps.length).toBeGreaterThan(40);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(0.8 * MINUTE);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(1.2 * MINUTE);
    expect(new Set(gaps).size).toBeGreaterThan(gaps.length / 2);
    await s.stop();
  });

  it('retries a failed capture after each retry delay, reports every failure, then falls back to the interval', async () => {
    const s = scheduler({ jitterFraction: 0, retryDelaysMs: [2000, 10_000, 30_000] });
    const atMs: number[] = [];
    const failures: Array<[string, number, boolean]> = [];
    let failNext = 4;
    s.add(
      'sbx_a',
      MINUTE,
      async () => {
        atMs.push(clock.nowMs());
        if (failNext > 0) throw new Error(`boom ${failNext--}`);
      },
      { onFailure: (err, attempt, willRetry) => failures.push([(err as Error).message, attempt, willRetry]) },
    );
    await timers.advance(2 * MINUTE + 2 * MINUTE + 42 * SECOND);
    const gaps = atMs.slice(1).map((t, i) => t - atMs[i]!);
    expect(gaps.slice(0, 5)).toEqual([2000, 10_000, 30_000, MINUTE, MINUTE]);
    expect(failures).toEqual([
      ['boom 4', 1, true],
      ['boom 3', 2, true],
      ['boom 2', 3, true],
      ['boom 1', 4, false],
    ]);
    // A success resets the sequence: the next failure is attempt 1 again, retried after the first delay.
    failNext = 1;
    const before = atMs.length;
    await timers.advance(MINUTE + 2 * SECOND);
    expect(failures.at(-1)).toEqual(['boom 1', 1, true]);
    expect(atMs.at(-1)! - atMs[before]!).toBe(2000);
    await s.stop();
  });

  it('keeps the schedule when onFailure throws', async () => {
    const s = scheduler({ jitterFraction: 0, retryDelaysMs: [1000] });
    let runs = 0;
    s.add(
      'sbx_a',
      MINUTE,
      async () => {
        runs++;
        throw new Error('boom');
      },
      {
        onFailure: () => {
          throw new Error('hook broke');
        },
      },
    );
    await timers.advance(10 * MINUTE);
    expect(runs).toBeGreaterThan(10);
    await s.stop();
  });

  it('remove cancels the timers and queued runs, and waits for the run under way', async () => {
    const s = scheduler({ jitterFraction: 0 });
    const gate = deferred();
    let runs = 0;
    s.add('sbx_a', MINUTE, async () => {
      runs++;
      await gate.promise;
    });
    const first = s.runNow('sbx_a');
    const second = s.runNow('sbx_a');
    await settle();
    expect([s.running, s.queued, runs]).toEqual([1, 1, 1]);

    let removed = false;
    const removing = s.remove('sbx_a').then(() => (removed = true));
    await expect(second).rejects.toMatchObject({ code: 'conflict' });
    await timers.advance(10 * SECOND);
    expect(removed).toBe(false);
    gate.resolve();
    await removing;
    await first;
    await timers.advance(10 * MINUTE);
    expect([runs, s.running, s.queued]).toEqual([1, 0, 0]);
    await expect(s.runNow('sbx_a')).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'key' } });
    await s.remove('sbx_a');
  });

  it('runNow never runs one key twice at once: a second caller waits for the running one, then gets its own run', async () => {
    const s = scheduler({ jitterFraction: 0 });
    const gates = [deferred(), deferred()];
    let inFlight = 0;
    const log: string[] = [];
    let n = 0;
    s.add('sbx_a', 10 * MINUTE, async () => {
      const run = n++;
      expect(++inFlight).toBe(1);
      log.push(`start ${run}`);
      await gates[run]?.promise;
      log.push(`end ${run}`);
      inFlight--;
    });
    const settled: string[] = [];
    const first = s.runNow('sbx_a').then(() => settled.push('first'));
    await settle();
    const second = s.runNow('sbx_a').then(() => settled.push('second'));
    await settle();
    expect(log).toEqual(['start 0']);
    gates[0]!.resolve();
    await first;
    await settle();
    expect(settled).toEqual(['first']);
    expect(log).toEqual(['start 0', 'end 0', 'start 1']);
    gates[1]!.resolve();
    await second;
    expect(settled).toEqual(['first', 'second']);
    // The schedule resumes once, after the last of the queued runs.
    await timers.advance(10 * MINUTE);
    expect(n).toBe(3);
    await s.stop();
  });

  it('runNow waits for a free slot, reports its own failure, and moves the next scheduled run', async () => {
    const s = scheduler({ concurrency: 1, jitterFraction: 0, retryDelaysMs: [] });
    const gate = deferred();
    s.add('busy', 10 * MINUTE, () => gate.promise);
    const atMs: number[] = [];
    let fail = true;
    s.add('sbx_a', 10 * MINUTE, async () => {
      atMs.push(clock.nowMs());
      if (fail) throw new Error('disk full');
    });
    void s.runNow('busy');
    const manual = s.runNow('sbx_a');
    manual.catch(() => undefined);
    await timers.advance(30 * SECOND);
    expect(atMs).toEqual([]);
    gate.resolve();
    await expect(manual).rejects.toThrow('disk full');
    expect(atMs).toEqual([START + 30 * SECOND]);
    fail = false;
    await s.runNow('sbx_a');
    await timers.advance(10 * MINUTE);
    expect(atMs.slice(1)).toEqual([START + 30 * SECOND, START + 30 * SECOND + 10 * MINUTE]);
    await s.stop();
  });

  it('setInterval stretches the wait under way in proportion and applies to later waits', async () => {
    const s = scheduler({ jitterFraction: 0 });
    const atMs: number[] = [];
    s.add('sbx_a', MINUTE, async () => {
      atMs.push(clock.nowMs());
    });
    await s.runNow('sbx_a');
    await timers.advance(30 * SECOND);
    s.setInterval('sbx_a', 2 * MINUTE);
    await timers.advance(90 * SECOND + 2 * MINUTE);
    expect(atMs.map((t) => t - START)).toEqual([0, 2 * MINUTE, 4 * MINUTE]);
    // Shrinking below the time already waited runs at once.
    await timers.advance(90 * SECOND);
    s.setInterval('sbx_a', 30 * SECOND);
    await timers.advance(0);
    expect(atMs.at(-1)! - START).toBe(5 * MINUTE + 30 * SECOND);
    await s.stop();
  });

  it('stop cancels queued runs and waits for the ones under way; nothing can be added afterwards', async () => {
    const s = scheduler({ concurrency: 1 });
    const gate = deferred();
    s.add('a', MINUTE, () => gate.promise);
    s.add('b', MINUTE, async () => undefined);
    const a = s.runNow('a');
    const b = s.runNow('b');
    let stopped = false;
    const stopping = s.stop().then(() => (stopped = true));
    await expect(b).rejects.toMatchObject({ code: 'conflict' });
    await settle();
    expect(stopped).toBe(false);
    gate.resolve();
    await Promise.all([a, stopping]);
    expect(() => s.add('c', MINUTE, async () => undefined)).toThrowError(expect.objectContaining({ code: 'conflict' }));
  });

  it('shares an overloaded node in proportion to the intervals asked: ten keys at 5 s and one at 60 s, none starved', async () => {
    // One slot, 1 s captures: 60 a minute against 121 asked for, so every key gets about half of its cadence.
    const s = scheduler({ concurrency: 1 });
    const starts = new Map<string, number[]>();
    const add = (key: string, intervalMs: number) => {
      starts.set(key, []);
      s.add(key, intervalMs, async () => {
        starts.get(key)!.push(clock.nowMs());
        await timers.sleep(SECOND);
      });
    };
    for (let i = 0; i < 10; i++) add(`fast_${i}`, 5 * SECOND);
    add('slow', MINUTE);
    await timers.advance(40 * MINUTE);
    // Achieved over the last 30 minutes, against the interval asked for.
    const fromMs = clock.nowMs() - 30 * MINUTE;
    const ratio = (key: string, intervalMs: number) => (30 * MINUTE) / starts.get(key)!.filter((t) => t >= fromMs).length / intervalMs;
    const fast = Array.from({ length: 10 }, (_, i) => ratio(`fast_${i}`, 5 * SECOND));
    const slow = ratio('slow', MINUTE);
    const total = [...starts.values()].reduce((n, list) => n + list.filter((t) => t >= fromMs).length, 0);
    // The slot is never idle, and the 60 s key is exactly as far behind its interval as the 5 s keys are behind theirs.
    expect(total).toBeGreaterThanOrEqual(30 * 60 - 2);
    for (const r of fast) expect(r).toBeGreaterThan(1.8);
    expect(Math.max(...fast) / Math.min(...fast)).toBeLessThan(1.05);
    expect(slow / (fast.reduce((a, b) => a + b, 0) / fast.length)).toBeGreaterThan(0.9);
    expect(slow / (fast.reduce((a, b) => a + b, 0) / fast.length)).toBeLessThan(1.1);
    const stopping = s.stop();
    await timers.advance(SECOND);
    await stopping;
  });

  it('reports each key behind once while the slots are full, and caught up once after the load drops', async () => {
    // Four keys at 10 s with one slot and 5 s captures: 24 asked for a minute, 12 possible.
    const s = scheduler({ concurrency: 1 });
    const behind = new Map<string, BehindReport[]>();
    const caughtUp = new Map<string, CaughtUpReport[]>();
    for (let i = 0; i < 4; i++) {
      const key = `sbx_${i}`;
      behind.set(key, []);
      caughtUp.set(key, []);
      s.add(key, 10 * SECOND, () => timers.sleep(5 * SECOND), {
        onBehind: (r) => behind.get(key)!.push(r),
        onCaughtUp: (r) => caughtUp.get(key)!.push(r),
      });
    }
    await timers.advance(10 * MINUTE);
    for (const [key, reports] of behind) {
      expect(reports, key).toHaveLength(1);
      expect(reports[0]!.why).toBe('slots_full');
      expect(reports[0]!.intervalMs).toBe(10 * SECOND);
      expect(reports[0]!.lateMs).toBeGreaterThanOrEqual(5 * SECOND);
      expect(caughtUp.get(key)).toEqual([]);
      const c = s.cadence(key)!;
      expect(c.behind).toBe(true);
      // 12 a minute shared by four: one every 20 s, so 4 to 6 in the 100 s window.
      expect(c.achievedIntervalMs).toBeGreaterThanOrEqual(16 * SECOND);
      expect(c.achievedIntervalMs).toBeLessThanOrEqual(25 * SECOND);
    }
    expect(s.capacityPerMinute()).toBe(12);
    const removing = Promise.all(['sbx_1', 'sbx_2', 'sbx_3'].map((key) => s.remove(key)));
    await timers.advance(5 * SECOND);
    await removing;
    await timers.advance(10 * MINUTE);
    expect(behind.get('sbx_0')).toHaveLength(1);
    expect(caughtUp.get('sbx_0')).toHaveLength(1);
    expect(caughtUp.get('sbx_0')![0]!.behindForMs).toBeGreaterThan(9 * MINUTE);
    const c = s.cadence('sbx_0')!;
    expect(c.behind).toBe(false);
    expect(c.achievedIntervalMs).toBeGreaterThan(9 * SECOND);
    expect(c.achievedIntervalMs).toBeLessThan(11 * SECOND);
    const stopping = s.stop();
    await timers.advance(5 * SECOND);
    await stopping;
  });

  it('says a key is behind because its own capture is slower than its interval, or because its captures fail', async () => {
    const s = scheduler({ concurrency: 4, jitterFraction: 0, retryDelaysMs: [2000, 10_000, 30_000] });
    const reports: Array<[string, string]> = [];
    const caught: string[] = [];
    let slowMs = 25 * SECOND;
    s.add('slow', 10 * SECOND, () => timers.sleep(slowMs), {
      onBehind: (r) => reports.push(['slow', r.why]),
      onCaughtUp: () => caught.push('slow'),
    });
    let failing = true;
    s.add(
      'broken',
      10 * SECOND,
      async () => {
        if (failing) throw new Error('store down');
      },
      { onBehind: (r) => reports.push(['broken', r.why]), onCaughtUp: () => caught.push('broken') },
    );
    await timers.advance(5 * MINUTE);
    expect(reports.sort()).toEqual([
      ['broken', 'failing'],
      ['slow', 'capture_slow'],
    ]);
    expect(caught).toEqual([]);
    slowMs = SECOND;
    failing = false;
    await timers.advance(5 * MINUTE);
    expect(caught.sort()).toEqual(['broken', 'slow']);
    expect(reports).toHaveLength(2);
    await s.stop();
  });

  it('a key on time is never reported, and a capture that takes part of the interval does not stretch it', async () => {
    const s = scheduler({ concurrency: 1, jitterFraction: 0 });
    const atMs: number[] = [];
    const reports: unknown[] = [];
    s.add(
      'sbx_a',
      10 * SECOND,
      async () => {
        atMs.push(clock.nowMs());
        await timers.sleep(4 * SECOND);
      },
      { onBehind: (r) => reports.push(r), onCaughtUp: (r) => reports.push(r) },
    );
    await timers.advance(10 * MINUTE);
    expect(reports).toEqual([]);
    const gaps = atMs.slice(1).map((t, i) => t - atMs[i]!);
    expect(new Set(gaps)).toEqual(new Set([10 * SECOND]));
    expect(s.capacityPerMinute()).toBe(15);
    const stopping = s.stop();
    await timers.advance(4 * SECOND);
    await stopping;
  });

  it('achievedCadence divides the window by the runs in it, and says nothing before one interval has passed', () => {
    expect(achievedCadence([], 0, 5 * SECOND, 0)).toEqual({ intervalMs: 5 * SECOND, achievedIntervalMs: null, windowMs: 0, takenInWindow: 0 });
    expect(achievedCadence([1000], 4 * SECOND, 5 * SECOND, 0).achievedIntervalMs).toBeNull();
    // Ten 5 s intervals holding 5 runs: one every 10 s.
    const starts = Array.from({ length: 8 }, (_, i) => i * 10 * SECOND);
    expect(achievedCadence(starts, 75 * SECOND, 5 * SECOND, 0)).toEqual({
      intervalMs: 5 * SECOND,
      achievedIntervalMs: 10 * SECOND,
      windowMs: 50 * SECOND,
      takenInWindow: 5,
    });
    // An hour at most, unless one interval is longer.
    expect(achievedCadence([], 100 * 3600 * SECOND, 3600 * SECOND, 0).windowMs).toBe(3600 * SECOND);
    expect(achievedCadence([], 100 * 86400 * SECOND, 86400 * SECOND, 0).windowMs).toBe(86400 * SECOND);
    // Nothing in the window: behind by all of it, and no achieved interval to show.
    expect(achievedCadence([0], 10 * MINUTE, 5 * SECOND, 0)).toMatchObject({ achievedIntervalMs: null, takenInWindow: 0 });
  });

  it('refuses bad options and arguments, naming the field', () => {
    const bad = (opts: Partial<CaptureSchedulerOptions>) => () => scheduler(opts);
    const field = (name: string) => expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field: name }) });
    expect(bad({ concurrency: 0 })).toThrowError(field('concurrency'));
    expect(bad({ jitterFraction: 1 })).toThrowError(field('jitterFraction'));
    expect(bad({ jitterFraction: -0.1 })).toThrowError(field('jitterFraction'));
    expect(bad({ retryDelaysMs: [1000, -1] })).toThrowError(field('retryDelaysMs[1]'));
    expect(bad({ caughtUpFraction: 0.5 })).toThrowError(field('caughtUpFraction'));
    expect(bad({ caughtUpRuns: 0 })).toThrowError(field('caughtUpRuns'));
    const s = scheduler();
    const task = async () => undefined;
    expect(() => s.add('a', 0, task)).toThrowError(field('intervalMs'));
    expect(() => s.add('', MINUTE, task)).toThrowError(field('key'));
    s.add('a', MINUTE, task);
    expect(() => s.add('a', MINUTE, task)).toThrowError(field('key'));
    expect(() => s.setInterval('a', 1.5)).toThrowError(field('intervalMs'));
    expect(() => s.setInterval('b', MINUTE)).toThrowError(field('key'));
  });
});
