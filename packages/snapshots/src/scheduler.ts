// The per-node capture scheduler: runs each sandbox's capture on a jittered interval, a bounded number at a time, with retries.
import { invalidArgument, SandglassError, type Clock, type Random } from '@sandglass/core';

export interface SchedulerTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface CaptureSchedulerOptions {
  clock: Clock;
  random: Random;
  /** At most this many captures run at once across all keys. */
  concurrency: number;
  /** Each wait is uniform in [interval * (1 - j), interval * (1 + j)]. Default 0.1. */
  jitterFraction?: number;
  /** After the n-th consecutive failure the key is retried after retryDelaysMs[n - 1]; past the end it waits its interval. */
  retryDelaysMs?: number[];
  timers?: SchedulerTimers;
}

export interface CaptureHooks {
  onFailure?(err: unknown, attempt: number, willRetry: boolean): void;
}

interface Entry {
  key: string;
  intervalMs: number;
  task: () => Promise<void>;
  hooks: CaptureHooks;
  timer?: unknown;
  /** The pending timer's wait, kept so setInterval can stretch or shrink it in proportion. */
  waitStartedMs: number;
  dueAtMs: number;
  retrying: boolean;
  failures: number;
  queued: number;
  removed: boolean;
}

interface Job {
  entry: Entry;
  /** Set for runNow: its caller learns how its own run went. */
  caller?: { resolve(): void; reject(err: unknown): void };
}

type Outcome = { ok: true } | { ok: false; err: unknown };

const realTimers: SchedulerTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

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
  private readonly timers: SchedulerTimers;
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
    this.timers = opts.timers ?? realTimers;
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
    const entry: Entry = { key, intervalMs, task, hooks, waitStartedMs: 0, dueAtMs: 0, retrying: false, failures: 0, queued: 0, removed: false };
    this.entries.set(key, entry);
    this.arm(entry, Math.floor(this.uniform() * intervalMs), false);
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
    this.arm(entry, Math.max(0, dueMs - this.clock.nowMs()), false, waitStartedMs);
  }

  /** Stops scheduling `key`, cancels its queued runs and resolves once a run of it already under way has finished. */
  async remove(key: string): Promise<void> {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    entry.removed = true;
    this.disarm(entry);
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
    await new Promise<void>((resolve, reject) => this.enqueue({ entry, caller: { resolve, reject } }));
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
    entry.timer = this.timers.setTimeout(() => {
      entry.timer = undefined;
      this.enqueue({ entry });
    }, delayMs);
  }

  private disarm(entry: Entry): void {
    if (entry.timer === undefined) return;
    this.timers.clearTimeout(entry.timer);
    entry.timer = undefined;
  }

  private enqueue(job: Job): void {
    job.entry.queued++;
    this.queue.push(job);
    this.pump();
  }

  /** Starts queued jobs in FIFO order while slots are free, passing over keys that already have a run under way. */
  private pump(): void {
    for (let i = 0; i < this.queue.length && this.active.size < this.concurrency; ) {
      const job = this.queue[i]!;
      if (this.active.has(job.entry.key)) {
        i++;
        continue;
      }
      this.queue.splice(i, 1);
      this.start(job);
    }
  }

  private start(job: Job): void {
    const { entry } = job;
    entry.queued--;
    const run = execute(entry.task).then((outcome) => {
      this.active.delete(entry.key);
      this.finish(job, outcome);
      this.pump();
    });
    this.active.set(entry.key, run);
  }

  private finish(job: Job, outcome: Outcome): void {
    const { entry } = job;
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
      try {
        entry.hooks.onFailure?.(outcome.err, attempt, retryInMs !== undefined);
      } catch {
        // A throwing hook must not cost the key its schedule; reporting is the hook's own business.
      }
    }
    // A run of this key still queued (runNow) is the next run; the schedule resumes after it.
    if (entry.queued > 0) return;
    if (retryInMs !== undefined) this.arm(entry, retryInMs, true);
    else this.arm(entry, this.jittered(entry.intervalMs), false);
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
