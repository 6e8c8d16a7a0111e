// Processes in a sandbox: run (foreground or background), reattach from an output offset, stdin, signals.
import { constants as osConstants } from 'node:os';
import { StringDecoder } from 'node:string_decoder';
import type { DataPlane } from './client.js';
import {
  CommandExitError,
  CommandTimeoutError,
  ConflictError,
  NotFoundError,
  ProtocolError,
  SandglassError,
  errorFromResponse,
  type CommandResult,
} from './errors.js';
import { OutputStream, RecordReader, type ExitMessage, type Fd } from './stream.js';
import type { GatewayReply } from './replies.js';
import type { CommandInfo, SignalName, StartCommandRequest, StreamMessage } from './types.js';

export type { CommandResult };

export interface OutputCallbacks {
  /** Output as text, decoded as UTF-8 across frame boundaries. */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Output as the raw bytes, for binary-safe use. */
  onStdoutBytes?: (data: Uint8Array) => void;
  onStderrBytes?: (data: Uint8Array) => void;
  /** Keep the decoded output on the handle and the result (default true); false for output too large to hold. */
  retainOutput?: boolean;
}

export interface RunOptions extends OutputCallbacks {
  cwd?: string;
  envs?: Record<string, string>;
  user?: string;
  /** The gateway kills the command after this long. Default 60000; 0 = no limit. */
  timeoutMs?: number;
  /** Keep stdin open for sendStdin (default: stdin is /dev/null). */
  stdin?: boolean;
  /** Return a CommandHandle at once instead of waiting for the command to exit. */
  background?: boolean;
}

export interface ConnectOptions extends OutputCallbacks {
  /** Resume the output at this byte offset (e.g. a previous handle's outputOffset). Default: the oldest byte the gateway still holds. */
  fromOffset?: number;
}

/** What `commands.readOutput` returns. */
export interface OutputRead {
  /** Offset of the first byte returned (greater than fromOffset when older output was dropped). */
  startOffset: number;
  /** Offset after the last byte returned: the fromOffset of the next read. */
  outputOffset: number;
  /** The bytes in order, each with its stream (1 stdout, 2 stderr) and offset. */
  pieces: Array<{ fd: Fd; offset: number; bytes: Uint8Array }>;
  droppedBytes: number;
  /** Present once the command has exited and every byte up to endOffset was returned. */
  exit?: Omit<ExitMessage, 'type'>;
}

export const DEFAULT_COMMAND_TIMEOUT_MS = 60_000;

/** Exit code as a shell reports it: 128 + the signal number when a signal ended the process. */
export function exitCodeOf(exit: Pick<ExitMessage, 'exitCode' | 'signal'>): number {
  if (typeof exit.exitCode === 'number') return exit.exitCode;
  const signo = exit.signal ? osConstants.signals[exit.signal as keyof typeof osConstants.signals] : undefined;
  return signo === undefined ? -1 : 128 + signo;
}

/** A running (or finished) command whose output this handle receives. */
export class CommandHandle {
  readonly id: string;
  private info?: CommandInfo;
  private readonly stream: OutputStream;
  private readonly decoders = { 1: new StringDecoder('utf8'), 2: new StringDecoder('utf8') };
  private out = { 1: '', 2: '' };
  private readonly done: Promise<CommandResult>;
  private settle!: { resolve: (r: CommandResult) => void; reject: (e: unknown) => void };
  private stdinChain: Promise<unknown> = Promise.resolve();

  /** @internal Use `commands.run`/`exec`/`connect`. */
  constructor(
    private readonly commands: Commands,
    dataPlane: DataPlane,
    commandId: string,
    private readonly opts: OutputCallbacks & { fromOffset?: number; timeoutMs?: number; transport?: 'ws' | 'http' },
  ) {
    this.id = commandId;
    this.done = new Promise<CommandResult>((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    // wait() may never be called on a background handle; its rejection must not crash the process.
    this.done.catch(() => undefined);
    this.stream = new OutputStream(dataPlane, commandId, {
      fromOffset: opts.fromOffset,
      transport: opts.transport,
      // Its input goes by POST, so a dropped stream is picked up again with one request, not a WebSocket handshake.
      reconnectOverHttp: true,
      onData: (fd, bytes) => this.onData(fd, bytes),
      onExit: (exit) => this.onExit(exit),
      onFail: (err) => this.settle.reject(err),
    });
  }

  /** @internal Opens the output stream; resolves once the gateway has started it. */
  async start(): Promise<this> {
    this.info = await this.stream.start();
    return this;
  }

  get pid(): number {
    return this.info?.pid ?? -1;
  }
  /** Decoded stdout received by this handle so far. */
  get stdout(): string {
    return this.out[1];
  }
  get stderr(): string {
    return this.out[2];
  }
  /** Bytes of output (stdout and stderr together) received so far: pass it as fromOffset to resume without gaps or repeats. */
  get outputOffset(): number {
    return this.stream.outputOffset;
  }

  /** Output bytes the gateway had already dropped from its bounded buffer when this handle asked for them. */
  get droppedBytes(): number {
    return this.stream.droppedBytes;
  }

  private onData(fd: Fd, bytes: Buffer): void {
    (fd === 1 ? this.opts.onStdoutBytes : this.opts.onStderrBytes)?.(bytes);
    const onText = fd === 1 ? this.opts.onStdout : this.opts.onStderr;
    if (!onText && this.opts.retainOutput === false) return;
    this.text(fd, this.decoders[fd].write(bytes));
  }

  private text(fd: Fd, s: string): void {
    if (s === '') return;
    if (this.opts.retainOutput !== false) this.out[fd] += s;
    (fd === 1 ? this.opts.onStdout : this.opts.onStderr)?.(s);
  }

  private onExit(exit: ExitMessage): void {
    this.text(1, this.decoders[1].end());
    this.text(2, this.decoders[2].end());
    const exitCode = exitCodeOf(exit);
    const result: CommandResult = { exitCode, stdout: this.out[1], stderr: this.out[2], timedOut: exit.timedOut };
    if (exit.signal) result.signal = exit.signal;
    if (this.stream.droppedBytes > 0) result.droppedBytes = this.stream.droppedBytes;
    if (exit.timedOut) {
      result.error = 'command ran past its timeout and was killed';
      this.settle.reject(new CommandTimeoutError(result, this.opts.timeoutMs));
    } else if (exitCode !== 0) {
      result.error = exit.signal ? `command was killed by ${exit.signal}` : `command exited with code ${exitCode}`;
      this.settle.reject(new CommandExitError(result));
    } else {
      this.settle.resolve(result);
    }
  }

  /** Resolves when the command exits 0; rejects with CommandExitError (result attached) otherwise, like E2B. */
  wait(): Promise<CommandResult> {
    return this.done;
  }

  /** Sends a signal (default SIGKILL); false when the command has already exited or is unknown. */
  kill(signal: SignalName = 'SIGKILL'): Promise<boolean> {
    return this.commands.kill(this.id, signal);
  }

  /** Writes to the command's stdin (it must have been started with stdin: true); writes arrive in call order. */
  sendStdin(data: string | Uint8Array): Promise<void> {
    return this.queueStdin(() => this.commands.sendStdin(this.id, data));
  }

  /** Closes the command's stdin (EOF) after every pending write. */
  closeStdin(): Promise<void> {
    return this.queueStdin(() => this.commands.closeStdin(this.id));
  }

  private queueStdin(op: () => Promise<void>): Promise<void> {
    const next = this.stdinChain.then(op);
    this.stdinChain = next.catch(() => undefined);
    return next;
  }

  /** Stops receiving output; the command keeps running and can be reattached with commands.connect(id, { fromOffset }). */
  async disconnect(): Promise<void> {
    await this.stream.close();
    this.settle.reject(
      new SandglassError(
        'disconnected',
        `disconnected from command ${this.id}; reattach with commands.connect('${this.id}', { fromOffset: ${this.outputOffset} })`,
      ),
    );
  }
}

/** `sandbox.commands`. */
export class Commands {
  /** @internal */
  constructor(private readonly dataPlane: DataPlane) {}

  /** Runs `cmd` with /bin/bash -c; with `background: true` returns at once with a handle. */
  run(cmd: string, opts: RunOptions & { background: true }): Promise<CommandHandle>;
  run(cmd: string, opts?: RunOptions & { background?: false | undefined }): Promise<CommandResult>;
  run(cmd: string, opts?: RunOptions): Promise<CommandHandle | CommandResult>;
  run(cmd: string, opts: RunOptions = {}): Promise<CommandHandle | CommandResult> {
    return this.start({ cmd }, opts);
  }

  /** Runs an argv directly, without a shell. */
  exec(argv: string[], opts: RunOptions & { background: true }): Promise<CommandHandle>;
  exec(argv: string[], opts?: RunOptions & { background?: false | undefined }): Promise<CommandResult>;
  exec(argv: string[], opts?: RunOptions): Promise<CommandHandle | CommandResult>;
  exec(argv: string[], opts: RunOptions = {}): Promise<CommandHandle | CommandResult> {
    return this.start({ argv }, opts);
  }

  private async start(what: { cmd: string } | { argv: string[] }, opts: RunOptions): Promise<CommandHandle | CommandResult> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    const body: StartCommandRequest = { ...what, cwd: opts.cwd, envs: opts.envs, user: opts.user, stdin: opts.stdin ?? false, timeoutMs };
    const info = await this.dataPlane.json<GatewayReply<'startCommand'>>('POST', '/commands', { json: body });
    // From offset 0: output produced between the POST and the socket opening is replayed, not lost.
    const handle = await new CommandHandle(this, this.dataPlane, info.id, { ...opts, timeoutMs, fromOffset: 0 }).start();
    return opts.background ? handle : handle.wait();
  }

  /**
   * Reattaches to a command, e.g. after a disconnect or from another process. Each (re)connect is one kept-alive
   * HTTP request that the gateway answers from its copy of recent output; input goes through sendStdin.
   */
  connect(commandId: string, opts: ConnectOptions = {}): Promise<CommandHandle> {
    return new CommandHandle(this, this.dataPlane, commandId, { ...opts, transport: 'http' }).start();
  }

  /**
   * The command's output after `fromOffset` as the gateway has it now, and its exit once it has exited: one request.
   * Poll with the returned `outputOffset` to follow a running command without holding a connection open.
   */
  async readOutput(commandId: string, opts: { fromOffset?: number } = {}): Promise<OutputRead> {
    const res = await this.dataPlane.request('GET', `/commands/${encodeURIComponent(commandId)}/output`, { query: { fromOffset: opts.fromOffset } });
    const records = new RecordReader();
    const frames = records.push(await res.bytes());
    if (records.pendingBytes > 0) throw new ProtocolError('protocol_error', `the output of ${commandId} ended inside a record`);
    const read: OutputRead = { startOffset: -1, outputOffset: -1, pieces: [], droppedBytes: 0 };
    for (const frame of frames) {
      if (frame[0] === 0) {
        const msg = JSON.parse(frame.subarray(1).toString('utf8')) as StreamMessage | { type: 'error' };
        if (msg.type === 'start') {
          read.startOffset = msg.startOffset;
          read.outputOffset = msg.startOffset;
          read.droppedBytes = Math.max(0, msg.startOffset - (opts.fromOffset ?? msg.startOffset));
        } else if (msg.type === 'exit') read.exit = { exitCode: msg.exitCode, signal: msg.signal, timedOut: msg.timedOut, endOffset: msg.endOffset };
        else throw errorFromResponse(0, msg);
        continue;
      }
      const offset = Number(frame.readBigUInt64BE(1));
      if (offset !== read.outputOffset) throw new ProtocolError('protocol_error', `output of ${commandId} jumped from ${read.outputOffset} to ${offset}`);
      const bytes = frame.subarray(9);
      read.pieces.push({ fd: frame[0] as Fd, offset, bytes });
      read.outputOffset += bytes.length;
    }
    if (read.startOffset < 0) throw new ProtocolError('protocol_error', `the output of ${commandId} came without its start`);
    return read;
  }

  async list(): Promise<CommandInfo[]> {
    return (await this.dataPlane.json<GatewayReply<'listCommands'>>('GET', '/commands')).commands;
  }

  async getInfo(commandId: string): Promise<CommandInfo> {
    return this.dataPlane.json<GatewayReply<'getCommand'>>('GET', `/commands/${encodeURIComponent(commandId)}`);
  }

  async sendStdin(commandId: string, data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    await this.dataPlane.request('POST', `/commands/${encodeURIComponent(commandId)}/stdin`, { body: bytes });
  }

  async closeStdin(commandId: string): Promise<void> {
    await this.dataPlane.request('POST', `/commands/${encodeURIComponent(commandId)}/stdin`, { query: { eof: true }, body: new Uint8Array(0) });
  }

  /** Sends a signal (default SIGKILL); false when the command has already exited or is unknown. */
  async kill(commandId: string, signal: SignalName = 'SIGKILL'): Promise<boolean> {
    try {
      await this.dataPlane.request('POST', `/commands/${encodeURIComponent(commandId)}/signal`, { json: { signal } });
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && err.code === 'command_not_found') return false;
      if (err instanceof ConflictError && err.code === 'command_exited') return false;
      throw err;
    }
  }
}
