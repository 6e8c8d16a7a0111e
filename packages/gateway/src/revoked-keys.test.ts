// Access tokens obtained with a revoked API key: refused by the data plane's hook while they could still be unexpired.
import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { deriveNodeKeys, signAccessToken, type Clock } from '@sandglass/core';
import { accessTokenHook, RevokedKeys } from './auth.js';

const keys = deriveNodeKeys(Buffer.alloc(32, 7));
const now = 1_000_000;
const clock = { nowMs: () => now } as Clock;

function request(token: string, id = 'sbx_a'): FastifyRequest {
  return { headers: { authorization: `Bearer ${token}` }, params: { id }, query: {}, routeOptions: { config: {} } } as unknown as FastifyRequest;
}

describe('revoked API keys on the data plane', () => {
  it('refuses a signed, unexpired token once its key is revoked, and only that key’s tokens', async () => {
    const revoked = new RevokedKeys();
    const hook = accessTokenHook(keys, clock, revoked);
    const mine = signAccessToken({ sbx: 'sbx_a', ten: 't', exp: now + 60_000, kid: 'key_1' }, keys.accessToken);
    const other = signAccessToken({ sbx: 'sbx_a', ten: 't', exp: now + 60_000, kid: 'key_2' }, keys.accessToken);
    await expect(hook(request(mine))).resolves.toBeUndefined();
    revoked.add(['key_1'], now + 60_000);
    await expect(hook(request(mine))).rejects.toMatchObject({ code: 'api_key_revoked' });
    await expect(hook(request(other))).resolves.toBeUndefined();
  });

  it('forgets an entry once every token it could match has expired', () => {
    const revoked = new RevokedKeys();
    revoked.add(['key_1'], now + 10);
    revoked.add(['key_1'], now + 5);
    expect(revoked.has('key_1', now + 9)).toBe(true);
    expect(revoked.has('key_1', now + 10)).toBe(false);
    expect(revoked.has('key_1', now)).toBe(false);
  });
});
