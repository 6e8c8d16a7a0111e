// The gateway's durable event outbox: each event is on local disk before it counts as recorded, then delivered in order to the control plane.
import { mkdirSync, openSync, closeSync, fsyncSync, readdirSync, statSync } from 'node:fs';
import { open, readFile, rename, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { newId, SandglassError, type Clock, type Logger } from '@sandglass/core';
import type { GatewayEvent, GatewayEvents } from './events.js';
import { MAX_EVENTS_PER_BATCH, type AppendEventsReply, type NodeEvent } from './node-api-client.js';

export interface OutboxSink {
  appendEvents(events: NodeEvent[]): Promise<AppendEventsReply>;
}

export interface OutboxOptions {
  /** `<home>/outbox`: segments `seg-<seq>.ndjson` and `cursor.json`. */
  dir: string;
  sink: OutboxSink;
  clock: Clock;
  logger: Logger;
  /** How long append() waits for the control plane to acknowledge its event; default 2 s. */
  deliveryWaitMs?: number;
  /** Undelivered bytes past which only lifecycle events are still written; default 1 GiB. */
  maxBytes?: number;
  /** Room past maxBytes kept for lifecycle events (sandbox.*, snapshot.*); default 64 MiB. */
  lifecycleReserveBytes?: number;
  /** A segment past this size is sealed and a new one started; default 8 MiB. */
  segmentBytes?: number;
  /** Bytes of events per delivery (the spec caps the count at 500); default 768 KiB. */
  batchBytes?: number;
  /** Backoff between failed deliveries: from min, doubled, capped at max; default 200 ms to 30 s. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
}

/** Where an event ends in the log: delivered once the cursor is at or past it. */
interface Position {
  seq: number;
  offset: number;
}

interface PendingAppend {
  line: Buffer;
  resolve(pos: Position): void;
  reject(err: unknown): void;
}

interface Waiter {
  pos: Position;
  /** Keeps waiting through failed deliveries (drain); an append's waiter gives up at the first. */
  throughFailures: boolean;
  resolve(): void;
}

/** Lifecycle events build the control plane's projection of sandboxes and snapshots: never dropped at the bound. */
const LIFECYCLE = /^(sandbox|snapshot)\./;
/** Refusals no resend can cure: the event itself is at fault. */
const PERMANENT = new Set(['invalid_argument', 'malformed_json', 'payload_too_large']);
const SEGMENT = /^seg-(\d{12})\.ndjson$/;
const CURSOR_FILE = 'cursor.json';

const segmentName = (seq: number) => `seg-${String(seq).padStart(12, '0')}.ndjson`;
const atOrPast = (a: Position, b: Position) => a.seq > b.seq || (a.seq === b.seq && a.offset >= b.offset);

/**
 * An append-only log of segments, each a file of JSON lines written once and never rewritten: appends are grouped
 * (every append waiting while one `fdatasync` runs shares the next), and append() resolves only after its line is
 * durable. One sender reads from the cursor on, delivers batches of at most 500 events in order to the node API
 * (idempotent by event id, so a batch re-sent after a crash is appended once), moves the cursor (`cursor.json`,
 * replaced by rename; losing it costs only re-sends) and deletes segments wholly behind it. Each run writes to a new
 * segment, so a line torn by a crash is only ever the tail of a sealed segment, which the reader skips.
 */
export class Outbox implements GatewayEvents {
  private readonly deliveryWaitMs: number;
  private readonly maxBytes: number;
  private readonly reserveBytes: number;
  private readonly segmentBytes: number;
  private readonly batchBytes: number;
  private readonly backoffMinMs: number;
  private readonly backoffMaxMs: number;
  /** Sizes of the segments on disk, by sequence number; the active one's is what is durable. */
  private readonly segments = new Map<number, number>();
  private active?: { seq: number; fh: FileHandle; broken: boolean };
  private cursor: Position = { seq: 0, offset: 0 };
  private pending: PendingAppend[] = [];
  private pendingBytes = 0;
  private flushing?: Promise<void>;
  private waiters: Waiter[] = [];
  private wake?: () => void;
  private sender?: Promise<void>;
  private closed = false;
  /** The last delivery succeeded (or none was tried): appends wait for theirs only then. */
  private healthy = true;
  /** Between failed attempts new appends do not wake the sender: the backoff holds. */
  private backingOff = false;
  private droppedAtBound = 0;
  private batchLimit = MAX_EVENTS_PER_BATCH;

  constructor(private readonly opts: OutboxOptions) {
    this.deliveryWaitMs = opts.deliveryWaitMs ?? 2000;
    this.maxBytes = opts.maxBytes ?? 1024 ** 3;
    this.reserveBytes = opts.lifecycleReserveBytes ?? 64 * 1024 ** 2;
    this.segmentBytes = opts.segmentBytes ?? 8 * 1024 ** 2;
    this.batchBytes = opts.batchBytes ?? 768 * 1024;
    this.backoffMinMs = opts.backoffMinMs ?? 200;
    this.backoffMaxMs = opts.backoffMaxMs ?? 30_000;
  }

  /** Opens the log (a new segment for this run) and starts delivering, oldest undelivered event first. */
  async start(): Promise<void> {
    mkdirSync(this.opts.dir, { recursive: true, mode: 0o700 });
    for (const name of readdirSync(this.opts.dir)) {
      const m = SEGMENT.exec(name);
      if (m) this.segments.set(Number(m[1]), statSync(join(this.opts.dir, name)).size);
    }
    const seqs = [...this.segments.keys()].sort((a, b) => a - b);
    this.cursor = (await this.readCursor()) ?? { seq: seqs[0] ?? 1, offset: 0 };
    // Past the cursor too: a segment numbered below it would count as delivered (segments removed by hand).
    await this.openSegment(Math.max(seqs.at(-1) ?? 0, this.cursor.seq) + 1);
    if (seqs.length > 0) {
      const undelivered = this.undeliveredBytes();
      if (undelivered > 0) this.opts.logger.info({ bytes: undelivered, segments: seqs.length }, 'outbox: delivering events left by the previous run first');
    }
    this.sender = this.run();
  }

  /**
   * Records an event: durable on local disk when this resolves. Then waits (at most deliveryWaitMs, and not at all
   * while the control plane is unreachable) for the control plane to acknowledge it, so a caller of the control plane
   * normally reads the node's events right after the call that caused them.
   */
  async append(event: GatewayEvent): Promise<void> {
    if (this.closed) throw new SandglassError('internal', 'the event outbox is closed');
    const rec: NodeEvent = {
      id: newId('evt'),
      type: event.type,
      tenantId: event.tenantId,
      ...(event.sandboxId ? { sandboxId: event.sandboxId } : {}),
      at: new Date(this.opts.clock.nowMs()).toISOString(),
      data: event.data,
    };
    const line = Buffer.from(`${JSON.stringify(rec)}\n`);
    const lifecycle = LIFECYCLE.test(event.type);
    const held = this.heldBytes() + line.length;
    if (held > this.maxBytes + (lifecycle ? this.reserveBytes : 0)) {
      if (lifecycle) {
        throw new SandglassError(
          'storage_full',
          `The gateway's event outbox holds ${held} bytes the control plane has not acknowledged; it cannot record more until the control plane is reachable.`,
        );
      }
      if (this.droppedAtBound++ === 0) {
        this.opts.logger.error(
          { heldBytes: held, maxBytes: this.maxBytes },
          'outbox full: dropping events other than sandbox and snapshot lifecycle until it drains',
        );
      }
      return;
    }
    const pos = await new Promise<Position>((resolve, reject) => {
      this.pending.push({ line, resolve, reject });
      this.pendingBytes += line.length;
      this.flushing ??= this.flush();
    });
    await this.delivered(pos, this.deliveryWaitMs);
  }

  /** Bytes on disk (and queued for it) not yet trimmed: what the bound is about. */
  heldBytes(): number {
    let sum = this.pendingBytes;
    for (const b of this.segments.values()) sum += b;
    return sum;
  }

  /** Bytes written and not yet acknowledged by the control plane. */
  undeliveredBytes(): number {
    let sum = 0;
    for (const [seq, bytes] of this.segments) if (seq >= this.cursor.seq) sum += seq === this.cursor.seq ? bytes - this.cursor.offset : bytes;
    return sum;
  }

  /** Waits until everything appended so far is acknowledged, or timeoutMs; true when it was. */
  async drain(timeoutMs: number): Promise<boolean> {
    await this.flushing;
    const a = this.active;
    if (!a) return true;
    return this.delivered({ seq: a.seq, offset: this.segments.get(a.seq) ?? 0 }, timeoutMs, true);
  }

  /** Stops delivering; what was not acknowledged stays on disk for the next run. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    while (this.flushing) await this.flushing;
    this.wake?.();
    await this.sender;
    await this.active?.fh.close();
    this.active = undefined;
    for (const w of this.waiters.splice(0)) w.resolve();
  }

  private delivered(pos: Position, timeoutMs: number, throughFailures = false): Promise<boolean> {
    if (atOrPast(this.cursor, pos)) return Promise.resolve(true);
    if ((!this.healthy && !throughFailures) || timeoutMs <= 0) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        resolve(false);
      }, timeoutMs);
      timer.unref();
      const w: Waiter = {
        pos,
        throughFailures,
        resolve: () => {
          clearTimeout(timer);
          resolve(atOrPast(this.cursor, pos));
        },
      };
      this.waiters.push(w);
    });
  }

  /** Group commit: everything appended while the previous write and fdatasync ran goes out in one write and one sync. */
  private async flush(): Promise<void> {
    while (this.pending.length > 0) {
      const batch = this.pending;
      this.pending = [];
      const buf = Buffer.concat(batch.map((p) => p.line));
      try {
        let a = this.active!;
        const size = this.segments.get(a.seq) ?? 0;
        if (a.broken || (size > 0 && size + buf.length > this.segmentBytes)) a = await this.openSegment(a.seq + 1);
        const start = this.segments.get(a.seq) ?? 0;
        try {
          for (let off = 0; off < buf.length; ) off += (await a.fh.write(buf, off, buf.length - off)).bytesWritten;
          await a.fh.datasync();
        } catch (err) {
          // Part of the batch may be on disk: later lines never follow it in this segment (a torn tail the reader skips).
          a.broken = true;
          throw err;
        }
        let end = start;
        this.segments.set(a.seq, start + buf.length);
        for (const p of batch) {
          end += p.line.length;
          p.resolve({ seq: a.seq, offset: end });
        }
        if (!this.backingOff) this.wake?.();
      } catch (err) {
        this.opts.logger.error({ err: (err as Error).message, events: batch.length }, 'outbox: writing events to disk failed');
        for (const p of batch) p.reject(err);
      } finally {
        this.pendingBytes -= buf.length;
      }
    }
    this.flushing = undefined;
  }

  /** A new segment, its directory entry made durable before anything counts as written to it. */
  private async openSegment(seq: number): Promise<{ seq: number; fh: FileHandle; broken: boolean }> {
    const fh = await open(join(this.opts.dir, segmentName(seq)), 'ax', 0o600);
    const dirFd = openSync(this.opts.dir, 'r');
    try {
      fsyncSync(dirFd);
    } finally {
      closeSync(dirFd);
    }
    const old = this.active;
    this.segments.set(seq, 0);
    this.active = { seq, fh, broken: false };
    await old?.fh.close();
    return this.active;
  }

  private async readCursor(): Promise<Position | undefined> {
    try {
      const c = JSON.parse(await readFile(join(this.opts.dir, CURSOR_FILE), 'utf8')) as Position;
      if (Number.isSafeInteger(c.seq) && Number.isSafeInteger(c.offset) && c.seq >= 0 && c.offset >= 0) return c;
    } catch {
      // None yet, or unreadable: everything on disk is sent again, which the control plane recognises by id.
    }
    return undefined;
  }

  /** The single sender: in order, one batch at a time, retried with capped backoff until acknowledged. */
  private async run(): Promise<void> {
    let backoffMs = this.backoffMinMs;
    while (!this.closed) {
      let batch: Awaited<ReturnType<Outbox['nextBatch']>>;
      try {
        batch = await this.nextBatch();
        if (batch?.events.length === 0) {
          await this.advance(batch.end);
          continue;
        }
      } catch (err) {
        // The log could not be read or the cursor not moved (a disk fault): nothing is lost, try again later.
        this.opts.logger.error({ err: (err as Error).message }, 'outbox: reading the log failed');
        await this.sleep(this.backoffMaxMs);
        continue;
      }
      if (!batch) {
        await this.sleep();
        continue;
      }
      try {
        const reply = await this.opts.sink.appendEvents(batch.events);
        for (const d of reply.dropped) {
          // The sandbox moved to another node (or ended there): this node's account of it no longer counts.
          this.opts.logger.warn({ eventId: d.id, reason: d.reason }, 'outbox: the control plane dropped an event');
        }
        this.healthy = true;
        backoffMs = this.backoffMinMs;
        this.batchLimit = MAX_EVENTS_PER_BATCH;
        await this.advance(batch.end);
      } catch (err) {
        const code = err instanceof SandglassError ? err.code : undefined;
        if (code !== undefined && PERMANENT.has(code)) {
          if (batch.events.length > 1) {
            // Halve until the event the control plane refuses is alone; the others still go.
            this.batchLimit = Math.ceil(batch.events.length / 2);
            continue;
          }
          this.opts.logger.error(
            { eventId: batch.events[0]!.id, type: batch.events[0]!.type, code, err: (err as Error).message },
            'outbox: the control plane refuses this event; skipping it',
          );
          await this.advance(batch.end);
          continue;
        }
        if (this.healthy) this.opts.logger.warn({ code, err: (err as Error).message }, 'outbox: delivering events failed; retrying');
        this.healthy = false;
        // Nobody waits on an unreachable control plane: appends resolve once durable.
        const gaveUp = this.waiters.filter((w) => !w.throughFailures);
        this.waiters = this.waiters.filter((w) => w.throughFailures);
        for (const w of gaveUp) w.resolve();
        this.backingOff = true;
        await this.sleep(backoffMs);
        this.backingOff = false;
        backoffMs = Math.min(backoffMs * 2, this.backoffMaxMs);
      }
    }
  }

  private sleep(ms?: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(done, ms);
      timer?.unref();
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = undefined;
        done();
      };
    });
  }

  /**
   * The events after the cursor, from one segment: whole lines only, at most batchLimit and about batchBytes. A
   * line that does not parse (a torn tail, damage) is skipped and logged. undefined: nothing to send.
   */
  private async nextBatch(): Promise<{ events: NodeEvent[]; end: Position } | undefined> {
    for (;;) {
      const { seq, offset } = this.cursor;
      const size = this.segments.get(seq);
      const sealed = seq !== this.active?.seq;
      if (size === undefined || (sealed && offset >= size)) {
        const next = [...this.segments.keys()].filter((s) => s > seq).sort((a, b) => a - b)[0];
        if (next === undefined) return undefined;
        await this.advance({ seq: next, offset: 0 });
        continue;
      }
      if (offset >= size) return undefined;
      const buf = await this.readRange(seq, offset, size);
      const events: NodeEvent[] = [];
      let pos = 0;
      while (events.length < this.batchLimit && (events.length === 0 || pos < this.batchBytes)) {
        const nl = buf.indexOf(10, pos);
        if (nl < 0) {
          if (!sealed || events.length > 0 || offset + buf.length < size) break;
          this.opts.logger.warn({ segment: segmentName(seq), bytes: buf.length - pos }, 'outbox: skipping a torn last line');
          pos = buf.length;
          break;
        }
        const text = buf.subarray(pos, nl).toString('utf8');
        pos = nl + 1;
        try {
          events.push(JSON.parse(text) as NodeEvent);
        } catch {
          this.opts.logger.error({ segment: segmentName(seq), offset: offset + pos }, 'outbox: skipping a line that is not JSON');
        }
      }
      if (pos === 0) return undefined;
      return { events, end: { seq, offset: offset + pos } };
    }
  }

  /** From offset to at most batchBytes further, or to the end of the first line when it is longer. */
  private async readRange(seq: number, offset: number, size: number): Promise<Buffer> {
    const fh = await open(join(this.opts.dir, segmentName(seq)), 'r');
    try {
      let want = Math.min(size - offset, this.batchBytes);
      for (;;) {
        const buf = Buffer.alloc(want);
        const { bytesRead } = await fh.read(buf, 0, want, offset);
        const got = buf.subarray(0, bytesRead);
        if (got.includes(10) || offset + bytesRead >= size) return got;
        want = Math.min(size - offset, want * 2);
      }
    } finally {
      await fh.close();
    }
  }

  /** Moves the cursor, records it, deletes segments wholly behind it and wakes appends waiting on their delivery. */
  private async advance(to: Position): Promise<void> {
    this.cursor = to;
    const tmp = join(this.opts.dir, `${CURSOR_FILE}.tmp`);
    await writeFile(tmp, JSON.stringify(to));
    await rename(tmp, join(this.opts.dir, CURSOR_FILE));
    for (const [seq] of this.segments) {
      if (seq >= to.seq || seq === this.active?.seq) continue;
      await unlink(join(this.opts.dir, segmentName(seq))).catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      });
      this.segments.delete(seq);
    }
    const still: Waiter[] = [];
    for (const w of this.waiters) (atOrPast(to, w.pos) ? w.resolve : () => still.push(w))();
    this.waiters = still;
  }
}
