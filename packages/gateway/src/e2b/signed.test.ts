// Unit tests of E2B's signed file URLs: parsing, expiry before any search, one sandbox's tokens only, bounded memory.
import { describe, expect, it } from 'vitest';
import { SandglassError } from '@sandglass/core';
import type { Sandbox } from '../sandbox.js';
import { e2bSignature, signedFileRequest, signedFileTarget } from './signed.js';
import { MAX_SIGNING_TOKENS, envdState } from './state.js';

const sandbox = (id: string, state = 'running') => ({ id, state, commands: new Map() }) as unknown as Sandbox;
const code = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err instanceof SandglassError ? `${err.code}: ${err.message}` : String(err);
  }
  return 'accepted';
};

describe('signed file URLs', () => {
  const a = sandbox('sbx_a');
  const b = sandbox('sbx_b');
  envdState(a).rememberToken('token-a');
  envdState(b).rememberToken('token-b');
  const req = { path: 'x.txt', user: '', operation: 'read' as const };

  it('finds the sandbox whose token made the signature, and only that one', () => {
    const signature = e2bSignature(req, 'token-a');
    expect(signature).toMatch(/^v1_[A-Za-z0-9+/]{43}$/);
    expect(signedFileTarget({ ...req, signature }, [b, a], 0)).toEqual({ sbx: a, token: 'token-a' });
    expect(signedFileTarget({ ...req, signature: e2bSignature(req, 'token-b') }, [a, b], 0).sbx).toBe(b);
    // What is signed is path, operation, user and expiry: another of any is no match.
    for (const other of [{ path: 'y.txt' }, { operation: 'write' as const }, { user: 'root' }, { expirationS: 99 }])
      expect(code(() => signedFileTarget({ ...req, ...other, signature }, [a, b], 0))).toMatch(/^unauthenticated: .*matches no sandbox/);
    // A sandbox that is not running opens nothing.
    expect(code(() => signedFileTarget({ ...req, signature }, [sandbox('sbx_c', 'paused'), b], 0))).toMatch(/matches no sandbox/);
  });

  it('refuses an expired URL before looking at any token', () => {
    const signed = { ...req, expirationS: 100 };
    const signature = e2bSignature(signed, 'token-a');
    expect(signedFileTarget({ ...signed, signature }, [a], 99_999).sbx).toBe(a);
    expect(code(() => signedFileTarget({ ...signed, signature }, [a], 100_000))).toMatch(/^unauthenticated: This file URL has expired/);
  });

  it('parses the query: no signature is not a signed URL; a malformed one is refused', () => {
    expect(signedFileRequest('GET', { path: 'p' })).toBeUndefined();
    const signature = `v1_${'A'.repeat(43)}`;
    expect(signedFileRequest('GET', { path: 'p', signature })).toEqual({ path: 'p', user: '', operation: 'read', signature });
    expect(signedFileRequest('POST', { signature, username: 'root', signature_expiration: '12' })).toEqual({
      path: '',
      user: 'root',
      operation: 'write',
      signature,
      expirationS: 12,
    });
    expect(code(() => signedFileRequest('GET', { signature: 'v1_short' }))).toMatch(/^unauthenticated: .*malformed/);
    expect(code(() => signedFileRequest('GET', { signature, signature_expiration: '-1' }))).toMatch(/^unauthenticated: signature_expiration/);
  });

  it('remembers the newest tokens of a sandbox, a bounded few', () => {
    const s = sandbox('sbx_d');
    for (let i = 0; i < MAX_SIGNING_TOKENS + 3; i++) envdState(s).rememberToken(`t${i}`);
    envdState(s).rememberToken('t5');
    const kept = envdState(s).signingTokens;
    expect(kept).toHaveLength(MAX_SIGNING_TOKENS);
    expect(kept.at(-1)).toBe('t5');
    expect(kept).not.toContain('t0');
  });
});
