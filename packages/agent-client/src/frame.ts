// Frame codec of the agent protocol (spec/agent-protocol.md): u32 length, u8 type, u32 channel, payload.

export const FrameType = {
  call: 1,
  reply: 2,
  event: 3,
  data: 4,
  end: 5,
  window: 6,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export interface Frame {
  type: number;
  channel: number;
  payload: Buffer;
}

export const FRAME_HEADER_BYTES = 9;
/** `length` counts type + channel + payload; a bigger frame means a broken peer. */
export const MAX_FRAME_LENGTH = 1024 * 1024 + 5;
/** Largest DATA payload the host sends: keeps frames far below the limit and interleaving fair. */
export const MAX_DATA_BYTES = 256 * 1024;

export function encodeFrame(type: number, channel: number, payload: Uint8Array = Buffer.alloc(0)): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  frame.writeUInt32BE(payload.length + 5, 0);
  frame.writeUInt8(type, 4);
  frame.writeUInt32BE(channel >>> 0, 5);
  frame.set(payload, FRAME_HEADER_BYTES);
  return frame;
}

export function encodeJsonFrame(type: number, channel: number, value: unknown): Buffer {
  return encodeFrame(type, channel, Buffer.from(JSON.stringify(value), 'utf8'));
}

export class FrameTooLargeError extends Error {
  constructor(readonly length: number) {
    super(`frame length ${length} is outside 5..${MAX_FRAME_LENGTH}`);
  }
}

/** Splits a byte stream into frames; chunks may cut frames anywhere. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private bufferedBytes = 0;

  /** Adds bytes and returns every frame now complete. Throws FrameTooLargeError on a bad length. */
  push(chunk: Buffer): Frame[] {
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.bufferedBytes += chunk.length;
    }
    const frames: Frame[] = [];
    while (this.bufferedBytes >= FRAME_HEADER_BYTES) {
      const header = this.peek(FRAME_HEADER_BYTES);
      const length = header.readUInt32BE(0);
      if (length < 5 || length > MAX_FRAME_LENGTH) throw new FrameTooLargeError(length);
      if (this.bufferedBytes < 4 + length) break;
      const whole = this.take(4 + length);
      frames.push({ type: whole.readUInt8(4), channel: whole.readUInt32BE(5), payload: whole.subarray(FRAME_HEADER_BYTES) });
    }
    return frames;
  }

  private peek(n: number): Buffer {
    const first = this.chunks[0]!;
    if (first.length >= n) return first;
    // Merge just enough leading chunks to see n bytes; rare (a header cut between chunks).
    let merged = first;
    while (merged.length < n) merged = Buffer.concat([merged, this.chunks.splice(1, 1)[0]!]);
    this.chunks[0] = merged;
    return merged;
  }

  private take(n: number): Buffer {
    this.bufferedBytes -= n;
    const first = this.chunks[0]!;
    if (first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const parts: Buffer[] = [];
    let need = n;
    while (need > 0) {
      const c = this.chunks[0]!;
      if (c.length <= need) {
        parts.push(c);
        this.chunks.shift();
        need -= c.length;
      } else {
        parts.push(c.subarray(0, need));
        this.chunks[0] = c.subarray(need);
        need = 0;
      }
    }
    return Buffer.concat(parts, n);
  }
}

/** Raw bytes the agent writes, followed by the host's 16-byte hello nonce, ahead of its hello reply. */
export const RESYNC_MAGIC = Buffer.from('\xffSGRESYNC', 'latin1');
