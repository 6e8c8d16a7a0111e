// The host client against a misbehaving agent speaking the real framing: credit overruns, huge frames, oversized replies.
import { afterEach, describe, expect, it } from 'vitest';
import { AgentError, MAX_AGENT_MESSAGE_CHARS, type NetConnection, type ProtocolViolation } from './index.js';
import { encodeJsonFrame, FrameType } from './frame.js';
import { HostileAgent } from './hostile-agent.js';

const MiB = 1024 * 1024;
const KiB = 1024;

let agent: HostileAgent | undefined;
afterEach(async () => {
  await agent?.close();
  agent = undefined;
});

function endError(agent: HostileAgent, stream: number): { code: string; message: string } | undefined {
  const end = agent.framesOn(stream, FrameType.end).find((f) => f.payload.length > 0);
  return end ? (JSON.parse(end.payload.toString('utf8')) as { error: { code: string; message: string } }).error : undefined;
}

/** Sends `totalBytes` of DATA in 64 KiB frames, stopping early once the host reset the stream. */
async function flood(agent: HostileAgent, stream: number, totalBytes: number, prefix = Buffer.alloc(0)): Promise<number> {
  const chunk = Buffer.concat([prefix, Buffer.alloc(64 * KiB - prefix.length, 0x61)]);
  let sent = 0;
  while (sent < totalBytes && agent.framesOn(stream, FrameType.end).length === 0) {
    await agent.data(stream, chunk);
    sent += chunk.length;
  }
  return sent;
}

describe('a hostile agent against the real AgentClient', () => {
  it('resets a relayed connection that exceeds its credit; the host buffers no more than it granted', async () => {
    agent = await HostileAgent.connect();
    const violations: ProtocolViolation[] = [];
    agent.client.on('violation', (v) => violations.push(v));
    let conn: NetConnection | undefined;
    let deliveredBytes = 0;
    let maxBufferedBytes = 0;
    agent.client.on('net.open', (c) => {
      conn = c;
      // The consumer never reads (a stalled upstream): everything delivered stays buffered on the host.
      const onData = c.onData.bind(c);
      c.onData = (bytes: Buffer) => {
        deliveredBytes += bytes.length;
        onData(bytes);
        maxBufferedBytes = Math.max(maxBufferedBytes, c.readableLength);
      };
      c.on('error', () => {});
    });
    const stream = 0x80000001;
    const windowBytes = 64 * KiB;
    await agent.event({ event: 'net.open', stream, peer: '127.0.0.1:40000', window: windowBytes, recvWindow: 256 * KiB });
    await flood(agent, stream, 64 * MiB);
    await agent.waitFor((f) => f.channel === stream && f.type === FrameType.end);

    expect(endError(agent, stream)?.code).toBe('bad_request');
    expect(conn?.destroyed).toBe(true);
    expect((conn as unknown as { errored: Error | null }).errored).toBeInstanceOf(AgentError);
    expect(deliveredBytes).toBeLessThanOrEqual(windowBytes);
    expect(maxBufferedBytes).toBeLessThanOrEqual(windowBytes);
    expect(violations).toEqual([{ kind: 'credit_exceeded', stream, creditBytes: 0, frameBytes: 64 * KiB }]);
    // Later frames on the reset stream are ignored: no second violation, no second END.
    await flood(agent, stream, 256 * KiB);
    await agent.client.ping();
    expect(violations).toHaveLength(1);
    expect(agent.framesOn(stream, FrameType.end)).toHaveLength(1);
  });

  it('resets a file read whose agent ignores the window, and keeps answering calls', async () => {
    agent = await HostileAgent.connect();
    const violations: ProtocolViolation[] = [];
    agent.client.on('violation', (v) => violations.push(v));
    let stream = 0;
    agent.onCall = (call) => {
      if (call.method !== 'file.read') return void agent!.reply(call.id, {});
      stream = call.params.streamId as number;
      void agent!.reply(call.id, { sizeBytes: 64 * MiB }).then(() => flood(agent!, stream, 64 * MiB));
    };
    const read = await agent.client.readFile('/big', { windowBytes: 128 * KiB });
    const failed = new Promise<Error>((resolve) => read.once('error', resolve));
    // A consumer that does not read: the host may hold the window, not the file.
    read.pause();
    await agent.waitFor((f) => f.channel === stream && f.type === FrameType.end);
    await expect(failed).resolves.toMatchObject({ code: 'agent_protocol' });
    expect(endError(agent, stream)?.code).toBe('bad_request');
    // Credit went back while the stream's own buffer (1 MiB) had room; beyond that, one window.
    expect(read.readableLength).toBeLessThanOrEqual(read.readableHighWaterMark + 128 * KiB);
    expect(violations).toHaveLength(1);
    await agent.client.ping();
  });

  it('resets an output stream whose frame is larger than the credit left', async () => {
    agent = await HostileAgent.connect();
    let stream = 0;
    agent.onCall = (call) => {
      if (call.method !== 'proc.attach') return void agent!.reply(call.id, {});
      stream = call.params.streamId as number;
      void agent!.reply(call.id, { startOffset: 0, endOffset: 0, exited: false });
    };
    let deliveredBytes = 0;
    let endedWith: AgentError | undefined;
    // The consumer takes every byte at once and credit flows straight back; a 64 KiB frame on a 16 KiB window is
    // still more than was ever granted.
    const ended = new Promise<void>((resolve) => {
      void agent!.client.procAttach(
        'cmd_1',
        0,
        (_fd, _offset, bytes) => (deliveredBytes += bytes.length),
        (err) => {
          endedWith = err;
          resolve();
        },
        { windowBytes: 16 * KiB },
      );
    });
    while (stream === 0) await new Promise((r) => setTimeout(r, 5));
    // The attach reply went out before this ping's: the host knows the stream now.
    await agent.client.ping();
    const prefix = Buffer.alloc(9);
    prefix[0] = 1;
    await flood(agent, stream, 64 * MiB, prefix);
    await ended;
    expect(endedWith?.code).toBe('agent_protocol');
    expect(endError(agent, stream)?.code).toBe('bad_request');
    const granted = agent.framesOn(stream, FrameType.window).reduce((n, f) => n + f.payload.readUInt32BE(0), 0);
    expect(deliveredBytes).toBeLessThanOrEqual(16 * KiB + granted);
  });

  it('gives a deferred-credit output stream its credit back only as pieces are released, each once', async () => {
    agent = await HostileAgent.connect();
    let stream = 0;
    agent.onCall = (call) => {
      if (call.method !== 'proc.attach') return void agent!.reply(call.id, {});
      stream = call.params.streamId as number;
      void agent!.reply(call.id, { startOffset: 0, endOffset: 0, exited: false });
    };
    const releases: Array<() => void> = [];
    let endedWith: AgentError | undefined;
    await agent.client.procAttach(
      'cmd_1',
      0,
      (_fd, _offset, _bytes, release) => releases.push(release),
      (err) => (endedWith = err),
      { windowBytes: 64 * KiB, deferCredit: true },
    );
    const grants = () => agent!.framesOn(stream, FrameType.window).map((f) => f.payload.readUInt32BE(0));
    // Four pieces of 16 KiB (with the 9-byte prefix) fill the window; none is released yet, so nothing is granted.
    const piece = Buffer.alloc(16 * KiB);
    piece[0] = 1;
    for (let i = 0; i < 4; i++) await agent.data(stream, piece);
    await agent.client.ping();
    expect(releases).toHaveLength(4);
    expect(grants()).toEqual([]);
    // Releasing one piece, however often, grants exactly that piece (a quarter window: one WINDOW frame).
    releases[0]!();
    releases[0]!();
    await agent.client.ping();
    expect(grants()).toEqual([16 * KiB]);
    // The credit is real: one more piece fits, a second one overruns and resets the stream.
    await agent.data(stream, piece);
    await agent.client.ping();
    expect(endedWith).toBeUndefined();
    await agent.data(stream, piece);
    await agent.client.ping();
    expect(endedWith?.code).toBe('agent_protocol');
  });

  it('closes the connection on a huge frame length without buffering toward it', async () => {
    agent = await HostileAgent.connect();
    const pending = agent.client.call('ping');
    const closed = new Promise<AgentError>((resolve) => agent!.client.once('close', resolve));
    const header = Buffer.alloc(9);
    header.writeUInt32BE(0xffffffff, 0);
    header.writeUInt8(FrameType.reply, 4);
    await agent.send(header);
    expect((await closed).message).toMatch(/malformed frame/);
    await expect(pending).rejects.toMatchObject({ code: 'agent_disconnected' });
    expect(agent.client.closed).toBe(true);
  });

  it('bounds error strings from the agent and ignores replies to calls no longer pending', async () => {
    agent = await HostileAgent.connect();
    agent.onCall = (call) => {
      void agent!.send(encodeJsonFrame(FrameType.reply, call.id, { error: { code: 'io', message: 'x'.repeat(512 * KiB) } }));
      // A replay of the same reply, and one to a call never made.
      void agent!.send(encodeJsonFrame(FrameType.reply, call.id, { result: { replayed: true } }));
      void agent!.send(encodeJsonFrame(FrameType.reply, 4242, { result: {} }));
    };
    const err = (await agent.client.call('file.stat', { path: '/x' }).catch((e: unknown) => e)) as AgentError;
    expect(err.code).toBe('io');
    expect(err.message.length).toBeLessThanOrEqual(MAX_AGENT_MESSAGE_CHARS + 1);
    agent.onCall = (call) => void agent!.reply(call.id, {});
    await agent.client.ping();
    expect(agent.client.closed).toBe(false);
  });

  it('reads a guest file into memory only up to a cap, whatever size the agent claims', async () => {
    agent = await HostileAgent.connect();
    let stream = 0;
    agent.onCall = (call) => {
      if (call.method !== 'file.read') return void agent!.reply(call.id, {});
      stream = call.params.streamId as number;
      const windowBytes = call.params.window as number;
      // Claims a small file, then sends within its window (a well-behaved flow) far more than the cap.
      void agent!.reply(call.id, { sizeBytes: 10 }).then(async () => {
        let sent = 0;
        while (agent!.framesOn(stream, FrameType.end).length === 0 && sent < 32 * MiB) {
          const granted = agent!.framesOn(stream, FrameType.window).reduce((n, f) => n + f.payload.readUInt32BE(0), 0);
          if (sent + 64 * KiB > windowBytes + granted) {
            await new Promise((r) => setTimeout(r, 5));
            continue;
          }
          await agent!.data(stream, Buffer.alloc(64 * KiB, 0x62));
          sent += 64 * KiB;
        }
      });
    };
    await expect(agent.client.readFileCapped('/etc/ssl/certs/ca-certificates.crt', 1 * MiB)).rejects.toMatchObject({ code: 'too_large' });
    await agent.waitFor((f) => f.channel === stream && f.type === FrameType.end);
  });

  it('a net.dial the connection loses, or that the agent ends before its reply, only rejects', async () => {
    agent = await HostileAgent.connect();
    // END with an error, then the error reply, in one write: the stream's end must not surface as a stray error.
    agent.onCall = (call) => {
      const stream = call.params.streamId as number;
      void agent!.send(
        Buffer.concat([
          encodeJsonFrame(FrameType.end, stream, { error: { code: 'io', message: 'gone' } }),
          encodeJsonFrame(FrameType.reply, call.id, { error: { code: 'not_found', message: 'nothing listens' } }),
        ]),
      );
    };
    await expect(agent.client.netDial(3000)).rejects.toMatchObject({ code: 'not_found' });
    // No reply at all, then the connection goes away.
    agent.onCall = () => undefined;
    const pending = agent.client.netDial(3000);
    await agent.waitFor((f) => f.type === FrameType.call && f.payload.includes('net.dial'));
    agent.socket.destroy();
    await expect(pending).rejects.toMatchObject({ code: 'agent_disconnected' });
  });

  it('a net.dial stream the agent ends with an error right after its reply fails that connection only', async () => {
    agent = await HostileAgent.connect();
    agent.onCall = (call) => {
      const stream = call.params.streamId as number;
      void agent!.send(
        Buffer.concat([
          encodeJsonFrame(FrameType.reply, call.id, { result: { recvWindow: 1024 } }),
          encodeJsonFrame(FrameType.end, stream, { error: { code: 'io', message: 'reset by the guest' } }),
        ]),
      );
    };
    const conn = await agent.client.netDial(3000);
    const err = await new Promise<Error>((resolve) => (conn.destroyed && conn.errored ? resolve(conn.errored) : conn.once('error', resolve)));
    expect(err).toMatchObject({ code: 'io' });
    await agent.client.ping();
  });
});
