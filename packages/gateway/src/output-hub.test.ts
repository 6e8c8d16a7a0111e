import { describe, expect, it } from 'vitest';
import type { OutputFd } from '@sandglass/agent-client';
import { OutputHubs, OutputRing, hubKey, type ExitInfo, type HubSource } from './output-hub.js';
import { HubFollower, hubSnapshot } from './output-read.js';

/** The deterministic output of a test command: byte i is (i * 7 + 3) mod 251, so any lost, repeated or moved byte shows. */
const byteAt = (i: number) => (i * 7 + 3) % 251;
const bytes = (from: number, n: number) => Buffer.from(Array.from({ length: n }, (_, k) => byteAt(from + k)));

/** An agent's attach stream driven by the test: it sends what `write` says, and ends when `exit` is called. */
class FakeCommand implements HubSource {
  written = 0;
  /** Oldest offset the "agent" still holds. */
  ringStart = 0;
  attaches: number[] = [];
  detached = 0;
  private sinks: Array<{ onData: (fd: OutputFd, offset: number, b: Buffer) => void; onEnd: (err?: Error) => void }> = [];
  private exitInfo?: ExitInfo;

  async attach(fromOffset: number, onData: (fd: OutputFd, offset: number, b: Buffer) => void, onEnd: (err?: Error) => void) {
    this.attaches.push(fromOffset);
    const startOffset = Math.max(fromOffset, this.ringStart);
    const sink = { onData, onEnd };
    if (startOffset < this.written) onData(1, startOffset, bytes(startOffset, this.written - startOffset));
    if (this.exitInfo) onEnd();
    else this.sinks.push(sink);
    return {
      startOffset,
      endOffset: this.written,
      exited: this.exitInfo !== undefined,
      detach: async () => {
        this.detached++;
        this.sinks = this.sinks.filter((s) => s !== sink);
      },
    };
  }

  async exitStatus(): Promise<ExitInfo> {
    return this.exitInfo!;
  }

  write(n: number, fd: OutputFd = 1): void {
    const b = bytes(this.written, n);
    for (const s of this.sinks) s.onData(fd, this.written, b);
    this.written += n;
  }

  exit(code = 0): void {
    this.exitInfo = { exitCode: code, signal: null, timedOut: false, endOffset: this.written };
    for (const s of this.sinks.splice(0)) s.onEnd();
  }

  breakLink(): void {
    for (const s of this.sinks.splice(0)) s.onEnd(new Error('agent_disconnected'));
  }
}

/** Parses a reconnect body: records `len:u32 | frame`. */
function parse(body: Buffer): { start?: number; data: Array<{ fd: number; offset: number; bytes: Buffer }>; exit?: ExitInfo; error?: unknown } {
  const out: ReturnType<typeof parse> = { data: [] };
  let at = 0;
  while (at < body.length) {
    const len = body.readUInt32BE(at);
    const frame = body.subarray(at + 4, at + 4 + len);
    at += 4 + len;
    if (frame[0] === 0) {
      const msg = JSON.parse(frame.subarray(1).toString('utf8'));
      if (msg.type === 'start') out.start = msg.startOffset;
      else if (msg.type === 'exit') out.exit = msg;
      else out.error = msg.error;
    } else out.data.push({ fd: frame[0]!, offset: Number(frame.readBigUInt64BE(1)), bytes: frame.subarray(9) });
  }
  return out;
}

/** The bytes of a parsed body, checked to be contiguous from its start. */
function contiguous(p: ReturnType<typeof parse>): Buffer {
  let at = p.start!;
  for (const d of p.data) {
    expect(d.offset).toBe(at);
    at += d.bytes.length;
  }
  return Buffer.concat(p.data.map((d) => d.bytes));
}

/** Buffers compared as bytes (vitest's deep equality walks them index by index, slowly). */
function sameBytes(got: Buffer, want: Buffer): void {
  expect(got.length).toBe(want.length);
  expect(got.equals(want)).toBe(true);
}

const tick = () => new Promise((r) => setImmediate(r));

async function drain(r: HubFollower): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of r) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

describe('OutputRing', () => {
  it('reads from any offset it holds, cut inside a piece, by the agent’s offsets', () => {
    const ring = new OutputRing(1024, 100);
    ring.append(1, 100, bytes(100, 10));
    ring.append(2, 110, bytes(110, 20));
    ring.append(1, 130, bytes(130, 5));
    expect([ring.start, ring.end, ring.sizeBytes]).toEqual([100, 135, 35]);
    const pieces = ring.read(115);
    expect(pieces.map((p) => [p.fd, p.offset, p.bytes.length])).toEqual([
      [2, 115, 15],
      [1, 130, 5],
    ]);
    sameBytes(Buffer.concat(pieces.map((p) => p.bytes)), bytes(115, 20));
    expect(ring.read(135)).toEqual([]);
    expect(() => ring.read(99)).toThrow(RangeError);
    expect(() => ring.read(136)).toThrow(RangeError);
  });

  it('skips bytes it already holds and restarts after a gap', () => {
    const ring = new OutputRing(1024);
    ring.append(1, 0, bytes(0, 10));
    expect(ring.append(1, 5, bytes(5, 10))).toBe(5);
    expect(ring.end).toBe(15);
    sameBytes(Buffer.concat(ring.read(0).map((p) => p.bytes)), bytes(0, 15));
    ring.append(1, 50, bytes(50, 4));
    expect([ring.start, ring.end, ring.sizeBytes]).toEqual([50, 54, 4]);
  });

  it('keeps at most its capacity plus one piece, dropping the oldest pieces whole', () => {
    const ring = new OutputRing(100);
    for (let i = 0; i < 5000; i++) ring.append(1, i * 30, bytes(i * 30, 30));
    expect(ring.end).toBe(150_000);
    expect(ring.sizeBytes).toBeGreaterThanOrEqual(100);
    expect(ring.sizeBytes).toBeLessThan(130);
    expect(ring.start).toBe(ring.end - ring.sizeBytes);
    sameBytes(Buffer.concat(ring.read(ring.start).map((p) => p.bytes)), bytes(ring.start, ring.sizeBytes));
    const mid = ring.start + 17;
    sameBytes(Buffer.concat(ring.read(mid, 1).map((p) => p.bytes)), bytes(mid, 30 - 17));
  });
});

describe('OutputHubs', () => {
  it('answers from the gateway once attached, with the exit cached: one attach for any number of reconnects', async () => {
    const cmd = new FakeCommand();
    cmd.write(5000);
    cmd.exit(3);
    const hubs = new OutputHubs({ perCommandBytes: 64 * 1024 });
    for (let i = 0; i < 50; i++) {
      const from = (i * 97) % 5001;
      const hub = hubs.open(hubKey('sbx_a', 'cmd_a'), from, () => cmd)!;
      await hub.ready;
      await tick();
      const p = parse(hubSnapshot(hub, from, { type: 'start' }));
      expect(p.start).toBe(from);
      sameBytes(contiguous(p), bytes(from, 5000 - from));
      expect(p.exit).toEqual({ type: 'exit', exitCode: 3, signal: null, timedOut: false, endOffset: 5000 });
    }
    expect(cmd.attaches).toEqual([0]);
  });

  it('starts where the agent’s ring starts, and leaves older offsets to the guest', async () => {
    const cmd = new FakeCommand();
    cmd.write(10_000);
    cmd.ringStart = 4000;
    const hubs = new OutputHubs({ perCommandBytes: 2048 });
    const hub = hubs.open('k', 9000, () => cmd)!;
    await hub.ready;
    expect(cmd.attaches).toEqual([9000 - 2048]);
    expect(hub.ring.end).toBe(10_000);
    expect(hubs.open('k', hub.ring.start - 1, () => cmd)).toBeUndefined();
    expect(hubs.open('k', hub.ring.start, () => cmd)).toBe(hub);
    cmd.write(100);
    expect(hub.ring.end).toBe(10_100);
  });

  it('bounds the bytes of the node: idle hubs go first, oldest use first; a followed one stays', async () => {
    const hubs = new OutputHubs({ perCommandBytes: 1000, totalBytes: 2500 });
    const cmds = [new FakeCommand(), new FakeCommand(), new FakeCommand(), new FakeCommand()];
    const opened = [];
    for (const [i, c] of cmds.entries()) {
      c.write(1000);
      const hub = hubs.open(`sbx/${i}`, 0, () => c)!;
      await hub.ready;
      opened.push(hub);
      if (i === 0) hub.followers.add(() => undefined);
    }
    expect(hubs.heldBytes).toBeLessThanOrEqual(2500);
    expect(opened[0]!.state).toBe('live');
    expect(opened[1]!.state).toBe('failed');
    expect(cmds[1]!.detached).toBe(1);
    expect(opened[3]!.state).toBe('live');
  });

  it('bounds the number of hubs and evicts idle ones', async () => {
    let now = 0;
    const hubs = new OutputHubs({ maxHubs: 2, idleMs: 1000, nowMs: () => now });
    const a = hubs.open('a', 0, () => new FakeCommand())!;
    hubs.open('b', 0, () => new FakeCommand());
    hubs.open('c', 0, () => new FakeCommand());
    expect(hubs.size).toBe(2);
    expect(a.state).toBe('failed');
    now = 5000;
    hubs.open('d', 0, () => new FakeCommand());
    expect(hubs.size).toBe(1);
    const followed = hubs.open('e', 0, () => new FakeCommand())!;
    followed.followers.add(() => undefined);
    await followed.ready;
    now = 10_000;
    hubs.sweep();
    expect(hubs.size).toBe(1);
    expect(followed.state).toBe('live');
  });

  it('forgets a hub whose agent link broke, and a sandbox’s hubs when it stops', async () => {
    const cmd = new FakeCommand();
    const hubs = new OutputHubs();
    const hub = hubs.open(hubKey('sbx_1', 'cmd_1'), 0, () => cmd)!;
    await hub.ready;
    cmd.breakLink();
    expect(hub.state).toBe('failed');
    const again = hubs.open(hubKey('sbx_1', 'cmd_1'), 0, () => cmd)!;
    expect(again).not.toBe(hub);
    hubs.open(hubKey('sbx_2', 'cmd_1'), 0, () => new FakeCommand());
    hubs.dropSandbox('sbx_1');
    expect(hubs.size).toBe(1);
    expect(again.state).toBe('failed');
  });

  it('many followers of a command still writing get every byte once, in order, and the exit', async () => {
    const cmd = new FakeCommand();
    const hubs = new OutputHubs({ perCommandBytes: 1024 * 1024 });
    cmd.write(1000);
    const readers = [];
    for (let i = 0; i < 16; i++) {
      const from = i * 50;
      const hub = hubs.open('k', from, () => cmd)!;
      await hub.ready;
      readers.push({ from, body: drain(new HubFollower(hub, from, { type: 'start' }, (e) => ({ error: String(e) }))) });
      cmd.write(333 + i, i % 2 === 0 ? 1 : 2);
      await tick();
    }
    for (let i = 0; i < 20; i++) {
      cmd.write(4096);
      await tick();
    }
    cmd.exit(0);
    for (const r of readers) {
      const p = parse(await r.body);
      expect(p.start).toBe(r.from);
      sameBytes(contiguous(p), bytes(r.from, cmd.written - r.from));
      expect(p.exit?.endOffset).toBe(cmd.written);
    }
    expect(cmd.attaches).toEqual([0]);
  });

  it('ends a follower that fell behind the window without an exit, so its client asks again from its offset', async () => {
    const cmd = new FakeCommand();
    const hubs = new OutputHubs({ perCommandBytes: 4096 });
    const hub = hubs.open('k', 0, () => cmd)!;
    await hub.ready;
    const follower = new HubFollower(hub, 0, { type: 'start' }, () => ({}));
    for (let i = 0; i < 40; i++) cmd.write(1000);
    const p = parse(await drain(follower));
    expect(p.exit).toBeUndefined();
    expect(p.error).toBeUndefined();
    sameBytes(contiguous(p), bytes(0, contiguous(p).length));
    expect(hub.followers.size).toBe(0);
  });
});
