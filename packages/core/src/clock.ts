// Clock and Random as parameters, so code that must replay deterministically never reads the real ones directly.
import { randomBytes } from 'node:crypto';
import { failpointClockJumpMs } from './failpoints.js';

/** A pending timer of a Clock; cancelling one that already fired or was cancelled does nothing. */
export interface Timer {
  cancel(): void;
}

export interface Clock {
  nowMs(): number;
  /**
   * Runs `fn` once, `delayMs` from now. A pending timer never keeps the process alive by itself: timers here are
   * deadlines and checks of something else (a sandbox, a command) that holds the process open while it matters.
   */
  setTimeout(fn: () => void, delayMs: number): Timer;
  /** Runs `fn` every `intervalMs` until cancelled; like setTimeout, it never keeps the process alive. */
  setInterval(fn: () => void, intervalMs: number): Timer;
}

export interface Random {
  bytes(n: number): Buffer;
}

/** Node's own setTimeout caps a delay at 2^31-1 ms (~24.8 days) and fires at once past it. */
const MAX_NODE_DELAY_MS = 2 ** 31 - 1;

export const systemClock: Clock = {
  // Plus the chaos runner's clock jump, if it made one (0 otherwise).
  nowMs: () => Date.now() + failpointClockJumpMs(),
  setTimeout(fn, delayMs) {
    const t = setTimeout(fn, Math.min(Math.max(0, delayMs), MAX_NODE_DELAY_MS));
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
  setInterval(fn, intervalMs) {
    const t = setInterval(fn, Math.min(Math.max(1, intervalMs), MAX_NODE_DELAY_MS));
    t.unref();
    return { cancel: () => clearInterval(t) };
  },
};
export const systemRandom: Random = { bytes: (n) => randomBytes(n) };

interface ManualTimer {
  dueMs: number;
  /** Set for an interval: its next run is this much after the one that fired. */
  everyMs?: number;
  /** Creation order: timers due at the same moment fire in the order they were set, as Node's do. */
  seq: number;
  fn: () => void;
}

/** A clock tests move by hand: its timers fire inside advance(), in due order, each with the clock at its due time. */
export class ManualClock implements Clock {
  private readonly timers: ManualTimer[] = [];
  private seq = 0;

  constructor(private ms = 0) {}

  nowMs(): number {
    return this.ms;
  }

  setTimeout(fn: () => void, delayMs: number): Timer {
    return this.add({ dueMs: this.ms + Math.max(0, delayMs), fn });
  }

  setInterval(fn: () => void, intervalMs: number): Timer {
    const everyMs = Math.max(1, intervalMs);
    return this.add({ dueMs: this.ms + everyMs, everyMs, fn });
  }

  /** Timers set and not yet fired or cancelled (an interval counts until cancelled). */
  get pendingTimers(): number {
    return this.timers.length;
  }

  advance(ms: number): void {
    const targetMs = this.ms + ms;
    for (;;) {
      const next = this.nextDue(targetMs);
      if (!next) break;
      this.ms = next.dueMs;
      if (next.everyMs !== undefined) {
        next.dueMs += next.everyMs;
        next.seq = this.seq++;
      } else this.remove(next);
      next.fn();
    }
    this.ms = targetMs;
  }

  private add(t: Omit<ManualTimer, 'seq'>): Timer {
    const timer: ManualTimer = { ...t, seq: this.seq++ };
    this.timers.push(timer);
    return { cancel: () => this.remove(timer) };
  }

  private nextDue(untilMs: number): ManualTimer | undefined {
    let next: ManualTimer | undefined;
    for (const t of this.timers) {
      if (t.dueMs > untilMs) continue;
      if (!next || t.dueMs < next.dueMs || (t.dueMs === next.dueMs && t.seq < next.seq)) next = t;
    }
    return next;
  }

  private remove(t: ManualTimer): void {
    const i = this.timers.indexOf(t);
    if (i >= 0) this.timers.splice(i, 1);
  }
}
