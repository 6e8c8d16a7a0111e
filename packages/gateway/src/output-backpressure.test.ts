import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { deriveNodeKeys, signAccessToken, systemClock } from '@sandglass/core';
import { FrameType } from '@sandglass/agent-client';
import { HostileAgent } from '@sandglass/agent-client/hostile-agent';
import type { Gateway } from './gateway.js';
import { OUTPUT_LOW_WATER_BYTES, OUTPUT_WINDOW_BYTES } from './output-pacing.js';
import { createDataPlaneServer } from './server.js';
import { sandboxOnDouble } from './sandbox-double.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const SECRET = Buffer.alloc(32, 7);
const SBX = 'sbx_backpressureaaaaaaaa';
/** Output the "guest" prints per DATA frame (plus the 9-byte fd/offset prefix). */
const PIECE_BYTES = 64 * KiB;
/** The guest prints this much between looks at the gateway's buffer. */
const ROUND_BYTES = 4 * MiB;
/** Stop a run that never stalls here: far beyond any bound the gateway may buffer. */
const GIVE_UP_BYTES = 128 * MiB;

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/**
 * The agent's side of one proc.attach stream, printing `y\n` as fast as the host's credit lets it (a well-behaved
 * agent: it never exceeds the window, so everything it sends is something the host granted).
 */
class Printer {
  sentBytes = 0;
  private stopped = false;
  private wake: (() => void) | undefined;

  constructor(
    private readonly agent: HostileAgent,
    readonly stream: number,
    private readonly windowBytes: number,
  ) {
    agent.socket.on('data', () => this.wake?.());
  }

  /** Bytes the host granted: the window it opened with plus every WINDOW it sent since. */
  get grantedBytes(): number {
    return this.windowBytes + this.agent.framesOn(this.stream, FrameType.window).reduce((n, f) => n + f.payload.readUInt32BE(0), 0);
  }

  get outOfCredit(): boolean {
    return this.grantedBytes - this.sentBytes < 9 + PIECE_BYTES;
  }

  /** Prints until untilBytes are sent, it is out of credit, or stopped. */
  async print(untilBytes: number): Promise<void> {
    const piece = Buffer.alloc(9 + PIECE_BYTES, 'y\n');
    while (!this.stopped && !this.outOfCredit && this.sentBytes < untilBytes) {
      piece[0] = 1;
      piece.writeBigUInt64BE(BigInt(this.sentBytes), 1);
      await this.agent.data(this.stream, piece);
      this.sentBytes += piece.length;
    }
  }

  /** Resolves once the host granted enough for another piece (or it was stopped). */
  async credit(): Promise<void> {
    while (!this.stopped && this.outOfCredit) await new Promise<void>((r) => (this.wake = r));
    this.wake = undefined;
  }

  stop(): void {
    this.stopped = true;
    this.wake?.();
  }
}

async function setup() {
  const agent = await HostileAgent.connect();
  cleanups.push(() => agent.close());
  let printer: Printer | undefined;
  const attached = new Promise<Printer>((resolve) => {
    agent.onCall = (call) => {
      if (call.method === 'proc.start') return void agent.reply(call.id, { pid: 42 });
      if (call.method === 'proc.attach') {
        printer = new Printer(agent, call.params.streamId as number, call.params.window as number);
        void agent.reply(call.id, { startOffset: 0 }).then(() => resolve(printer!));
        return;
      }
      if (call.method === 'proc.detach') printer?.stop();
      void agent.reply(call.id, {});
    };
  });
  cleanups.push(() => printer?.stop());

  const sandbox = await sandboxOnDouble(agent, { id: SBX, events: { append: async () => {} } });
  cleanups.push(() => sandbox.end('killed'));
  const rec = await sandbox.startCommand({ argv: ['yes'] });

  // The real data-plane server, in front of that one sandbox.
  const gw = {
    opts: { nodeSecret: SECRET, clock: systemClock, events: { append: async () => {} } },
    revokedKeys: { has: () => false },
    get: (id: string) => {
      if (id !== SBX) throw new Error(`unexpected sandbox ${id}`);
      return sandbox;
    },
  } as unknown as Gateway;
  const app: FastifyInstance = await createDataPlaneServer(gw);
  await app.listen({ port: 0, host: '127.0.0.1' });
  cleanups.push(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  const token = signAccessToken({ sbx: SBX, ten: 'ten_a', exp: Date.now() + 600_000 }, deriveNodeKeys(SECRET).accessToken);
  const url = `ws://127.0.0.1:${port}/v1/sandboxes/${SBX}/commands/${rec.id}/stream?access_token=${token}`;
  return { agent, attached, app, url };
}

/** The gateway's end of the one WebSocket connection it holds. */
function serverSocket(app: FastifyInstance): WebSocket {
  const clients = [...(app as unknown as { websocketServer: { clients: Set<WebSocket> } }).websocketServer.clients];
  expect(clients).toHaveLength(1);
  return clients[0]!;
}

describe('command output to a WebSocket client that never reads', () => {
  it('stays within the stream window on the gateway while the guest keeps printing, and flows again once the client reads', async () => {
    const { agent, attached, app, url } = await setup();
    const client = new WebSocket(url);
    cleanups.push(() => client.terminate());
    let receivedBytes = 0;
    client.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) receivedBytes += data.length - 9;
    });
    await new Promise((resolve, reject) => client.once('open', resolve).once('error', reject));
    // Stop reading the TCP socket: what the gateway sends piles up in the kernel's buffers, then in the gateway's.
    client.pause();
    const printer = await attached;

    // What the gateway may hold for this client: the credit it gave (the stream's window) on top of the low-water
    // mark, below which it gives credit back, plus one piece of WebSocket framing slack.
    const boundBytes = OUTPUT_WINDOW_BYTES + OUTPUT_LOW_WATER_BYTES + 9 + PIECE_BYTES;
    let maxBufferedBytes = 0;
    for (;;) {
      // The guest prints on, a round at a time, for as long as the gateway gives credit.
      await printer.print(printer.sentBytes + ROUND_BYTES);
      // A ping's reply comes after every DATA the printer sent, so the host has handled them all; a second ping's
      // CALL comes after every WINDOW the host wrote meanwhile.
      await agent.client.ping();
      await agent.client.ping();
      maxBufferedBytes = Math.max(maxBufferedBytes, serverSocket(app).bufferedAmount);
      if (maxBufferedBytes > boundBytes || printer.sentBytes >= GIVE_UP_BYTES) break;
      // Out of credit with everything handled: the gateway holds the guest's output back.
      if (printer.outOfCredit) break;
    }
    expect(maxBufferedBytes).toBeLessThanOrEqual(boundBytes);
    expect(printer.sentBytes).toBeLessThan(GIVE_UP_BYTES);
    // Held back only once the gateway's own buffer had filled, not before.
    expect(maxBufferedBytes).toBeGreaterThan(OUTPUT_LOW_WATER_BYTES);

    // The client reads again: the held credit goes back and the output flows on.
    const targetBytes = printer.sentBytes + 4 * OUTPUT_WINDOW_BYTES;
    client.resume();
    while (printer.sentBytes < targetBytes) {
      await printer.credit();
      await printer.print(targetBytes);
    }
    await agent.client.ping();
    expect(receivedBytes).toBeGreaterThan(0);
  });
});
