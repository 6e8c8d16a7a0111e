// The SDK's HTTP transport against a real local node:http server: header timeout, stale-socket retry, streaming both ways, typed errors.
import { execFile } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createTlsServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConnectionError, NotFoundError, ProtocolError, TimeoutError, type SandglassError } from './errors.js';
import { RESPONSE_CHANNEL, send, type HttpRequest, type ObservedResponse } from './http.js';

type Handler = (req: IncomingMessage, res: ServerResponse, socketRequests: number) => unknown;

let server: Server;
let base: string;
let handler: Handler;
/** Every connection the server accepted, and how many requests each carried. */
let connections: Map<Socket, number>;

beforeEach(async () => {
  connections = new Map();
  server = createServer((req, res) => {
    const n = (connections.get(req.socket) ?? 0) + 1;
    connections.set(req.socket, n);
    void handler(req, res, n);
  });
  server.on('connection', (s: Socket) => connections.set(s, 0));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const get = (path: string, extra: Partial<HttpRequest> = {}) => send(new URL(base + path), 'tok', { method: 'GET', timeoutMs: 5_000, ...extra });
const caught = (p: Promise<unknown>) =>
  p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (err: SandglassError) => err,
  );

async function readAll(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

describe('send', () => {
  it('sends the bearer token and a JSON body, and reads a JSON answer', async () => {
    handler = async (req, res) => {
      const body = JSON.parse((await readAll(req)).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ auth: req.headers.authorization, type: req.headers['content-type'], body }));
    };
    const res = await send(new URL(`${base}/x`), 'tok', { method: 'POST', json: { a: 1 }, timeoutMs: 5_000 });
    expect(res.status).toBe(200);
    expect(JSON.parse(await res.text())).toEqual({ auth: 'Bearer tok', type: 'application/json', body: { a: 1 } });
  });

  it('publishes each answer read whole, errors included, on its diagnostics channel, and no streamed one', async () => {
    const seen: ObservedResponse[] = [];
    const listener = (m: unknown) => seen.push(m as ObservedResponse);
    subscribe(RESPONSE_CHANNEL, listener);
    try {
      handler = (req, res) => {
        res.writeHead(req.url === '/gone' ? 404 : 200, { 'content-type': 'application/json' });
        res.end(req.url === '/gone' ? '{"error":{"code":"not_found","message":"no"}}' : '{"ok":true}');
      };
      await get('/one');
      await caught(get('/gone'));
      const streamed = await get('/streamed', { stream: true });
      await streamed.text();
    } finally {
      unsubscribe(RESPONSE_CHANNEL, listener);
    }
    expect(seen.map((r) => [r.method, r.url.pathname, r.status, r.headers['content-type'], r.body.toString()])).toEqual([
      ['GET', '/one', 200, 'application/json', '{"ok":true}'],
      ['GET', '/gone', 404, 'application/json', '{"error":{"code":"not_found","message":"no"}}'],
    ]);
  });

  it('reads an ignored body whole, so one kept-alive connection carries every request', async () => {
    handler = (_req, res) => res.end('x'.repeat(10_000));
    for (let i = 0; i < 20; i++) await get('/x');
    expect(connections.size).toBe(1);
    expect([...connections.values()]).toEqual([20]);
  });

  it('times out when the headers do not arrive, but not while the body streams', async () => {
    handler = () => undefined;
    const err = await caught(get('/never', { timeoutMs: 200 }));
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err.code).toBe('timeout');

    let finish!: () => void;
    const finished = new Promise<void>((resolve) => {
      finish = resolve;
    });
    handler = async (_req, res) => {
      res.writeHead(200);
      res.write('first ');
      await finished;
      res.end('last');
    };
    const res = await get('/slow', { timeoutMs: 200, stream: true });
    const reader = res.webStream().getReader();
    expect(Buffer.from((await reader.read()).value!).toString()).toBe('first ');
    // Past the header timeout, the body keeps coming.
    await new Promise((resolve) => setTimeout(resolve, 400));
    finish();
    const rest: Buffer[] = [];
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest.push(Buffer.from(r.value));
    expect(Buffer.concat(rest).toString()).toBe('last');
  });

  it('sends a GET again on a fresh connection when its kept-alive one was closed as it was reused', async () => {
    // The server closes a connection when its second request arrives: what a server's idle close racing a reuse looks like.
    handler = (req, res, n) => (n === 2 ? req.socket.destroy() : res.end('ok'));
    await get('/a');
    const res = await get('/b');
    expect(await res.text()).toBe('ok');
    expect([...connections.values()]).toEqual([2, 1]);
  });

  it('does not send a POST again when its kept-alive connection drops: it may have run', async () => {
    handler = (req, res, n) => (n === 2 ? req.socket.destroy() : res.end('ok'));
    await get('/a');
    const err = await caught(send(new URL(`${base}/b`), 'tok', { method: 'POST', json: {}, timeoutMs: 5_000 }));
    expect(err).toBeInstanceOf(ConnectionError);
    expect(err.retryable).toBe(true);
    expect([...connections.values()]).toEqual([2]);
  });

  it('streams an AsyncIterable body no faster than the server reads it', async () => {
    const chunk = Buffer.alloc(64 * 1024, 7);
    const chunks = 1024;
    let produced = 0;
    let received = 0;
    let maxAhead = 0;
    handler = async (req, res) => {
      // Read nothing for a while: without backpressure the whole 64 MiB would be produced meanwhile.
      req.pause();
      await new Promise((resolve) => setTimeout(resolve, 300));
      for await (const c of req) received += (c as Buffer).length;
      res.end(String(received));
    };
    async function* body() {
      for (let i = 0; i < chunks; i++) {
        maxAhead = Math.max(maxAhead, produced - received);
        produced += chunk.length;
        yield chunk;
      }
    }
    const res = await send(new URL(`${base}/up`), 'tok', { method: 'PUT', body: body(), timeoutMs: 0 });
    expect(Number(await res.text())).toBe(chunk.length * chunks);
    expect(maxAhead).toBeLessThan(16 * 1024 * 1024);
  });

  it('streams a ReadableStream body, chunked, with its content type', async () => {
    handler = async (req, res) => {
      const body = await readAll(req);
      res.end(JSON.stringify({ te: req.headers['transfer-encoding'], type: req.headers['content-type'], body: body.toString() }));
    };
    let i = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull: (c) => (i < 3 ? c.enqueue(Buffer.from(`part${i++};`)) : c.close()),
    });
    const res = await send(new URL(`${base}/up`), 'tok', { method: 'PUT', body: stream, contentType: 'application/x-tar', timeoutMs: 0 });
    expect(JSON.parse(await res.text())).toEqual({ te: 'chunked', type: 'application/x-tar', body: 'part0;part1;part2;' });
  });

  it("passes on the body source's own error", async () => {
    handler = async (req, res) => {
      await readAll(req).catch(() => undefined);
      res.end();
    };
    const boom = new Error('source broke');
    async function* body() {
      yield Buffer.from('some');
      throw boom;
    }
    await expect(send(new URL(`${base}/up`), 'tok', { method: 'PUT', body: body(), timeoutMs: 0 })).rejects.toBe(boom);
  });

  it('turns a non-2xx answer into the typed error with its request id', async () => {
    handler = (_req, res) => {
      res.writeHead(404, { 'content-type': 'application/json', 'x-request-id': 'req_h' });
      res.end(JSON.stringify({ error: { code: 'sandbox_not_found', message: 'no such sandbox', requestId: 'req_b' } }));
    };
    const err = await caught(get('/missing', { stream: true }));
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err.code).toBe('sandbox_not_found');
    expect(err.status).toBe(404);

    handler = (_req, res) => {
      res.writeHead(502);
      res.end('<html>bad gateway</html>');
    };
    const proxy = await caught(get('/proxy'));
    expect(proxy.status).toBe(502);
    expect(proxy.message).toContain('bad gateway');
  });

  it('does not follow a redirect, which would carry the token elsewhere, and says where it pointed', async () => {
    handler = (_req, res) => {
      res.writeHead(301, { location: 'https://elsewhere.example/v1/health' });
      res.end();
    };
    const err = await caught(get('/v1/health'));
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err.status).toBe(301);
    expect(err.message).toContain('https://elsewhere.example/v1/health');
    expect(connections.size).toBe(1);
  });

  it('reports a server that is not there, and a body cut short, as connection_failed', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const refused = await caught(send(new URL(`http://127.0.0.1:${port}/x`), 'tok', { method: 'GET', timeoutMs: 5_000 }));
    expect(refused).toBeInstanceOf(ConnectionError);
    expect(refused.message).toContain('ECONNREFUSED');

    handler = (req, res) => {
      res.writeHead(200, { 'content-length': '100' });
      res.write('only part');
      setTimeout(() => req.socket.destroy(), 50);
    };
    const cut = await caught(get('/cut'));
    expect(cut).toBeInstanceOf(ConnectionError);
  });

  it('hands over a streamed body as it arrives, and closes the connection when it is cancelled', async () => {
    let next!: () => void;
    const more = new Promise<void>((resolve) => {
      next = resolve;
    });
    let closed!: () => void;
    const serverSawClose = new Promise<void>((resolve) => {
      closed = resolve;
    });
    handler = async (_req, res) => {
      res.on('close', closed);
      res.writeHead(200);
      res.write('a');
      await more;
      res.write('b');
    };
    const res = await get('/follow', { stream: true });
    const reader = res.webStream().getReader();
    expect(Buffer.from((await reader.read()).value!).toString()).toBe('a');
    next();
    expect(Buffer.from((await reader.read()).value!).toString()).toBe('b');
    await reader.cancel();
    await serverSawClose;
  });
});

// A self-signed certificate for 127.0.0.1, made for this test alone (valid for 100 years): the SDK trusts what Node
// trusts, the system's CAs and NODE_EXTRA_CA_CERTS, exactly as it did over fetch.
const TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBrDCCAVOgAwIBAgIUEV1q+UnXT6rS+XgG9xo2eZnlfAUwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSc2FuZGdsYXNzIHNkayB0ZXN0MCAXDTI2MTIwMTEyMzUyNloY
DzIxMjYxMTA3MTIzNTI2WjAdMRswGQYDVQQDDBJzYW5kZ2xhc3Mgc2RrIHRlc3Qw
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATv4QC4fzX+Mh5ULom78qeYtmTCMUCi
o51rBnduZ5X1AE7d8e2EO4ehDzd0ZjCFEWBtNqXkf6/0ojBgrv3kftb4o28wbTAd
BgNVHQ4EFgQUTohv3SsmFx5pQX14ZlL/S/wow7wwHwYDVR0jBBgwFoAUTohv3Ssm
Fx5pQX14ZlL/S/wow7wwDwYDVR0TAQH/BAUwAwEB/zAaBgNVHREEEzARhwR/AAAB
gglsb2NhbGhvc3QwCgYIKoZIzj0EAwIDRwAwRAIgFHs9eJFc5SS1XA4r21fDudCu
DR29Wvh8njRD6YiqDx8CIGQdc5Ex/FKV9tqw6YDwscioHfT6IwLxfkWZI652c5my
-----END CERTIFICATE-----`;
const TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgZ1+BI8JYWXdX7jN0
zRWe8HO4TUaJ4Sr/Ypv4Z0bwIvKhRANCAATv4QC4fzX+Mh5ULom78qeYtmTCMUCi
o51rBnduZ5X1AE7d8e2EO4ehDzd0ZjCFEWBtNqXkf6/0ojBgrv3kftb4
-----END PRIVATE KEY-----`;

describe('send over https', () => {
  it('refuses a certificate no trusted CA signed, and accepts it once NODE_EXTRA_CA_CERTS names it', async () => {
    const tlsServer = createTlsServer({ cert: TEST_CERT, key: TEST_KEY }, (_req, res) => res.end('{"over":"tls"}'));
    await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
    const url = `https://127.0.0.1:${(tlsServer.address() as AddressInfo).port}/v1/health`;
    const dir = mkdtempSync(join(tmpdir(), 'sg-sdk-tls-'));
    try {
      const untrusted = await caught(send(new URL(url), 'tok', { method: 'GET', timeoutMs: 5_000 }));
      expect(untrusted).toBeInstanceOf(ConnectionError);
      expect(untrusted.message).toContain('SELF_SIGNED');

      // NODE_EXTRA_CA_CERTS is read when a process starts: a child process sends the request.
      const caFile = join(dir, 'ca.pem');
      writeFileSync(caFile, TEST_CERT);
      const httpTs = fileURLToPath(new URL('./http.ts', import.meta.url));
      const script = `const { send } = await import(${JSON.stringify(httpTs)}); const res = await send(new URL(${JSON.stringify(url)}), 'tok', { method: 'GET', timeoutMs: 5000 }); process.stdout.write(await res.text());`;
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        env: { ...process.env, NODE_EXTRA_CA_CERTS: caFile },
      });
      expect(JSON.parse(stdout)).toEqual({ over: 'tls' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
      tlsServer.closeAllConnections();
      await new Promise((resolve) => tlsServer.close(resolve));
    }
  });
});
