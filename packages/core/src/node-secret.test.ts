// The node secret: only exactly 32 bytes of hex start a node, and each purpose gets its own key.
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { deriveNodeKeys, loadNodeSecret } from './node-secret.js';
import { signAccessToken, verifyAccessToken } from './access-token.js';

const dir = mkdtempSync(join(tmpdir(), 'sg-node-secret-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
const fileWith = (text: string) => {
  const f = join(dir, `node-secret-${n++}`);
  writeFileSync(f, text);
  return f;
};

describe('loadNodeSecret', () => {
  it('creates a 32-byte secret, mode 0600, and reads the same one back', () => {
    const f = join(dir, 'fresh');
    const a = loadNodeSecret(f);
    expect(a.length).toBe(32);
    expect(statSync(f).mode & 0o777).toBe(0o600);
    expect(loadNodeSecret(f).equals(a)).toBe(true);
    expect(readFileSync(f, 'utf8')).toMatch(/^[0-9a-f]{64}\n$/);
  });

  it('reads 64 hex digits with or without a newline', () => {
    expect(loadNodeSecret(fileWith('ab'.repeat(32))).equals(Buffer.alloc(32, 0xab))).toBe(true);
    expect(loadNodeSecret(fileWith('AB'.repeat(32) + '\n')).equals(Buffer.alloc(32, 0xab))).toBe(true);
  });

  it.each([
    ['empty', ''],
    ['only a newline', '\n'],
    ['truncated', 'ab'.repeat(16) + '\n'],
    ['one digit short', 'a'.repeat(63)],
    ['too long', 'ab'.repeat(33) + '\n'],
    ['non-hex from the start', 'zz' + 'ab'.repeat(31)],
    ['non-hex in the middle (Buffer.from would stop there)', 'ab'.repeat(10) + 'g' + 'a'.repeat(43)],
    ['raw bytes', Buffer.alloc(32, 0x41).toString('latin1')],
    ['surrounding spaces', ` ${'ab'.repeat(32)} `],
    ['two lines', 'ab'.repeat(32) + '\n' + 'ab'.repeat(32) + '\n'],
  ])('refuses a file that is %s, naming it', (_why, text) => {
    const f = fileWith(text);
    expect(() => loadNodeSecret(f)).toThrow(f);
    expect(() => loadNodeSecret(f)).toThrow(/exactly 32 bytes/);
    expect(readFileSync(f, 'latin1')).toBe(Buffer.from(text, 'latin1').toString('latin1'));
  });
});

describe('deriveNodeKeys', () => {
  const secret = Buffer.alloc(32, 7);

  it('refuses anything but 32 bytes', () => {
    for (const len of [0, 1, 31, 33, 64]) expect(() => deriveNodeKeys(Buffer.alloc(len, 7))).toThrow(/exactly 32 bytes/);
  });

  it('gives each purpose its own key, none of them the secret', () => {
    const k = deriveNodeKeys(secret);
    expect(k.internalBearer.length).toBe(32);
    expect(k.accessToken.length).toBe(32);
    expect(k.internalBearer.equals(k.accessToken)).toBe(false);
    expect(k.internalBearer.equals(secret) || k.accessToken.equals(secret)).toBe(false);
    expect(deriveNodeKeys(Buffer.alloc(32, 8)).accessToken.equals(k.accessToken)).toBe(false);
  });

  it('a token signed with the bearer key or the raw secret is rejected; the access-token key verifies', () => {
    const k = deriveNodeKeys(secret);
    const claims = { sbx: 'sbx_aaaaaaaaaaaaaaaaaaaa', ten: 'ten_a', exp: 2_000 };
    expect(verifyAccessToken(signAccessToken(claims, k.accessToken), k.accessToken, 1_000)).toEqual(claims);
    expect(() => verifyAccessToken(signAccessToken(claims, k.internalBearer), k.accessToken, 1_000)).toThrow(/not valid/);
    expect(() => verifyAccessToken(signAccessToken(claims, secret), k.accessToken, 1_000)).toThrow(/not valid/);
  });

  it('no token is signed or verified under an empty or short key', () => {
    const claims = { sbx: 'sbx_aaaaaaaaaaaaaaaaaaaa', ten: 'ten_a', exp: 2_000 };
    expect(() => signAccessToken(claims, Buffer.alloc(0))).toThrow(/refused/);
    const forged = signAccessToken(claims, Buffer.alloc(32));
    expect(() => verifyAccessToken(forged, Buffer.alloc(0), 1_000)).toThrow(/refused/);
  });
});
