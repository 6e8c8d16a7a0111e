// The envelope: round trips, and any change to key, aad or a single stored byte is refused.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { seal, unseal } from './index.js';

const key = randomBytes(32);
const plaintext = Buffer.from('the quick brown fox');
const aad = Buffer.from('ten_a|chunk');

describe('seal', () => {
  it('round trips and lays out version | nonce | ciphertext | tag', () => {
    const sealed = seal(key, plaintext, aad);
    expect(sealed.length).toBe(1 + 12 + plaintext.length + 16);
    expect(sealed[0]).toBe(1);
    expect(unseal(key, sealed, aad)).toEqual(plaintext);
    expect(unseal(key, seal(key, Buffer.alloc(0)))).toEqual(Buffer.alloc(0));
  });

  it('uses a fresh nonce every time', () => {
    expect(seal(key, plaintext).equals(seal(key, plaintext))).toBe(false);
  });

  it('refuses a wrong key, a wrong or missing aad, and every flipped byte', () => {
    const sealed = seal(key, plaintext, aad);
    expect(() => unseal(randomBytes(32), sealed, aad)).toThrow();
    expect(() => unseal(key, sealed, Buffer.from('ten_b|chunk'))).toThrow();
    expect(() => unseal(key, sealed)).toThrow();
    for (let i = 0; i < sealed.length; i++) {
      const bad = Buffer.from(sealed);
      bad[i]! ^= 0x01;
      expect(() => unseal(key, bad, aad), `byte ${i}`).toThrow();
    }
  });

  it('refuses truncated input and keys of the wrong size', () => {
    const sealed = seal(key, plaintext, aad);
    expect(() => unseal(key, sealed.subarray(0, sealed.length - 1), aad)).toThrow();
    expect(() => unseal(key, sealed.subarray(0, 20), aad)).toThrow(/shorter/);
    expect(() => seal(randomBytes(16), plaintext)).toThrow(/32 bytes/);
  });
});
