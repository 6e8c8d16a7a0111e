// The per-node capture scheduler: each sandbox's capture on a jittered interval, a bounded number at a time, the most
// overdue for its interval first, with retries; it says when a sandbox falls behind its interval and when it catches up.
import { invalidArgument, SandglassError, type Clock, type Random, type Timer } from '@sandglass/core';

export interface CaptureSchedulerOptions {
  clock: Clock;
  random: Random;
  /** At most this many captures run at once across all keys. */
  concurrency: number;
  /** Each wait is uniform in [interval * (1 - j), interval * (1 + j)]. Default 0.1. */
  jitterFraction?: number;
  /** After the n-th consecutive failure the key is retried after retryDelaysMs[n - 1]; past the end it waits its interval. */
  retryDelaysMs?: number[];
  /** A run that has not started this fraction of its interval after it was due puts its key behind. Default 0.5. */
  behindFraction?: number;
  /** A key behind catches up after `caughtUpRuns` runs in a row each started within this fraction of its interval of its due time. Default 0.25. */
  caughtUpFraction?: number;
  /** Default 3. */
  caughtUpRuns?: number;
}

/**
 * Why a key's capture is late, as far as the scheduler can tell: it waited for one of the node's capture slots
 * (`slots_full`: the node takes more captures than it has slots for), its own previous capture ran past the next due
 * time (`capture_slow`: the capture itself takes longer than the interval, a busy node or a slow store), or its
 * captures fail and are being retried (`failing`).
 */
export type BehindReason = 'slots_full' | 'capture_slow' | 'failing';

/** A key's asked and achieved cadence: `takenInWindow` successful runs started in the last `windowMs`. */
export interface Cadence {
  intervalMs: number;
  /** The window's length divided by the runs in it; null until it spans one interval, and while it holds none. */
  achievedIntervalMs: number | null;
  windowMs: number;
  takenInWindow: number;
}

export interface BehindReport extends Cadence {
  /** How long after its due time the late run started, or has waited so far. */
  lateMs: number;
  why: BehindReason;
}

export interface CaughtUpReport extends Cadence {
  /** How long the key was behind. */
  behindForMs: number;
}

export interface CaptureHooks {
  onFailure?(err: unknown, attempt: number, willRetry: boolean): void;
  /** Once when the key falls behind; nothing more until onCaughtUp. */
  onBehind?(report: BehindReport): void;
  onCaughtUp?(report: CaughtUpReport): void;
}

/**
 * The cadence window: ten intervals, but no more than an hour unless one interval is longer. Retention keeps every
 * snapshot for an hour and one per 10 minutes for a day, so the store's timeline still holds the window's snapshots.
 */
export function cadenceWindowMs(intervalMs: number): number {
  return Math.max(intervalMs, Math.min(10 * intervalMs, 3_600_000));
}

/**
 * The achieved interval over the window ending at `nowMs`: its length over the runs started in it (`startsMs`,
 * ascending). The window starts no earlier than `sinceMs` (when the key began), and says nothing until it spans one
 * interval. The one measure of cadence: the scheduler's events and the API's timeline both use it.
 */
export function achievedCadence(startsMs: readonly number[], nowMs: number, intervalMs: number, sinceMs: number): Cadence {
  const windowMs = Math.max(0, Math.min(cadenceWindowMs(intervalMs), nowMs - sinceMs));
  const takenInWindow = startsMs.filter((t) => t > nowMs - windowMs && t <= nowMs).length;
  const achievedIntervalMs = windowMs < intervalMs || takenInWindow === 0 ? null : Math.round(windowMs / takenInWindow);
  return { intervalMs, achievedIntervalMs, windowMs, takenInWindow };
}

interface Entry {
  key: string;
  intervalMs: number;
  task: () => Promise<void>;
  hooks: CaptureHooks;
  timer?: Timer;
  /** The pending timer's wait, kept so setInterval can stretch or shrink it in proportion. */
  waitStartedMs: number;
  dueAtMs: number;
  /** When the next run is due by the schedule: what lateness is measured from (a retry keeps its failed run's). */
  runDueMs: number;
  /** Fires when the due run is late enough to put the key behind. */
  lateTimer?: Timer;
  retrying: boolean;
  failures: number;
  queued: number;
  removed: boolean;
  addedAtMs: number;
  lastStartMs: number;
  /** Start times of the successful runs in the cadence window, ascending. */
  takenMs: number[];
  /** Set while the key is behind: since when. */
  behindSinceMs?: number;
  onTimeRuns: number;
}

interface Job {
  entry: Entry;
  enqueuedAtMs: number;
  /** A retry of a failed run. */
  retry: boolean;
  /** Set for runNow: its caller learns how its own run went. */
  caller?: { resolve(): void; reject(err: unknown): void };
}

type Outcome = { ok: true } | { ok: false; err: unknown };

function positiveInteger(value: unknown, field: string): number {
  if (!Number.isSafeInteger(value) || (value as number) <= 0) throw invalidArgument(field, 'must be a positive integer');
  return value as number;
}

export class CaptureScheduler {
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly concurrency: number;
  private readonly jitterFraction: number;
  private readonly retryDelaysMs: number[];
  private readonly behindFraction: number;
  private readonly caughtUpFraction: number;
  private readonly caughtUpRuns: number;
  /** Durations of the latest successful runs, any key: what the node's capture capacity is reckoned from. */
  private readonly durationsMs: number[] = [];
  private readonly entries = new Map<string, Entry>();
  private readonly queue: Job[] = [];
  /** In-flight runs by key; their promises never reject. */
  private readonly active = new Map<string, Promise<void>>();
  private stopped = false;

  constructor(opts: CaptureSchedulerOptions) {
    this.clock = opts.clock;
    this.random = opts.random;
    this.concurrency = positiveInteger(opts.concurrency, 'concurrency');
    this.jitterFraction = opts.jitterFraction ?? 0.1;
    if (!(this.jitterFraction >= 0 && this.jitterFraction < 1)) throw invalidArgument('jitterFraction', 'must be at least 0 and below 1');
    this.retryDelaysMs = [...(opts.retryDelaysMs ?? [2000, 10_000, 30_000])];
    for (const [i, ms] of this.retryDelaysMs.entries()) {
      if (!Number.isSafeInteger(ms) || ms < 0) throw invalidArgument(`retryDelaysMs[${i}]`, 'must be a non-negative integer');
    }
    this.behindFraction = opts.behindFraction ?? 0.5;
    this.caughtUpFraction = opts.caughtUpFraction ?? 0.25;
    if (!(this.caughtUpFraction >= 0 && this.caughtUpFraction < this.behindFraction)) {
      throw invalidArgument('caughtUpFraction', 'must be at least 0 and below behindFraction');
    }
    this.caughtUpRuns = positiveInteger(opts.caughtUpRuns ?? 3, 'caughtUpRuns');
  }

  /** A scheduled key's asked and achieved cadence, or undefined when it is not scheduled. */
  cadence(key: string): (Cadence & { behind: boolean }) | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    return { ...this.cadenceOf(entry), behind: entry.behindSinceMs !== undefined };
  }

  /**
   * Captures a minute the node can sustain: its slots over the mean duration of the latest 20 successful runs. Null
   * until one has run.
   */
  capacityPerMinute(): number | null {
    if (this.durationsMs.length === 0) return null;
    const meanMs = this.durationsMs.reduce((a, b) => a + b, 0) / this.durationsMs.length;
    return Math.round(((this.concurrency * 60_000) / Math.max(meanMs, 1)) * 10) / 10;
  }

  get running(): number {
    return this.active.size;
  }

  get queued(): number {
    return this.queue.length;
  }

  /**
   * Schedules `task` every `intervalMs` (jittered). The first wait is uniform in [0, intervalMs): a sandbox gets its
   * first snapshot within one interval, and sandboxes added together (a node restarting) spread their captures over
   * a whole interval instead of firing at once.
   */
  add(key: string, intervalMs: number, task: () => Promise<void>, hooks: CaptureHooks = {}): void {
    if (this.stopped) throw new SandglassError('conflict', 'the capture scheduler is stopped');
    if (typeof key !== 'string' || key.length === 0) throw invalidArgument('key', 'must be a non-empty string');
    if (this.entries.has(key)) throw invalidArgument('key', `${key} is already scheduled`);
    positiveInteger(intervalMs, 'intervalMs');
    const now = this.clock.nowMs();
    const entry: Entry = {
      key,
      intervalMs,
      task,
      hooks,
      waitStartedMs: 0,
      dueAtMs: 0,
      runDueMs: 0,
      retrying: false,
      failures: 0,
      queued: 0,
      removed: false,
      addedAtMs: now,
      lastStartMs: -Infinity,
      takenMs: [],
      onTimeRuns: 0,
    };
    this.entries.set(key, entry);
    this.armRun(entry, now + Math.floor(this.uniform() * intervalMs), now);
  }

  /** Changes a key's interval; a wait already under way is stretched or shrunk in proportion, keeping its jitter. */
  setInterval(key: string, intervalMs: number): void {
    const entry = this.entryOf(key);
    positiveInteger(intervalMs, 'intervalMs');
    const previousMs = entry.intervalMs;
    entry.intervalMs = intervalMs;
    if (entry.timer === undefined || entry.retrying) return;
    const { waitStartedMs, dueAtMs } = entry;
    const dueMs = waitStartedMs + Math.round(((dueAtMs - waitStartedMs) * intervalMs) / previousMs);
    this.disarm(entry);
    this.armRun(entry, dueMs, waitStartedMs);
  }

  /** Stops scheduling `key`, cancels its queued runs and resolves once a run of it already under way has finished. */
  async remove(key: string): Promise<void> {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    entry.removed = true;
    this.disarm(entry);
    this.clearLate(entry);
    for (let i = this.queue.length - 1; i >= 0; i--) {
      const job = this.queue[i]!;
      if (job.entry !== entry) continue;
      this.queue.splice(i, 1);
      job.caller?.reject(new SandglassError('conflict', `the capture of ${key} was cancelled: it was removed from the scheduler`));
    }
    await this.active.get(key);
  }

  /**
   * Runs `key` as soon as a slot is free and resolves (or rejects with the task's error) when this call's own run has
   * finished. A run of the key already under way started before this call, so it does not count: this one waits for it.
   * The key's next scheduled run counts from this one.
   */
  async runNow(key: string): Promise<void> {
    const entry = this.entryOf(key);
    this.disarm(entry);
    await new Promise<void>((resolve, reject) => this.enqueue({ entry, enqueuedAtMs: this.clock.nowMs(), retry: false, caller: { resolve, reject } }));
  }

  /** Cancels everything scheduled or queued and resolves once every run under way has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.entries.keys()].map((key) => this.remove(key)));
    await Promise.all(this.active.values());
  }

  private entryOf(key: string): Entry {
    const entry = this.entries.get(key);
    if (!entry) throw invalidArgument('key', `no capture is scheduled for ${key}`);
    return entry;
  }

  /** Uniform in [0, 1) from 48 random bits. */
  private uniform(): number {
    return this.random.bytes(6).readUIntBE(0, 6) / 2 ** 48;
  }

  private jittered(intervalMs: number): number {
    return Math.round(intervalMs * (1 - this.jitterFraction + 2 * this.jitterFraction * this.uniform()));
  }

  private arm(entry: Entry, delayMs: number, retrying: boolean, waitStartedMs = this.clock.nowMs()): void {
    entry.waitStartedMs = waitStartedMs;
    entry.dueAtMs = this.clock.nowMs() + delayMs;
    entry.retrying = retrying;
    entry.timer = this.clock.setTimeout(() => {
      entry.timer = undefined;
      this.enqueue({ entry, enqueuedAtMs: this.clock.nowMs(), retry: retrying });
    }, delayMs);
  }

  /** Schedules the key's next run at `dueMs` (at once when that has passed) and watches it for lateness. */
  private armRun(entry: Entry, dueMs: number, waitStartedMs: number): void {
    entry.runDueMs = dueMs;
    this.arm(entry, Math.max(0, dueMs - this.clock.nowMs()), false, waitStartedMs);
    this.clearLate(entry);
    const lateAtMs = dueMs + this.behindFraction * entry.intervalMs;
    entry.lateTimer = this.clock.setTimeout(
      () => {
        entry.lateTimer = undefined;
        this.lateCheck(entry);
      },
      Math.max(0, Math.ceil(lateAtMs - this.clock.nowMs())),
    );
  }

  private clearLate(entry: Entry): void {
    if (entry.lateTimer === undefined) return;
    entry.lateTimer.cancel();
    entry.lateTimer = undefined;
  }

  /** The due run has not started this late: the key falls behind, for the reason the scheduler sees now. */
  private lateCheck(entry: Entry): void {
    if (entry.removed || entry.lastStartMs >= entry.runDueMs) return;
    let why: BehindReason;
    if (entry.queued > 0) why = 'slots_full';
    else if (entry.retrying) why = 'failing';
    else return;
    this.fallBehind(entry, this.clock.nowMs() - entry.runDueMs, why);
  }

  private fallBehind(entry: Entry, lateMs: number, why: BehindReason): void {
    entry.onTimeRuns = 0;
    if (entry.behindSinceMs !== undefined) return;
    entry.behindSinceMs = this.clock.nowMs();
    const report: BehindReport = { ...this.cadenceOf(entry), lateMs: Math.round(lateMs), why };
    safely(() => entry.hooks.onBehind?.(report));
  }

  /** A run of the key starts: how late it is moves the key behind, or towards catching up. */
  private assessStart(entry: Entry, job: Job, now: number): void {
    const lateMs = now - entry.runDueMs;
    if (lateMs > this.behindFraction * entry.intervalMs) {
      // Lateness is the wait for a slot plus whatever had the run enqueued only after its due time: its own previous
      // capture still running.
      const waitedMs = now - job.enqueuedAtMs;
      const why: BehindReason = job.retry ? 'failing' : waitedMs >= lateMs - waitedMs ? 'slots_full' : 'capture_slow';
      this.fallBehind(entry, lateMs, why);
      return;
    }
    if (lateMs > this.caughtUpFraction * entry.intervalMs) {
      entry.onTimeRuns = 0;
      return;
    }
    if (entry.behindSinceMs === undefined || ++entry.onTimeRuns < this.caughtUpRuns) return;
    const report: CaughtUpReport = { ...this.cadenceOf(entry), behindForMs: now - entry.behindSinceMs };
    entry.behindSinceMs = undefined;
    entry.onTimeRuns = 0;
    safely(() => entry.hooks.onCaughtUp?.(report));
  }

  private cadenceOf(entry: Entry): Cadence {
    const now = this.clock.nowMs();
    const fromMs = now - cadenceWindowMs(entry.intervalMs);
    while (entry.takenMs.length > 0 && entry.takenMs[0]! <= fromMs) entry.takenMs.shift();
    return achievedCadence(entry.takenMs, now, entry.intervalMs, entry.addedAtMs);
  }

  private disarm(entry: Entry): void {
    if (entry.timer === undefined) return;
    entry.timer.cancel();
    entry.timer = undefined;
  }

  private enqueue(job: Job): void {
    job.entry.queued++;
    this.queue.push(job);
    this.pump();
  }

  /**
   * Starts queued jobs while slots are free, passing over keys that already have a run under way: runNow's first, in
   * the order asked (someone waits for each), then the one most overdue relative to its own interval. Under load every
   * key is then equally late for its interval, so keys share the slots in proportion to how often they ask, and a key
   * with a long interval is neither starved nor served ahead of the rest.
   */
  private pump(): void {
    while (this.active.size < this.concurrency) {
      const now = this.clock.nowMs();
      let best = -1;
      let bestRank = -Infinity;
      for (const [i, job] of this.queue.entries()) {
        if (this.active.has(job.entry.key)) continue;
        const rank = job.caller ? Infinity : (now - job.entry.runDueMs) / job.entry.intervalMs;
        if (best === -1 || rank > bestRank) [best, bestRank] = [i, rank];
        if (rank === Infinity) break;
      }
      if (best === -1) return;
      this.start(this.queue.splice(best, 1)[0]!);
    }
  }

  private start(job: Job): void {
    const { entry } = job;
    entry.queued--;
    const startedMs = this.clock.nowMs();
    this.assessStart(entry, job, startedMs);
    entry.lastStartMs = startedMs;
    // The next run is armed when this one ends; a run still going a late interval from now has put its key behind.
    this.clearLate(entry);
    entry.lateTimer = this.clock.setTimeout(
      () => {
        entry.lateTimer = undefined;
        if (!entry.removed && entry.lastStartMs === startedMs) this.fallBehind(entry, this.clock.nowMs() - startedMs - entry.intervalMs, 'capture_slow');
      },
      Math.ceil((1 + this.behindFraction) * entry.intervalMs),
    );
    const run = execute(entry.task).then((outcome) => {
      this.active.delete(entry.key);
      if (outcome.ok) this.recordRun(entry, startedMs);
      this.finish(job, outcome);
      this.pump();
    });
    this.active.set(entry.key, run);
  }

  private recordRun(entry: Entry, startedMs: number): void {
    entry.takenMs.push(startedMs);
    this.durationsMs.push(this.clock.nowMs() - startedMs);
    if (this.durationsMs.length > 20) this.durationsMs.shift();
  }

  private finish(job: Job, outcome: Outcome): void {
    const { entry } = job;
    this.clearLate(entry);
    if (outcome.ok) job.caller?.resolve();
    else job.caller?.reject(outcome.err);
    if (entry.removed) return;
    let retryInMs: number | undefined;
    if (outcome.ok) {
      entry.failures = 0;
    } else {
      entry.failures++;
      retryInMs = this.retryDelaysMs[entry.failures - 1];
      const attempt = entry.failures;
      if (retryInMs === undefined) entry.failures = 0;
      safely(() => entry.hooks.onFailure?.(outcome.err, attempt, retryInMs !== undefined));
    }
    // A run of this key still queued (runNow) is the next run; the schedule resumes after it.
    if (entry.queued > 0) return;
    if (retryInMs !== undefined) this.arm(entry, retryInMs, true);
    // The next run is due an interval after this one started, not after it ended: the interval asked for is between
    // snapshots, and a capture's own duration must not stretch it.
    else this.armRun(entry, entry.lastStartMs + this.jittered(entry.intervalMs), entry.lastStartMs);
  }
}

function safely(hook: () => void): void {
  try {
    hook();
  } catch {
    // A throwing hook must not cost the key its schedule; reporting is the hook's own business.
  }
}

async function execute(task: () => Promise<void>): Promise<Outcome> {
  try {
    await task();
    return { ok: true };
  } catch (err) {
    return { ok: false, err };
  }
}
