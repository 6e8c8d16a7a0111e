// Retention: which snapshots of a sandbox to keep as they age, thinned in fixed time buckets so repeated thinning is stable.
import { invalidArgument } from '@sandglass/core';

/**
 * Everything taken within `keepAllForMs` of now is kept; then each tier, up to `withinMs` of now, keeps one snapshot per
 * `everyMs`; anything older than the last tier is dropped. Pinned snapshots are always kept.
 */
export interface RetentionPolicy {
  keepAllForMs: number;
  tiers: Array<{ withinMs: number; everyMs: number }>;
}

export interface RetentionCandidate {
  id: string;
  takenAtMs: number;
  pinned: boolean;
}

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;
const MAX_WINDOW_MS = 366 * DAY_MS;

export const DEFAULT_RETENTION: RetentionPolicy = {
  keepAllForMs: HOUR_MS,
  tiers: [
    { withinMs: DAY_MS, everyMs: 10 * MINUTE_MS },
    { withinMs: 7 * DAY_MS, everyMs: HOUR_MS },
  ],
};

function windowMs(value: unknown, field: string): number {
  if (!Number.isSafeInteger(value) || (value as number) <= 0) throw invalidArgument(field, 'must be a positive integer');
  if ((value as number) > MAX_WINDOW_MS) throw invalidArgument(field, `must be at most ${MAX_WINDOW_MS} (366 days)`);
  return value as number;
}

function onlyFields(value: unknown, field: string, allowed: string[]): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalidArgument(field, 'must be an object');
  const extra = Object.keys(value).find((k) => !allowed.includes(k));
  if (extra !== undefined) throw invalidArgument(field === 'retention' ? extra : `${field}.${extra}`, 'is not a known field');
  return value as Record<string, unknown>;
}

/** Validates a policy from the outside (config, API) and returns a fresh copy; errors name the field and the rule. */
export function parseRetention(input: unknown): RetentionPolicy {
  const obj = onlyFields(input, 'retention', ['keepAllForMs', 'tiers']);
  const keepAllForMs = windowMs(obj.keepAllForMs, 'keepAllForMs');
  if (!Array.isArray(obj.tiers)) throw invalidArgument('tiers', 'must be an array');
  const tiers: RetentionPolicy['tiers'] = [];
  for (const [i, raw] of obj.tiers.entries()) {
    const tier = onlyFields(raw, `tiers[${i}]`, ['withinMs', 'everyMs']);
    const withinMs = windowMs(tier.withinMs, `tiers[${i}].withinMs`);
    const everyMs = windowMs(tier.everyMs, `tiers[${i}].everyMs`);
    const previous = tiers[i - 1];
    if (previous === undefined && withinMs <= keepAllForMs) throw invalidArgument(`tiers[${i}].withinMs`, 'must be greater than keepAllForMs');
    if (previous !== undefined && withinMs <= previous.withinMs) {
      throw invalidArgument(`tiers[${i}].withinMs`, `must be greater than tiers[${i - 1}].withinMs (tiers are ordered by withinMs)`);
    }
    if (previous !== undefined && everyMs <= previous.everyMs) {
      throw invalidArgument(`tiers[${i}].everyMs`, `must be greater than tiers[${i - 1}].everyMs (older tiers keep fewer)`);
    }
    tiers.push({ withinMs, everyMs });
  }
  return { keepAllForMs, tiers };
}

/** The oldest moment the policy still covers: unpinned snapshots taken before it are dropped (except the newest). */
export function retainedSinceMs(nowMs: number, policy: RetentionPolicy): number {
  return nowMs - (policy.tiers.at(-1)?.withinMs ?? policy.keepAllForMs);
}

/** Orders by time, then id, so ties between snapshots taken in the same millisecond resolve the same way every run. */
function older(a: RetentionCandidate, b: RetentionCandidate): boolean {
  return a.takenAtMs < b.takenAtMs || (a.takenAtMs === b.takenAtMs && a.id < b.id);
}

/**
 * Splits snapshots into those to keep and those to drop at `nowMs`. Tier i covers snapshots taken in
 * [now - withinMs, now - the previous tier's window), and keeps the oldest in each bucket floor(takenAtMs / everyMs):
 * buckets are fixed in time, not relative to now, so a snapshot kept once stays kept while it remains in the same tier
 * and thinning the result again changes nothing. The newest unpinned snapshot is always kept, however old, so a paused
 * sandbox can always be resumed.
 */
export function thin(snapshots: RetentionCandidate[], nowMs: number, policy: RetentionPolicy): { keep: string[]; drop: string[] } {
  const keepAllSinceMs = nowMs - policy.keepAllForMs;
  const oldestInBucket = new Map<string, RetentionCandidate>();
  const tierBucket = new Map<RetentionCandidate, string>();
  let newest: RetentionCandidate | undefined;
  for (const s of snapshots) {
    if (s.pinned) continue;
    if (!newest || older(newest, s)) newest = s;
    if (s.takenAtMs >= keepAllSinceMs) continue;
    const tierIndex = policy.tiers.findIndex((t) => s.takenAtMs >= nowMs - t.withinMs);
    if (tierIndex < 0) continue;
    const bucket = `${tierIndex}:${Math.floor(s.takenAtMs / policy.tiers[tierIndex]!.everyMs)}`;
    tierBucket.set(s, bucket);
    const current = oldestInBucket.get(bucket);
    if (!current || older(s, current)) oldestInBucket.set(bucket, s);
  }
  const keep: string[] = [];
  const drop: string[] = [];
  for (const s of snapshots) {
    const bucket = tierBucket.get(s);
    const kept = s.pinned || s === newest || s.takenAtMs >= keepAllSinceMs || (bucket !== undefined && oldestInBucket.get(bucket) === s);
    (kept ? keep : drop).push(s.id);
  }
  return { keep, drop };
}

/** A committed snapshot as retention sees it across sandboxes. */
export interface RetentionEntry extends RetentionCandidate {
  sandboxId: string;
  /** The sandbox ended or failed: there is nothing to resume, so its newest snapshot ages out like the others. */
  sandboxEnded: boolean;
}

/**
 * The snapshots to delete at `nowMs`: each sandbox's history thinned by `thin` (pinned ones stay; a sandbox that still
 * exists keeps its newest whatever its age, so it can always be resumed), and an ended sandbox's snapshots older than
 * the policy's last window dropped even when newest. One plan for every deployment: the one-process gateway and the
 * cluster's control plane thin alike.
 */
export function planRetention(list: readonly RetentionEntry[], nowMs: number, policy: RetentionPolicy): string[] {
  const bySandbox = new Map<string, RetentionEntry[]>();
  for (const s of list) {
    const group = bySandbox.get(s.sandboxId);
    if (group) group.push(s);
    else bySandbox.set(s.sandboxId, [s]);
  }
  const since = retainedSinceMs(nowMs, policy);
  const drop: string[] = [];
  for (const group of bySandbox.values()) {
    const gone = new Set(thin(group, nowMs, policy).drop);
    for (const s of group) {
      if (gone.has(s.id) || (s.sandboxEnded && !s.pinned && s.takenAtMs < since)) drop.push(s.id);
    }
  }
  return drop;
}
