// The console's event streams: one tail of the log per tenant, fanned out to that tenant's open streams, with a cap on
// streams per console session and per tenant.
import { SandglassError } from '@sandglass/core';
import type { EventLog, StoredEvent } from '@sandglass/events';

/** How often a tenant's tail looks for new rows of the log: the server tails, the page never polls. */
const TAIL_MS = 500;
const PAGE = 200;
/** Ends a stream at a proxy that cuts idle connections before it would. */
const KEEPALIVE_MS = 15_000;
/**
 * A stream whose client leaves this much unread is ended (the page reopens it from its last event), so a client that
 * stops reading cannot make the server hold its tenant's log in memory.
 */
export const STREAM_UNSENT_MAX_BYTES = 8 * 1024 * 1024;

export interface StreamLimits {
  perSession: number;
  perTenant: number;
}

/** Where a stream's bytes go: the hijacked HTTP response. */
export interface StreamSink {
  write(chunk: string): unknown;
  end(): unknown;
  readonly writableLength: number;
}

export interface StreamRequest {
  tenantId: string;
  /** The console session's id (a hash of its cookie): counted against `perSession` and re-checked every round. */
  sessionId: string;
  /** Every event of the tenant with a larger seq is sent, the backlog first. */
  afterSeq: number;
  /** Only this sandbox's events. */
  sandboxId?: string;
  sink: StreamSink;
}

export interface LogStreamsOptions {
  events: Pick<EventLog, 'list' | 'headSeq'>;
  limits: StreamLimits;
  /** Which of these sessions are still signed in with a key that is neither revoked nor expired: once a round per tenant. */
  signedIn(sessionIds: string[]): Promise<Set<string>>;
  /** A round that failed; its tenant's streams were ended. */
  onError(err: unknown, tenantId: string): void;
}

interface Stream {
  req: StreamRequest;
  tail: TenantTail;
  /** The last seq this stream was sent or skipped past. */
  afterSeq: number;
  /** Caught up: the backlog and the `ready` marker are out, new events come from the tenant's tail. */
  live: boolean;
  closed: boolean;
}

interface TenantTail {
  tenantId: string;
  streams: Set<Stream>;
  /** The newest seq the tail has read; undefined until its first round. */
  headSeq?: number;
  busy: boolean;
  again: boolean;
  timer: NodeJS.Timeout;
  keepalive: NodeJS.Timeout;
}

/**
 * The open streams. A tenant with streams has one tail, which reads the tenant's new events once a round and hands each
 * to every stream that wants it, so a tenant's streams cost the database one page read a round however many there
 * are, and a tenant without any costs nothing. A new stream reads its own backlog, up to where the tail is, inside the
 * tail's round, so nothing falls between its backlog and its live events.
 */
export class LogStreams {
  readonly #tails = new Map<string, TenantTail>();
  readonly #perSession = new Map<string, number>();
  constructor(private readonly opts: LogStreamsOptions) {}

  /**
   * Admits a stream, or refuses it with `rate_limited` past a cap. Nothing is written to the sink before this returns,
   * so a refusal can still be an ordinary error answer. The returned function closes the stream (any number of times).
   */
  open(req: StreamRequest): () => void {
    const { perSession, perTenant } = this.opts.limits;
    if ((this.#perSession.get(req.sessionId) ?? 0) >= perSession) {
      throw new SandglassError('rate_limited', `This console session has ${perSession} event streams open, the most it may have: close a console page first.`, {
        details: { limit: perSession, scope: 'session' },
      });
    }
    let tail = this.#tails.get(req.tenantId);
    if ((tail?.streams.size ?? 0) >= perTenant) {
      throw new SandglassError('rate_limited', `The tenant has ${perTenant} console event streams open, the most it may have: close a console page first.`, {
        details: { limit: perTenant, scope: 'tenant' },
      });
    }
    if (!tail) {
      const t: TenantTail = {
        tenantId: req.tenantId,
        streams: new Set(),
        busy: false,
        again: false,
        timer: setInterval(() => void this.#round(t), TAIL_MS),
        keepalive: setInterval(() => {
          for (const s of t.streams) s.req.sink.write(': keepalive\n\n');
        }, KEEPALIVE_MS),
      };
      tail = t;
      this.#tails.set(req.tenantId, t);
    }
    const stream: Stream = { req, tail, afterSeq: req.afterSeq, live: false, closed: false };
    tail.streams.add(stream);
    this.#perSession.set(req.sessionId, (this.#perSession.get(req.sessionId) ?? 0) + 1);
    // A round now rather than at the next tick: the backlog goes out at once. Its first write follows an await.
    void this.#round(tail);
    return () => this.#end(stream);
  }

  /** How many streams are open, in all and for one tenant. */
  count(tenantId?: string): number {
    if (tenantId !== undefined) return this.#tails.get(tenantId)?.streams.size ?? 0;
    let n = 0;
    for (const t of this.#tails.values()) n += t.streams.size;
    return n;
  }

  /** Ends every stream (the server is closing). */
  closeAll(): void {
    for (const t of [...this.#tails.values()]) for (const s of [...t.streams]) this.#end(s);
  }

  #end(s: Stream): void {
    if (s.closed) return;
    s.closed = true;
    const { tail } = s;
    tail.streams.delete(s);
    const left = (this.#perSession.get(s.req.sessionId) ?? 1) - 1;
    if (left > 0) this.#perSession.set(s.req.sessionId, left);
    else this.#perSession.delete(s.req.sessionId);
    s.req.sink.end();
    if (tail.streams.size === 0) {
      clearInterval(tail.timer);
      clearInterval(tail.keepalive);
      // A round still running on this tail finds no streams; a later stream of the tenant starts a tail of its own.
      if (this.#tails.get(tail.tenantId) === tail) this.#tails.delete(tail.tenantId);
    }
  }

  /** One round at a time per tenant; a stream opened during a round gets another one right after it. */
  async #round(tail: TenantTail): Promise<void> {
    if (tail.busy) {
      tail.again = true;
      return;
    }
    tail.busy = true;
    try {
      do {
        tail.again = false;
        await this.#step(tail);
      } while (tail.again && tail.streams.size > 0);
    } catch (err) {
      // Fails closed: the tenant's streams end, and the page reopens each from the last event it saw.
      for (const s of [...tail.streams]) this.#end(s);
      this.opts.onError(err, tail.tenantId);
    } finally {
      tail.busy = false;
    }
  }

  async #step(tail: TenantTail): Promise<void> {
    if (tail.streams.size === 0) return;
    // Re-checked every round: the streams of a revoked or expired key, or of a session that was closed, end here.
    const signedIn = await this.opts.signedIn([...new Set([...tail.streams].map((s) => s.req.sessionId))]);
    for (const s of [...tail.streams]) if (!signedIn.has(s.req.sessionId)) this.#end(s);
    if (tail.streams.size === 0) return;

    tail.headSeq ??= await this.opts.events.headSeq();
    for (;;) {
      const page = await this.opts.events.list({ tenantId: tail.tenantId, afterSeq: tail.headSeq, limit: PAGE });
      for (const ev of page) for (const s of tail.streams) if (s.live) this.#send(s, ev);
      if (page.length > 0) tail.headSeq = page[page.length - 1]!.seq;
      if (page.length < PAGE) break;
    }

    // A stream's backlog ends where the tail now is; from the next round on, the tail's pages carry it on from there.
    const head = tail.headSeq;
    for (const s of tail.streams) {
      if (s.live) continue;
      for (;;) {
        const page = await this.opts.events.list({
          tenantId: tail.tenantId,
          afterSeq: s.afterSeq,
          untilSeq: head,
          limit: PAGE,
          ...(s.req.sandboxId ? { sandboxId: s.req.sandboxId } : {}),
        });
        for (const ev of page) this.#send(s, ev);
        if (page.length < PAGE || s.closed) break;
      }
      if (s.closed) continue;
      s.afterSeq = Math.max(s.afterSeq, head);
      s.live = true;
      // Once: what came so far was the backlog, what comes next is live. The page reacts to live events only.
      s.req.sink.write('event: ready\ndata: {}\n\n');
    }
  }

  #send(s: Stream, ev: StoredEvent): void {
    if (s.closed || ev.seq <= s.afterSeq) return;
    s.afterSeq = ev.seq;
    if (s.req.sandboxId !== undefined && ev.sandboxId !== s.req.sandboxId) return;
    s.req.sink.write(
      `id: ${ev.seq}\nevent: log\ndata: ${JSON.stringify({ seq: ev.seq, type: ev.type, sandboxId: ev.sandboxId, at: ev.at, data: ev.data })}\n\n`,
    );
    if (s.req.sink.writableLength > STREAM_UNSENT_MAX_BYTES) this.#end(s);
  }
}
