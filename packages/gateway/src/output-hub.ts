// Each command's recent output and exit status, held in the gateway: a client re-attaching from a recent offset is answered with no guest round trip.
import { SandglassError } from '@sandglass/core';
import type { OutputFd } from '@sandglass/agent-client';

export interface OutputPiece {
  fd: OutputFd;
  /** Offset of the piece's first byte in the command's output (the agent's offsets). */
  offset: number;
  bytes: Buffer;
}

export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  endOffset: number;
}

/**
 * The newest output of one command, by the agent's offsets: pieces [start, end) with no gap, at most `capacityBytes`
 * plus one piece (the oldest pieces give way, whole). The guest's ring stays the source of truth: what gave way here
 * is still read from there.
 */
export class OutputRing {
  private pieces: OutputPiece[] = [];
  private head = 0;
  #start = 0;
  #end = 0;
  #sizeBytes = 0;

  constructor(
    readonly capacityBytes: number,
    startOffset = 0,
  ) {
    if (!(capacityBytes > 0)) throw new RangeError('an output ring holds at least one byte');
    this.#start = startOffset;
    this.#end = startOffset;
  }

  get start(): number {
    return this.#start;
  }
  get end(): number {
    return this.#end;
  }
  get sizeBytes(): number {
    return this.#sizeBytes;
  }

  /**
   * Adds bytes at `offset`; returns the change in bytes held. Bytes already held are skipped; a piece past the end
   * (the agent's ring dropped bytes before it sent them) restarts the ring there, as nothing before it can follow.
   */
  append(fd: OutputFd, offset: number, bytes: Buffer): number {
    const before = this.#sizeBytes;
    if (offset > this.#end) {
      this.pieces = [];
      this.head = 0;
      this.#sizeBytes = 0;
      this.#start = offset;
      this.#end = offset;
    }
    const skip = this.#end - offset;
    if (skip >= bytes.length) return this.#sizeBytes - before;
    // A copy: the frame's buffer is the transport's read chunk, which would stay alive as long as this slice.
    const own = Buffer.from(bytes.subarray(skip));
    this.pieces.push({ fd, offset: this.#end, bytes: own });
    this.#end += own.length;
    this.#sizeBytes += own.length;
    while (this.#sizeBytes - this.pieces[this.head]!.bytes.length >= this.capacityBytes) {
      const dropped = this.pieces[this.head]!;
      this.pieces[this.head++] = undefined as unknown as OutputPiece;
      this.#sizeBytes -= dropped.bytes.length;
      this.#start = dropped.offset + dropped.bytes.length;
    }
    if (this.head > 1024 && this.head * 2 > this.pieces.length) {
      this.pieces = this.pieces.slice(this.head);
      this.head = 0;
    }
    return this.#sizeBytes - before;
  }

  /** The pieces from `offset` (start ≤ offset ≤ end) to the end, the first one cut at `offset`; at most maxBytes in all (at least one piece). */
  read(offset: number, maxBytes = Number.POSITIVE_INFINITY): OutputPiece[] {
    if (offset < this.#start || offset > this.#end) throw new RangeError(`offset ${offset} is outside [${this.#start}, ${this.#end})`);
    const out: OutputPiece[] = [];
    if (offset === this.#end) return out;
    // Binary search for the piece holding `offset`.
    let lo = this.head;
    let hi = this.pieces.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.pieces[mid]!.offset <= offset) lo = mid;
      else hi = mid - 1;
    }
    let n = 0;
    for (let i = lo; i < this.pieces.length && n < maxBytes; i++) {
      const p = this.pieces[i]!;
      const cut = offset > p.offset ? offset - p.offset : 0;
      const bytes = cut > 0 ? p.bytes.subarray(cut) : p.bytes;
      out.push({ fd: p.fd, offset: p.offset + cut, bytes });
      n += bytes.length;
    }
    return out;
  }

  clear(): number {
    const held = this.#sizeBytes;
    this.pieces = [];
    this.head = 0;
    this.#sizeBytes = 0;
    this.#start = this.#end;
    return -held;
  }
}

/** What feeds a hub: one attach to the command's output in the agent. */
export interface HubSource {
  /** Opens the attach from `fromOffset`; resolves with where the agent's retained output starts. */
  attach(
    fromOffset: number,
    onData: (fd: OutputFd, offset: number, bytes: Buffer) => void,
    onEnd: (err?: Error) => void,
  ): Promise<{ startOffset: number; endOffset: number; exited: boolean; detach: () => Promise<void> }>;
  /** The command's exit, once its output stream ended (the proc.exit event may trail the stream's end). */
  exitStatus(): Promise<ExitInfo>;
}

type HubState = 'attaching' | 'live' | 'exited' | 'failed';

/** One command's output as the gateway holds it: fed by one agent attach, read by any number of clients. */
export class OutputHub {
  readonly ring: OutputRing;
  #state: HubState = 'attaching';
  #exit?: ExitInfo;
  #error?: Error;
  /**
   * Resolves once the hub holds what the agent had when the attach opened (and the exit, if it had exited then), so
   * its first reader gets the same answer the guest would give; rejects if the attach failed.
   */
  readonly ready: Promise<void>;
  /** Checked as bytes and the exit arrive, until `ready` resolves. */
  private caughtUp?: () => void;
  lastUsedMs: number;
  /** Readers following the output: each is called when bytes arrive, the exit is known, or the hub failed. */
  readonly followers = new Set<() => void>();
  private detach?: () => Promise<void>;

  constructor(
    readonly key: string,
    private readonly source: HubSource,
    fromOffset: number,
    capacityBytes: number,
    nowMs: number,
    private readonly onBytes: (deltaBytes: number) => void,
    private readonly onDead: (hub: OutputHub) => void,
  ) {
    this.ring = new OutputRing(capacityBytes, fromOffset);
    this.lastUsedMs = nowMs;
    this.ready = this.open(fromOffset);
    // A failed open is also reported to the readers waiting on `ready`; nobody else must see it as unhandled.
    this.ready.catch(() => undefined);
  }

  get state(): HubState {
    return this.#state;
  }
  get exit(): ExitInfo | undefined {
    return this.#exit;
  }
  get error(): Error | undefined {
    return this.#error;
  }

  private async open(fromOffset: number): Promise<void> {
    try {
      const h = await this.source.attach(
        fromOffset,
        (fd, offset, bytes) => {
          if (this.#state === 'failed') return;
          this.onBytes(this.ring.append(fd, offset, bytes));
          this.notify();
        },
        (err) => this.ended(err),
      );
      // Evicted while the attach was opening: nobody reads it.
      if (this.#state === 'failed') {
        void h.detach().catch(() => undefined);
        throw this.#error;
      }
      this.detach = h.detach;
      // Output before the agent's ring start is gone for good: the ring starts where the agent's does.
      if (h.startOffset > this.ring.end) this.onBytes(this.ring.append(1, h.startOffset, Buffer.alloc(0)));
      if (this.#state === 'attaching') this.#state = 'live';
      const done = () => this.#state === 'failed' || this.#state === 'exited' || (!h.exited && this.ring.end >= h.endOffset);
      if (!done()) {
        await new Promise<void>((resolve) => {
          this.caughtUp = () => {
            if (!done()) return;
            this.caughtUp = undefined;
            resolve();
          };
        });
      }
      // The wait above may have ended in a failure (the narrowing before it does not know).
      if ((this.#state as HubState) === 'failed' && this.#error) throw this.#error;
    } catch (err) {
      this.fail(err as Error);
      throw err;
    }
  }

  private ended(err?: Error): void {
    if (this.#state === 'failed') return;
    if (err) return this.fail(err);
    this.detach = undefined;
    this.source.exitStatus().then(
      (exit) => {
        if (this.#state === 'failed') return;
        this.#exit = { ...exit, endOffset: Math.max(exit.endOffset, this.ring.end) };
        this.#state = 'exited';
        this.notify();
      },
      (e: unknown) => this.fail(e as Error),
    );
  }

  private fail(err: Error): void {
    if (this.#state === 'failed') return;
    this.#state = 'failed';
    this.#error = err;
    this.notify();
    this.close();
    this.onDead(this);
  }

  private notify(): void {
    this.caughtUp?.();
    for (const f of [...this.followers]) f();
  }

  /** Stops the attach and frees the bytes; readers still following are told it failed. */
  close(): void {
    const detach = this.detach;
    this.detach = undefined;
    if (detach) void detach().catch(() => undefined);
    this.onBytes(this.ring.clear());
    if (this.#state !== 'failed') {
      this.#state = 'failed';
      // Only a hub nobody follows is evicted for room; one with followers goes when its sandbox stops or pauses.
      this.#error = new SandglassError('sandbox_not_running', 'The sandbox stopped running; read the output again once it runs.');
      this.notify();
    }
  }
}

export interface OutputHubsOptions {
  /** Bytes of output kept per command (default 1 MiB). */
  perCommandBytes?: number;
  /** Bytes of output kept for all commands of the node (default 64 MiB): past it, idle hubs are evicted, oldest use first. */
  totalBytes?: number;
  /** Hubs at most (default 4096): each one that follows a running command holds an attach in its agent. */
  maxHubs?: number;
  /** A hub nobody read for this long is evicted (default 60 s). */
  idleMs?: number;
  nowMs?: () => number;
}

/** A hub's key: its sandbox's (whose hubs go when it stops) and its command's. */
export function hubKey(sandboxId: string, commandId: string): string {
  return `${sandboxId}/${commandId}`;
}

/** The node's hubs: one per command that a client re-attached to, bounded in bytes and count, idle ones evicted. */
export class OutputHubs {
  readonly perCommandBytes: number;
  readonly totalBytes: number;
  readonly maxHubs: number;
  readonly idleMs: number;
  private readonly nowMs: () => number;
  /** In order of last use (Map iteration order: re-inserted on each use). */
  private readonly hubs = new Map<string, OutputHub>();
  #heldBytes = 0;

  constructor(opts: OutputHubsOptions = {}) {
    this.perCommandBytes = opts.perCommandBytes ?? 1024 * 1024;
    this.totalBytes = opts.totalBytes ?? 64 * 1024 * 1024;
    this.maxHubs = opts.maxHubs ?? 4096;
    this.idleMs = opts.idleMs ?? 60_000;
    this.nowMs = opts.nowMs ?? Date.now;
    // An idle hub of a running command keeps its attach (and the guest's output crossing to the host) until it goes.
    setInterval(() => this.sweep(), this.idleMs).unref();
  }

  /** Evicts the hubs nobody read for idleMs (and follows). */
  sweep(): void {
    this.evict(this.nowMs(), 0);
  }

  get heldBytes(): number {
    return this.#heldBytes;
  }
  get size(): number {
    return this.hubs.size;
  }

  /**
   * The hub of `key` (a sandbox's agent connection and a command) that can serve `fromOffset`, opened from just
   * before it when there is none; undefined when the existing hub starts after `fromOffset` (the caller reads the
   * guest's ring instead).
   */
  open(key: string, fromOffset: number, source: () => HubSource): OutputHub | undefined {
    const now = this.nowMs();
    let hub = this.hubs.get(key);
    if (hub && hub.state === 'failed') {
      this.hubs.delete(key);
      hub = undefined;
    }
    if (hub) {
      if (hub.state !== 'attaching' && fromOffset < hub.ring.start) return undefined;
      hub.lastUsedMs = now;
      this.hubs.delete(key);
      this.hubs.set(key, hub);
      return hub;
    }
    this.evict(now, 1);
    // From a window before the offset asked for, so clients a little behind it are served too.
    const created = new OutputHub(
      key,
      source(),
      Math.max(0, fromOffset - this.perCommandBytes),
      this.perCommandBytes,
      now,
      (d) => {
        this.#heldBytes += d;
        if (d > 0 && this.#heldBytes > this.totalBytes) this.evict(this.nowMs(), 0);
      },
      (h) => {
        if (this.hubs.get(h.key) === h) this.hubs.delete(h.key);
      },
    );
    this.hubs.set(key, created);
    return created;
  }

  /** Evicts a sandbox's hubs (it stopped or paused: a resume attaches anew, to its new agent connection). */
  dropSandbox(sandboxId: string): void {
    const prefix = hubKey(sandboxId, '');
    for (const [key, hub] of this.hubs) {
      if (!key.startsWith(prefix)) continue;
      this.hubs.delete(key);
      hub.close();
    }
  }

  /** Idle hubs (no followers) go, oldest use first: all past idleMs, then more while over the byte or count bound. */
  private evict(now: number, room: number): void {
    for (const [key, hub] of this.hubs) {
      const over = this.#heldBytes > this.totalBytes || this.hubs.size + room > this.maxHubs;
      const stale = now - hub.lastUsedMs > this.idleMs;
      // Oldest use first: once one is neither stale nor needed for room, none after it is.
      if (!over && !stale) break;
      if (hub.followers.size > 0) continue;
      this.hubs.delete(key);
      hub.close();
    }
  }
}
