// Forwarding of envd requests between gateways (cluster mode): the data-plane server of a gateway that runs no
// sandbox, in front of an upstream double standing in for the gateway that does (it records what reaches it).
import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deriveNodeKeys, signAccessToken, systemClock } from '@sandglass/core';
import { RevokedKeys } from '../auth.js';
import type { Gateway } from '../gateway.js';
import { createDataPlaneServer } from '../server.js';
import { EnvdForwarder, FORWARDED_HEADER, type SandboxLocation } from './forward.js';

const SECRET = Buffer.alloc(32, 9);
const SBX = 'sbx_fwdtestaaaaaaaaaaaaa';
const keys = deriveNodeKeys(SECRET);
const token = signAccessToken({ sbx: SBX, ten: 'ten_a', exp: Date.now() + 600_000 }, keys.accessToken);

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

let app: FastifyInstance;
let upstream: Server;
let upstreamUrl = '';
let gwPort = 0;
let forwarder: EnvdForwarder;
let location: SandboxLocation | undefined;
let lookups: string[] = [];
let seen: Seen[] = [];
/** The upstream's handler of the next request, after it recorded it. */
let answer: (req: IncomingMessage, res: ServerResponse) => void;

beforeAll(async () => {
  upstream = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString() });
      answer(req, res);
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  forwarder = new EnvdForwarder({
    nodeId: 'n1',
    clock: systemClock,
    cacheMs: 0,
    locate: async (id) => {
      lookups.push(id);
      return location;
    },
  });
  const gw = { opts: { nodeSecret: SECRET, clock: systemClock }, revokedKeys: new RevokedKeys(), sandboxes: new Map() } as unknown as Gateway;
  app = await createDataPlaneServer(gw, { envdForward: forwarder });
  await app.listen({ port: 0, host: '127.0.0.1' });
  gwPort = (app.server.address() as AddressInfo).port;
});

afterAll(async () => {
  app.server.closeAllConnections();
  await app.close();
  forwarder.close();
  upstream.closeAllConnections();
  upstream.close();
});

beforeEach(() => {
  location = { gatewayId: 'n2', dataPlaneUrl: upstreamUrl };
  lookups = [];
  seen = [];
  answer = (_req, res) => res.writeHead(204).end();
});

/** A request to the gateway; resolves with the response as soon as its head arrives (the body left to read). */
function send(path: string, headers: Record<string, string>, body?: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: gwPort, path, method: body === undefined ? 'GET' : 'POST', headers }, resolve);
    req.on('error', reject);
    req.end(body);
  });
}

async function text(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString();
}

const envd = { 'e2b-sandbox-id': SBX, 'e2b-sandbox-port': '49983', 'x-access-token': token };

describe('envd requests for a sandbox another gateway runs', () => {
  it('are proxied whole: method, path under /e2b, end-to-end headers, body; hop-by-hop headers dropped both ways', async () => {
    answer = (_req, res) =>
      res
        .writeHead(200, { 'content-type': 'application/json', connection: 'x-upstream-hop', 'x-upstream-hop': 'y', 'x-end-to-end': 'kept' })
        .end('{"entry":{}}');
    const res = await send(
      '/e2b/filesystem.Filesystem/Stat?q=1',
      {
        ...envd,
        authorization: `Basic ${Buffer.from('user:').toString('base64')}`,
        'content-type': 'application/json',
        'connect-protocol-version': '1',
        'connect-timeout-ms': '5000',
        connection: 'keep-alive, x-client-hop',
        'x-client-hop': 'secret',
        'proxy-authorization': 'Basic cHJveHk6',
      },
      '{"path":"/tmp"}',
    );
    expect(res.statusCode).toBe(200);
    expect(await text(res)).toBe('{"entry":{}}');
    expect(res.headers['x-end-to-end']).toBe('kept');
    expect(res.headers['x-upstream-hop']).toBeUndefined();
    expect(lookups).toEqual([SBX]);
    const [up] = seen;
    expect(up).toMatchObject({ method: 'POST', url: '/e2b/filesystem.Filesystem/Stat?q=1', body: '{"path":"/tmp"}' });
    expect(up!.headers).toMatchObject({
      'x-access-token': token,
      authorization: `Basic ${Buffer.from('user:').toString('base64')}`,
      'content-type': 'application/json',
      'connect-protocol-version': '1',
      'connect-timeout-ms': '5000',
      'e2b-sandbox-id': SBX,
      'e2b-sandbox-port': '49983',
      [FORWARDED_HEADER]: 'n1',
    });
    expect(up!.headers['x-client-hop']).toBeUndefined();
    expect(up!.headers['proxy-authorization']).toBeUndefined();
  });

  it('streams the answer as it comes: the second frame is sent only after the client got the first', async () => {
    let sendSecond!: () => void;
    const secondAllowed = new Promise<void>((r) => (sendSecond = r));
    answer = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/connect+json' });
      res.write('frame-1;');
      void secondAllowed.then(() => res.end('frame-2;'));
    };
    const res = await send('/e2b/process.Process/Start', { ...envd, 'content-type': 'application/connect+json' }, 'start');
    const it = res[Symbol.asyncIterator]();
    // Buffered by the proxy, this first chunk would never come: the upstream waits for it to arrive here.
    expect(String((await it.next()).value)).toBe('frame-1;');
    sendSecond();
    let rest = '';
    for (let r = await it.next(); !r.done; r = await it.next()) rest += String(r.value);
    expect(rest).toBe('frame-2;');
  });

  it('a client that goes away aborts the upstream request', async () => {
    let upstreamClosed!: () => void;
    const closed = new Promise<void>((r) => (upstreamClosed = r));
    answer = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/connect+json' });
      res.write('frame-1;');
      res.on('close', upstreamClosed);
    };
    const res = await send('/e2b/process.Process/Start', envd, 'start');
    await new Promise((r) => res.once('data', r));
    res.destroy();
    await closed;
  });

  it('the host form is forwarded under /e2b with the sandbox id and port as headers', async () => {
    const res = await send('/health', { host: `49983-${SBX}.sandboxes.test`, 'x-access-token': token });
    expect(res.statusCode).toBe(204);
    expect(seen.map((s) => s.url)).toEqual(['/e2b/health']);
    expect(seen[0]!.headers).toMatchObject({ 'e2b-sandbox-id': SBX, 'e2b-sandbox-port': '49983', [FORWARDED_HEADER]: 'n1' });
    expect(seen[0]!.headers.host).toBe(new URL(upstreamUrl).host);
  });

  it('the path is sent as written, under /e2b: dot segments do not climb out to the native data plane', async () => {
    expect((await send('/e2b/../v1/sandboxes/x/files', envd)).statusCode).toBe(204);
    expect(seen.map((s) => s.url)).toEqual(['/e2b/../v1/sandboxes/x/files']);
  });

  it('a request already forwarded is never forwarded again: 502, without a lookup', async () => {
    const res = await send('/e2b/health', { ...envd, [FORWARDED_HEADER]: 'n3' });
    expect(res.statusCode).toBe(502);
    expect(JSON.parse(await text(res))).toMatchObject({ code: 502 });
    expect(lookups).toEqual([]);
    expect(seen).toEqual([]);
  });

  it('the location is asked only after the token checked out for that sandbox', async () => {
    const other = signAccessToken({ sbx: 'sbx_otheraaaaaaaaaaaaaaaa', ten: 'ten_a', exp: Date.now() + 600_000 }, keys.accessToken);
    expect((await send('/e2b/health', { ...envd, 'x-access-token': 'nope' })).statusCode).toBe(401);
    expect((await send('/e2b/health', { ...envd, 'x-access-token': other })).statusCode).toBe(403);
    expect(lookups).toEqual([]);
    expect(seen).toEqual([]);
  });

  it('a sandbox that runs nowhere, or on this gateway (not running here), or whose gateway is unreachable: 502', async () => {
    location = undefined;
    expect((await send('/e2b/health', envd)).statusCode).toBe(502);
    location = { gatewayId: 'n1', dataPlaneUrl: upstreamUrl };
    expect((await send('/e2b/health', envd)).statusCode).toBe(502);
    expect(seen).toEqual([]);
    // A port nothing listens on (the upstream's own, closed below, would be racy): port 1 on loopback.
    location = { gatewayId: 'n2', dataPlaneUrl: 'http://127.0.0.1:1' };
    const res = await send('/e2b/health', envd);
    expect(res.statusCode).toBe(502);
    expect(JSON.parse(await text(res)).message).toMatch(/cannot be reached/);
  });
});
