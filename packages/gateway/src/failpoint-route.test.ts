// The failpoint arming route: absent (404) on a production node whatever the credential, and behind the internal
// bearer on a chaos node; a tenant's token never reaches it either way.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { armedFailpoints, deriveNodeKeys, disarmFailpoints, ManualClock, signAccessToken } from '@sandglass/core';
import type { Gateway } from './gateway.js';
import { createInternalServer, listenOnSocket } from './server.js';
import { errorCodeOf, rawRequest } from './test-support.js';

const SECRET = Buffer.alloc(32, 7);
const KEYS = deriveNodeKeys(SECRET);
const clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
// The route touches no gateway state: a gateway with only its options is enough.
const gw = { opts: { nodeSecret: SECRET, clock } } as unknown as Gateway;
const dir = mkdtempSync(join(tmpdir(), 'sg-failpoint-route-'));
const servers: FastifyInstance[] = [];

async function serve(chaos: boolean): Promise<string> {
  const saved = process.env.SANDGLASS_CHAOS;
  if (chaos) process.env.SANDGLASS_CHAOS = '1';
  else delete process.env.SANDGLASS_CHAOS;
  try {
    const app = await createInternalServer(gw);
    const socketPath = join(dir, `${chaos ? 'chaos' : 'prod'}.sock`);
    await listenOnSocket(app, socketPath);
    servers.push(app);
    return socketPath;
  } finally {
    if (saved === undefined) delete process.env.SANDGLASS_CHAOS;
    else process.env.SANDGLASS_CHAOS = saved;
  }
}

const arm = (socketPath: string, authorization: string) =>
  rawRequest({ socketPath }, 'POST', '/internal/v1/failpoints', {
    headers: { authorization, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'egress.upstream', spec: 'reset' }),
  });

afterAll(async () => {
  for (const s of servers) await s.close();
  disarmFailpoints();
  rmSync(dir, { recursive: true, force: true });
});

describe('failpoint route', () => {
  it('does not exist without SANDGLASS_CHAOS=1, even for the internal bearer', async () => {
    const socketPath = await serve(false);
    const r = await arm(socketPath, `Bearer ${KEYS.internalBearer.toString('hex')}`);
    expect(r.status).toBe(404);
    expect(armedFailpoints()).toEqual([]);
  });

  it('on a chaos node arms a failpoint for the internal bearer only', async () => {
    const socketPath = await serve(true);
    const tenantToken = signAccessToken({ sbx: 'sbx_aaaaaaaaaaaaaaaaaaaa', ten: 'ten_a', exp: clock.nowMs() + 60_000 }, KEYS.accessToken);
    const refused = await arm(socketPath, `Bearer ${tenantToken}`);
    expect(refused.status).toBe(401);
    expect(errorCodeOf(refused.body)).toBe('unauthenticated');
    expect(armedFailpoints()).toEqual([]);
    const ok = await arm(socketPath, `Bearer ${KEYS.internalBearer.toString('hex')}`);
    expect(ok.status).toBe(204);
    expect(armedFailpoints()).toEqual(['egress.upstream']);
    const unknown = await rawRequest({ socketPath }, 'POST', '/internal/v1/failpoints', {
      headers: { authorization: `Bearer ${KEYS.internalBearer.toString('hex')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'no.such', spec: 'kill' }),
    });
    expect(unknown.status).toBe(400);
  });
});
