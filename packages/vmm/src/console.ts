// The guest's serial console on the host: QEMU connects to a socket we listen on, and the bytes land in a fixed-size ring.
import { chmodSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';

/** What the host keeps of a guest's console: enough for a failure report's tail, never more whatever the guest prints. */
export const CONSOLE_RING_BYTES = 256 * 1024;

/** The last `capBytes` bytes written to it, in a buffer allocated once. */
export class ConsoleRing {
  private readonly buf: Buffer;
  private writeAt = 0;
  /** Everything the guest ever printed (kept: bytes beyond the ring are counted, not stored). */
  totalBytes = 0;

  constructor(readonly capBytes: number = CONSOLE_RING_BYTES) {
    this.buf = Buffer.alloc(capBytes);
  }

  push(chunk: Buffer): void {
    const cap = this.capBytes;
    this.totalBytes += chunk.length;
    if (chunk.length >= cap) {
      chunk.copy(this.buf, 0, chunk.length - cap);
      this.writeAt = 0;
      return;
    }
    const first = Math.min(chunk.length, cap - this.writeAt);
    chunk.copy(this.buf, this.writeAt, 0, first);
    if (first < chunk.length) chunk.copy(this.buf, 0, first);
    this.writeAt = (this.writeAt + chunk.length) % cap;
  }

  /** The newest `maxBytes` bytes (fewer when less was printed). */
  tail(maxBytes: number): Buffer {
    const cap = this.capBytes;
    const n = Math.max(0, Math.min(maxBytes, this.totalBytes, cap));
    const start = (this.writeAt - n + cap) % cap;
    if (start + n <= cap) return Buffer.from(this.buf.subarray(start, start + n));
    return Buffer.concat([this.buf.subarray(start), this.buf.subarray(0, start + n - cap)]);
  }
}

/**
 * Listens where QEMU's console chardev (`socket,server=off`) connects at start, so not a byte of the boot is missed.
 * QEMU writes only as fast as we read (a guest printing forever is slowed, not stored): the ring holds the tail.
 */
export class ConsoleLink {
  readonly ring = new ConsoleRing();
  private server?: Server;
  private conn?: Socket;
  /** Settles when QEMU's connection has closed, every byte it wrote read into the ring. */
  private ended?: Promise<void>;

  static async listen(path: string, allowConnect: (path: string) => void): Promise<ConsoleLink> {
    const link = new ConsoleLink();
    rmSync(path, { force: true });
    const server = createServer((conn) => {
      // One QEMU, one connection: later ones (there should be none) are refused.
      if (link.conn) return void conn.destroy();
      link.conn = conn;
      link.ended = new Promise((resolve) => conn.once('close', () => resolve()));
      conn.on('data', (d: Buffer) => link.ring.push(d));
      conn.on('error', () => {});
      server.close();
    });
    link.server = server;
    await new Promise<void>((resolve, reject) => server.listen(path, resolve).once('error', reject));
    allowConnect(path);
    chmodSync(path, 0o600);
    return link;
  }

  /**
   * Waits (at most `timeoutMs`) for QEMU's side to close once it has exited, so the ring holds its last bytes: a panic's
   * final lines are still in the socket when QEMU reports the guest down.
   */
  async drained(timeoutMs: number): Promise<void> {
    if (!this.ended) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.ended, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }

  close(): void {
    this.server?.close();
    this.conn?.destroy();
  }
}
