// The streaming multipart reader of POST /files: boundaries split anywhere, several parts, malformed bodies refused.
import type { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { forEachPart, MAX_PART_HEADER_BYTES, MultipartError } from './multipart.js';

const B = 'xYzBoundary42';

function body(parts: Array<{ name: string; filename?: string; data: Buffer | string }>, opts: { preamble?: string; epilogue?: string } = {}): Buffer {
  // A preamble ends with CRLF: a boundary starts a line.
  const out: Buffer[] = [Buffer.from(opts.preamble !== undefined ? `${opts.preamble}\r\n` : '')];
  for (const p of parts) {
    const fn = p.filename !== undefined ? `; filename="${p.filename}"` : '';
    out.push(Buffer.from(`--${B}\r\nContent-Disposition: form-data; name="${p.name}"${fn}\r\nContent-Type: application/octet-stream\r\n\r\n`));
    out.push(Buffer.from(p.data));
    out.push(Buffer.from('\r\n'));
  }
  out.push(Buffer.from(`--${B}--\r\n${opts.epilogue ?? ''}`));
  return Buffer.concat(out);
}

async function* chunked(buf: Buffer, sizes: number[]): AsyncGenerator<Buffer> {
  let at = 0;
  for (let i = 0; at < buf.length; i++) {
    const n = sizes[i % sizes.length]!;
    yield buf.subarray(at, at + n);
    at += n;
  }
}

async function collect(src: AsyncIterable<Buffer>) {
  const got: Array<{ name: string; filename?: string; data: Buffer }> = [];
  await forEachPart(src, B, async (info, data: Readable) => {
    const chunks: Buffer[] = [];
    for await (const c of data) chunks.push(c as Buffer);
    got.push({ ...info, data: Buffer.concat(chunks) });
  });
  return got;
}

describe('forEachPart', () => {
  // Data that looks like a boundary but is not one, CRLFs, and bytes of every value.
  const tricky = Buffer.concat([Buffer.from(`\r\n--${B.slice(0, 5)}\r\n--x\r\n\r\n`), Buffer.from(Array.from({ length: 256 }, (_, i) => i))]);
  const parts = [
    { name: 'file', filename: '/home/user/a b.txt', data: tricky },
    { name: 'other', data: 'ignored by envd' },
    { name: 'file', filename: 'rel/c.bin', data: '' },
  ];

  it('gives every part with its name, filename and exact bytes, however the body is chunked', async () => {
    const whole = body(parts, { preamble: 'preamble text', epilogue: 'epilogue' });
    for (const sizes of [[whole.length], [1], [2, 3], [7], [B.length + 3], [B.length + 4, 1]]) {
      const got = await collect(chunked(whole, sizes));
      expect(got.map((p) => ({ name: p.name, filename: p.filename }))).toEqual([
        { name: 'file', filename: '/home/user/a b.txt' },
        { name: 'other', filename: undefined },
        { name: 'file', filename: 'rel/c.bin' },
      ]);
      expect(got[0]!.data).toEqual(tricky);
      expect(got[1]!.data.toString()).toBe('ignored by envd');
      expect(got[2]!.data).toHaveLength(0);
    }
  });

  it('refuses a body without its closing boundary, a part without a name, and huge part headers', async () => {
    const whole = body(parts);
    await expect(collect(chunked(whole.subarray(0, whole.length - 10), [64]))).rejects.toBeInstanceOf(MultipartError);
    const nameless = Buffer.from(`--${B}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--${B}--\r\n`);
    await expect(collect(chunked(nameless, [64]))).rejects.toThrow(/no name/);
    const huge = Buffer.from(`--${B}\r\nX-Pad: ${'a'.repeat(MAX_PART_HEADER_BYTES + 10)}\r\n`);
    await expect(collect(chunked(huge, [1024]))).rejects.toThrow(/part headers/);
  });

  it("stops at the consumer's failure", async () => {
    const whole = body([{ name: 'file', filename: 'a', data: Buffer.alloc(1024 * 1024) }]);
    const run = forEachPart(chunked(whole, [4096]), B, async (_info, data) => {
      data.destroy();
      throw new Error('guest refused');
    });
    await expect(run).rejects.toThrow('guest refused');
  });
});
