// The data-plane credentials under one key family: each verifies as itself only, and tampering or expiry refuses it.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  portUrlKey,
  signAccessToken,
  signPortUrlToken,
  signTrafficToken,
  trafficTokenKey,
  verifyAccessToken,
  verifyDataPlaneCredential,
  verifyPortUrlToken,
  verifyTrafficToken,
} from './access-token.js';

const key = randomBytes(32);
const now = 1_800_000_000_000;

describe('data-plane credentials', () => {
  it('an access token and a port URL token each verify as what they are, with the claims they carry', () => {
    const at = signAccessToken({ sbx: 'sbx_a', ten: 't1', exp: now + 1000, kid: 'key_1' }, key);
    const pu = signPortUrlToken({ sbx: 'sbx_a', prt: 8000, exp: now + 1000, kid: 'key_1' }, portUrlKey(key));
    expect(verifyDataPlaneCredential(at, key, now)).toEqual({ sbx: 'sbx_a', ten: 't1', kid: 'key_1' });
    expect(verifyDataPlaneCredential(pu, key, now)).toEqual({ sbx: 'sbx_a', kid: 'key_1' });
    expect(verifyPortUrlToken(pu, portUrlKey(key), now).prt).toBe(8000);
  });

  it('a port URL never verifies as an access token, nor the reverse', () => {
    const pu = signPortUrlToken({ sbx: 'sbx_a', prt: 8000, exp: now + 1000 }, portUrlKey(key));
    const asAccess = `sgat_${pu.slice('sgpu_'.length)}`;
    expect(() => verifyAccessToken(asAccess, key, now)).toThrow(/not valid/);
    const at = signAccessToken({ sbx: 'sbx_a', ten: 't1', exp: now + 1000 }, key);
    expect(() => verifyDataPlaneCredential(`sgpu_${at.slice('sgat_'.length)}`, key, now)).toThrow(/not valid/);
  });

  it('refuses tampered claims, another key and expiry', () => {
    const pu = signPortUrlToken({ sbx: 'sbx_a', prt: 8000, exp: now + 1000 }, portUrlKey(key));
    const [body, mac] = pu.slice('sgpu_'.length).split('.');
    const other = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(body!, 'base64url').toString()), sbx: 'sbx_b' })).toString('base64url');
    expect(() => verifyDataPlaneCredential(`sgpu_${other}.${mac}`, key, now)).toThrow(/not valid/);
    expect(() => verifyDataPlaneCredential(pu, randomBytes(32), now)).toThrow(/not valid/);
    expect(() => verifyDataPlaneCredential(pu, key, now + 1000)).toThrow(/expired/);
    expect(() => verifyDataPlaneCredential('sgpu_x', key, now)).toThrow(/malformed/);
  });

  it('a traffic token verifies as itself, and as none of the others under their prefixes or keys', () => {
    const tt = signTrafficToken({ sbx: 'sbx_a', ten: 't1', exp: now + 1000, kid: 'key_1' }, trafficTokenKey(key));
    expect(verifyDataPlaneCredential(tt, key, now)).toEqual({ sbx: 'sbx_a', ten: 't1', kid: 'key_1' });
    const body = tt.slice('sgtt_'.length);
    expect(() => verifyDataPlaneCredential(`sgat_${body}`, key, now)).toThrow(/not valid/);
    expect(() => verifyDataPlaneCredential(`sgpu_${body}`, key, now)).toThrow(/not valid/);
    const at = signAccessToken({ sbx: 'sbx_a', ten: 't1', exp: now + 1000 }, key);
    expect(() => verifyDataPlaneCredential(`sgtt_${at.slice('sgat_'.length)}`, key, now)).toThrow(/not valid/);
    const pu = signPortUrlToken({ sbx: 'sbx_a', prt: 8000, exp: now + 1000 }, portUrlKey(key));
    expect(() => verifyTrafficToken(`sgtt_${pu.slice('sgpu_'.length)}`, trafficTokenKey(key), now)).toThrow(/not valid/);
    expect(() => verifyTrafficToken(tt, trafficTokenKey(key), now + 1000)).toThrow(/expired/);
  });
});
