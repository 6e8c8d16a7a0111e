// isZeroChunk: exact at every position and across the shared buffer's boundary.
import { describe, expect, it } from 'vitest';
import { isZeroChunk } from './index.js';

describe('isZeroChunk', () => {
  it('is true only when every byte is zero', () => {
    expect(isZeroChunk(Buffer.alloc(0))).toBe(true);
    expect(isZeroChunk(Buffer.alloc(1))).toBe(true);
    expect(isZeroChunk(Buffer.alloc(4 * 1024 * 1024 + 3))).toBe(true);
    const size = 2 * 1024 * 1024 + 5;
    for (const at of [0, 1, 1024 * 1024 - 1, 1024 * 1024, size - 1]) {
      const data = Buffer.alloc(size);
      data[at] = 1;
      expect(isZeroChunk(data), `byte ${at}`).toBe(false);
    }
  });
});
