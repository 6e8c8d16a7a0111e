// Guest ports through a real VM: servers started in the guest reached by path and host name, private by default,
// signed URLs and their cookie, public ports, large bodies both ways, server-sent events and a WebSocket echo.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { Sandbox } from '@sandglass/sdk';
import { type Answer, PORT_APP, send } from './port-support.js';
import { api, checkResponsesAgainstSpec, config, gatewayUrl, home } from './helpers.js';

checkResponsesAgainstSpec();

const MiB = 1024 * 1024;
const HTTP_PORT = 8000;
const APP_PORT = 8080;
const COUNT_PORT = 8081;
const RESET_PORT = 8082;
const STUCK_PORT = 8083;
const DOMAIN = 'sandglass.localhost';

// Prints one line per TCP connection accepted, and answers each with a fixed response: proves whether a refused
// request ever reached the guest.
const COUNTER = String.raw`
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); print('accepted', flush=True)
    c.recv(65536); c.sendall(b'HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:' + sys.argv[2].encode() + b'/\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'); c.close()
`;

// Answers one complete response, then resets the connection (RST) a moment later, after the client has its answer,
// and says so: a hostile guest ending a stream with an error once the gateway's HTTP client has let go of it.
const RESETTER = String.raw`
import socket, struct, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); c.recv(65536)
    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'); time.sleep(0.5)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0)); c.close(); print('reset', flush=True)
`;

// Listens with a backlog of one and never accepts: its accept queue fills, and the kernel drops the SYNs after it, as
// for a busy server with a small backlog (python3 -m http.server's is 5).
const STUCK = `
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1)
while True: time.sleep(60)
`;

let sbx: Sandbox;
let resetOutput = '';
let token = '';
let counterOutput = '';
const gw = new URL(gatewayUrl);

const auth = () => ({ 'x-sandglass-access-token': token });
const byPath = (port: number, rest = '/') => `/v1/sandboxes/${sbx.id}/ports/${port}${rest}`;
const hostOf = (port: number, id = sbx.id) => `${port}-${id}.${DOMAIN}:${gw.port}`;
const json = (a: Answer) => JSON.parse(a.body.toString('utf8')) as Record<string, any>;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Waits until a server started in the guest has bound its port (the guest's own listing says so). */
async function listening(port: number): Promise<void> {
  for (;;) {
    const res = await send(`/v1/sandboxes/${sbx.id}/ports`, { headers: { authorization: `Bearer ${token}` } });
    if (res.status === 200 && (json(res).ports as Array<{ port: number }>).some((p) => p.port === port)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
}

let hostListener: net.Server;
let hostConnections = 0;

beforeAll(async () => {
  hostListener = net.createServer((s) => {
    hostConnections++;
    s.destroy();
  });
  await new Promise<void>((r) => hostListener.listen(0, '127.0.0.1', r));
  sbx = await Sandbox.create({ ...config(), timeoutS: 900 });
  token = (await api('POST', `/v1/sandboxes/${sbx.id}/access`)).body!.token;
  await sbx.files.write('/tmp/app.py', PORT_APP);
  await sbx.files.write('/tmp/counter.py', COUNTER);
  await sbx.files.write('/tmp/www/hello.txt', 'hello from the guest\n');
  await sbx.commands.run(`cd /tmp/www && exec python3 -m http.server ${HTTP_PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
  await sbx.commands.run(`exec python3 /tmp/app.py ${APP_PORT}`, { background: true, timeoutMs: 0 });
  const hostPort = (hostListener.address() as net.AddressInfo).port;
  await sbx.commands.run(`exec python3 -u /tmp/counter.py ${COUNT_PORT} ${hostPort}`, {
    background: true,
    timeoutMs: 0,
    onStdout: (d) => {
      counterOutput += typeof d === 'string' ? d : Buffer.from(d).toString('utf8');
    },
  });
  await sbx.files.write('/tmp/resetter.py', RESETTER);
  await sbx.commands.run(`exec python3 -u /tmp/resetter.py ${RESET_PORT}`, {
    background: true,
    timeoutMs: 0,
    onStdout: (d) => {
      resetOutput += typeof d === 'string' ? d : Buffer.from(d).toString('utf8');
    },
  });
  await listening(RESET_PORT);
  await listening(HTTP_PORT);
  await listening(APP_PORT);
  await listening(COUNT_PORT);
}, 300_000);

afterAll(async () => {
  await sbx?.kill();
  await new Promise((r) => hostListener?.close(r));
});

describe('guest ports', () => {
  it("serves the base image's python3 http.server by path and by host name, with the token", async () => {
    const a = await send(byPath(HTTP_PORT, '/hello.txt'), { headers: auth() });
    expect([a.status, a.body.toString()]).toEqual([200, 'hello from the guest\n']);
    const b = await send('/hello.txt', { headers: { host: hostOf(HTTP_PORT), ...auth() } });
    expect([b.status, b.body.toString()]).toEqual([200, 'hello from the guest\n']);
  });

  it('lists listening sockets without the egress relay', async () => {
    const res = await send(`/v1/sandboxes/${sbx.id}/ports`, { headers: { authorization: `Bearer ${token}` } });
    const ports = (json(res).ports as Array<{ port: number; address: string; public: boolean }>).map((p) => p.port);
    expect(ports).toEqual(expect.arrayContaining([HTTP_PORT, APP_PORT, COUNT_PORT]));
    expect(json(res).domain).toBe(DOMAIN);
  });

  it('refuses a request without a credential before any guest connection, and strips the credential it forwards', async () => {
    const before = (counterOutput.match(/accepted/g) ?? []).length;
    for (const r of [await send(byPath(COUNT_PORT)), await send('/', { headers: { host: hostOf(COUNT_PORT) } })]) {
      expect([r.status, json(r).error.code]).toEqual([401, 'unauthenticated']);
    }
    const forged = await send(byPath(COUNT_PORT), { headers: { 'x-sandglass-access-token': `${token}x` } });
    expect(forged.status).toBe(401);
    // A token for this sandbox never opens another, by path or by host name.
    const other = 'sbx_aaaaaaaaaaaaaaaaaaaa';
    expect((await send(`/v1/sandboxes/${other}/ports/${COUNT_PORT}/`, { headers: auth() })).status).toBe(403);
    expect((await send('/', { headers: { host: hostOf(COUNT_PORT, other), ...auth() } })).status).toBe(403);
    // The first connection the guest ever sees is the authenticated one below.
    const ok = await send(byPath(COUNT_PORT), { headers: auth() });
    expect(ok.status).toBe(302);
    expect((counterOutput.match(/accepted/g) ?? []).length).toBe(before + 1);

    const echoed = json(
      await send(byPath(APP_PORT, '/headers?x=1'), { headers: { ...auth(), cookie: 'sandglass_port_access=sgpu_x.y; app=1', authorization: 'Basic app' } }),
    );
    expect(echoed.path).toBe('/headers?x=1');
    const seen = Object.fromEntries(Object.entries(echoed.headers as Record<string, string>).map(([k, v]) => [k.toLowerCase(), v]));
    expect(seen['x-sandglass-access-token']).toBeUndefined();
    expect(seen.cookie).toBe('app=1');
    expect(seen.authorization).toBe('Basic app');
    expect(JSON.stringify(echoed)).not.toContain(token);
  });

  it('answers a bad or closed port at once with a stable code', async () => {
    expect(json(await send(byPath(0), { headers: auth() })).error.code).toBe('invalid_argument');
    expect(json(await send(byPath(70_000), { headers: auth() })).error.code).toBe('invalid_argument');
    const closed = await send(byPath(8999), { headers: auth() });
    expect([closed.status, json(closed).error.code]).toEqual([502, 'port_not_listening']);
  });

  it('answers a busy port (its accept queue full) as a timeout to retry, never as a closed port', async () => {
    await sbx.files.write('/tmp/stuck.py', STUCK);
    await sbx.commands.run(`exec python3 /tmp/stuck.py ${STUCK_PORT}`, { background: true, timeoutMs: 0 });
    await listening(STUCK_PORT);
    // The first two fill the queue and are never answered; the connects of the others wait on dropped SYNs.
    const reqs: http.ClientRequest[] = [];
    const first = await new Promise<Answer>((resolve) => {
      for (let i = 0; i < 4; i++) {
        const req = http.request({ host: gw.hostname, port: gw.port, path: byPath(STUCK_PORT), headers: auth() }, (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
        });
        req.on('error', () => undefined);
        req.end();
        reqs.push(req);
      }
    });
    for (const r of reqs) r.destroy();
    expect([first.status, json(first).error.code]).toEqual([504, 'timeout']);
  });

  it("passes the guest's redirect through without following it: the port channel opens no path outward", async () => {
    const hostPort = (hostListener.address() as net.AddressInfo).port;
    const r = await send(byPath(COUNT_PORT), { headers: auth() });
    expect([r.status, r.headers.location]).toEqual([302, `http://127.0.0.1:${hostPort}/`]);
    expect(hostConnections).toBe(0);
  });

  it('survives a guest that resets a connection after answering', async () => {
    const r = await send(byPath(RESET_PORT), { headers: auth() });
    expect([r.status, r.body.toString()]).toEqual([200, 'ok']);
    while (!resetOutput.includes('reset')) await new Promise((res) => setTimeout(res, 100));
    // Each of these crosses the agent channel after the reset's END: a gateway that died on it answers none.
    for (let i = 0; i < 3; i++) expect((await send(byPath(HTTP_PORT, '/hello.txt'), { headers: auth() })).status).toBe(200);
  });

  it('carries 64 MiB down and 64 MiB up, hashed end to end', async () => {
    const down = await send(byPath(APP_PORT, '/big/64'), { headers: auth() });
    const block = Buffer.alloc(MiB);
    for (let i = 0; i < MiB; i++) block[i] = i & 0xff;
    const want = createHash('sha256');
    for (let i = 0; i < 64; i++) want.update(block);
    expect([down.status, down.body.length, sha(down.body)]).toEqual([200, 64 * MiB, want.digest('hex')]);

    const upHash = createHash('sha256');
    async function* chunks() {
      for (let i = 0; i < 64; i++) {
        const c = Buffer.from(block.map((b) => (b + i) & 0xff));
        upHash.update(c);
        yield c;
      }
    }
    const up = await send(byPath(APP_PORT, '/upload'), { method: 'POST', headers: { ...auth(), 'content-length': String(64 * MiB) }, body: chunks });
    expect(json(up)).toEqual({ sha256: upHash.digest('hex'), bytes: 64 * MiB });
  }, 300_000);

  it('streams server-sent events as they are written', async () => {
    const r = await send(byPath(APP_PORT, '/sse'), { headers: auth() });
    expect(r.headers['content-type']).toBe('text/event-stream');
    expect(r.body.toString()).toBe('data: tick 0\n\ndata: tick 1\n\ndata: tick 2\n\n');
  });

  it('relays a WebSocket upgrade both ways, by path and by host name', async () => {
    for (const [url, host] of [
      [`ws://${gw.host}${byPath(APP_PORT, '/ws')}`, undefined],
      [`ws://${gw.host}/ws`, hostOf(APP_PORT)],
    ] as const) {
      const ws = new WebSocket(url, { headers: { ...auth(), ...(host ? { host } : {}) } });
      const got = await new Promise<string>((resolve, reject) => {
        ws.on('open', () => ws.send('ping'));
        ws.on('message', (d) => resolve(d.toString()));
        ws.on('error', reject);
      });
      expect(got).toBe('echo:ping');
      ws.terminate();
    }
  });

  it('signed URLs set a cookie scoped to the port once, and open only that port', async () => {
    const made = await send(`/v1/sandboxes/${sbx.id}/port-urls`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ port: HTTP_PORT, expiresInS: 60 })),
    });
    expect(made.status).toBe(200);
    const url = json(made);
    expect(url.host).toBe(`${HTTP_PORT}-${sbx.id}.${DOMAIN}`);
    const first = await send(url.path);
    expect([first.status, first.headers.location]).toEqual([302, byPath(HTTP_PORT, '/')]);
    const cookie = String(first.headers['set-cookie']).split(';')[0]!;
    expect(String(first.headers['set-cookie'])).toContain(`Path=/v1/sandboxes/${sbx.id}/ports/${HTTP_PORT}/`);
    expect((await send(byPath(HTTP_PORT, '/hello.txt'), { headers: { cookie } })).status).toBe(200);
    expect((await send(byPath(APP_PORT, '/'), { headers: { cookie } })).status).toBe(403);
    // The host form: the cookie is the host's own (no Domain attribute).
    const byHost = await send(`/?sandglass_url_token=${url.token}`, { headers: { host: hostOf(HTTP_PORT) } });
    expect([byHost.status, byHost.headers.location]).toEqual([302, '/']);
    expect(String(byHost.headers['set-cookie'])).not.toContain('Domain');
    // The URL's token is not an access token.
    expect((await send(`/v1/sandboxes/${sbx.id}/ports`, { headers: { authorization: `Bearer ${url.token}` } })).status).toBe(401);
  });

  it('a public port needs no credential; each change is an event, and traffic is logged without bodies', async () => {
    const set = (open: boolean) =>
      send(`/v1/sandboxes/${sbx.id}/public-ports/${HTTP_PORT}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ public: open })),
      });
    expect(json(await set(true))).toEqual({ port: HTTP_PORT, public: true });
    expect((await send(byPath(HTTP_PORT, '/hello.txt'))).status).toBe(200);
    expect((await send(byPath(APP_PORT, '/'))).status).toBe(401);
    expect(json(await set(false))).toEqual({ port: HTTP_PORT, public: false });
    expect((await send(byPath(HTTP_PORT, '/hello.txt'))).status).toBe(401);

    const events = await sbx.events();
    const visibility = events.filter((e) => e.type === 'port.visibility').map((e) => e.data);
    expect(visibility).toEqual([
      { port: HTTP_PORT, public: true },
      { port: HTTP_PORT, public: false },
    ]);
    const traffic = events.filter((e) => e.type === 'port.request').map((e) => e.data as Record<string, unknown>);
    expect(traffic).toContainEqual(expect.objectContaining({ port: APP_PORT, method: 'POST', status: 200, bytesIn: 64 * MiB }));
    expect(JSON.stringify(traffic)).not.toContain('hello from the guest');
  });
});

describe('guest ports from the SDK and the CLI', () => {
  it('lists ports, names the host, signs a URL and sets visibility', async () => {
    expect((await sbx.ports.list()).map((p) => p.port)).toEqual(expect.arrayContaining([HTTP_PORT, APP_PORT]));
    expect(sbx.getHost(HTTP_PORT)).toBe(hostOf(HTTP_PORT));
    const { url } = await sbx.ports.url(HTTP_PORT, { expiresInS: 30, form: 'path' });
    const signed = new URL(url);
    expect(signed.origin).toBe(gw.origin);
    const first = await send(`${signed.pathname}${signed.search}`);
    expect(first.status).toBe(302);
    const hostUrl = new URL((await sbx.ports.url(HTTP_PORT)).url);
    expect(hostUrl.host).toBe(hostOf(HTTP_PORT));
    await sbx.ports.setPublic(APP_PORT, true);
    expect((await send(byPath(APP_PORT, '/x'))).status).toBe(200);
    await sbx.ports.setPublic(APP_PORT, false);
    expect((await send(byPath(APP_PORT, '/x'))).status).toBe(401);
  });

  it('a public port is public again after a pause and resume; a fork of it starts private', async () => {
    const s = await Sandbox.create({ ...config(), timeoutS: 600, snapshotIntervalS: 3600 });
    try {
      await s.files.write('/tmp/www/hi.txt', 'still public');
      await s.commands.run(`cd /tmp/www && exec python3 -m http.server ${HTTP_PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
      while (!(await s.ports.list()).some((p) => p.port === HTTP_PORT)) await new Promise((r) => setTimeout(r, 200));
      await s.ports.setPublic(HTTP_PORT, true);
      const open = (id: string) => send(`/v1/sandboxes/${id}/ports/${HTTP_PORT}/hi.txt`);
      expect((await open(s.id)).status).toBe(200);
      const paused = await s.pause();
      await Sandbox.resume(s.id, config());
      const after = await open(s.id);
      expect([after.status, after.body.toString('utf8')]).toEqual([200, 'still public']);
      expect((await s.ports.list()).find((p) => p.port === HTTP_PORT)).toMatchObject({ public: true });
      const [fork] = await Sandbox.fork(paused.id, { ...config(), timeoutS: 300 });
      try {
        expect((await open(fork!.id)).status).toBe(401);
      } finally {
        await fork!.kill();
      }
      await s.ports.setPublic(HTTP_PORT, false);
      expect((await open(s.id)).status).toBe(401);
    } finally {
      await s.kill();
    }
  });

  it('tunnels raw TCP (ports.connect), and refuses a closed port with its code', async () => {
    const sock = await sbx.ports.connect(COUNT_PORT);
    const got = await new Promise<string>((resolve, reject) => {
      const parts: Buffer[] = [];
      sock.on('data', (c: Buffer) => parts.push(c));
      sock.on('end', () => resolve(Buffer.concat(parts).toString('latin1')));
      sock.on('error', reject);
      sock.write('anything, not HTTP\r\n\r\n');
    });
    expect(got).toMatch(/^HTTP\/1\.1 302 Found\r\n/);
    await expect(sbx.ports.connect(8999)).rejects.toMatchObject({ code: 'port_not_listening' });
  });

  it('sandglass port-forward serves a local listener tunnelled to the guest port', async () => {
    const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
    const env: NodeJS.ProcessEnv = { ...process.env, SANDGLASS_HOME: home };
    delete env.SANDGLASS_URL;
    delete env.SANDGLASS_API_KEY;
    const child = spawn(bin, ['port-forward', sbx.id, `0:${HTTP_PORT}`], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      const localPort = await new Promise<number>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (c: Buffer) => {
          out += c.toString('utf8');
          const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out);
          if (m) resolve(Number(m[1]));
        });
        child.once('exit', (code) => reject(new Error(`port-forward exited with ${code}`)));
      });
      for (let i = 0; i < 2; i++) {
        const body = await new Promise<string>((resolve, reject) => {
          http
            .get({ host: '127.0.0.1', port: localPort, path: '/hello.txt', agent: false }, (res) => {
              const parts: Buffer[] = [];
              res.on('data', (c: Buffer) => parts.push(c));
              res.on('end', () => resolve(Buffer.concat(parts).toString()));
            })
            .on('error', reject);
        });
        expect(body).toBe('hello from the guest\n');
      }
    } finally {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await exited;
    }
  });
});
