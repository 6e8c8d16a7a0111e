// The frame multiplexer under the agent client: calls and their replies, stream ids, credit, resync after restore, quiesce.
import { Duplex, type Readable, type Writable } from 'node:stream';
import { failpoint } from '@sandglass/core';
import { AgentError, agentErrorOf } from './errors.js';
import { encodeFrame, encodeJsonFrame, FrameDecoder, FrameType, RESYNC_MAGIC, type Frame } from './frame.js';
import type { AgentEvent, ErrorInfo } from './types.js';

/** A Duplex (a net.Socket to the VM's chardev socket) or two halves (a child process's stdio). */
export type AgentTransport = Duplex | { readable: Readable; writable: Writable };

export interface CallOptions {
  timeoutMs?: number;
}

/** The agent broke the protocol on one stream; the stream was reset, the connection stays. */
export interface ProtocolViolation {
  kind: 'credit_exceeded';
  stream: number;
  /** Credit the host had granted and bytes the offending frame carried. */
  creditBytes: number;
  frameBytes: number;
}

/** Stream ids with this bit are the agent's (net.open); the host allocates below it. */
export const AGENT_STREAM_BIT = 0x80000000;

/** Credit of one agent→host stream, as its consumer sees it. */
export interface Granter {
  /** Bytes the agent may still send on the stream. */
  creditBytes: number;
  /** DATA of this many bytes arrived; false when it went beyond the credit. */
  received(bytes: number): boolean;
  /** The consumer took these bytes: they may be granted back to the agent. */
  consumed(bytes: number): void;
}

/** Where the frames of one stream go. */
export interface StreamHandler {
  data(payload: Buffer): void;
  /** Agent→host streams with credit: DATA beyond what was granted resets the stream instead of reaching data(). */
  granter?: Granter;
  end(err: AgentError | undefined): void;
  window?(bytes: number): void;
  /** Relayed connections: the agent dropped them (resync); nothing more may be sent on the stream. */
  reset?(err: AgentError): void;
  /** Both directions use the stream: a plain END from the agent leaves it open, the handler forgets it itself. */
  bidirectional?: boolean;
}

/** What the multiplexer tells the layer above it. */
export interface MuxHooks {
  /** Every well-formed EVENT frame, in order. */
  event(ev: AgentEvent): void;
  violation(v: ProtocolViolation): void;
  /** The transport is gone; runs once, after pending calls were rejected and open streams ended. */
  closed(err: AgentError): void;
}

interface PendingCall {
  method: string;
  resolve(result: unknown): void;
  reject(err: Error): void;
  timer?: NodeJS.Timeout;
}

/**
 * One byte stream to the agent, multiplexed: calls matched to replies by id, agent→host streams routed by id with
 * credit enforced, host→agent frames in order (held back while quiesced). It knows frames, not methods.
 */
export class FrameMux {
  private readonly readable: Readable;
  private readonly writable: Writable;
  private decoder = new FrameDecoder();
  /** Frames held back while quiesced (see quiesce). */
  private held: Buffer[] | undefined;
  /** Set from resync until the agent's marker arrives: bytes before it are stale and dropped. */
  private resyncState: { marker: Buffer; carry: Buffer } | undefined;
  private readonly pending = new Map<number, PendingCall>();
  private readonly streams = new Map<number, StreamHandler>();
  /** Host→agent streams (file.write): the agent sends nothing on them, but their ids stay taken until released. */
  private readonly outbound = new Set<number>();
  private readonly closeWaiters = new Set<(err: AgentError) => void>();
  private nextCallId = 1;
  private nextStreamId = 1;
  private closedError: AgentError | undefined;

  constructor(
    transport: AgentTransport,
    private readonly hooks: MuxHooks,
    private readonly callTimeoutMs: number,
  ) {
    if (transport instanceof Duplex) {
      this.readable = transport;
      this.writable = transport;
    } else {
      this.readable = transport.readable;
      this.writable = transport.writable;
    }
    this.readable.on('data', (chunk: Buffer) => this.onChunk(chunk));
    const gone = (err?: Error) => this.teardown(err);
    this.readable.on('end', () => gone());
    this.readable.on('close', () => gone());
    this.readable.on('error', gone);
    this.writable.on('error', gone);
    this.writable.on('close', () => gone());
  }

  /** True once the transport is gone; every later call rejects with agent_disconnected. */
  get closed(): boolean {
    return this.closedError !== undefined;
  }

  call<T = unknown>(method: string, params: object = {}, opts: CallOptions = {}): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = this.allocCallId();
    const timeoutMs = opts.timeoutMs ?? this.callTimeoutMs;
    return new Promise<T>((resolve, reject) => {
      const entry: PendingCall = { method, resolve: resolve as (r: unknown) => void, reject };
      if (timeoutMs > 0) {
        entry.timer = setTimeout(() => {
          this.pending.delete(id);
          reject(new AgentError('agent_timeout', `agent did not answer ${method} within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this.pending.set(id, entry);
      this.write(encodeJsonFrame(FrameType.call, id, { method, params }));
    });
  }

  /**
   * Discards everything the agent sends until it writes the marker for `nonce` (its answer to a hello carrying it),
   * and drops the relayed connections: after a restore their guest ends may be anywhere, and the tail of frames the
   * guest wrote before the snapshot would otherwise break the framing.
   */
  resync(nonce: Buffer): void {
    this.resyncState = { marker: Buffer.concat([RESYNC_MAGIC, nonce]), carry: Buffer.alloc(0) };
    this.decoder = new FrameDecoder();
    const reset = new AgentError('agent_disconnected', 'the agent connection was reset (hello): relayed connection dropped');
    for (const [id, handler] of [...this.streams]) {
      if (!handler.reset) continue;
      this.streams.delete(id);
      handler.reset(reset);
    }
  }

  /** A free host stream id for an agent→host stream; register its handler before the call that opens it. */
  allocStream(): number {
    for (;;) {
      const id = this.nextStreamId;
      // Stream ids with bit 31 are the agent's.
      this.nextStreamId = id >= AGENT_STREAM_BIT - 1 ? 1 : id + 1;
      if (!this.streams.has(id) && !this.outbound.has(id)) return id;
    }
  }

  /** A free host stream id for a host→agent stream: no agent frames are routed to it; taken until releaseOutbound. */
  openOutbound(): number {
    const id = this.allocStream();
    this.outbound.add(id);
    return id;
  }

  releaseOutbound(id: number): void {
    this.outbound.delete(id);
  }

  hasStream(id: number): boolean {
    return this.streams.has(id);
  }

  register(id: number, handler: StreamHandler): void {
    this.streams.set(id, handler);
  }

  /** Forgets a stream (only while `handler` is still the one registered, when given); true if it was there. */
  unregister(id: number, handler?: StreamHandler): boolean {
    if (handler && this.streams.get(id) !== handler) return false;
    return this.streams.delete(id);
  }

  /** Queues a frame (held while quiesced); dropped once the transport is gone. */
  send(frame: Buffer): void {
    if (!this.closedError) this.write(frame);
  }

  /** END on a stream, with an error when given; dropped once the transport is gone. */
  endStream(id: number, error?: ErrorInfo): void {
    this.send(error ? encodeJsonFrame(FrameType.end, id, { error }) : encodeFrame(FrameType.end, id));
  }

  /** Sends a frame and waits while the transport pushes back; rejects once it is gone. */
  async sendWithBackpressure(frame: Buffer): Promise<void> {
    if (this.closedError) throw this.closedError;
    if (this.write(frame)) return;
    await new Promise<void>((resolve, reject) => {
      const onDrain = () => {
        this.closeWaiters.delete(onClose);
        resolve();
      };
      const onClose = (err: AgentError) => {
        this.writable.off('drain', onDrain);
        reject(err);
      };
      this.writable.once('drain', onDrain);
      this.closeWaiters.add(onClose);
    });
  }

  /**
   * Credit of an agent→host stream, to put on its handler. WINDOW grants are batched: a grant per quarter window
   * keeps the pipe full with few frames. Grants stop once the stream is no longer registered with this granter.
   */
  granter(streamId: number, windowBytes: number): Granter {
    const thresholdBytes = Math.max(1, Math.floor(windowBytes / 4));
    let ungrantedBytes = 0;
    const granter: Granter = {
      // What the agent may still send: the window, less what arrived, plus what was granted back.
      creditBytes: windowBytes,
      received: (bytes) => {
        granter.creditBytes -= bytes;
        return granter.creditBytes >= 0;
      },
      consumed: (bytes) => {
        ungrantedBytes += bytes;
        if (ungrantedBytes >= thresholdBytes) flush();
      },
    };
    const flush = () => {
      if (ungrantedBytes === 0 || this.closedError || this.streams.get(streamId)?.granter !== granter) return;
      const payload = Buffer.allocUnsafe(4);
      payload.writeUInt32BE(ungrantedBytes);
      granter.creditBytes += ungrantedBytes;
      ungrantedBytes = 0;
      this.write(encodeFrame(FrameType.window, streamId, payload));
    };
    return granter;
  }

  /**
   * Brings the host→agent direction to a frame boundary for a live snapshot: later frames are held back, and a ping
   * round trip proves the agent has read everything sent before it. Restoring such a snapshot, the agent's reader
   * is between frames. Call the returned function to release the held frames (always, also when the snapshot fails).
   */
  async quiesce(opts?: CallOptions): Promise<() => void> {
    if (this.held) throw new AgentError('busy', 'the agent channel is already quiesced');
    this.held = [];
    const release = () => {
      const frames = this.held ?? [];
      this.held = undefined;
      for (const f of frames) if (!this.closedError) this.writable.write(f);
    };
    const id = this.allocCallId();
    try {
      await new Promise<void>((resolve, reject) => {
        const entry: PendingCall = { method: 'ping', resolve: () => resolve(), reject };
        entry.timer = setTimeout(() => {
          this.pending.delete(id);
          reject(new AgentError('agent_timeout', `agent did not answer the quiesce ping within ${opts?.timeoutMs ?? this.callTimeoutMs} ms`));
        }, opts?.timeoutMs ?? this.callTimeoutMs);
        this.pending.set(id, entry);
        this.writable.write(encodeJsonFrame(FrameType.call, id, { method: 'ping', params: {} }));
      });
    } catch (err) {
      release();
      throw err;
    }
    return release;
  }

  /** Closes the transport; pending calls reject with agent_disconnected. */
  close(): Promise<void> {
    this.teardown(undefined, 'client closed the connection');
    return new Promise((resolve) => {
      if (this.writable.writableFinished || this.writable.destroyed) {
        this.readable.destroy();
        resolve();
        return;
      }
      this.writable.end(() => {
        this.readable.destroy();
        resolve();
      });
    });
  }

  private onChunk(chunk: Buffer): void {
    if (this.resyncState) {
      const { marker, carry } = this.resyncState;
      const hay = Buffer.concat([carry, chunk]);
      const at = hay.indexOf(marker);
      if (at < 0) {
        this.resyncState.carry = hay.subarray(Math.max(0, hay.length - marker.length + 1));
        return;
      }
      this.resyncState = undefined;
      chunk = hay.subarray(at + marker.length);
    }
    let frames: Frame[];
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      this.teardown(err as Error, 'agent sent a malformed frame');
      this.readable.destroy();
      this.writable.destroy();
      return;
    }
    for (const frame of frames) this.dispatch(frame);
  }

  private dispatch(frame: Frame): void {
    switch (frame.type) {
      case FrameType.reply: {
        const call = this.pending.get(frame.channel);
        if (!call) return; // timed out meanwhile
        this.pending.delete(frame.channel);
        clearTimeout(call.timer);
        const body = parseJson(frame.payload) as { result?: unknown; error?: ErrorInfo } | undefined;
        if (!body) call.reject(new AgentError('agent_protocol', `unparseable reply to ${call.method}`));
        else if (body.error) call.reject(agentErrorOf(body.error));
        else call.resolve(body.result ?? {});
        return;
      }
      case FrameType.event: {
        const ev = parseJson(frame.payload) as AgentEvent | undefined;
        if (ev && typeof ev.event === 'string') this.hooks.event(ev);
        return;
      }
      case FrameType.data: {
        const handler = this.streams.get(frame.channel);
        if (!handler) return;
        if (handler.granter && !handler.granter.received(frame.payload.length)) this.resetOverCredit(frame.channel, handler, frame.payload.length);
        else handler.data(frame.payload);
        return;
      }
      case FrameType.end: {
        const handler = this.streams.get(frame.channel);
        if (!handler) return;
        if (!handler.bidirectional) this.streams.delete(frame.channel);
        const body = frame.payload.length > 0 ? (parseJson(frame.payload) as { error?: ErrorInfo } | undefined) : undefined;
        handler.end(body?.error ? agentErrorOf(body.error) : undefined);
        return;
      }
      case FrameType.window:
        // Only relayed connections take credit from the agent; other host→agent streams rely on transport backpressure.
        if (frame.payload.length === 4) this.streams.get(frame.channel)?.window?.(frame.payload.readUInt32BE(0));
        return;
      default:
        return;
    }
  }

  /**
   * The agent sent more than the stream's credit: everything it sends is buffered on the host only within what was
   * granted, so the stream is reset rather than delivered (END bad_request tells the agent, as it does to a host that
   * oversends), its consumer fails, and the violation is reported once.
   */
  private resetOverCredit(streamId: number, handler: StreamHandler, frameBytes: number): void {
    this.streams.delete(streamId);
    this.endStream(streamId, { code: 'bad_request', message: 'stream exceeded the flow-control credit the host granted' });
    const creditBytes = handler.granter!.creditBytes + frameBytes;
    handler.end(new AgentError('agent_protocol', `the agent sent ${frameBytes} bytes on stream ${streamId} with ${creditBytes} bytes of credit: stream reset`));
    this.hooks.violation({ kind: 'credit_exceeded', stream: streamId, creditBytes, frameBytes });
  }

  /** Every frame goes out here: held back while the channel is quiesced for a snapshot, in order. */
  private write(frame: Buffer): boolean {
    if (this.held) {
      this.held.push(frame);
      return true;
    }
    if (failpoint('agent.frame') === 'drop') {
      // The channel dies with half a frame on the wire: the agent must resync, the host must fail its calls cleanly.
      this.writable.write(frame.subarray(0, frame.length >> 1));
      this.writable.destroy();
      this.readable.destroy();
      return false;
    }
    return this.writable.write(frame);
  }

  private allocCallId(): number {
    for (;;) {
      const id = this.nextCallId;
      // Call ids may use the whole range.
      this.nextCallId = id >= 0xffffffff ? 1 : id + 1;
      if (!this.pending.has(id)) return id;
    }
  }

  private teardown(cause?: Error, message = 'connection to the agent was lost'): void {
    if (this.closedError) return;
    const err = new AgentError('agent_disconnected', cause ? `${message}: ${cause.message}` : message, { cause });
    this.closedError = err;
    for (const call of this.pending.values()) {
      clearTimeout(call.timer);
      call.reject(err);
    }
    this.pending.clear();
    const streams = [...this.streams.values()];
    this.streams.clear();
    for (const s of streams) s.end(err);
    this.outbound.clear();
    this.hooks.closed(err);
    for (const waiter of [...this.closeWaiters]) waiter(err);
    this.closeWaiters.clear();
  }
}

function parseJson(payload: Buffer): unknown {
  try {
    return JSON.parse(payload.toString('utf8'));
  } catch {
    return undefined;
  }
}
