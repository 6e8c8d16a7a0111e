// Test support: a deliberately misbehaving agent that speaks the real framing of spec/agent-protocol.md over a unix socket.
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from './client.js';
import { encodeFrame, encodeJsonFrame, FrameDecoder, FrameType, RESYNC_MAGIC, type Frame } from './frame.js';

export interface HostileCall {
  id: number;
  method: string;
  params: Record<string, unknown>;
}

/**
 * The agent end of a real AgentClient's connection. It answers `hello` as the agent does (resync marker, then the
 * reply); every other CALL goes to `onCall`, which decides what to send back, within the protocol or not. Every frame
 * the host sent is kept in `received`.
 */
export class HostileAgent {
  readonly received: Frame[] = [];
  onCall: (call: HostileCall) => void = (call) => this.reply(call.id, {});
  private readonly decoder = new FrameDecoder();

  private constructor(
    readonly socket: net.Socket,
    readonly client: AgentClient,
    private readonly cleanup: () => void,
  ) {
    socket.on('data', (chunk: Buffer) => {
      for (const frame of this.decoder.push(chunk)) this.onFrame(frame);
    });
    socket.on('error', () => {});
  }

  /** A connected pair: the hostile agent and a real AgentClient, after hello. */
  static async connect(opts: { callTimeoutMs?: number } = {}): Promise<HostileAgent> {
    const dir = mkdtempSync(join(tmpdir(), 'sandglass-hostile-'));
    const path = join(dir, 'agent.sock');
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
    const hostSocket = net.createConnection(path);
    const client = new AgentClient(hostSocket, { callTimeoutMs: opts.callTimeoutMs ?? 10_000 });
    const agent = new HostileAgent(await accepted, client, () => {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    });
    await client.hello();
    return agent;
  }

  /** Writes raw bytes, framed or not. Resolves once the socket took them (the kernel buffer may apply backpressure). */
  send(bytes: Buffer): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.socket.destroyed) return reject(new Error('hostile agent: socket closed'));
      this.socket.write(bytes, (err) => (err ? reject(err) : resolve()));
    });
  }

  reply(id: number, result: unknown): Promise<void> {
    return this.send(encodeJsonFrame(FrameType.reply, id, { result }));
  }

  event(ev: Record<string, unknown>, channel = 0): Promise<void> {
    return this.send(encodeJsonFrame(FrameType.event, channel, ev));
  }

  data(stream: number, payload: Buffer): Promise<void> {
    return this.send(encodeFrame(FrameType.data, stream, payload));
  }

  /** Frames the host sent on a stream, of one type. */
  framesOn(stream: number, type: number): Frame[] {
    return this.received.filter((f) => f.channel === stream && f.type === type);
  }

  /** Resolves once a frame matching `match` has arrived from the host. */
  async waitFor(match: (f: Frame) => boolean, timeoutMs = 10_000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.received.find(match);
      if (hit) return hit;
      if (Date.now() > deadline) throw new Error('hostile agent: the host never sent the expected frame');
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  async close(): Promise<void> {
    await this.client.close();
    this.socket.destroy();
    this.cleanup();
  }

  private onFrame(frame: Frame): void {
    this.received.push(frame);
    if (frame.type !== FrameType.call) return;
    const { method, params } = JSON.parse(frame.payload.toString('utf8')) as { method: string; params: Record<string, unknown> };
    if (method === 'hello') {
      const nonce = Buffer.from(String(params.resync), 'hex');
      void this.send(Buffer.concat([RESYNC_MAGIC, nonce]));
      void this.reply(frame.channel, { version: 1, agentVersion: 'hostile', bootId: 'hostile', uptimeMs: 0 });
      return;
    }
    this.onCall({ id: frame.channel, method, params });
  }
}
