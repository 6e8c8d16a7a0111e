// The gateway's auth lives on its routes: every spelling of every route in spec/gateway.yaml, without the right
// credential, is refused before any handler touches the gateway; internal routes exist only on the internal socket.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deriveNodeKeys, ManualClock, signAccessToken } from '@sandglass/core';
import type { Gateway } from './gateway.js';
import { createDataPlaneServer, createInternalServer, listenOnSocket } from './server.js';
import { RevokedKeys } from './auth.js';
import { GuestPorts } from './ports.js';
import { errorCodeOf, fillPath, pathVariants, rawRequest, specOperations, type RawResponse } from './test-support.js';

const SECRET = Buffer.alloc(32, 5);
const KEYS = deriveNodeKeys(SECRET);
const clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
const SBX = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const OTHER = 'sbx_bbbbbbbbbbbbbbbbbbbb';
const ids = { id: SBX, port: '3000', cid: 'cmd_1', requestId: 'apr_1', contentId: 'c'.repeat(64), tenantId: 'ten_a' };
const ops = specOperations(fileURLToPath(new URL('../../../spec/gateway.yaml', import.meta.url)));
const dataOps = ops.filter((o) => o.security.includes('accessToken'));
const internalOps = ops.filter((o) => o.security.includes('nodeSecret'));

const token = (sbx: string, key = KEYS.accessToken) => signAccessToken({ sbx, ten: 'ten_a', exp: clock.nowMs() + 60_000 }, key);
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

const revokedKeys = new RevokedKeys();
const publicPorts = new Map<string, Set<number>>();
/** What handlers reached: any use of the gateway beyond its options is a handler at work. */
const touched: string[] = [];
const gw = new Proxy({} as Gateway, {
  get(_t, prop) {
    if (prop === 'opts') return { nodeSecret: SECRET, clock, events: { append: async () => touched.push('events.append') } };
    // Read once when the data plane is built, to check tokens against: part of authentication, not a handler.
    if (prop === 'revokedKeys') return revokedKeys;
    // So is the map of ports open without a credential (read once too): none here.
    if (prop === 'publicPorts') return publicPorts;
    if (prop === 'then') return undefined;
    touched.push(String(prop));
    throw new Error(`handler reached gw.${String(prop)}`);
  },
});

let dataPlane: FastifyInstance;
let internal: FastifyInstance;
let dataPort: number;
const dir = mkdtempSync(join(tmpdir(), 'sg-gw-auth-'));
const socketPath = join(dir, 'internal.sock');

beforeAll(async () => {
  dataPlane = await createDataPlaneServer(gw);
  await dataPlane.listen({ port: 0, host: '127.0.0.1' });
  dataPort = (dataPlane.server.address() as AddressInfo).port;
  internal = await createInternalServer(gw);
  await listenOnSocket(internal, socketPath);
});
afterAll(async () => {
  await dataPlane?.close();
  await internal?.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => {
  touched.length = 0;
});

const REFUSALS = new Set(['unauthenticated', 'permission_denied', 'not_found']);
/** A refusal by the auth hook or the router: never 2xx, never an error a handler would raise. */
function refused(r: RawResponse, method: string): boolean {
  // A HEAD answer has no body to tell whose refusal it is; `touched` tells whether a handler ran.
  if (method === 'HEAD') return [401, 403, 404].includes(r.status);
  return r.status >= 400 && r.status < 500 && REFUSALS.has(errorCodeOf(r.body) ?? '');
}

async function probe(target: Parameters<typeof rawRequest>[0], method: string, paths: string[], headers: Record<string, string>, query = '') {
  const bad: string[] = [];
  for (const p of paths) {
    const withBody = method === 'POST' || method === 'PUT';
    const r = await rawRequest(target, method, p + query, {
      headers: withBody ? { ...headers, 'content-type': 'application/json' } : headers,
      body: withBody ? '{}' : undefined,
    });
    if (!refused(r, method)) bad.push(`${method} ${p}${query} -> ${r.status} ${r.body.slice(0, 120)}`);
  }
  return bad;
}

describe('data plane', () => {
  it('covers every data-plane route of the spec', () => {
    expect(dataOps.length).toBeGreaterThan(10);
    expect(internalOps.length).toBeGreaterThan(10);
  });

  it.each(dataOps.map((o) => [`${o.method} ${o.path}`, o] as const))('%s: no spelling passes without a token or with another sandbox’s', async (_n, op) => {
    const variants = pathVariants(fillPath(op.path, ids));
    const bad = [
      ...(await probe({ port: dataPort }, op.method, variants, {})),
      ...(await probe({ port: dataPort }, op.method, variants, bearer(token(OTHER)))),
      // fastify answers HEAD for every GET route: the same hooks must guard it.
      ...(op.method === 'GET' ? await probe({ port: dataPort }, 'HEAD', variants, {}) : []),
    ];
    expect(bad).toEqual([]);
    expect(touched).toEqual([]);
  });

  it.each(dataOps.map((o) => [`${o.method} ${o.path}`, o] as const))(
    '%s: refuses the node secret, the internal bearer, and a token under the bearer key',
    async (_n, op) => {
      const path = fillPath(op.path, ids);
      const bad: string[] = [];
      for (const h of [
        bearer(SECRET.toString('hex')),
        bearer(KEYS.internalBearer.toString('hex')),
        bearer(token(SBX, KEYS.internalBearer)),
        bearer(token(SBX, SECRET)),
      ]) {
        bad.push(...(await probe({ port: dataPort }, op.method, [path], h)));
      }
      expect(bad).toEqual([]);
      expect(touched).toEqual([]);
    },
  );

  it('guest port relays: no spelling, form or stray credential reaches the sandbox without its token', async () => {
    const paths = [
      ...pathVariants(`/v1/sandboxes/${SBX}/ports/3000/x`),
      `/v1/sandboxes/${SBX}/ports/3000`,
      `/v1/sandboxes/${SBX}/ports/0/`,
      `/v1/sandboxes/${SBX}/ports/3000/?access_token=${token(SBX)}`,
      `/v1/sandboxes/${SBX}/ports/3000/?sandglass_url_token=${token(SBX)}`,
    ];
    const bad: string[] = [];
    for (const method of ['GET', 'POST', 'HEAD']) {
      bad.push(...(await probe({ port: dataPort }, method, paths, {})));
      bad.push(...(await probe({ port: dataPort }, method, paths, bearer(token(SBX)))));
      bad.push(...(await probe({ port: dataPort }, method, paths, { 'x-sandglass-access-token': token(OTHER) })));
      bad.push(...(await probe({ port: dataPort }, method, ['/', '/v1/health'], { host: `3000-${SBX}.sandglass.localhost` })));
      bad.push(...(await probe({ port: dataPort }, method, ['/'], { host: `3000-${SBX}.sandglass.localhost`, 'x-sandglass-access-token': token(OTHER) })));
      bad.push(...(await probe({ port: dataPort }, method, ['/'], { host: `3000-${SBX}.sandglass.localhost`, cookie: `sandglass_port_access=${token(SBX)}` })));
    }
    bad.push(...(await probe({ port: dataPort }, 'GET', [`/v1/sandboxes/${SBX}/tunnel/3000`], { connection: 'Upgrade', upgrade: 'sandglass-tcp' })));
    expect(bad).toEqual([]);
    expect(touched).toEqual([]);
  });

  it("a port cookie counts only for the sandbox's own pages, and one set beside it by another host hides nothing", async () => {
    const cookie = new GuestPorts(gw, KEYS).signUrl(token(SBX), SBX, 3000, 60).token;
    const host = `3000-${SBX}.sandglass.localhost`;
    const withCookie = { host, cookie: `sandglass_port_access=${cookie}` };
    const bad: string[] = [];
    // A page of another sandbox (one site with this one to a browser), a sandboxed frame, another site, a look-alike.
    for (const origin of [`http://3000-${OTHER}.sandglass.localhost`, 'null', 'http://evil.example', `http://${host}.evil.example`]) {
      for (const method of ['GET', 'POST']) bad.push(...(await probe({ port: dataPort }, method, ['/'], { ...withCookie, origin })));
      bad.push(...(await probe({ port: dataPort }, 'GET', ['/ws'], { ...withCookie, origin, connection: 'Upgrade', upgrade: 'websocket' })));
    }
    // The path form's pages are the gateway's origin's: a host-form page is not.
    const pathCookie = { cookie: `sandglass_port_access=${cookie}`, origin: `http://${host}` };
    bad.push(...(await probe({ port: dataPort }, 'POST', [`/v1/sandboxes/${SBX}/ports/3000/`], pathCookie)));
    expect(bad).toEqual([]);
    expect(touched).toEqual([]);
    // Its own page, a page of another port of the sandbox, and the cookie sent after one another host set: all reach the relay.
    for (const headers of [
      { ...withCookie, origin: `http://${host}:8080` },
      { ...withCookie, origin: `http://8000-${SBX}.sandglass.localhost` },
      { host, cookie: `sandglass_port_access=sgpu_dG9zc2Vk.dG9zc2Vk; app=1; sandglass_port_access=${cookie}` },
    ]) {
      touched.length = 0;
      await rawRequest({ port: dataPort }, 'GET', '/', { headers });
      // A credentialed request finds its sandbox through reach (which may wake a paused one), not a bare get.
      expect(touched).toEqual(['reach']);
    }
  });

  it('takes ?access_token= on the WebSocket route only', async () => {
    const queryOnly = `?access_token=${token(SBX)}`;
    for (const op of dataOps.filter((o) => !o.websocket)) {
      expect(
        await probe(
          { port: dataPort },
          op.method,
          [fillPath(op.path, ids)],
          {},
          op.path.includes('/files') && !op.path.endsWith('mkdir') && !op.path.endsWith('rename') ? `${queryOnly}&path=/x` : queryOnly,
        ),
      ).toEqual([]);
    }
    expect(touched).toEqual([]);
    // The WebSocket route does take it (the handler then looks the sandbox up).
    const ws = dataOps.find((o) => o.websocket)!;
    await rawRequest({ port: dataPort }, 'GET', fillPath(ws.path, ids) + queryOnly);
    expect(touched).not.toEqual([]);
  });

  it('a valid token reaches the handler (the probe can tell)', async () => {
    const r = await rawRequest({ port: dataPort }, 'GET', `/v1/sandboxes/${SBX}/commands`, { headers: bearer(token(SBX)) });
    expect(r.status).toBe(500);
    expect(touched).toEqual(['get']);
  });

  it('serves no internal route, whatever the credential', async () => {
    const bad: string[] = [];
    for (const op of internalOps) {
      const variants = pathVariants(fillPath(op.path, ids));
      // The old bearer (the raw secret) over every spelling; the others on the route as written.
      bad.push(...(await probe({ port: dataPort }, op.method, variants, bearer(SECRET.toString('hex')))));
      for (const h of [{}, bearer(KEYS.internalBearer.toString('hex'))]) bad.push(...(await probe({ port: dataPort }, op.method, [variants[0]!], h)));
    }
    expect(bad).toEqual([]);
    expect(touched).toEqual([]);
    const r = await rawRequest({ port: dataPort }, 'GET', '/internal/v1/sandboxes', { headers: bearer(KEYS.internalBearer.toString('hex')) });
    expect([r.status, errorCodeOf(r.body)]).toEqual([404, 'not_found']);
  });
});

describe('internal API', () => {
  it('listens on a socket only its owner may open', () => {
    expect(statSync(socketPath).mode & 0o777).toBe(0o600);
  });

  it.each(internalOps.map((o) => [`${o.method} ${o.path}`, o] as const))('%s: no spelling passes without the internal bearer', async (_n, op) => {
    const variants = pathVariants(fillPath(op.path, ids));
    const bad: string[] = [];
    bad.push(...(await probe({ socketPath }, op.method, variants, {})));
    for (const h of [bearer(SECRET.toString('hex')), bearer(token(SBX)), bearer(KEYS.accessToken.toString('hex'))])
      bad.push(...(await probe({ socketPath }, op.method, [variants[0]!], h)));
    bad.push(...(await probe({ socketPath }, op.method, [fillPath(op.path, ids)], {}, `?access_token=${KEYS.internalBearer.toString('hex')}`)));
    expect(bad).toEqual([]);
    expect(touched).toEqual([]);
  });

  it('serves no data-plane route, whatever the credential', async () => {
    const bad: string[] = [];
    for (const op of dataOps) bad.push(...(await probe({ socketPath }, op.method, [fillPath(op.path, ids)], bearer(token(SBX)))));
    bad.push(...(await probe({ socketPath }, 'GET', ['/v1/health'], {})));
    expect(bad).toEqual([]);
    expect(touched).toEqual([]);
  });

  it('the internal bearer reaches the handler (the probe can tell)', async () => {
    const r = await rawRequest({ socketPath }, 'GET', '/internal/v1/sandboxes', { headers: bearer(KEYS.internalBearer.toString('hex')) });
    expect(r.status).toBe(500);
    expect(touched).toEqual(['sandboxes']);
  });
});
