// Retention thinning: a simulated week ends with the counts the policy implies, thinning is idempotent and stable, pins and the newest survive.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '@sandglass/core';
import { DEFAULT_RETENTION, parseRetention, planRetention, retainedSinceMs, thin, type RetentionCandidate, type RetentionPolicy } from './index.js';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const START = Date.UTC(2025, 0, 1);

/** Which band of the default policy a snapshot falls in at `nowMs`: 0 keep-all, 1 ten-minute, 2 hourly, 3 older. */
function band(takenAtMs: number, nowMs: number): number {
  const ageMs = nowMs - takenAtMs;
  if (ageMs <= HOUR) return 0;
  if (ageMs <= DAY) return 1;
  if (ageMs <= 7 * DAY) return 2;
  return 3;
}

/**
 * A snapshot every minute for eight days, thinned every hour. Checks on the way that nothing kept is later dropped while
 * it is still in the same band, and that thinning the kept set again changes nothing.
 */
function simulateWeek(startMs: number): { nowMs: number; kept: RetentionCandidate[] } {
  const clock = new ManualClock(startMs);
  let kept: RetentionCandidate[] = [];
  const keptInBand = new Map<string, number>();
  for (let minute = 0; minute <= 8 * 24 * 60; minute++) {
    kept.push({ id: `s${minute}`, takenAtMs: clock.nowMs(), pinned: false });
    if (minute % 60 === 0) {
      const nowMs = clock.nowMs();
      const { keep, drop } = thin(kept, nowMs, DEFAULT_RETENTION);
      const byId = new Map(kept.map((s) => [s.id, s]));
      for (const id of drop) {
        const wasKeptIn = keptInBand.get(id);
        if (wasKeptIn !== undefined) expect(band(byId.get(id)!.takenAtMs, nowMs), `${id} flipped to dropped`).not.toBe(wasKeptIn);
      }
      kept = keep.map((id) => byId.get(id)!);
      for (const s of kept) keptInBand.set(s.id, band(s.takenAtMs, nowMs));
      expect(thin(kept, nowMs, DEFAULT_RETENTION)).toEqual({ keep, drop: [] });
    }
    clock.advance(MINUTE);
  }
  return { nowMs: clock.nowMs() - MINUTE, kept };
}

function countByBand(kept: RetentionCandidate[], nowMs: number): number[] {
  const counts = [0, 0, 0, 0];
  for (const s of kept) counts[band(s.takenAtMs, nowMs)]!++;
  return counts;
}

describe('thin', () => {
  // Keep-all covers ages 0..60 min inclusive: 61 snapshots. The ten-minute tier covers [now-24h, now-1h): 23 h = 138
  // buckets, each keeping its oldest. The hourly tier covers [now-7d, now-24h): 144 buckets. Nothing older survives.
  it('a week of per-minute snapshots, thinned hourly, ends with 61 + 138 + 144 on bucket-aligned time', () => {
    const { nowMs, kept } = simulateWeek(START);
    expect(countByBand(kept, nowMs)).toEqual([61, 138, 144, 0]);
    expect(kept.every((s) => band(s.takenAtMs, nowMs) !== 2 || (s.takenAtMs - START) % HOUR === 0)).toBe(true);
  });

  // When now is not on a bucket edge each tier's window cuts two buckets. The newer cut bucket still holds its oldest
  // snapshot; the older cut bucket's remaining members were dropped an hour earlier, when the whole bucket was in the
  // tier alongside its oldest (which has since moved on). So the counts stay exactly 61, 137 + 1 and 143 + 1.
  it('gives the same counts when snapshots and thinning are off the bucket edges', () => {
    const { nowMs, kept } = simulateWeek(START + 7 * MINUTE + 13_000);
    expect(countByBand(kept, nowMs)).toEqual([61, 138, 144, 0]);
  });

  it('keeps the oldest snapshot in each bucket and drops everything older than the last tier', () => {
    const nowMs = START + 10 * DAY;
    const at = (id: string, agoMs: number): RetentionCandidate => ({ id, takenAtMs: nowMs - agoMs, pinned: false });
    const bucketStart = Math.floor((nowMs - 2 * HOUR) / (10 * MINUTE)) * 10 * MINUTE;
    const snapshots = [
      at('new', 0),
      at('recent-a', 59 * MINUTE),
      at('recent-b', 60 * MINUTE),
      { id: 'b-late', takenAtMs: bucketStart + 9 * MINUTE, pinned: false },
      { id: 'b-first', takenAtMs: bucketStart + 1 * MINUTE, pinned: false },
      { id: 'b-mid', takenAtMs: bucketStart + 5 * MINUTE, pinned: false },
      at('week-old', 7 * DAY),
      at('too-old', 7 * DAY + 1),
    ];
    expect(thin(snapshots, nowMs, DEFAULT_RETENTION)).toEqual({
      keep: ['new', 'recent-a', 'recent-b', 'b-first', 'week-old'],
      drop: ['b-late', 'b-mid', 'too-old'],
    });
  });

  it('always keeps pinned snapshots', () => {
    const nowMs = START + 30 * DAY;
    const snapshots = [
      { id: 'pinned-ancient', takenAtMs: START, pinned: true },
      { id: 'pinned-dup', takenAtMs: nowMs - 2 * DAY + 1, pinned: true },
      { id: 'same-hour', takenAtMs: nowMs - 2 * DAY + 2, pinned: false },
      { id: 'newest', takenAtMs: nowMs, pinned: false },
    ];
    // A pinned snapshot does not take its bucket's place: the unpinned one there is still the oldest unpinned.
    expect(thin(snapshots, nowMs, DEFAULT_RETENTION)).toEqual({ keep: ['pinned-ancient', 'pinned-dup', 'same-hour', 'newest'], drop: [] });
  });

  it('keeps the newest unpinned snapshot even when it is older than every tier', () => {
    const nowMs = START + 30 * DAY;
    const snapshots = [
      { id: 'old', takenAtMs: START, pinned: false },
      { id: 'older', takenAtMs: START - DAY, pinned: false },
      { id: 'pinned-newer', takenAtMs: START + DAY, pinned: true },
    ];
    expect(thin(snapshots, nowMs, DEFAULT_RETENTION)).toEqual({ keep: ['old', 'pinned-newer'], drop: ['older'] });
    // Once the sandbox takes a new snapshot, the old one is no longer needed to resume it.
    expect(thin([...snapshots, { id: 'fresh', takenAtMs: nowMs, pinned: false }], nowMs, DEFAULT_RETENTION).drop).toEqual(['old', 'older']);
  });

  it('resolves snapshots taken in the same millisecond by id, whatever the input order', () => {
    const nowMs = START + DAY;
    const t = nowMs - 3 * HOUR;
    const a = { id: 'a', takenAtMs: t, pinned: false };
    const b = { id: 'b', takenAtMs: t, pinned: false };
    const n = { id: 'n', takenAtMs: nowMs, pinned: false };
    expect(thin([a, b, n], nowMs, DEFAULT_RETENTION).drop).toEqual(['b']);
    expect(thin([b, a, n], nowMs, DEFAULT_RETENTION).drop).toEqual(['b']);
  });

  it('keeps nothing but the newest past keepAllForMs when there are no tiers', () => {
    const policy: RetentionPolicy = { keepAllForMs: HOUR, tiers: [] };
    const nowMs = START + DAY;
    const snapshots = [2, 3, 30, 90].map((m) => ({ id: `m${m}`, takenAtMs: nowMs - m * MINUTE, pinned: false }));
    expect(thin(snapshots, nowMs, policy)).toEqual({ keep: ['m2', 'm3', 'm30'], drop: ['m90'] });
    expect(retainedSinceMs(nowMs, policy)).toBe(nowMs - HOUR);
  });
});

describe('retainedSinceMs', () => {
  it('is the start of the last tier', () => {
    expect(retainedSinceMs(START + 30 * DAY, DEFAULT_RETENTION)).toBe(START + 23 * DAY);
    // A snapshot taken exactly then is still covered.
    const nowMs = START + 30 * DAY;
    const edge = { id: 'edge', takenAtMs: retainedSinceMs(nowMs, DEFAULT_RETENTION), pinned: false };
    expect(thin([edge, { id: 'n', takenAtMs: nowMs, pinned: false }], nowMs, DEFAULT_RETENTION).keep).toEqual(['edge', 'n']);
  });
});

describe('parseRetention', () => {
  it('accepts the default policy and returns a copy', () => {
    const input = structuredClone(DEFAULT_RETENTION);
    const parsed = parseRetention(input);
    expect(parsed).toEqual(DEFAULT_RETENTION);
    input.tiers[0]!.everyMs = 1;
    expect(parsed.tiers[0]!.everyMs).toBe(10 * MINUTE);
  });

  const tier = (withinMs: number, everyMs: number) => ({ withinMs, everyMs });
  it.each([
    [null, 'retention'],
    [[], 'retention'],
    [{ keepAllForMs: HOUR, tiers: [], extra: 1 }, 'extra'],
    [{ tiers: [] }, 'keepAllForMs'],
    [{ keepAllForMs: 0, tiers: [] }, 'keepAllForMs'],
    [{ keepAllForMs: 1.5, tiers: [] }, 'keepAllForMs'],
    [{ keepAllForMs: '3600000', tiers: [] }, 'keepAllForMs'],
    [{ keepAllForMs: 367 * DAY, tiers: [] }, 'keepAllForMs'],
    [{ keepAllForMs: HOUR }, 'tiers'],
    [{ keepAllForMs: HOUR, tiers: [5] }, 'tiers[0]'],
    [{ keepAllForMs: HOUR, tiers: [{ withinMs: DAY, everyMs: HOUR, keep: 1 }] }, 'tiers[0].keep'],
    [{ keepAllForMs: HOUR, tiers: [tier(DAY, -1)] }, 'tiers[0].everyMs'],
    [{ keepAllForMs: HOUR, tiers: [tier(HOUR, MINUTE)] }, 'tiers[0].withinMs'],
    [{ keepAllForMs: HOUR, tiers: [tier(7 * DAY, HOUR), tier(DAY, DAY)] }, 'tiers[1].withinMs'],
    [{ keepAllForMs: HOUR, tiers: [tier(DAY, HOUR), tier(7 * DAY, HOUR)] }, 'tiers[1].everyMs'],
    [{ keepAllForMs: HOUR, tiers: [tier(DAY, HOUR), tier(367 * DAY, DAY)] }, 'tiers[1].withinMs'],
  ])('refuses %j, naming %s', (input, field) => {
    expect(() => parseRetention(input)).toThrowError(expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field }) }));
  });

  it('accepts a window of exactly 366 days', () => {
    expect(parseRetention({ keepAllForMs: HOUR, tiers: [tier(366 * DAY, DAY)] }).tiers).toHaveLength(1);
  });
});

describe('planRetention', () => {
  const nowMs = START + 30 * DAY;
  const entry = (id: string, sandboxId: string, ageMs: number, over: { pinned?: boolean; sandboxEnded?: boolean } = {}) => ({
    id,
    sandboxId,
    takenAtMs: nowMs - ageMs,
    pinned: over.pinned ?? false,
    sandboxEnded: over.sandboxEnded ?? false,
  });

  it('thins each sandbox on its own: a live sandbox keeps its newest however old, an ended one lets it age out, pins stay', () => {
    const list = [
      entry('live-old', 'sbx_live', 20 * DAY),
      entry('live-newest', 'sbx_live', 10 * DAY),
      entry('ended-newest', 'sbx_ended', 10 * DAY, { sandboxEnded: true }),
      entry('ended-pinned', 'sbx_ended', 20 * DAY, { sandboxEnded: true, pinned: true }),
      entry('ended-recent', 'sbx_other', MINUTE, { sandboxEnded: true }),
    ];
    expect(planRetention(list, nowMs, DEFAULT_RETENTION).sort()).toEqual(['ended-newest', 'live-old']);
  });
});
