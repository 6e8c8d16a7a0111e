// A command's output WebSocket: parses the offset-carrying frames, never delivers a byte twice or skips one, and reconnects from the last offset when the socket drops.
import WebSocket from 'ws';
import type { DataPlane } from './client.js';
import { AuthenticationError, ConnectionError, ProtocolError, SandglassError, errorFromResponse } from './errors.js';
import { connectionError } from './http.js';
import type { CommandInfo, StreamMessage } from './types.js';

export type Fd = 1 | 2;
export type ExitMessage = Extract<StreamMessage, { type: 'exit' }>;

/** Binary frame header: fd (u8) then the offset of the first byte in the command's combined output (u64 BE). */
const HEADER_BYTES = 9;
const MAX_RECONNECTS = 5;
const FIRST_RECONNECT_DELAY_MS = 100;
// A gateway that vanished without closing the TCP connection is noticed after at most two of these.
const HEARTBEAT_INTERVAL_MS = 30_000;

export interface OutputStreamOptions {
  /** Where to start in the command's output; undefined = the oldest byte the gateway still holds. */
  fromOffset?: number;
  /**
   * `http`: each (re)connect is one kept-alive GET of the output route (no WebSocket handshake; the gateway serves
   * recent output from its own copy); no input goes over it. `ws` (default): the WebSocket, which also carries input.
   */
  transport?: 'ws' | 'http';
  /** Reconnects after a drop go over `http` whatever the first connection used (a stream that carries no input). */
  reconnectOverHttp?: boolean;
  onData: (fd: Fd, bytes: Buffer) => void;
  onExit: (exit: ExitMessage) => void;
  onFail: (err: SandglassError) => void;
}

export class OutputStream {
  /** Offset of the next byte expected; undefined until the server says where the stream starts. */
  private offset?: number;
  private ws?: WebSocket;
  /** The body being read by the http transport. */
  private reader?: ReadableStreamDefaultReader<Uint8Array>;
  private finished = false;
  private connectedOnce = false;
  private failedAttempts = 0;
  private refreshedToken = false;
  /** The last attempt could not reach the gateway, or it did not have the sandbox. */
  private mayHaveMoved = false;
  private followedMove = false;
  private pendingInput: Buffer[] = [];
  private startWaiters: { resolve: (c: CommandInfo) => void; reject: (e: SandglassError) => void }[] = [];
  private command?: CommandInfo;
  private droppedBytesTotal = 0;

  constructor(
    private readonly dataPlane: DataPlane,
    readonly commandId: string,
    private readonly opts: OutputStreamOptions,
  ) {
    this.offset = opts.fromOffset;
  }

  /** Bytes of output received so far, counted from the start of the command's output. */
  get outputOffset(): number {
    return this.offset ?? this.opts.fromOffset ?? 0;
  }

  /** Output bytes the gateway no longer held when this stream asked for them (its buffer is bounded). */
  get droppedBytes(): number {
    return this.droppedBytesTotal;
  }

  /** Opens the socket; resolves with the command once the server has started the stream. */
  start(): Promise<CommandInfo> {
    const started = new Promise<CommandInfo>((resolve, reject) => this.startWaiters.push({ resolve, reject }));
    void this.connect();
    return started;
  }

  /** Sends bytes to the command's stdin (or PTY) over the socket, queued while it (re)connects. */
  sendInput(data: Buffer): void {
    if (this.finished) return;
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(data);
    else this.pendingInput.push(data);
  }

  /** Stops receiving; the command keeps running. */
  close(): Promise<void> {
    const ws = this.ws;
    this.finished = true;
    void this.reader?.cancel().catch(() => undefined);
    if (!ws || ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      ws.once('close', () => resolve());
      if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
      else ws.close();
    });
  }

  private async connect(): Promise<void> {
    const reconnect = this.connectedOnce;
    this.connectedOnce = true;
    if (this.opts.transport === 'http' || (reconnect && this.opts.reconnectOverHttp)) return this.connectHttp();
    let target;
    try {
      target = await this.dataPlane.webSocketTarget(
        `/commands/${encodeURIComponent(this.commandId)}/stream`,
        { fromOffset: this.offset },
        // A fresh grant after a refused token, and after a gateway that could not be reached or did not have the
        // sandbox: it may have moved to another node, and the control plane names that one.
        { force: (this.refreshedToken && this.failedAttempts === 0) || this.mayHaveMoved },
      );
    } catch (err) {
      this.fail(err instanceof SandglassError ? err : new ProtocolError('protocol_error', String(err), { cause: err }));
      return;
    }
    if (this.finished) return;
    const ws = new WebSocket(target.url, { headers: target.headers });
    this.ws = ws;
    let closeError: SandglassError | undefined;
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // errorFromResponse reports non-JSON text as it is.
        }
        closeError = errorFromResponse(res.statusCode ?? 0, body, header(res.headers['x-request-id']));
        ws.terminate();
      });
    });
    ws.on('error', (err) => {
      closeError ??= connectionError(new URL(target.url), err);
    });
    ws.on('open', () => {
      for (const b of this.pendingInput.splice(0)) ws.send(b);
      let answered = true;
      ws.on('pong', () => {
        answered = true;
      });
      const heartbeat = setInterval(() => {
        if (!answered) {
          closeError ??= new SandglassError('disconnected', `the gateway stopped answering on the output stream of ${this.commandId}`, { retryable: true });
          ws.terminate();
          return;
        }
        answered = false;
        ws.ping();
      }, HEARTBEAT_INTERVAL_MS).unref();
      ws.once('close', () => clearInterval(heartbeat));
    });
    ws.on('message', (data, isBinary) => {
      if (this.finished) return;
      try {
        if (isBinary) return this.onFrame(toBuffer(data));
        const msg = JSON.parse(toBuffer(data).toString('utf8')) as StreamMessage | ({ type: 'error' } & Record<string, unknown>);
        // The gateway reports a failure of the stream itself (agent gone, sandbox ended) this way, then closes.
        if (msg.type === 'error') closeError = errorFromResponse(0, msg);
        else this.onText(msg);
      } catch (err) {
        this.fail(err instanceof SandglassError ? err : new ProtocolError('protocol_error', `bad stream message: ${String(err)}`, { cause: err }));
      }
    });
    ws.on('close', (code) => {
      if (this.ws === ws) this.ws = undefined;
      if (this.finished) return;
      const err =
        closeError ??
        new SandglassError('disconnected', `output stream of ${this.commandId} closed (code ${code}) before the command exited`, { retryable: true });
      this.retryOrFail(err);
    });
  }

  /** One GET of the output route, followed to the exit; a body that ends before the exit is a drop like a closed socket. */
  private async connectHttp(): Promise<void> {
    let closeError: SandglassError | undefined;
    try {
      const res = await this.dataPlane.request('GET', `/commands/${encodeURIComponent(this.commandId)}/output`, {
        query: { fromOffset: this.offset, follow: true },
        stream: true,
      });
      if (this.finished) {
        res.body.destroy();
        return;
      }
      const reader = res.webStream().getReader();
      this.reader = reader;
      const records = new RecordReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done || this.finished) break;
        for (const frame of records.push(value)) {
          if (this.finished) break;
          if (frame[0] !== 0) {
            this.onFrame(frame);
            continue;
          }
          const msg = JSON.parse(frame.subarray(1).toString('utf8')) as StreamMessage | ({ type: 'error' } & Record<string, unknown>);
          if (msg.type === 'error') closeError = errorFromResponse(0, msg);
          else this.onText(msg);
        }
      }
    } catch (err) {
      if (this.finished) return;
      if (err instanceof ProtocolError) return this.fail(err);
      closeError ??=
        err instanceof SandglassError
          ? err
          : new SandglassError('disconnected', `output of ${this.commandId}: ${String(err)}`, { retryable: true, cause: err });
    } finally {
      this.reader = undefined;
    }
    if (this.finished) return;
    this.retryOrFail(closeError ?? new SandglassError('disconnected', `output of ${this.commandId} ended before the command exited`, { retryable: true }));
  }

  private retryOrFail(err: SandglassError): void {
    this.mayHaveMoved = err instanceof ConnectionError || err.code === 'sandbox_not_found';
    // A gateway without the sandbox gets one more try on a fresh grant, which names its node now.
    if (err.code === 'sandbox_not_found' && !this.followedMove) {
      this.followedMove = true;
      void this.connect();
      return;
    }
    // An expired token gets one fresh token; anything else retryable (gateway restarting, socket dropped) gets a few tries with backoff.
    if (err instanceof AuthenticationError && !this.refreshedToken) {
      this.refreshedToken = true;
      void this.connect();
      return;
    }
    if (!err.retryable || this.failedAttempts >= MAX_RECONNECTS) {
      this.fail(err);
      return;
    }
    const delayMs = FIRST_RECONNECT_DELAY_MS * 2 ** this.failedAttempts++;
    setTimeout(() => {
      if (!this.finished) void this.connect();
    }, delayMs).unref();
  }

  private onText(msg: StreamMessage): void {
    if (msg.type === 'start') {
      // The gateway's buffer is bounded: a start past our offset is how it says older bytes are gone.
      if (this.offset !== undefined && msg.startOffset > this.offset) this.droppedBytesTotal += msg.startOffset - this.offset;
      if (this.offset === undefined || msg.startOffset > this.offset) this.offset = msg.startOffset;
      this.failedAttempts = 0;
      this.refreshedToken = false;
      this.followedMove = false;
      this.command = msg.command;
      for (const w of this.startWaiters.splice(0)) w.resolve(msg.command);
    } else if (msg.type === 'exit') {
      if (this.outputOffset < msg.endOffset) {
        throw new ProtocolError('protocol_error', `stream of ${this.commandId} ended at ${msg.endOffset} but only ${this.outputOffset} bytes arrived`);
      }
      this.finished = true;
      // A command that exits before anyone saw 'start' still counts as started; an exit with no start at all is
      // a broken stream, and waiters must hear so rather than wait forever.
      const command = this.command;
      for (const w of this.startWaiters.splice(0)) {
        if (command) w.resolve(command);
        else w.reject(new ProtocolError('protocol_error', `stream of ${this.commandId} sent exit before start`));
      }
      this.opts.onExit(msg);
      this.ws?.close();
    }
  }

  private onFrame(buf: Buffer): void {
    if (buf.length < HEADER_BYTES) throw new ProtocolError('protocol_error', `output frame of ${buf.length} bytes is shorter than its header`);
    const fd = buf[0];
    if (fd !== 1 && fd !== 2) throw new ProtocolError('protocol_error', `output frame names fd ${fd}`);
    const frameOffset = Number(buf.readBigUInt64BE(1));
    let bytes = buf.subarray(HEADER_BYTES);
    const expected = this.offset ?? frameOffset;
    if (frameOffset > expected) {
      throw new ProtocolError('protocol_error', `output of ${this.commandId} jumped from ${expected} to ${frameOffset}: bytes were lost`);
    }
    // Bytes before `expected` were delivered already (a replay after reconnecting): skip them.
    const skip = expected - frameOffset;
    if (skip >= bytes.length) return;
    bytes = bytes.subarray(skip);
    this.offset = expected + bytes.length;
    this.opts.onData(fd, bytes);
  }

  private fail(err: SandglassError): void {
    if (this.finished) return;
    this.finished = true;
    for (const w of this.startWaiters.splice(0)) w.reject(err);
    this.opts.onFail(err);
    this.ws?.terminate();
  }
}

/** Splits the output route's body into its frames (`length:u32 BE | frame`), across reads. */
export class RecordReader {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Uint8Array): Buffer[] {
    const buf = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const out: Buffer[] = [];
    let at = 0;
    while (buf.length - at >= 4) {
      const len = buf.readUInt32BE(at);
      if (len === 0) throw new ProtocolError('protocol_error', 'output record of length 0');
      if (buf.length - at - 4 < len) break;
      out.push(buf.subarray(at + 4, at + 4 + len));
      at += 4 + len;
    }
    this.pending = at === buf.length ? Buffer.alloc(0) : Buffer.from(buf.subarray(at));
    return out;
  }

  /** Bytes of an unfinished record held back (a body must not end inside one). */
  get pendingBytes(): number {
    return this.pending.length;
  }
}

function toBuffer(data: WebSocket.RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
