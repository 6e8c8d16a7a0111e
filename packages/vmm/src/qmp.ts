// A minimal QMP client: one JSON command in flight at a time, asynchronous events to listeners.
import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';
import { SandglassError } from '@sandglass/core';

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

export class QmpError extends Error {
  constructor(
    readonly command: string,
    readonly qmpClass: string,
    desc: string,
  ) {
    super(`QMP ${command} failed: ${qmpClass}: ${desc}`);
    this.name = 'QmpError';
  }
}

export class QmpClient extends EventEmitter {
  private buf = '';
  private queue: Array<{ cmd: string } & Pending> = [];
  private closed = false;

  private constructor(private readonly sock: Socket) {
    super();
    sock.setEncoding('utf8');
    sock.on('data', (chunk: string) => this.onData(chunk));
    sock.on('close', () => this.onClose());
    sock.on('error', () => this.onClose());
  }

  /** Connects to a QMP unix socket (retrying while QEMU creates it) and negotiates capabilities. */
  static async connect(path: string, opts: { timeoutMs?: number } = {}): Promise<QmpClient> {
    const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
    for (;;) {
      try {
        const sock = await new Promise<Socket>((resolve, reject) => {
          const s = connect(path);
          s.once('connect', () => resolve(s));
          s.once('error', reject);
        });
        const client = new QmpClient(sock);
        // QEMU serves one monitor client at a time: a second one is accepted by the kernel but never greeted.
        const greeted = await Promise.race([
          client.greeting().then(() => true),
          new Promise<boolean>((r) => setTimeout(() => r(false), Math.max(0, deadline - Date.now()))),
        ]);
        if (!greeted) {
          client.close();
          throw new SandglassError('vm_failed', `QMP socket ${path} accepted but sent no greeting (another client connected?)`);
        }
        await client.execute('qmp_capabilities');
        return client;
      } catch (err) {
        if (Date.now() > deadline) {
          throw new SandglassError('vm_failed', `QMP socket ${path} did not answer`, { cause: err });
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  }

  private greetingWaiter?: Pending;

  private greeting(): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.greetingWaiter = { resolve, reject };
    });
  }

  private onData(chunk: string): void {
    this.buf += chunk;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      const msg = JSON.parse(line) as Record<string, unknown>;
      if ('QMP' in msg) {
        this.greetingWaiter?.resolve(msg);
        this.greetingWaiter = undefined;
      } else if ('event' in msg) {
        this.emit('event', msg as unknown as QmpEvent);
      } else if ('return' in msg || 'error' in msg) {
        const p = this.queue.shift();
        if (!p) continue;
        if ('error' in msg) {
          const e = msg.error as { class: string; desc: string };
          p.reject(new QmpError(p.cmd, e.class, e.desc));
        } else p.resolve(msg.return);
      }
    }
  }

  private onClose(): void {
    if (this.closed) return;
    this.closed = true;
    const err = new SandglassError('vm_failed', 'QMP connection closed');
    this.greetingWaiter?.reject(err);
    for (const p of this.queue.splice(0)) p.reject(err);
    this.emit('close');
  }

  get isClosed(): boolean {
    return this.closed;
  }

  execute<T = unknown>(cmd: string, args?: Record<string, unknown>): Promise<T> {
    if (this.closed) return Promise.reject(new SandglassError('vm_failed', 'QMP connection closed'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ cmd, resolve: resolve as (v: unknown) => void, reject });
      this.sock.write(JSON.stringify(args ? { execute: cmd, arguments: args } : { execute: cmd }) + '\n');
    });
  }

  /** Resolves with the first event named `name` whose data passes `match`. */
  waitForEvent(name: string, match: (data: Record<string, unknown>) => boolean = () => true, timeoutMs = 30_000): Promise<QmpEvent> {
    return new Promise((resolve, reject) => {
      const onEvent = (ev: QmpEvent) => {
        if (ev.event === name && match(ev.data ?? {})) {
          cleanup();
          resolve(ev);
        }
      };
      const onClose = () => {
        cleanup();
        reject(new SandglassError('vm_failed', `QMP closed while waiting for ${name}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new SandglassError('timeout', `no ${name} event within ${timeoutMs} ms`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.off('event', onEvent);
        this.off('close', onClose);
      };
      this.on('event', onEvent);
      this.on('close', onClose);
    });
  }

  close(): void {
    this.sock.destroy();
  }
}
