// The console ring: a guest printing forever costs the host the ring, and the tail is the newest bytes.
import { describe, expect, it } from 'vitest';
import { ConsoleRing } from './console.js';

describe('ConsoleRing', () => {
  it('keeps the newest bytes across wraps, in order', () => {
    const ring = new ConsoleRing(10);
    ring.push(Buffer.from('abcdef'));
    expect(ring.tail(100).toString()).toBe('abcdef');
    ring.push(Buffer.from('ghijkl'));
    expect(ring.tail(100).toString()).toBe('cdefghijkl');
    expect(ring.tail(4).toString()).toBe('ijkl');
    ring.push(Buffer.from('0123456789ABC'));
    expect(ring.tail(10).toString()).toBe('3456789ABC');
    expect(ring.totalBytes).toBe(25);
  });

  it('stays at its size however much is printed', () => {
    const ring = new ConsoleRing(4096);
    const line = Buffer.from('x'.repeat(999) + '\n');
    for (let i = 0; i < 100_000; i++) ring.push(line);
    ring.push(Buffer.from('Kernel panic - not syncing'));
    expect(ring.tail(1 << 30).length).toBe(4096);
    expect(ring.tail(26).toString()).toBe('Kernel panic - not syncing');
    expect(ring.totalBytes).toBe(100_000 * 1000 + 26);
  });
});
