// Host side of the agent protocol: calls, events, process output streams, file transfer and relayed guest connections over one byte stream.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { Duplex, Readable, type Writable } from 'node:stream';
import { encodeFrame, encodeJsonFrame, FrameDecoder, FrameType, MAX_DATA_BYTES, RESYNC_MAGIC, type Frame } from './frame.js';
import type {
  AgentEvent,
  AttachResult,
  ErrorInfo,
  FileStat,
  FileWriteFailedEvent,
  FileWrittenEvent,
  HelloResult,
  NetOpenEvent,
  NetOpenInfo,
  ProcInfo,
  ProcStartParams,
  SignalName,
  SyncResult,
} from './types.js';

/** An error reply from the agent (`code` is the agent's code) or a host-side failure (`agent_*`). */
export class AgentError extends Error {
  readonly code: string;

  constructor(code: string, message: string, opts: { cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AgentError';
    this.code = code;
  }
}

/** A Duplex (a net.Socket to the VM's chardev socket) or two halves (a child process's stdio). */
export type AgentTransport = Duplex | { readable: Readable; writable: Writable };

export interface AgentClientOptions {
  /** Default for calls without their own timeoutMs; 0 waits forever. */
  callTimeoutMs?: number;
}

export interface CallOptions {
  timeoutMs?: number;
}

export interface StreamOptions extends CallOptions {
  /** Flow-control window: bytes the agent may send before the host grants more. */
  windowBytes?: number;
}

export interface WriteFileOptions extends CallOptions {
  mode?: number;
  parents?: boolean;
  append?: boolean;
}

export interface AttachHandle extends AttachResult {
  /** Stops the stream; onEnd is not called afterwards. */
  detach(): Promise<void>;
}

export type OutputFd = 1 | 2;

export interface NetListenOptions extends CallOptions {
  /** IP address to listen on in the guest; default 127.0.0.1. */
  address?: string;
  /** Flow-control window of each relayed connection's guest→host direction. */
  windowBytes?: number;
}

const DEFAULT_CALL_TIMEOUT_MS = 30_000;
const DEFAULT_WINDOW_BYTES = 4 * 1024 * 1024;
/** Stream ids with this bit are the agent's (net.open); the host allocates below it. */
const AGENT_STREAM_BIT = 0x80000000;
/** Host→agent credit of a relayed connection when net.open does not say. */
const DEFAULT_NET_RECV_WINDOW_BYTES = 256 * 1024;
/** Host→agent DATA on a relayed connection: small next to the agent's window, so its grants overlap our sending. */
const NET_DATA_BYTES = 64 * 1024;

interface PendingCall {
  method: string;
  resolve(result: unknown): void;
  reject(err: Error): void;
  timer?: NodeJS.Timeout;
}

interface StreamHandler {
  data(payload: Buffer): void;
  /** Agent→host streams with credit: DATA beyond what was granted resets the stream instead of reaching data(). */
  granter?: Granter;
  end(err: AgentError | undefined): void;
  window?(bytes: number): void;
  /** Relayed connections: the agent dropped them (hello); nothing more may be sent on the stream. */
  reset?(err: AgentError): void;
  /** Both directions use the stream: a plain END from the agent leaves it open, the handler forgets it itself. */
  bidirectional?: boolean;
}

interface WriteWaiter {
  resolve(sizeBytes: number): void;
  reject(err: Error): void;
}

export type NetOpenListener = (conn: NetConnection, info: NetOpenInfo) => void;

/** The agent broke the protocol on one stream; the stream was reset, the connection stays. */
export interface ProtocolViolation {
  kind: 'credit_exceeded';
  stream: number;
  /** Credit the host had granted and bytes the offending frame carried. */
  creditBytes: number;
  frameBytes: number;
}

/** Longest error message kept from the agent: it ends up in logs, events and API responses. */
export const MAX_AGENT_MESSAGE_CHARS = 1024;

export interface AgentClient {
  on(event: 'event', listener: (ev: AgentEvent) => void): this;
  on(event: 'close', listener: (err: AgentError) => void): this;
  /** A guest program connected to the relay listener (netListen). Without a listener the connection is refused. */
  on(event: 'net.open', listener: NetOpenListener): this;
  /** The agent sent more than a stream's credit: the stream was reset (END bad_request) and its consumer failed. */
  on(event: 'violation', listener: (v: ProtocolViolation) => void): this;
  once(event: 'event', listener: (ev: AgentEvent) => void): this;
  once(event: 'close', listener: (err: AgentError) => void): this;
  once(event: 'net.open', listener: NetOpenListener): this;
  off(event: 'event', listener: (ev: AgentEvent) => void): this;
  off(event: 'close', listener: (err: AgentError) => void): this;
  off(event: 'net.open', listener: NetOpenListener): this;
}

// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the interface only adds typed overloads of on/once/off, which EventEmitter implements
export class AgentClient extends EventEmitter {
  private readonly readable: Readable;
  private readonly writable: Writable;
  private decoder = new FrameDecoder();
  /** Frames held back while quiesced (see quiesce). */
  private held: Buffer[] | undefined;
  /** Set from hello until the agent's resync marker arrives: bytes before it are stale and dropped. */
  private resync: { marker: Buffer; carry: Buffer } | undefined;
  private readonly pending = new Map<number, PendingCall>();
  private readonly streams = new Map<number, StreamHandler>();
  private readonly writeWaiters = new Map<number, WriteWaiter>();
  private readonly callTimeoutMs: number;
  private nextCallId = 1;
  private nextStreamId = 1;
  private closedError: AgentError | undefined;

  constructor(transport: AgentTransport, opts: AgentClientOptions = {}) {
    super();
    if (transport instanceof Duplex) {
      this.readable = transport;
      this.writable = transport;
    } else {
      this.readable = transport.readable;
      this.writable = transport.writable;
    }
    this.callTimeoutMs = opts.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
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
    const id = this.allocId('call');
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
   * Opens the protocol on this connection. Every hello carries a fresh nonce: the agent writes a raw marker with it
   * ahead of its reply, and everything received before the marker is discarded. After a restore that is how the host
   * skips the tail of frames the guest wrote before the snapshot, which would otherwise break the framing.
   */
  hello(opts?: CallOptions): Promise<HelloResult> {
    const nonce = randomBytes(16);
    this.resync = { marker: Buffer.concat([RESYNC_MAGIC, nonce]), carry: Buffer.alloc(0) };
    this.decoder = new FrameDecoder();
    // hello drops the agent's relayed connections: after a restore their guest ends may be anywhere.
    const reset = new AgentError('agent_disconnected', 'the agent connection was reset (hello): relayed connection dropped');
    for (const [id, handler] of [...this.streams]) {
      if (!handler.reset) continue;
      this.streams.delete(id);
      handler.reset(reset);
    }
    return this.call('hello', { version: 1, resync: nonce.toString('hex') }, opts);
  }

  async ping(opts?: CallOptions): Promise<void> {
    await this.call('ping', {}, opts);
  }

  /** Sends fresh host randomness and the host clock; call after every restore. */
  sync(opts: CallOptions & { timeUnixNs?: bigint; entropy?: Buffer } = {}): Promise<SyncResult> {
    const entropy = opts.entropy ?? randomBytes(64);
    const timeUnixNs = opts.timeUnixNs ?? hostClockNs();
    return this.call('sync', { timeUnixNs: timeUnixNs.toString(), entropy: entropy.toString('base64') }, opts);
  }

  procStart(params: ProcStartParams, opts?: CallOptions): Promise<{ pid: number }> {
    return this.call('proc.start', { stdin: false, ...params }, opts);
  }

  /**
   * Follows a process's output from fromOffset. onData gets each piece with its output offset;
   * onEnd runs once the process exited and everything was delivered, or with an error.
   */
  async procAttach(
    id: string,
    fromOffset: number,
    onData: (fd: OutputFd, offset: number, bytes: Buffer) => void,
    onEnd: (err?: AgentError) => void,
    opts: StreamOptions = {},
  ): Promise<AttachHandle> {
    const windowBytes = opts.windowBytes ?? DEFAULT_WINDOW_BYTES;
    const streamId = this.allocId('stream');
    const granter = this.granter(streamId, windowBytes);
    this.streams.set(streamId, {
      granter,
      data: (payload) => {
        if (payload.length < 9) return;
        onData(payload[0] as OutputFd, Number(payload.readBigUInt64BE(1)), payload.subarray(9));
        // The callback consumed it synchronously, so the credit can go straight back.
        granter.consumed(payload.length);
      },
      end: (err) => onEnd(err),
    });
    let result: AttachResult;
    try {
      result = await this.call<AttachResult>('proc.attach', { id, streamId, fromOffset, window: windowBytes }, opts);
    } catch (err) {
      this.streams.delete(streamId);
      throw err;
    }
    return {
      ...result,
      detach: async () => {
        if (!this.streams.delete(streamId)) return;
        await this.call('proc.detach', { streamId });
      },
    };
  }

  async procStdin(id: string, data?: Buffer | string, opts: CallOptions & { eof?: boolean } = {}): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : (data ?? Buffer.alloc(0));
    await this.call('proc.stdin', { id, data: bytes.toString('base64'), eof: opts.eof ?? false }, opts);
  }

  async procSignal(id: string, signal: SignalName, opts?: CallOptions): Promise<void> {
    await this.call('proc.signal', { id, signal }, opts);
  }

  async procResize(id: string, cols: number, rows: number, opts?: CallOptions): Promise<void> {
    await this.call('proc.resize', { id, cols, rows }, opts);
  }

  async procList(opts?: CallOptions): Promise<ProcInfo[]> {
    return (await this.call<{ processes: ProcInfo[] }>('proc.list', {}, opts)).processes;
  }

  async procForget(id: string, opts?: CallOptions): Promise<void> {
    await this.call('proc.forget', { id }, opts);
  }

  stat(path: string, opts?: CallOptions): Promise<FileStat> {
    return this.call('file.stat', { path }, opts);
  }

  async list(path: string, opts: CallOptions & { depth?: number } = {}): Promise<FileStat[]> {
    return (await this.call<{ entries: FileStat[] }>('file.list', { path, depth: opts.depth ?? 1 }, opts)).entries;
  }

  async mkdir(path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<{ created: boolean }> {
    return this.call('file.mkdir', { path, parents: opts.parents ?? true }, opts);
  }

  async remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.call('file.remove', { path, recursive: opts.recursive ?? false }, opts);
  }

  async rename(from: string, to: string, opts?: CallOptions): Promise<void> {
    await this.call('file.rename', { from, to }, opts);
  }

  /**
   * Opens a file for reading. Rejects with the agent's error (not_found, is_a_directory …);
   * otherwise the stream yields the bytes, and credit returns to the agent only as fast as the
   * consumer reads.
   */
  async readFile(path: string, opts: StreamOptions = {}): Promise<FileReadStream> {
    const windowBytes = opts.windowBytes ?? DEFAULT_WINDOW_BYTES;
    const streamId = this.allocId('stream');
    const granter = this.granter(streamId, windowBytes);
    const stream = new FileReadStream(granter, () => {
      if (this.streams.delete(streamId) && !this.closedError) this.write(encodeFrame(FrameType.end, streamId));
    });
    this.streams.set(streamId, { granter, data: (p) => stream.onData(p), end: (err) => stream.onEnd(err) });
    try {
      const { sizeBytes } = await this.call<{ sizeBytes: number }>('file.read', { path, streamId, window: windowBytes }, opts);
      stream.sizeBytes = sizeBytes;
      return stream;
    } catch (err) {
      this.streams.delete(streamId);
      stream.destroy();
      throw err;
    }
  }

  /**
   * Reads a whole guest file into memory, for the node's own use of a guest file (the CA bundle). The guest controls
   * its content and size, so it is read only up to maxBytes: a bigger file (by the size the agent states, or by what
   * actually arrives) is cancelled and rejects with `too_large`, having held at most maxBytes plus one window.
   */
  async readFileCapped(path: string, maxBytes: number, opts: CallOptions = {}): Promise<Buffer> {
    const stream = await this.readFile(path, { ...opts, windowBytes: Math.min(DEFAULT_WINDOW_BYTES, Math.max(64 * 1024, maxBytes)) });
    const tooLarge = () => new AgentError('too_large', `${path} is larger than the ${maxBytes} bytes the host reads of it`);
    if (stream.sizeBytes > maxBytes) {
      stream.destroy();
      throw tooLarge();
    }
    const parts: Buffer[] = [];
    let totalBytes = 0;
    for await (const chunk of stream) {
      totalBytes += (chunk as Buffer).length;
      if (totalBytes > maxBytes) {
        stream.destroy();
        throw tooLarge();
      }
      parts.push(chunk as Buffer);
    }
    return Buffer.concat(parts, totalBytes);
  }

  /** Writes a file atomically; resolves once the agent has synced and renamed it into place. */
  async writeFile(
    path: string,
    data: Uint8Array | string | Readable | AsyncIterable<Uint8Array | string>,
    opts: WriteFileOptions = {},
  ): Promise<{ sizeBytes: number }> {
    const streamId = this.allocId('stream');
    const written = new Promise<number>((resolve, reject) => this.writeWaiters.set(streamId, { resolve, reject }));
    written.catch(() => undefined); // observed below; avoids an unhandled rejection on early failure
    const params: Record<string, unknown> = { path, streamId, parents: opts.parents ?? true, append: opts.append ?? false };
    if (opts.mode !== undefined) params.mode = opts.mode;
    try {
      await this.call('file.write', params, opts);
    } catch (err) {
      this.writeWaiters.delete(streamId);
      throw err;
    }
    try {
      for await (const chunk of chunksOf(data)) {
        for (let offset = 0; offset < chunk.length; offset += MAX_DATA_BYTES) {
          await this.sendFrame(encodeFrame(FrameType.data, streamId, chunk.subarray(offset, offset + MAX_DATA_BYTES)));
        }
      }
      await this.sendFrame(encodeFrame(FrameType.end, streamId));
    } catch (err) {
      this.writeWaiters.delete(streamId);
      if (!this.closedError) {
        const error: ErrorInfo = { code: 'io', message: `host source failed: ${(err as Error).message}` };
        this.write(encodeJsonFrame(FrameType.end, streamId, { error }));
      }
      throw err;
    }
    return { sizeBytes: await written };
  }

  /**
   * Sets the environment merged into every process started afterwards (proxy addresses, secret placeholders, CA
   * bundle paths); a proc.start's own env wins. Replaces the previous defaults entirely. Agent state: it survives
   * reconnects and restores.
   */
  async envDefaults(env: Record<string, string>, opts?: CallOptions): Promise<void> {
    await this.call('env.defaults', { env }, opts);
  }

  /**
   * Starts (or keeps) the guest's relay listener. Each connection a guest program makes to it arrives as a
   * `net.open` event carrying a NetConnection. The same port again is a no-op (port 0: keep whatever port is bound);
   * another port replaces the listener, leaving connections already relayed open. Agent state: it survives
   * reconnects and restores, the connections it relayed do not.
   */
  netListen(port: number, opts: NetListenOptions = {}): Promise<{ port: number }> {
    const params: Record<string, unknown> = { port, address: opts.address ?? '127.0.0.1' };
    if (opts.windowBytes !== undefined) params.window = opts.windowBytes;
    return this.call('net.listen', params, opts);
  }

  /** Stops the relay listener and resets every connection it relayed (their NetConnections are destroyed). */
  async netClose(opts?: CallOptions): Promise<void> {
    await this.call('net.close', {}, opts);
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
    if (this.resync) {
      const { marker, carry } = this.resync;
      const hay = Buffer.concat([carry, chunk]);
      const at = hay.indexOf(marker);
      if (at < 0) {
        this.resync.carry = hay.subarray(Math.max(0, hay.length - marker.length + 1));
        return;
      }
      this.resync = undefined;
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
        if (!ev || typeof ev.event !== 'string') return;
        if (ev.event === 'file.written' || ev.event === 'file.write_failed') {
          this.settleWrite(ev as FileWrittenEvent | FileWriteFailedEvent);
        }
        if (ev.event === 'net.open') {
          this.openNet(ev as unknown as NetOpenEvent);
          return;
        }
        this.emit('event', ev);
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

  private openNet(ev: NetOpenEvent): void {
    const streamId = ev.stream;
    if (!Number.isInteger(streamId) || streamId < AGENT_STREAM_BIT || streamId > 0xffffffff || this.streams.has(streamId)) return;
    if (this.listenerCount('net.open') === 0) {
      const error: ErrorInfo = { code: 'io', message: 'the host relays no connections' };
      this.write(encodeJsonFrame(FrameType.end, streamId, { error }));
      return;
    }
    const windowBytes = ev.window > 0 ? ev.window : DEFAULT_WINDOW_BYTES;
    const recvWindow = ev.recvWindow > 0 ? ev.recvWindow : DEFAULT_NET_RECV_WINDOW_BYTES;
    let handler: StreamHandler | undefined;
    const granter = this.granter(streamId, windowBytes);
    const conn = new NetConnection({ stream: streamId, peer: String(ev.peer).slice(0, 64) }, recvWindow, {
      granter,
      send: (frame) => {
        if (!this.closedError) this.write(frame);
      },
      release: () => {
        if (this.streams.get(streamId) === handler) this.streams.delete(streamId);
      },
    });
    handler = {
      granter,
      data: (p) => conn.onData(p),
      end: (err) => conn.onEnd(err),
      window: (n) => conn.onWindow(n),
      reset: (err) => conn.onReset(err),
      bidirectional: true,
    };
    this.streams.set(streamId, handler);
    this.emit('net.open', conn, { stream: streamId, peer: conn.peer });
  }

  private settleWrite(ev: FileWrittenEvent | FileWriteFailedEvent): void {
    const waiter = this.writeWaiters.get(ev.streamId);
    if (!waiter) return;
    this.writeWaiters.delete(ev.streamId);
    if (ev.event === 'file.written') waiter.resolve(Number.isSafeInteger(ev.sizeBytes) ? ev.sizeBytes : 0);
    else waiter.reject(agentErrorOf(ev.error));
  }

  /**
   * The agent sent more than the stream's credit: everything it sends is buffered on the host only within what was
   * granted, so the stream is reset rather than delivered (END bad_request tells the agent, as it does to a host that
   * oversends), its consumer fails, and the violation is reported once.
   */
  private resetOverCredit(streamId: number, handler: StreamHandler, frameBytes: number): void {
    this.streams.delete(streamId);
    const error: ErrorInfo = { code: 'bad_request', message: 'stream exceeded the flow-control credit the host granted' };
    if (!this.closedError) this.write(encodeJsonFrame(FrameType.end, streamId, { error }));
    const creditBytes = handler.granter!.creditBytes + frameBytes;
    handler.end(new AgentError('agent_protocol', `the agent sent ${frameBytes} bytes on stream ${streamId} with ${creditBytes} bytes of credit: stream reset`));
    this.emit('violation', { kind: 'credit_exceeded', stream: streamId, creditBytes, frameBytes } satisfies ProtocolViolation);
  }

  /** Batches WINDOW grants: a grant per quarter window keeps the pipe full with few frames. */
  private granter(streamId: number, windowBytes: number): Granter {
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
      if (ungrantedBytes === 0 || this.closedError || !this.streams.has(streamId)) return;
      const payload = Buffer.allocUnsafe(4);
      payload.writeUInt32BE(ungrantedBytes);
      granter.creditBytes += ungrantedBytes;
      ungrantedBytes = 0;
      this.write(encodeFrame(FrameType.window, streamId, payload));
    };
    return granter;
  }

  /** Every frame goes out here: held back while the channel is quiesced for a snapshot, in order. */
  private write(frame: Buffer): boolean {
    if (this.held) {
      this.held.push(frame);
      return true;
    }
    return this.writable.write(frame);
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
    const id = this.allocId('call');
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

  private async sendFrame(frame: Buffer): Promise<void> {
    if (this.closedError) throw this.closedError;
    if (this.write(frame)) return;
    await new Promise<void>((resolve, reject) => {
      const onDrain = () => {
        this.off('close', onClose);
        resolve();
      };
      const onClose = (err: AgentError) => {
        this.writable.off('drain', onDrain);
        reject(err);
      };
      this.writable.once('drain', onDrain);
      this.once('close', onClose);
    });
  }

  private allocId(kind: 'call' | 'stream'): number {
    const inUse = kind === 'call' ? this.pending : this.streams;
    for (;;) {
      const id = kind === 'call' ? this.nextCallId : this.nextStreamId;
      // Stream ids with bit 31 are the agent's; call ids may use the whole range.
      const next = id >= (kind === 'call' ? 0xffffffff : AGENT_STREAM_BIT - 1) ? 1 : id + 1;
      if (kind === 'call') this.nextCallId = next;
      else this.nextStreamId = next;
      if (!inUse.has(id) && !(kind === 'stream' && this.writeWaiters.has(id))) return id;
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
    for (const w of this.writeWaiters.values()) w.reject(err);
    this.writeWaiters.clear();
    this.emit('close', err);
  }
}

interface Granter {
  /** Bytes the agent may still send on the stream. */
  creditBytes: number;
  /** DATA of this many bytes arrived; false when it went beyond the credit. */
  received(bytes: number): boolean;
  /** The consumer took these bytes: they may be granted back to the agent. */
  consumed(bytes: number): void;
}

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

interface NetLink {
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

async function* chunksOf(data: Uint8Array | string | Readable | AsyncIterable<Uint8Array | string>): AsyncGenerator<Buffer> {
  if (typeof data === 'string') {
    yield Buffer.from(data, 'utf8');
    return;
  }
  if (data instanceof Uint8Array) {
    yield Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    return;
  }
  for await (const chunk of data) {
    yield typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  }
}

/** An error the agent sent; code and message are the guest's words, so both are bounded before they travel further. */
function agentErrorOf(error: ErrorInfo): AgentError {
  const code = typeof error?.code === 'string' && /^[a-z_]{1,32}$/.test(error.code) ? error.code : 'agent_protocol';
  const message = typeof error?.message === 'string' ? error.message : 'the agent sent an error without a message';
  return new AgentError(code, message.length > MAX_AGENT_MESSAGE_CHARS ? `${message.slice(0, MAX_AGENT_MESSAGE_CHARS)}…` : message);
}

function parseJson(payload: Buffer): unknown {
  try {
    return JSON.parse(payload.toString('utf8'));
  } catch {
    return undefined;
  }
}

function hostClockNs(): bigint {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}
