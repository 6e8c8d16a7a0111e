// Just-in-time approval of secret use: a request waits until someone approves or denies it, or until it times out.
import { SandglassError, systemClock, systemRandom, type Clock, type Random } from '@sandglass/core';

export type ApprovalResult = 'approved' | 'denied' | 'timeout';

export interface ApprovalInput {
  sandboxId: string;
  /** The secret's name (never its value). */
  secret: string;
  host: string;
  port: number;
  method: string;
  path: string;
}

export interface ApprovalRequest extends ApprovalInput {
  requestId: string;
  requestedAtMs: number;
  expiresAtMs: number;
}

export interface ApprovalDecided {
  request: ApprovalRequest;
  /** cancelled: the waiting request went away (client disconnected, sandbox removed) before a decision. */
  decision: 'approved' | 'denied' | 'timeout' | 'cancelled';
  /** Set when the approval was time-boxed: later uses of the same secret by the same sandbox pass until then. */
  grantUntilMs?: number;
}

export interface ApprovalBrokerOptions {
  clock?: Clock;
  random?: Random;
  /** How long a request waits for a decision; default 5 minutes. */
  timeoutMs?: number;
  onRequested?(req: ApprovalRequest): void;
  onDecided?(d: ApprovalDecided): void;
}

export interface RequestOptions {
  /** Aborting withdraws the pending request (it resolves 'denied' and is reported as cancelled). */
  signal?: AbortSignal;
  /** Called with the pending request as soon as it exists (after the broker's own onRequested). */
  onRequested?(req: ApprovalRequest): void;
}

interface Pending {
  req: ApprovalRequest;
  settle(decision: ApprovalDecided['decision'], grantUntilMs?: number): void;
}

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
const DEFAULT_TIMEOUT_MS = 5 * 60_000;
const MAX_GRANT_MS = 24 * 3600_000;

export class ApprovalBroker {
  readonly #clock: Clock;
  readonly #random: Random;
  readonly #timeoutMs: number;
  readonly #opts: ApprovalBrokerOptions;
  readonly #pending = new Map<string, Pending>();
  // sandboxId + '\0' + secret → time-boxed grant expiry.
  readonly #grants = new Map<string, number>();

  constructor(opts: ApprovalBrokerOptions = {}) {
    this.#clock = opts.clock ?? systemClock;
    this.#random = opts.random ?? systemRandom;
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#opts = opts;
  }

  /**
   * Asks for approval to use `secret` in this request. Resolves 'approved' at once while a time-boxed grant for the same
   * sandbox and secret runs; otherwise the request is pending until decide(), the timeout, or the abort signal.
   */
  request(input: ApprovalInput, opts: RequestOptions = {}): Promise<ApprovalResult> {
    if (this.grantUntil(input.sandboxId, input.secret) !== undefined) return Promise.resolve('approved');
    if (opts.signal?.aborted) return Promise.resolve('denied');
    const now = this.#clock.nowMs();
    const req: ApprovalRequest = { ...input, requestId: this.#newId(), requestedAtMs: now, expiresAtMs: now + this.#timeoutMs };
    return new Promise<ApprovalResult>((resolve) => {
      const onAbort = () => pending.settle('cancelled');
      const timer = setTimeout(() => pending.settle('timeout'), this.#timeoutMs);
      const pending: Pending = {
        req,
        settle: (decision, grantUntilMs) => {
          if (!this.#pending.delete(req.requestId)) return;
          clearTimeout(timer);
          opts.signal?.removeEventListener('abort', onAbort);
          this.#notify(() => this.#opts.onDecided?.({ request: req, decision, ...(grantUntilMs === undefined ? {} : { grantUntilMs }) }));
          resolve(decision === 'approved' ? 'approved' : decision === 'timeout' ? 'timeout' : 'denied');
        },
      };
      this.#pending.set(req.requestId, pending);
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      this.#notify(() => this.#opts.onRequested?.(req));
      this.#notify(() => opts.onRequested?.(req));
    });
  }

  /**
   * Decides a pending request. `ttlMs` makes an approval time-boxed: for that long, the same sandbox's further uses of
   * the same secret pass without asking (pending ones included). Without it an approval covers this one request.
   */
  decide(requestId: string, decision: 'approve' | 'deny', opts: { ttlMs?: number } = {}): void {
    const p = this.#pending.get(requestId);
    if (!p)
      throw new SandglassError('approval_not_found', `No pending approval request ${requestId}; it may have been decided or timed out.`, {
        details: { requestId },
      });
    const ttl = opts.ttlMs;
    if (ttl !== undefined && (!Number.isFinite(ttl) || ttl <= 0 || ttl > MAX_GRANT_MS)) {
      throw new SandglassError('invalid_argument', `ttlMs: must be between 1 and ${MAX_GRANT_MS}`, {
        details: { field: 'ttlMs', rule: `between 1 and ${MAX_GRANT_MS}` },
      });
    }
    if (decision === 'deny') return p.settle('denied');
    if (ttl === undefined) return p.settle('approved');
    const until = this.#clock.nowMs() + ttl;
    this.#grants.set(grantKey(p.req.sandboxId, p.req.secret), until);
    p.settle('approved', until);
    for (const other of [...this.#pending.values()]) {
      if (other.req.sandboxId === p.req.sandboxId && other.req.secret === p.req.secret) other.settle('approved', until);
    }
  }

  /** The requests waiting for a decision, oldest first (optionally for one sandbox). */
  pending(sandboxId?: string): ApprovalRequest[] {
    return [...this.#pending.values()].map((p) => p.req).filter((r) => sandboxId === undefined || r.sandboxId === sandboxId);
  }

  /** When the running time-boxed grant for this sandbox and secret ends, if one runs. */
  grantUntil(sandboxId: string, secret: string): number | undefined {
    const key = grantKey(sandboxId, secret);
    const until = this.#grants.get(key);
    if (until === undefined) return undefined;
    if (until > this.#clock.nowMs()) return until;
    this.#grants.delete(key);
    return undefined;
  }

  /** Withdraws a sandbox's grants (all, or one secret's) and cancels its pending requests (for those secrets). */
  revoke(sandboxId: string, secret?: string): void {
    for (const key of [...this.#grants.keys()]) {
      const [sbx, name] = key.split('\0') as [string, string];
      if (sbx === sandboxId && (secret === undefined || name === secret)) this.#grants.delete(key);
    }
    for (const p of [...this.#pending.values()]) {
      if (p.req.sandboxId === sandboxId && (secret === undefined || p.req.secret === secret)) p.settle('cancelled');
    }
  }

  #newId(): string {
    const bytes = this.#random.bytes(20);
    let out = 'apr_';
    for (let i = 0; i < 20; i++) out += ALPHABET[bytes[i]! & 31];
    return out;
  }

  // A listener that throws must not leave a request hanging or undecided.
  #notify(fn: () => void): void {
    try {
      fn();
    } catch {
      /* listeners are the caller's; their failures are not the broker's state */
    }
  }
}

function grantKey(sandboxId: string, secret: string): string {
  return `${sandboxId}\0${secret}`;
}
