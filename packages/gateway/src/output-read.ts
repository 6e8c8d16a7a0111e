// The body of a reconnect over HTTP (GET …/commands/{cid}/output): length-prefixed records from the node's output hub, or from the guest's ring when the hub does not hold the offset.
import { Readable } from 'node:stream';
import type { AgentClient, OutputFd } from '@sandglass/agent-client';
import type { ExitInfo, HubSource, OutputHub } from './output-hub.js';
import type { CommandRecord, Sandbox } from './sandbox.js';
import { OUTPUT_WINDOW_BYTES } from './output-pacing.js';

/** Output queued in a body before it stops taking more (from the hub) or holds the agent's credit (from the guest). */
const BODY_HIGH_WATER_BYTES = 256 * 1024;
/** Pieces read from the hub per push. */
const READ_SLICE_BYTES = 64 * 1024;

/** `length:u32 BE | fd | offset:u64 BE | bytes`: the stream route's binary frame, length-prefixed. */
export function dataRecord(fd: OutputFd, offset: number, bytes: Buffer): Buffer {
  const head = Buffer.allocUnsafe(13);
  head.writeUInt32BE(9 + bytes.length, 0);
  head[4] = fd;
  head.writeBigUInt64BE(BigInt(offset), 5);
  return Buffer.concat([head, bytes]);
}

/** `length:u32 BE | 0 | JSON`: the stream route's text message, length-prefixed. */
export function jsonRecord(msg: Record<string, unknown>): Buffer {
  const json = Buffer.from(JSON.stringify(msg), 'utf8');
  const head = Buffer.allocUnsafe(5);
  head.writeUInt32BE(1 + json.length, 0);
  head[4] = 0;
  return Buffer.concat([head, json]);
}

export function exitRecord(exit: ExitInfo): Buffer {
  return jsonRecord({ type: 'exit', exitCode: exit.exitCode, signal: exit.signal, timedOut: exit.timedOut, endOffset: exit.endOffset });
}

/** What a hub of this command reads from: an attach of its own in the sandbox's agent, credit returned at once (the ring is bounded). */
export function hubSource(sbx: Sandbox, rec: CommandRecord, agent: AgentClient): HubSource {
  return {
    attach: async (fromOffset, onData, onEnd) => {
      const h = await agent.procAttach(rec.id, fromOffset, (fd, offset, bytes) => onData(fd, offset, bytes), onEnd, { windowBytes: OUTPUT_WINDOW_BYTES });
      return { startOffset: h.startOffset, endOffset: h.endOffset, exited: h.exited, detach: h.detach };
    },
    exitStatus: async () => {
      await sbx.exitStatus(rec.id);
      return { exitCode: rec.exitCode ?? null, signal: rec.signal ?? null, timedOut: rec.timedOut, endOffset: rec.outputBytes };
    },
  };
}

/** The whole answer without `follow`, from a hub that holds `fromOffset`: what it has now, and the exit if known. */
export function hubSnapshot(hub: OutputHub, fromOffset: number, start: Record<string, unknown>): Buffer {
  const parts = [jsonRecord({ ...start, startOffset: fromOffset })];
  if (fromOffset < hub.ring.end) for (const p of hub.ring.read(fromOffset)) parts.push(dataRecord(p.fd, p.offset, p.bytes));
  const exit = hub.exit;
  if (exit && fromOffset >= hub.ring.start) parts.push(exitRecord(exit));
  return Buffer.concat(parts);
}

/**
 * A `follow` answer from a hub: records as the hub gets them, until the exit. A reader that falls behind the hub's
 * window (the client reads slower than the command writes) is ended without an exit, and its client asks again from
 * its offset, which the guest's ring then serves.
 */
export class HubFollower extends Readable {
  private offset: number;
  private wanted = false;
  private finished = false;
  private readonly wake = () => {
    if (this.wanted) this.pump();
  };

  constructor(
    private readonly hub: OutputHub,
    fromOffset: number,
    start: Record<string, unknown>,
    private readonly errorBody: (err: unknown) => object,
  ) {
    super({ highWaterMark: BODY_HIGH_WATER_BYTES });
    this.offset = fromOffset;
    this.push(jsonRecord({ ...start, startOffset: fromOffset }));
    hub.followers.add(this.wake);
  }

  override _read(): void {
    this.wanted = true;
    this.pump();
  }

  private pump(): void {
    while (!this.finished && this.wanted) {
      const hub = this.hub;
      if (hub.state === 'failed') return this.finish(hub.error ? jsonRecord({ type: 'error', ...this.errorBody(hub.error) }) : undefined);
      if (this.offset < hub.ring.start) return this.finish();
      if (this.offset < hub.ring.end) {
        for (const p of hub.ring.read(this.offset, READ_SLICE_BYTES)) {
          this.offset = p.offset + p.bytes.length;
          if (!this.push(dataRecord(p.fd, p.offset, p.bytes))) this.wanted = false;
        }
        continue;
      }
      if (hub.exit) return this.finish(exitRecord(hub.exit));
      return;
    }
  }

  private finish(last?: Buffer): void {
    this.finished = true;
    this.hub.followers.delete(this.wake);
    if (last) this.push(last);
    this.push(null);
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.finished = true;
    this.hub.followers.delete(this.wake);
    callback(err);
  }
}

/**
 * An answer read from the guest's ring (an offset older than the hub holds, or none could be made): one attach from
 * `fromOffset`, each piece's credit returned once the body has room, so a client that stops reading holds the agent.
 * Without `follow` it ends at the output the agent had when the attach opened (and the exit, when it had exited).
 */
export class GuestReader extends Readable {
  private held: Array<() => void> = [];
  private finished = false;
  private detach?: () => Promise<void>;

  constructor(
    sbx: Sandbox,
    rec: CommandRecord,
    agent: AgentClient,
    fromOffset: number,
    follow: boolean,
    start: Record<string, unknown>,
    errorBody: (err: unknown) => object,
  ) {
    super({ highWaterMark: BODY_HIGH_WATER_BYTES });
    // The attach's reply can arrive after its first pieces: they wait until `start` is out.
    let started = false;
    let endAt = Number.POSITIVE_INFINITY;
    let offset = fromOffset;
    const early: Array<() => void> = [];
    const inOrder = (fn: () => void) => (started ? fn() : early.push(fn));
    const fail = (err: unknown) => this.finish(jsonRecord({ type: 'error', ...errorBody(err) }));
    const handle = agent.procAttach(
      rec.id,
      fromOffset,
      (fd, at, bytes, release) =>
        inOrder(() => {
          if (this.finished) return release();
          offset = at + bytes.length;
          if (this.push(dataRecord(fd, at, bytes))) release();
          else this.held.push(release);
          if (offset >= endAt) this.finish();
        }),
      (err) =>
        inOrder(() => {
          if (err) return fail(err);
          void sbx
            .exitStatus(rec.id)
            .then(() =>
              this.finish(exitRecord({ exitCode: rec.exitCode ?? null, signal: rec.signal ?? null, timedOut: rec.timedOut, endOffset: rec.outputBytes })),
            );
        }),
      { deferCredit: true, windowBytes: OUTPUT_WINDOW_BYTES },
    );
    handle.then((info) => {
      this.detach = info.detach;
      if (this.finished) return void info.detach().catch(() => undefined);
      // The agent names where its ring starts; its bytes start at the later of that and the offset asked for.
      const startOffset = Math.max(fromOffset, info.startOffset);
      this.push(jsonRecord({ ...start, startOffset }));
      // Without follow, a running command's answer is what the agent held when asked.
      if (!follow && !info.exited) endAt = Math.max(info.endOffset, startOffset);
      started = true;
      for (const fn of early.splice(0)) fn();
      if (!this.finished && offset >= endAt) this.finish();
    }, fail);
  }

  override _read(): void {
    for (const release of this.held.splice(0)) release();
  }

  private finish(last?: Buffer): void {
    if (this.finished) return;
    this.finished = true;
    if (last) this.push(last);
    this.push(null);
    this.stop();
  }

  private stop(): void {
    for (const release of this.held.splice(0)) release();
    const detach = this.detach;
    this.detach = undefined;
    if (detach) void detach().catch(() => undefined);
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.finished = true;
    this.stop();
    callback(err);
  }
}
