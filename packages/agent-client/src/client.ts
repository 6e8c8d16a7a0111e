// Host side of the agent protocol, typed: one method per agent call (hello, sync, proc.*, file.*, net.*) over the frame multiplexer.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import { AgentError, agentErrorOf } from './errors.js';
import { encodeFrame, FrameType, MAX_DATA_BYTES } from './frame.js';
import { AGENT_STREAM_BIT, FrameMux, type AgentTransport, type CallOptions, type ProtocolViolation, type StreamHandler } from './mux.js';
import { FileReadStream, NetConnection } from './streams.js';
import type {
  AgentEvent,
  AgentParams,
  AttachResult,
  FileStat,
  FileWriteFailedEvent,
  FileWrittenEvent,
  FsEvent,
  FsEventOp,
  HelloResult,
  GuestStats,
  ListeningPort,
  NetOpenEvent,
  NetOpenInfo,
  ProcInfo,
  ProcStartParams,
  SignalName,
  SyncResult,
} from './types.js';

/** A host→agent stream's params as its caller gives them: the client picks the stream id. */
type StreamParams<M extends 'file.write' | 'file.writeTar'> = Omit<AgentParams[M], 'streamId'>;

export interface AgentClientOptions {
  /** Default for calls without their own timeoutMs; 0 waits forever. */
  callTimeoutMs?: number;
}

export interface StreamOptions extends CallOptions {
  /** Flow-control window: bytes the agent may send before the host grants more. */
  windowBytes?: number;
}

export interface WriteFileOptions extends CallOptions {
  mode?: number;
  parents?: boolean;
  append?: boolean;
  /** Guest user (name or uid) the file and the directories the write created are chowned to. */
  owner?: string | number;
  /** `user.` extended attributes (names without the prefix) set on the file before it is renamed into place. */
  xattrs?: Record<string, string>;
}

export interface WriteTarOptions extends CallOptions {
  /** Guest user (name or uid) every entry the extraction creates is chowned to; the archive's owners are ignored. */
  owner?: string | number;
}

export interface WatchOptions extends CallOptions {
  /** Also watch subdirectories, existing and new. */
  recursive?: boolean;
  /** The watch ended without unwatch: the connection to the agent closed. Not called after unwatch. */
  onEnd?: (err: AgentError) => void;
}

interface WatchEntry {
  onEvent(ev: FsEvent): void;
  onEnd?(err: AgentError): void;
}

export interface AttachOptions extends StreamOptions {
  /**
   * Each piece's credit goes back to the agent only when the consumer calls its `release` (onData's fourth argument),
   * not as soon as onData returns. For a consumer that hands output on to a buffer of its own (a WebSocket): a reader
   * that stops then holds the agent after one window instead of growing that buffer without bound.
   */
  deferCredit?: boolean;
}

export interface AttachHandle extends AttachResult {
  /** Stops the stream; onEnd is not called afterwards. */
  detach(): Promise<void>;
}

export type OutputFd = 1 | 2;

/** What the agent answers an input (stdin, signal, resize): the output offset when it arrived; null from an agent that predates it. */
export interface InputResult {
  outputOffset: number | null;
}

function inputResult(reply: unknown): InputResult {
  const off = (reply as { outputOffset?: unknown } | null)?.outputOffset;
  return { outputOffset: Number.isSafeInteger(off) && (off as number) >= 0 ? (off as number) : null };
}

export interface NetListenOptions extends CallOptions {
  /** IP address to listen on in the guest; default 127.0.0.1. */
  address?: string;
  /** Flow-control window of each relayed connection's guest→host direction. */
  windowBytes?: number;
}

export interface NetDialOptions extends CallOptions {
  /** Guest loopback address; default 127.0.0.1, then ::1 when that is refused. */
  address?: '127.0.0.1' | '::1';
  /** Flow-control window of the connection's guest→host direction. */
  windowBytes?: number;
}

const DEFAULT_CALL_TIMEOUT_MS = 30_000;
const FS_EVENT_OPS: ReadonlySet<FsEventOp> = new Set(['create', 'write', 'remove', 'rename', 'chmod']);
/** PATH_MAX: no name relative to a watched directory is longer. */
const MAX_FS_EVENT_NAME_CHARS = 4096;
const DEFAULT_WINDOW_BYTES = 4 * 1024 * 1024;
/** Host→agent credit of a relayed connection when net.open does not say. */
const DEFAULT_NET_RECV_WINDOW_BYTES = 256 * 1024;

interface WriteWaiter {
  resolve(written: FileWrittenEvent): void;
  reject(err: Error): void;
}

export type NetOpenListener = (conn: NetConnection, info: NetOpenInfo) => void;

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
  private readonly mux: FrameMux;
  /** file.write streams awaiting the agent's file.written / file.write_failed. */
  private readonly writeWaiters = new Map<number, WriteWaiter>();
  /** fs.watch subscriptions by watchId. */
  private readonly watches = new Map<string, WatchEntry>();

  constructor(transport: AgentTransport, opts: AgentClientOptions = {}) {
    super();
    this.mux = new FrameMux(
      transport,
      {
        event: (ev) => this.onEvent(ev),
        violation: (v) => this.emit('violation', v),
        closed: (err) => {
          for (const w of this.writeWaiters.values()) w.reject(err);
          this.writeWaiters.clear();
          const watches = [...this.watches.values()];
          this.watches.clear();
          for (const w of watches) w.onEnd?.(err);
          this.emit('close', err);
        },
      },
      opts.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS,
    );
  }

  /** True once the transport is gone; every later call rejects with agent_disconnected. */
  get closed(): boolean {
    return this.mux.closed;
  }

  call<T = unknown>(method: string, params: object = {}, opts: CallOptions = {}): Promise<T> {
    return this.mux.call<T>(method, params, opts);
  }

  /**
   * Opens the protocol on this connection. Every hello carries a fresh nonce: the agent writes a raw marker with it
   * ahead of its reply, and everything received before the marker is discarded. After a restore that is how the host
   * skips the tail of frames the guest wrote before the snapshot, which would otherwise break the framing.
   */
  hello(opts?: CallOptions): Promise<HelloResult> {
    const nonce = randomBytes(16);
    this.mux.resync(nonce);
    return this.call('hello', { version: 1, resync: nonce.toString('hex') } satisfies AgentParams['hello'], opts);
  }

  async ping(opts?: CallOptions): Promise<void> {
    await this.call('ping', {} satisfies AgentParams['ping'], opts);
  }

  /** Sends fresh host randomness and the host clock; call after every restore. */
  sync(opts: CallOptions & { timeUnixNs?: bigint; entropy?: Buffer } = {}): Promise<SyncResult> {
    const entropy = opts.entropy ?? randomBytes(64);
    const timeUnixNs = opts.timeUnixNs ?? hostClockNs();
    return this.call('sync', { timeUnixNs: timeUnixNs.toString(), entropy: entropy.toString('base64') } satisfies AgentParams['sync'], opts);
  }

  /**
   * Brings the host→agent direction to a frame boundary for a live snapshot (see FrameMux.quiesce). Call the
   * returned function to release the held frames (always, also when the snapshot fails).
   */
  quiesce(opts?: CallOptions): Promise<() => void> {
    return this.mux.quiesce(opts);
  }

  procStart(params: ProcStartParams, opts?: CallOptions): Promise<{ pid: number }> {
    return this.call('proc.start', { stdin: false, ...params } satisfies AgentParams['proc.start'], opts);
  }

  /**
   * Follows a process's output from fromOffset. onData gets each piece with its output offset;
   * onEnd runs once the process exited and everything was delivered, or with an error. With
   * `deferCredit`, the piece's credit returns when its `release` is called (once; later calls do
   * nothing); otherwise release does nothing and the credit returns as soon as onData returns.
   */
  async procAttach(
    id: string,
    fromOffset: number,
    onData: (fd: OutputFd, offset: number, bytes: Buffer, release: () => void) => void,
    onEnd: (err?: AgentError) => void,
    opts: AttachOptions = {},
  ): Promise<AttachHandle> {
    const windowBytes = opts.windowBytes ?? DEFAULT_WINDOW_BYTES;
    const streamId = this.mux.allocStream();
    const granter = this.mux.granter(streamId, windowBytes);
    this.mux.register(streamId, {
      granter,
      data: (payload) => {
        if (payload.length < 9) return;
        const fd = payload[0] as OutputFd;
        const offset = Number(payload.readBigUInt64BE(1));
        if (!opts.deferCredit) {
          onData(fd, offset, payload.subarray(9), () => {});
          // The callback consumed it synchronously, so the credit can go straight back.
          granter.consumed(payload.length);
          return;
        }
        let released = false;
        onData(fd, offset, payload.subarray(9), () => {
          if (released) return;
          released = true;
          granter.consumed(payload.length);
        });
      },
      end: (err) => onEnd(err),
    });
    let result: AttachResult;
    try {
      result = await this.call<AttachResult>('proc.attach', { id, streamId, fromOffset, window: windowBytes } satisfies AgentParams['proc.attach'], opts);
    } catch (err) {
      this.mux.unregister(streamId);
      throw err;
    }
    return {
      ...result,
      detach: async () => {
        if (!this.mux.unregister(streamId)) return;
        await this.call('proc.detach', { streamId } satisfies AgentParams['proc.detach']);
      },
    };
  }

  /** Resolves once the bytes are written, with the process's output offset when they arrived. */
  async procStdin(id: string, data?: Buffer | string, opts: CallOptions & { eof?: boolean } = {}): Promise<InputResult> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : (data ?? Buffer.alloc(0));
    return inputResult(await this.call('proc.stdin', { id, data: bytes.toString('base64'), eof: opts.eof ?? false } satisfies AgentParams['proc.stdin'], opts));
  }

  async procSignal(id: string, signal: SignalName, opts?: CallOptions): Promise<InputResult> {
    return inputResult(await this.call('proc.signal', { id, signal } satisfies AgentParams['proc.signal'], opts));
  }

  async procResize(id: string, cols: number, rows: number, opts?: CallOptions): Promise<InputResult> {
    return inputResult(await this.call('proc.resize', { id, cols, rows } satisfies AgentParams['proc.resize'], opts));
  }

  async procList(opts?: CallOptions): Promise<ProcInfo[]> {
    return (await this.call<{ processes: ProcInfo[] }>('proc.list', {} satisfies AgentParams['proc.list'], opts)).processes;
  }

  async procForget(id: string, opts?: CallOptions): Promise<void> {
    await this.call('proc.forget', { id } satisfies AgentParams['proc.forget'], opts);
  }

  stat(path: string, opts?: CallOptions): Promise<FileStat> {
    return this.call('file.stat', { path } satisfies AgentParams['file.stat'], opts);
  }

  async list(path: string, opts: CallOptions & { depth?: number } = {}): Promise<FileStat[]> {
    return (await this.call<{ entries: FileStat[] }>('file.list', { path, depth: opts.depth ?? 1 } satisfies AgentParams['file.list'], opts)).entries;
  }

  /** With `owner`, every directory the call created is chowned to that guest user (name or uid) and its group. */
  async mkdir(path: string, opts: CallOptions & { parents?: boolean; owner?: string | number } = {}): Promise<{ created: boolean }> {
    const params: AgentParams['file.mkdir'] = { path, parents: opts.parents ?? true };
    if (opts.owner !== undefined) params.owner = String(opts.owner);
    return this.call('file.mkdir', params, opts);
  }

  async remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.call('file.remove', { path, recursive: opts.recursive ?? false } satisfies AgentParams['file.remove'], opts);
  }

  async rename(from: string, to: string, opts?: CallOptions): Promise<void> {
    await this.call('file.rename', { from, to } satisfies AgentParams['file.rename'], opts);
  }

  /**
   * Opens a file for reading. Rejects with the agent's error (not_found, is_a_directory …);
   * otherwise the stream yields the bytes, and credit returns to the agent only as fast as the
   * consumer reads.
   */
  async readFile(path: string, opts: StreamOptions = {}): Promise<FileReadStream> {
    return this.openRead('file.read', path, opts);
  }

  private async openRead(method: 'file.read' | 'file.readTar', path: string, opts: StreamOptions): Promise<FileReadStream> {
    const windowBytes = opts.windowBytes ?? DEFAULT_WINDOW_BYTES;
    const streamId = this.mux.allocStream();
    const granter = this.mux.granter(streamId, windowBytes);
    const stream = new FileReadStream(granter, () => {
      if (this.mux.unregister(streamId)) this.mux.endStream(streamId);
    });
    this.mux.register(streamId, { granter, data: (p) => stream.onData(p), end: (err) => stream.onEnd(err) });
    try {
      const { sizeBytes } = await this.call<{ sizeBytes?: number }>(method, { path, streamId, window: windowBytes } satisfies AgentParams[typeof method], opts);
      stream.sizeBytes = sizeBytes ?? 0;
      return stream;
    } catch (err) {
      this.mux.unregister(streamId);
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
    const params: StreamParams<'file.write'> = { path, parents: opts.parents ?? true, append: opts.append ?? false };
    if (opts.mode !== undefined) params.mode = opts.mode;
    if (opts.owner !== undefined) params.owner = String(opts.owner);
    if (opts.xattrs !== undefined) params.xattrs = opts.xattrs;
    const { sizeBytes } = await this.sendStream('file.write', params, data, opts);
    return { sizeBytes };
  }

  /**
   * Extracts a tar stream into the guest directory `path` (created with its parents), never outside it; resolves with
   * the entries extracted and their content bytes once all of it is written. A failure rejects as soon as the agent
   * reports it (the rest of the stream is not sent); entries extracted before it stay.
   */
  async writeTar(
    path: string,
    data: Uint8Array | Readable | AsyncIterable<Uint8Array>,
    opts: WriteTarOptions = {},
  ): Promise<{ entries: number; sizeBytes: number }> {
    const params: StreamParams<'file.writeTar'> = { path };
    if (opts.owner !== undefined) params.owner = String(opts.owner);
    const ev = await this.sendStream('file.writeTar', params, data, opts);
    return { entries: Number.isSafeInteger(ev.entries) ? ev.entries! : 0, sizeBytes: ev.sizeBytes };
  }

  /** A guest directory packed as a tar stream (symlinks as symlinks, never followed), with credit like readFile. */
  async readTar(path: string, opts: StreamOptions = {}): Promise<FileReadStream> {
    return this.openRead('file.readTar', path, opts);
  }

  /**
   * Opens a host→agent stream with `method`, sends `data` on it, and waits for the agent's file.written. When the reply
   * grants a `window` (file.writeTar), bytes go out only within the credit the agent grants (WINDOW frames); otherwise
   * the transport's backpressure paces them.
   */
  private async sendStream<M extends 'file.write' | 'file.writeTar'>(
    method: M,
    params: StreamParams<M>,
    data: Uint8Array | string | Readable | AsyncIterable<Uint8Array | string>,
    opts: CallOptions,
  ): Promise<FileWrittenEvent> {
    const streamId = this.mux.openOutbound();
    let failed = false;
    let creditBytes = 0;
    let wake: (() => void) | undefined;
    const poke = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    const written = new Promise<FileWrittenEvent>((resolve, reject) =>
      this.writeWaiters.set(streamId, {
        resolve,
        reject: (err) => {
          failed = true;
          poke();
          reject(err);
        },
      }),
    );
    written.catch(() => undefined); // observed below; avoids an unhandled rejection on early failure
    const credited: StreamHandler = {
      data: () => undefined,
      end: () => poke(),
      window: (bytes) => {
        creditBytes += bytes;
        poke();
      },
    };
    const forget = () => {
      this.writeWaiters.delete(streamId);
      this.mux.releaseOutbound(streamId);
    };
    let windowed = false;
    try {
      // Registered before the call: the agent may grant more as soon as it replied.
      this.mux.register(streamId, credited);
      const reply = await this.call<{ window?: number }>(method, { ...params, streamId }, opts);
      if (typeof reply.window === 'number' && reply.window > 0) {
        windowed = true;
        creditBytes += reply.window;
      } else this.mux.unregister(streamId, credited);
    } catch (err) {
      this.mux.unregister(streamId, credited);
      forget();
      throw err;
    }
    try {
      send: for await (const chunk of chunksOf(data)) {
        for (let offset = 0; offset < chunk.length; ) {
          // The agent gave up (a bad archive, a full disk): the rest would only be dropped.
          if (failed) break send;
          let n = Math.min(MAX_DATA_BYTES, chunk.length - offset);
          if (windowed) {
            while (creditBytes <= 0 && !failed) {
              if (this.mux.closed) throw new AgentError('agent_disconnected', `connection to the agent was lost during ${method}`);
              await new Promise<void>((resolve) => {
                wake = resolve;
              });
            }
            if (failed) break send;
            n = Math.min(n, creditBytes);
            creditBytes -= n;
          }
          await this.mux.sendWithBackpressure(encodeFrame(FrameType.data, streamId, chunk.subarray(offset, offset + n)));
          offset += n;
        }
      }
      if (!failed) await this.mux.sendWithBackpressure(encodeFrame(FrameType.end, streamId));
    } catch (err) {
      forget();
      this.mux.endStream(streamId, { code: 'io', message: `host source failed: ${(err as Error).message}` });
      throw err;
    } finally {
      this.mux.unregister(streamId, credited);
    }
    return written;
  }

  /**
   * Sets the environment merged into every process started afterwards (proxy addresses, secret placeholders, CA
   * bundle paths); a proc.start's own env wins. Replaces the previous defaults entirely. Agent state: it survives
   * reconnects and restores.
   */
  async envDefaults(env: Record<string, string>, opts?: CallOptions): Promise<void> {
    await this.call('env.defaults', { env } satisfies AgentParams['env.defaults'], opts);
  }

  /**
   * Grows the root filesystem online to fill a root disk the host has made at least `bytes` long (after QMP
   * `block_resize`); answers the filesystem's new size. Waits for the guest kernel to notice the resize.
   */
  async diskGrow(bytes: number, opts?: CallOptions): Promise<{ bytes: number }> {
    return this.call('disk.grow', { bytes } satisfies AgentParams['disk.grow'], opts);
  }

  /**
   * Starts (or keeps) the guest's relay listener. Each connection a guest program makes to it arrives as a
   * `net.open` event carrying a NetConnection. The same port again is a no-op (port 0: keep whatever port is bound);
   * another port replaces the listener, leaving connections already relayed open. Agent state: it survives
   * reconnects and restores, the connections it relayed do not.
   */
  netListen(port: number, opts: NetListenOptions = {}): Promise<{ port: number }> {
    const params: AgentParams['net.listen'] = { port, address: opts.address ?? '127.0.0.1' };
    if (opts.windowBytes !== undefined) params.window = opts.windowBytes;
    return this.call('net.listen', params, opts);
  }

  /**
   * Connects to a server on guest loopback (inbound port access) and relays it as a NetConnection, with credit both
   * ways as for relayed connections. Rejects with the agent's code: `not_found` when nothing listens there,
   * `bad_request` for a port outside 1–65535, `permission_denied` for the egress relay's own port.
   */
  async netDial(port: number, opts: NetDialOptions = {}): Promise<NetConnection> {
    const windowBytes = opts.windowBytes ?? DEFAULT_WINDOW_BYTES;
    const streamId = this.mux.allocStream();
    const granter = this.mux.granter(streamId, windowBytes);
    // No credit until the reply says how much: the agent's DATA may follow its REPLY before this function resumes,
    // so the handler is registered first.
    const conn = new NetConnection({ stream: streamId, peer: `127.0.0.1:${port}` }, 0, {
      granter,
      send: (frame) => this.mux.send(frame),
      release: () => this.mux.unregister(streamId, handler),
    });
    // Until the caller holds the connection, an END or a reset is kept, not raised: nobody listens for its error yet,
    // and when the call fails its rejection is the whole answer.
    let opened = false;
    let early: (() => void) | undefined;
    const handler: StreamHandler = {
      granter,
      data: (p) => conn.onData(p),
      end: (err) => (opened ? conn.onEnd(err) : (early ??= () => conn.onEnd(err))),
      window: (n) => conn.onWindow(n),
      reset: (err) => (opened ? conn.onReset(err) : (early ??= () => conn.onReset(err))),
      bidirectional: true,
    };
    this.mux.register(streamId, handler);
    const params: AgentParams['net.dial'] = { streamId, port, window: windowBytes };
    if (opts.address !== undefined) params.address = opts.address;
    let reply: { recvWindow?: number };
    try {
      reply = await this.call<{ recvWindow?: number }>('net.dial', params, opts);
    } catch (err) {
      // Nothing was opened: forgetting the stream is all there is to undo.
      this.mux.unregister(streamId, handler);
      throw err;
    }
    conn.onWindow(typeof reply.recvWindow === 'number' && reply.recvWindow > 0 ? reply.recvWindow : DEFAULT_NET_RECV_WINDOW_BYTES);
    opened = true;
    // Raised once the caller had a chance to listen: the stream ended between the reply and now.
    if (early) setImmediate(early);
    return conn;
  }

  /** The guest's listening TCP sockets (not the egress relay's listener), sorted by port. */
  async netPorts(opts?: CallOptions): Promise<ListeningPort[]> {
    const { ports } = await this.call<{ ports?: unknown }>('net.ports', {} satisfies AgentParams['net.ports'], opts);
    // The guest writes this list: only well-formed entries reach the caller.
    if (!Array.isArray(ports)) return [];
    return ports
      .filter((p): p is ListeningPort => Number.isInteger(p?.port) && p.port >= 1 && p.port <= 65535 && typeof p.address === 'string' && p.address.length <= 64)
      .map((p) => ({ port: p.port, address: p.address }));
  }

  /** The guest's CPU ticks, memory and root filesystem use; the guest writes them, so only sane integers come back. */
  async sysStats(opts?: CallOptions): Promise<GuestStats> {
    const raw = await this.call<Record<string, unknown>>('sys.stats', {}, opts);
    const count = (v: unknown): number | undefined => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : undefined);
    const out: GuestStats = { cpuCount: Math.max(1, Math.min(count(raw.cpuCount) ?? 1, 1024)) };
    for (const k of ['cpuTotalTicks', 'cpuIdleTicks', 'memTotalBytes', 'memUsedBytes', 'memCacheBytes', 'diskTotalBytes', 'diskUsedBytes'] as const) {
      const v = count(raw[k]);
      if (v !== undefined) out[k] = v;
    }
    return out;
  }

  /** Stops the relay listener and resets every connection it relayed (their NetConnections are destroyed). */
  async netClose(opts?: CallOptions): Promise<void> {
    await this.call('net.close', {} satisfies AgentParams['net.close'], opts);
  }

  /**
   * Watches a guest directory: onEvent gets each change (name relative to `path`) from now until unwatch, or until
   * the connection closes (then `onEnd`). `watchId` is the caller's and must not be in use on this connection.
   */
  async watch(watchId: string, path: string, opts: WatchOptions, onEvent: (ev: FsEvent) => void): Promise<void> {
    if (this.watches.has(watchId)) throw new AgentError('bad_request', `watchId ${watchId} is already in use`);
    // Registered first: the agent may send events before its REPLY.
    const entry: WatchEntry = { onEvent, onEnd: opts.onEnd };
    this.watches.set(watchId, entry);
    try {
      await this.call('fs.watch', { watchId, path, recursive: opts.recursive ?? false } satisfies AgentParams['fs.watch'], opts);
    } catch (err) {
      if (this.watches.get(watchId) === entry) this.watches.delete(watchId);
      throw err;
    }
  }

  /** Ends a watch: no event of it is delivered once this is called. Unknown ids are ignored. */
  async unwatch(watchId: string, opts?: CallOptions): Promise<void> {
    if (!this.watches.delete(watchId)) return;
    await this.call('fs.unwatch', { watchId } satisfies AgentParams['fs.unwatch'], opts);
  }

  /** Closes the transport; pending calls reject with agent_disconnected. */
  close(): Promise<void> {
    return this.mux.close();
  }

  private onEvent(ev: AgentEvent): void {
    if (ev.event === 'file.written' || ev.event === 'file.write_failed') {
      this.settleWrite(ev as FileWrittenEvent | FileWriteFailedEvent);
    }
    if (ev.event === 'net.open') {
      this.openNet(ev as unknown as NetOpenEvent);
      return;
    }
    if (ev.event === 'fs.event') {
      this.dispatchFsEvent(ev);
      return;
    }
    this.emit('event', ev);
  }

  /** The guest writes these: only a known watch, a known op and a path-sized string name reach the consumer. */
  private dispatchFsEvent(ev: AgentEvent): void {
    const raw = ev as Record<string, unknown>;
    const watch = typeof raw.watchId === 'string' ? this.watches.get(raw.watchId) : undefined;
    if (!watch) return;
    const watchId = raw.watchId as string;
    if (raw.op === 'overflow') {
      watch.onEvent({ event: 'fs.event', watchId, op: 'overflow' });
      return;
    }
    if (!FS_EVENT_OPS.has(raw.op as FsEventOp) || typeof raw.name !== 'string' || raw.name.length > MAX_FS_EVENT_NAME_CHARS) return;
    watch.onEvent({ event: 'fs.event', watchId, op: raw.op as FsEventOp, name: raw.name });
  }

  private openNet(ev: NetOpenEvent): void {
    const streamId = ev.stream;
    if (!Number.isInteger(streamId) || streamId < AGENT_STREAM_BIT || streamId > 0xffffffff || this.mux.hasStream(streamId)) return;
    if (this.listenerCount('net.open') === 0) {
      this.mux.endStream(streamId, { code: 'io', message: 'the host relays no connections' });
      return;
    }
    const windowBytes = ev.window > 0 ? ev.window : DEFAULT_WINDOW_BYTES;
    const recvWindow = ev.recvWindow > 0 ? ev.recvWindow : DEFAULT_NET_RECV_WINDOW_BYTES;
    const granter = this.mux.granter(streamId, windowBytes);
    const conn = new NetConnection({ stream: streamId, peer: String(ev.peer).slice(0, 64) }, recvWindow, {
      granter,
      send: (frame) => this.mux.send(frame),
      release: () => this.mux.unregister(streamId, handler),
    });
    const handler: StreamHandler = {
      granter,
      data: (p) => conn.onData(p),
      end: (err) => conn.onEnd(err),
      window: (n) => conn.onWindow(n),
      reset: (err) => conn.onReset(err),
      bidirectional: true,
    };
    this.mux.register(streamId, handler);
    this.emit('net.open', conn, { stream: streamId, peer: conn.peer });
  }

  private settleWrite(ev: FileWrittenEvent | FileWriteFailedEvent): void {
    const waiter = this.writeWaiters.get(ev.streamId);
    if (!waiter) return;
    this.writeWaiters.delete(ev.streamId);
    this.mux.releaseOutbound(ev.streamId);
    if (ev.event === 'file.written') waiter.resolve({ ...ev, sizeBytes: Number.isSafeInteger(ev.sizeBytes) ? ev.sizeBytes : 0 });
    else waiter.reject(agentErrorOf(ev.error));
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

function hostClockNs(): bigint {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}
