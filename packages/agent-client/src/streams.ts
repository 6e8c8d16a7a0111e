// Agent→host streams as Node streams: a file.read's bytes and relayed guest connections, each giving credit back as its consumer reads.
import { Duplex, Readable } from 'node:stream';
import type { AgentError } from './errors.js';
import { encodeFrame, encodeJsonFrame, FrameType } from './frame.js';
import type { Granter } from './mux.js';
import type { ErrorInfo, NetOpenInfo } from './types.js';

/** Host→agent DATA on a relayed connection: small next to the agent's window, so its grants overlap our sending. */
const NET_DATA_BYTES = 64 * 1024;

/**
 * Bytes of a file.read. Credit is granted back to the agent only while the consumer keeps up
 * (push() below the high-water mark, or a _read() asking for more), so a slow consumer stops the
 * agent after one window instead of buffering the whole file in host memory.
 */
export class FileReadStream extends Readable {
  sizeBytes = 0;
  private finished = false;
  /** Bytes that arrived while the consumer was behind: granted back on the next _read(). */
  private heldBytes = 0;

  constructor(
    private readonly granter: Granter,
    private readonly cancel: () => void,
  ) {
    super({ highWaterMark: 1024 * 1024 });
  }

  /** @internal */
  onData(bytes: Buffer): void {
    if (this.push(bytes)) this.granter.consumed(bytes.length);
    else this.heldBytes += bytes.length;
  }

  /** @internal */
  onEnd(err: AgentError | undefined): void {
    this.finished = true;
    if (err) this.destroy(err);
    else this.push(null);
  }

  override _read(): void {
    if (this.heldBytes > 0) {
      const bytes = this.heldBytes;
      this.heldBytes = 0;
      this.granter.consumed(bytes);
    }
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.finished) this.cancel();
    callback(err);
  }
}

export interface NetLink {
  granter: Granter;
  /** Queues a frame on the client's write path (held while quiesced); dropped once the transport is gone. */
  send(frame: Buffer): void;
  /** Forgets the stream: later frames for it are ignored. */
  release(): void;
}

/**
 * One guest connection relayed by the agent (net.open), as a Duplex. Writes become DATA frames within the credit the
 * agent grants; a write's callback runs once all of it is sent, so a guest that reads slowly holds back the writer.
 * Reads come from the agent's DATA, and credit goes back to the agent as the consumer reads. end() half-closes
 * (END); the guest's EOF ends the readable side. destroy() before both sides ended aborts: the agent resets the
 * guest's socket. A reset of the agent connection (hello, transport loss) destroys it with agent_disconnected.
 */
export class NetConnection extends Duplex {
  readonly stream: number;
  /** The guest program's address. */
  readonly peer: string;
  private credit: number;
  private pendingWrite: { chunk: Buffer; callback: (err?: Error | null) => void } | undefined;
  /** Bytes that arrived while the consumer was behind: granted back on the next _read(). */
  private heldBytes = 0;
  private endSent = false;
  private endReceived = false;
  private released = false;
  private idleTimer: NodeJS.Timeout | undefined;

  /** @internal */
  constructor(
    info: NetOpenInfo,
    recvWindowBytes: number,
    private readonly link: NetLink,
  ) {
    // A small readable buffer like a socket's: credit goes back only below it, so a stalled consumer holds at most
    // this plus one window of the agent's.
    super({ allowHalfOpen: true, readableHighWaterMark: NET_DATA_BYTES, writableHighWaterMark: NET_DATA_BYTES });
    this.stream = info.stream;
    this.peer = info.peer;
    this.credit = recvWindowBytes;
  }

  /**
   * Like net.Socket's: emits 'timeout' after timeoutMs without bytes moving either way (0 turns it off); the
   * connection stays open. Node's HTTP server uses it for its idle and keep-alive limits.
   */
  setTimeout(timeoutMs: number, callback?: () => void): this {
    if (callback) {
      if (timeoutMs === 0) this.off('timeout', callback);
      else this.once('timeout', callback);
    }
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    if (timeoutMs > 0 && !this.destroyed) {
      this.idleTimer = setTimeout(() => this.emit('timeout'), timeoutMs);
      this.idleTimer.unref();
    }
    return this;
  }

  /** @internal */
  onData(bytes: Buffer): void {
    if (this.endReceived || this.released) return;
    if (this.destroyed) {
      // Closed gracefully on our side (see _destroy): drain what the guest still sends until its END.
      this.link.granter.consumed(bytes.length);
      return;
    }
    this.idleTimer?.refresh();
    if (this.push(bytes)) this.link.granter.consumed(bytes.length);
    else this.heldBytes += bytes.length;
  }

  /** @internal */
  onEnd(err: AgentError | undefined): void {
    if (err) {
      this.release();
      this.destroy(err);
      return;
    }
    if (this.endReceived) return;
    this.endReceived = true;
    this.push(null);
    if (this.endSent) this.release();
  }

  /** @internal */
  onWindow(bytes: number): void {
    this.credit += bytes;
    this.pump();
  }

  /** @internal */
  onReset(err: AgentError): void {
    this.released = true;
    this.destroy(err);
  }

  override _read(): void {
    if (this.heldBytes > 0) {
      const bytes = this.heldBytes;
      this.heldBytes = 0;
      this.link.granter.consumed(bytes);
    }
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.pendingWrite = { chunk, callback };
    this.pump();
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.released) {
      this.link.send(encodeFrame(FrameType.end, this.stream));
      this.endSent = true;
      if (this.endReceived) this.release();
    }
    callback();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    clearTimeout(this.idleTimer);
    this.pendingWrite = undefined;
    // A close without error after our END (an HTTP server finishing a `Connection: close` response destroys its
    // socket) is graceful: the guest must still get every byte already sent, so no abort; the stream is released
    // when the guest's END arrives.
    if (!err && this.endSent && !this.released) {
      callback(null);
      return;
    }
    if (!this.released) {
      const error: ErrorInfo = { code: 'io', message: err ? `host aborted the connection: ${err.message}` : 'host closed the connection' };
      this.link.send(encodeJsonFrame(FrameType.end, this.stream, { error }));
      this.release();
    }
    callback(err);
  }

  private pump(): void {
    const pending = this.pendingWrite;
    if (!pending || this.released) return;
    if (pending.chunk.length > 0 && this.credit > 0) this.idleTimer?.refresh();
    while (pending.chunk.length > 0 && this.credit > 0) {
      const n = Math.min(this.credit, NET_DATA_BYTES, pending.chunk.length);
      this.link.send(encodeFrame(FrameType.data, this.stream, pending.chunk.subarray(0, n)));
      this.credit -= n;
      pending.chunk = pending.chunk.subarray(n);
    }
    if (pending.chunk.length === 0) {
      this.pendingWrite = undefined;
      pending.callback();
    }
  }

  private release(): void {
    if (this.released) return;
    this.released = true;
    this.link.release();
  }
}
