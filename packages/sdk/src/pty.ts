// Interactive terminals in a sandbox: a command on a PTY whose input goes over the output WebSocket for low latency.
import type { DataPlane } from './client.js';
import { exitCodeOf } from './commands.js';
import { SandglassError } from './errors.js';
import { OutputStream } from './stream.js';
import type { GatewayReply } from './replies.js';
import type { CommandInfo, StartCommandRequest } from './types.js';

export interface PtySize {
  cols: number;
  rows: number;
}

export interface PtyCreateOptions extends PtySize {
  /** Terminal output, raw bytes (escape sequences included). */
  onData: (data: Uint8Array) => void;
  cwd?: string;
  /** Added to the environment; TERM defaults to xterm-256color. */
  envs?: Record<string, string>;
  user?: string;
  /** Run this through /bin/bash -c instead of a login bash. */
  cmd?: string;
  /** The gateway kills the terminal after this long. Default 0 = no limit. */
  timeoutMs?: number;
}

export interface PtyConnectOptions {
  onData: (data: Uint8Array) => void;
  /** Resume at this byte offset; default: the oldest byte the gateway still holds (redraws recent screen contents). */
  fromOffset?: number;
}

export interface PtyExit {
  /** 128 + signal number when a signal ended it. */
  exitCode: number;
  signal?: string;
}

export class PtyHandle {
  readonly id: string;
  private info?: CommandInfo;
  private readonly stream: OutputStream;
  private readonly done: Promise<PtyExit>;
  private settle!: { resolve: (e: PtyExit) => void; reject: (e: unknown) => void };

  /** @internal Use `pty.create`/`connect`. */
  constructor(
    private readonly pty: Pty,
    dataPlane: DataPlane,
    commandId: string,
    opts: PtyConnectOptions,
  ) {
    this.id = commandId;
    this.done = new Promise<PtyExit>((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    this.done.catch(() => undefined);
    this.stream = new OutputStream(dataPlane, commandId, {
      fromOffset: opts.fromOffset,
      onData: (_fd, bytes) => opts.onData(bytes),
      onExit: (exit) => this.settle.resolve({ exitCode: exitCodeOf(exit), ...(exit.signal ? { signal: exit.signal } : {}) }),
      onFail: (err) => this.settle.reject(err),
    });
  }

  /** @internal */
  async start(): Promise<this> {
    this.info = await this.stream.start();
    return this;
  }

  get pid(): number {
    return this.info?.pid ?? -1;
  }
  get outputOffset(): number {
    return this.stream.outputOffset;
  }

  /** Keystrokes; sent over the open socket (queued while it reconnects). */
  sendInput(data: string | Uint8Array): void {
    this.stream.sendInput(typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }

  resize(size: PtySize): Promise<void> {
    return this.pty.resize(this.id, size);
  }

  /** SIGKILLs the terminal's process; false when it has already exited. */
  kill(): Promise<boolean> {
    return this.pty.kill(this.id);
  }

  /** Resolves with the exit status, whatever it is: a shell's last status is not a failure of the terminal. */
  wait(): Promise<PtyExit> {
    return this.done;
  }

  /** Stops receiving; the terminal keeps running and can be reattached with pty.connect(id, { fromOffset }). */
  async disconnect(): Promise<void> {
    await this.stream.close();
    this.settle.reject(
      new SandglassError(
        'disconnected',
        `disconnected from terminal ${this.id}; reattach with pty.connect('${this.id}', { fromOffset: ${this.outputOffset} })`,
      ),
    );
  }
}

/** `sandbox.pty`. */
export class Pty {
  /** @internal */
  constructor(
    private readonly dataPlane: DataPlane,
    private readonly killCommand: (id: string, signal: 'SIGKILL') => Promise<boolean>,
  ) {}

  async create(opts: PtyCreateOptions): Promise<PtyHandle> {
    const body: StartCommandRequest = {
      ...(opts.cmd === undefined ? { argv: ['/bin/bash', '-l'] } : { cmd: opts.cmd }),
      cwd: opts.cwd,
      envs: { TERM: 'xterm-256color', ...opts.envs },
      user: opts.user,
      stdin: true,
      pty: { cols: opts.cols, rows: opts.rows },
      timeoutMs: opts.timeoutMs ?? 0,
    };
    const info = await this.dataPlane.json<GatewayReply<'startCommand'>>('POST', '/commands', { json: body });
    return new PtyHandle(this, this.dataPlane, info.id, { onData: opts.onData, fromOffset: 0 }).start();
  }

  connect(id: string, opts: PtyConnectOptions): Promise<PtyHandle> {
    return new PtyHandle(this, this.dataPlane, id, opts).start();
  }

  async resize(id: string, size: PtySize): Promise<void> {
    await this.dataPlane.request('POST', `/commands/${encodeURIComponent(id)}/resize`, { json: { cols: size.cols, rows: size.rows } });
  }

  kill(id: string): Promise<boolean> {
    return this.killCommand(id, 'SIGKILL');
  }
}
