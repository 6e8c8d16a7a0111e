// The egress proxy against real local servers: interception, streaming, policy, destination safety, secrets, approvals,
// limits and timeouts — each test an attack or a use the proxy must get right.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, Redacted, SandglassError, type Clock } from '@sandglass/core';
import { ApprovalBroker } from './approvals.js';
import type { ReplaySource } from './context.js';
import type { EgressEvent } from './events.js';
import { parsePolicy, type PolicyInput } from './policy.js';
import { EgressProxy, type EgressLimits, type SandboxEgress } from './proxy.js';
import { newPlaceholder, type SecretBinding, type SecretConfig } from './secrets.js';
import {
  TunnelAgent,
  answerOf,
  makeUpstreamPki,
  rawExchange,
  startHttpUpstream,
  startHttpsUpstream,
  startSilentServer,
  tlsTunnel,
  viaPlainProxy,
  viaTunnel,
  type Pki,
  type Upstream,
} from './test-support.js';

const VALUE = 'sk_live_T0p+Secret/Value=42&more';
const PH = newPlaceholder();
const allEvents: EgressEvent[] = [];
const dir = mkdtempSync(join(tmpdir(), 'sg-egress-'));
let pki: Pki;
let tlsUp: Upstream;
let plainUp: Upstream;
let silent: Upstream;

const DNS: Record<string, string[]> = {
  'api.example.test': ['127.0.0.1'],
  'other.example.test': ['127.0.0.1'],
  'internal.example.test': ['127.0.0.1'],
  'meta.example.test': ['169.254.169.254'],
  'mixed.example.test': ['93.184.216.34', '127.0.0.1'],
  'mapped.example.test': ['::ffff:127.0.0.1'],
};
// Test-only resolver: it maps names, and the proxy still vets every address it returns.
const lookup = async (host: string) => {
  const a = DNS[host];
  if (!a) throw Object.assign(new Error(`ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return a;
};

const OPEN: PolicyInput = { allow: ['api.example.test:*', 'other.example.test:*'] };
// The node operator's list: only the test upstreams on loopback are reachable (SANDGLASS_EGRESS_PRIVATE_ALLOW).
const upstreamAddresses = () => [tlsUp, plainUp, silent].map((u) => `127.0.0.1:${u.port}`);

interface Setup {
  proxy: EgressProxy;
  sbx: SandboxEgress;
  path: string;
  events: EgressEvent[];
  broker: ApprovalBroker;
  agent(): TunnelAgent;
  close(): Promise<void>;
}

/** Writes one request on an open (plain) tunnel and reads until the response head and its sized body are in. */
function rawExchange2(socket: net.Socket, data: string): Promise<string> {
  return new Promise((resolve) => {
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      const m = /content-length:\s*(\d+)/i.exec(buf);
      if (end >= 0 && m && buf.length >= end + 4 + Number(m[1])) {
        socket.off('data', onData);
        resolve(buf);
      }
    };
    socket.on('data', onData);
    socket.write(data);
  });
}

let seq = 0;
async function setup(
  opts: {
    policy?: PolicyInput;
    secrets?: Partial<SecretConfig>[];
    privateAllow?: string[];
    limits?: EgressLimits;
    approvalTimeoutMs?: number;
    brokerClock?: Clock;
    record?: boolean;
    trustUpstream?: boolean;
    sandboxes?: number;
    replay?: ReplaySource;
  } = {},
): Promise<Setup & { more: { sbx: SandboxEgress; path: string }[] }> {
  const events: EgressEvent[] = [];
  const broker = new ApprovalBroker({ timeoutMs: opts.approvalTimeoutMs ?? 30_000, ...(opts.brokerClock ? { clock: opts.brokerClock } : {}) });
  const proxy = new EgressProxy({
    lookup,
    privateAllow: opts.privateAllow ?? upstreamAddresses(),
    ...(opts.trustUpstream === false ? {} : { upstreamCAs: [pki.caPem] }),
    approvals: broker,
    onEvent: (e) => {
      events.push(e);
      allEvents.push(e);
    },
    ...(opts.record ? { recordExchanges: true } : {}),
    ...(opts.limits ? { limits: opts.limits } : {}),
  });
  const secrets: SecretBinding[] = (opts.secrets ?? []).map((s, i) => ({
    name: `secret${i}`,
    placeholder: i === 0 ? PH : newPlaceholder(),
    current: async () => ({ hosts: ['api.example.test:*'], approval: 'none', value: async () => new Redacted(VALUE), ...s }),
  }));
  const closers: (() => Promise<void>)[] = [];
  const agents: TunnelAgent[] = [];
  const boxes: { sbx: SandboxEgress; path: string }[] = [];
  for (let i = 0; i < (opts.sandboxes ?? 1); i++) {
    const sbx = await proxy.addSandbox(`sbx_test${++seq}`, {
      policy: parsePolicy(opts.policy ?? OPEN),
      secrets,
      ...(opts.replay ? { replay: opts.replay } : {}),
    });
    const path = join(dir, `${seq}.sock`);
    closers.push(await sbx.listen(path));
    boxes.push({ sbx, path });
  }
  const { sbx, path } = boxes[0]!;
  return {
    proxy,
    sbx,
    path,
    events,
    broker,
    more: boxes.slice(1),
    agent: () => {
      const a = new TunnelAgent(path, sbx.caCertPem);
      agents.push(a);
      return a;
    },
    close: async () => {
      for (const a of agents) a.destroy();
      for (const c of closers) await c();
      proxy.close();
    },
  };
}

const api = (path = '/echo') => `https://api.example.test:${tlsUp.port}${path}`;
const requests = (events: EgressEvent[]) =>
  events.filter((e) => e.type === 'egress.request').map((e) => e.data as Extract<EgressEvent, { type: 'egress.request' }>['data']);

async function waitFor(cond: () => boolean, what: string, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

beforeAll(async () => {
  pki = await makeUpstreamPki(['api.example.test', 'other.example.test']);
  tlsUp = await startHttpsUpstream(pki);
  plainUp = await startHttpUpstream();
  silent = await startSilentServer();
});

afterAll(async () => {
  await tlsUp.close();
  await plainUp.close();
  await silent.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('forwarding', () => {
  it('intercepts HTTPS through CONNECT with a leaf from the sandbox CA and keeps one connection for several requests', async () => {
    const t = await setup();
    const agent = t.agent();
    const before = tlsUp.connections;
    for (let i = 0; i < 5; i++) {
      const a = await viaTunnel(agent, api(`/echo?i=${i}`));
      expect(a.status).toBe(200);
      expect(a.json().url).toBe(`/echo?i=${i}`);
    }
    expect(agent.tunnels).toBe(1);
    expect(tlsUp.connections - before).toBe(1);
    const reqs = requests(t.events);
    expect(reqs).toHaveLength(5);
    expect(reqs[0]).toMatchObject({
      host: 'api.example.test',
      port: tlsUp.port,
      scheme: 'https',
      method: 'GET',
      path: '/echo',
      allowed: true,
      rule: 'api.example.test:*',
      status: 200,
      secrets: [],
    });
    expect(reqs[0]!.bytesDown).toBeGreaterThan(0);
    // The client must trust the sandbox CA: the upstream's real CA does not vouch for what the proxy presents.
    await expect(tlsTunnel(t.path, `api.example.test:${tlsUp.port}`, pki.caPem)).rejects.toThrow();
    await t.close();
  });

  it('streams a 20 MiB chunked upload and a 20 MiB download', async () => {
    const t = await setup();
    const agent = t.agent();
    const size = 20 * 1024 * 1024;
    const hash = createHash('sha256');
    let finishedAt = 0;
    const answer = await new Promise<Awaited<ReturnType<typeof answerOf>>>((resolve, reject) => {
      const req = https.request(
        api('/upload'),
        { agent: agent as https.Agent, method: 'POST', headers: { 'content-type': 'application/octet-stream' } },
        (res) => answerOf(res).then(resolve, reject),
      );
      req.once('error', reject);
      let sent = 0;
      const pump = () => {
        while (sent < size) {
          const c = randomBytes(256 * 1024);
          hash.update(c);
          sent += c.length;
          if (!req.write(c)) return void req.once('drain', pump);
        }
        finishedAt = Date.now();
        req.end();
      };
      pump();
    });
    expect(answer.status).toBe(200);
    const seen = tlsUp.seen.at(-1)!;
    expect(seen.headers['transfer-encoding']).toBe('chunked');
    expect(seen.bodyBytes).toBe(size);
    expect(seen.bodySha256).toBe(hash.digest('hex'));
    // Streamed, not buffered: the upstream had the first bytes long before the client finished sending.
    expect(seen.firstByteAtMs!).toBeLessThan(finishedAt);
    const down = await viaTunnel(agent, api(`/bytes?n=${size}&chunked`));
    expect(down.headers['transfer-encoding']).toBe('chunked');
    expect(down.body.length).toBe(size);
    await waitFor(() => requests(t.events).length === 2, 'both events');
    const reqs = requests(t.events);
    expect(reqs[0]!.bytesUp).toBe(size);
    expect(reqs[1]!.bytesDown).toBe(size);
    await t.close();
  });

  it('forwards plain HTTP in absolute form, keeping the upstream connection alive', async () => {
    const t = await setup();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const before = plainUp.connections;
    for (let i = 0; i < 3; i++) {
      const a = await new Promise<Awaited<ReturnType<typeof answerOf>>>((resolve, reject) => {
        const req = http.request(
          { socketPath: t.path, agent, path: `http://api.example.test:${plainUp.port}/echo?n=${i}`, headers: { host: `api.example.test:${plainUp.port}` } },
          (res) => answerOf(res).then(resolve, reject),
        );
        req.once('error', reject);
        req.end();
      });
      expect(a.status).toBe(200);
      expect(a.json().url).toBe(`/echo?n=${i}`);
    }
    expect(plainUp.connections - before).toBe(1);
    expect(t.sbx.activeConnections).toBe(1);
    agent.destroy();
    await t.close();
  });

  it('passes WebSocket-style upgrades both ways after policy and substitution on the handshake', async () => {
    const t = await setup({ secrets: [{ allowUpgrade: true, allowPlaintext: true }] });
    const agent = t.agent();
    const { status, echoed } = await new Promise<{ status: number; echoed: string }>((resolve, reject) => {
      const req = https.request(api('/ws'), { agent: agent as https.Agent, headers: { connection: 'Upgrade', upgrade: 'echo', 'x-api-key': PH } });
      req.once('upgrade', (res, socket) => {
        socket.write('ping-through-proxy');
        socket.once('data', (d: Buffer) => {
          resolve({ status: res.statusCode!, echoed: d.toString() });
          socket.destroy();
        });
      });
      req.once('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.once('error', reject);
      req.end();
    });
    expect(status).toBe(101);
    expect(echoed).toBe('ping-through-proxy');
    expect(tlsUp.seen.at(-1)!.headers['x-api-key']).toBe(VALUE);
    await waitFor(() => requests(t.events).length === 1, 'the upgrade event');
    expect(requests(t.events)[0]).toMatchObject({ status: 101, secrets: ['secret0'], allowed: true });
    // Plain ws:// style, in absolute form.
    const plain = await new Promise<string>((resolve, reject) => {
      const req = http.request({
        socketPath: t.path,
        path: `http://api.example.test:${plainUp.port}/ws`,
        headers: { host: `api.example.test:${plainUp.port}`, connection: 'Upgrade', upgrade: 'echo' },
      });
      req.once('upgrade', (_res, socket) => {
        socket.write('plain-ping');
        socket.once('data', (d: Buffer) => {
          resolve(d.toString());
          socket.destroy();
        });
      });
      req.once('error', reject);
      req.end();
    });
    expect(plain).toBe('plain-ping');
    await t.close();
  });
});

describe('policy', () => {
  it('judges the path the upstream will see: dot segments are resolved before matching and forwarding', async () => {
    const t = await setup({ policy: { allow: ['api.example.test:* GET /echo'] } });
    const agent = t.agent();
    expect((await viaTunnel(agent, api('/echo/./x/../y?q=1'))).status).toBe(200);
    expect(tlsUp.seen.at(-1)!.url).toBe('/echo/y?q=1');
    const seenBefore = tlsUp.seen.length;
    for (const sneaky of [
      '/echo/../admin',
      '/echo/%2e%2e/admin',
      '/echoes',
      '/echo\\..\\admin',
      '/echo/%2e%2e%2Fadmin',
      '/echo%2f..%2fadmin',
      '/echo/..%5cadmin',
      '/echo/%252e%252e/admin',
      '/echo/..;/admin',
      '//echo/../admin',
      '/echo//x',
    ]) {
      const a = await viaTunnel(agent, api(sneaky));
      expect(a.status, sneaky).toBe(403);
    }
    expect((await viaTunnel(agent, api('/echo'), { method: 'POST' })).status).toBe(403);
    expect(tlsUp.seen.length).toBe(seenBefore);
    // An escaped unreserved character is the character: /%65cho is /echo.
    expect((await viaTunnel(agent, api('/%65cho'))).status).toBe(200);
    await t.close();
  });

  it('answers 403 JSON to a denied CONNECT and a denied plain request', async () => {
    const t = await setup({ policy: { allow: ['api.example.test:*'], deny: ['other.example.test'] } });
    const c = await rawExchange(t.path, 'CONNECT nowhere.example.test:443 HTTP/1.1\r\nHost: nowhere.example.test:443\r\n\r\n');
    expect(c.status).toBe(403);
    expect(c.head.toLowerCase()).toContain('x-sandglass-error: egress_denied');
    expect(JSON.parse(c.body)).toEqual({
      error: {
        code: 'egress_denied',
        message: expect.stringContaining('nowhere.example.test:443'),
        details: { host: 'nowhere.example.test', port: 443, reason: 'no rule allows' },
      },
    });
    c.socket.destroy();
    const p = await viaPlainProxy(t.path, `http://other.example.test:${plainUp.port}/x`);
    expect(p.status).toBe(403);
    expect(p.headers['x-sandglass-error']).toBe('egress_denied');
    expect(p.json()).toMatchObject({
      error: { code: 'egress_denied', details: { host: 'other.example.test', rule: 'other.example.test:*', reason: 'denied by rule' } },
    });
    expect(requests(t.events)).toMatchObject([
      { method: 'CONNECT', scheme: 'tunnel', allowed: false, reason: 'no rule allows', status: 403, code: 'egress_denied' },
      { method: 'GET', scheme: 'http', allowed: false, reason: 'denied by rule', path: '/x', status: 403 },
    ]);
    await t.close();
  });

  it('refuses a Host header that differs from the CONNECT target, before anything reaches the upstream', async () => {
    const t = await setup();
    const agent = t.agent();
    const seenBefore = tlsUp.seen.length;
    const a = await viaTunnel(agent, api('/echo'), { servername: 'api.example.test', headers: { host: `other.example.test:${tlsUp.port}` } });
    expect(a.status).toBe(403);
    expect(a.json()).toMatchObject({
      error: { code: 'egress_denied', details: { reason: 'Host header does not match the target', host: 'api.example.test' } },
    });
    // Also an absolute-form target inside the tunnel naming another host.
    const s = await tlsTunnel(t.path, `api.example.test:${tlsUp.port}`, t.sbx.caCertPem);
    s.write(`GET https://other.example.test:${tlsUp.port}/echo HTTP/1.1\r\nHost: other.example.test:${tlsUp.port}\r\n\r\n`);
    const head = await new Promise<string>((resolve) => s.once('data', (d: Buffer) => resolve(d.toString())));
    expect(head).toMatch(/^HTTP\/1.1 403/);
    s.destroy();
    // And plain HTTP whose Host disagrees with its absolute URI.
    const p = await viaPlainProxy(t.path, `http://api.example.test:${plainUp.port}/x`, { headers: { host: 'other.example.test' } });
    expect(p.status).toBe(403);
    expect(tlsUp.seen.length).toBe(seenBefore);
    expect(requests(t.events).every((r) => !r.allowed)).toBe(true);
    await t.close();
  });

  it('applies a policy change to the next request, also on an open connection', async () => {
    const t = await setup();
    const agent = t.agent();
    expect((await viaTunnel(agent, api())).status).toBe(200);
    t.sbx.setPolicy(parsePolicy({ allow: ['other.example.test:*'] }));
    const denied = await viaTunnel(agent, api());
    expect(denied.status).toBe(403);
    expect(denied.json()).toMatchObject({ error: { details: { reason: 'no rule allows' } } });
    t.sbx.setPolicy(parsePolicy(OPEN));
    expect((await viaTunnel(agent, api())).status).toBe(200);
    expect(agent.tunnels).toBe(1);
    await t.close();
  });

  it('refuses loopback, private, metadata and mixed answers whatever the policy; only the operator opens ip:port', async () => {
    const hosts = ['internal.example.test', 'meta.example.test', 'mixed.example.test', 'mapped.example.test'];
    // The operator opened nothing: the tenant's rules name the hosts, and every one resolves somewhere internal.
    const t = await setup({ policy: { allow: hosts.map((h) => `${h}:*`) }, privateAllow: [] });
    for (const h of hosts) {
      const c = await rawExchange(t.path, `CONNECT ${h}:${tlsUp.port} HTTP/1.1\r\nHost: ${h}\r\n\r\n`);
      expect(c.status, h).toBe(403);
      expect(JSON.parse(c.body).error.details, h).toMatchObject({ reason: 'internal address' });
      c.socket.destroy();
    }
    expect(JSON.parse((await rawExchange(t.path, `CONNECT meta.example.test:80 HTTP/1.1\r\nHost: x\r\n\r\n`)).body).error.message).toContain('cloud metadata');
    // Plain HTTP is vetted the same way; other spellings of 127.0.0.1 are not even valid targets.
    expect((await viaPlainProxy(t.path, `http://internal.example.test:${plainUp.port}/`)).status).toBe(403);
    expect((await viaPlainProxy(t.path, `http://0x7f.1:${plainUp.port}/`, { headers: { host: '0x7f.1' } })).status).toBe(400);
    expect((await viaPlainProxy(t.path, `http://2130706433:${plainUp.port}/`, { headers: { host: '2130706433' } })).status).toBe(400);
    expect(plainUp.seen.filter((s) => s.url === '/').length).toBe(0);
    // No policy can name an internal IP at all.
    expect(() => parsePolicy({ allow: [`127.0.0.1:${plainUp.port}`] })).toThrow(/loopback/);
    await t.close();
    // The operator's list opens exactly ip:port: that port goes through, another port on the same IP does not.
    const o = await setup({ policy: { allow: ['internal.example.test:*'] }, privateAllow: [`127.0.0.1:${plainUp.port}`] });
    expect((await viaPlainProxy(o.path, `http://internal.example.test:${plainUp.port}/echo`)).status).toBe(200);
    const other = await viaPlainProxy(o.path, `http://internal.example.test:${tlsUp.port}/echo`);
    expect(other.status).toBe(403);
    expect(other.json()).toMatchObject({ error: { details: { reason: 'internal address', address: '127.0.0.1' } } });
    await o.close();
  });

  it("refuses the node's own addresses even when they are public, before connecting", async () => {
    const events: EgressEvent[] = [];
    const proxy = new EgressProxy({
      lookup: async () => ['93.184.216.34'],
      approvals: new ApprovalBroker(),
      onEvent: (e) => events.push(e),
      nodeAddresses: () => new Set(['93.184.216.34']),
    });
    const sbx = await proxy.addSandbox('sbx_nodeaddr', { policy: parsePolicy({ allow: ['public.example.test:*', '93.184.216.34:*'] }), secrets: [] });
    const path = join(dir, 'nodeaddr.sock');
    const close = await sbx.listen(path);
    for (const target of ['public.example.test:443', '93.184.216.34:7071']) {
      const c = await rawExchange(path, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
      expect(c.status, target).toBe(403);
      expect(JSON.parse(c.body).error.details, target).toMatchObject({ reason: 'internal address', range: "this node's own address (93.184.216.34)" });
      c.socket.destroy();
    }
    await close();
    proxy.close();
  });
});

describe('secrets', () => {
  it('substitutes a placeholder for its scoped host: the upstream sees the value, the client never does', async () => {
    const t = await setup({ secrets: [{}] });
    const agent = t.agent();
    const a = await viaTunnel(agent, api(`/echo?key=${PH}`), {
      headers: { 'x-api-key': PH, 'x-note': `before-${PH}-after`, authorization: `Basic ${Buffer.from(`git:${PH}`).toString('base64')}` },
    });
    expect(a.status).toBe(200);
    const seen = tlsUp.seen.at(-1)!;
    expect(seen.headers['x-api-key']).toBe(VALUE);
    expect(seen.headers['x-note']).toBe(`before-${VALUE}-after`);
    expect(seen.url).toBe(`/echo?key=${encodeURIComponent(VALUE)}`);
    expect(Buffer.from(seen.headers.authorization!.split(' ')[1]!, 'base64').toString()).toBe(`git:${VALUE}`);
    // The upstream echoes everything back; the proxy masks the value in every form it could come back in.
    const text = a.body.toString() + JSON.stringify(a.headers);
    for (const form of [VALUE, encodeURIComponent(VALUE), Buffer.from(VALUE).toString('base64'), seen.headers.authorization!.split(' ')[1]!])
      expect(text).not.toContain(form);
    expect(a.headers['x-echo-auth']).toBe('Basic «redacted»');
    expect(requests(t.events)[0]).toMatchObject({ secrets: ['secret0'], allowed: true, status: 200 });
    await t.close();
  });

  it('adds the configured header with its format, only for scoped hosts', async () => {
    const t = await setup({ secrets: [{ header: 'Authorization', format: 'Bearer {value}' }] });
    const agent = t.agent();
    expect((await viaTunnel(agent, api(), { headers: { authorization: 'Bearer client-supplied' } })).status).toBe(200);
    expect(tlsUp.seen.at(-1)!.headers.authorization).toBe(`Bearer ${VALUE}`);
    const other = await viaTunnel(t.agent(), `https://other.example.test:${tlsUp.port}/echo`);
    expect(other.status).toBe(200);
    expect(tlsUp.seen.at(-1)!.headers.authorization).toBeUndefined();
    await t.close();
  });

  it('blocks a placeholder bound for a host outside its scope (header, URL or scanned body) and reports the secret', async () => {
    const t = await setup({ secrets: [{ bodyContentTypes: ['application/json'] }] });
    const seenBefore = tlsUp.seen.length + plainUp.seen.length;
    const other = `https://other.example.test:${tlsUp.port}/echo`;
    const h = await viaTunnel(t.agent(), other, { headers: { 'x-api-key': PH } });
    expect(h.status).toBe(403);
    expect(h.headers['x-sandglass-error']).toBe('egress_secret_scope');
    expect(h.json()).toMatchObject({ error: { code: 'egress_secret_scope', details: { host: 'other.example.test', secrets: ['secret0'] } } });
    const u = await viaPlainProxy(t.path, `http://other.example.test:${plainUp.port}/?k=${PH}`);
    expect(u.status).toBe(403);
    const b = await viaTunnel(t.agent(), other, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-8' },
      body: JSON.stringify({ token: PH }),
    });
    expect(b.status).toBe(403);
    expect(tlsUp.seen.length + plainUp.seen.length).toBe(seenBefore);
    const scope = t.events.filter((e) => e.type === 'egress.secret_scope').map((e) => e.data);
    expect(scope).toMatchObject([
      { secret: 'secret0', host: 'other.example.test', where: 'header' },
      { secret: 'secret0', host: 'other.example.test', where: 'url' },
      { secret: 'secret0', host: 'other.example.test', where: 'body' },
    ]);
    expect(requests(t.events).every((r) => !r.allowed && r.code === 'egress_secret_scope')).toBe(true);
    await t.close();
  });

  it('substitutes in bodies of declared types (JSON-escaped) and refuses such bodies above the scan limit', async () => {
    const t = await setup({ secrets: [{ bodyContentTypes: ['application/json'] }], limits: { maxScannedBodyBytes: 4096 } });
    const agent = t.agent();
    const ok = await viaTunnel(agent, api(), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: PH }) });
    expect(ok.status).toBe(200);
    const seen = tlsUp.seen.at(-1)!;
    expect(JSON.parse(seen.body)).toEqual({ token: VALUE });
    expect(Number(seen.headers['content-length'])).toBe(Buffer.byteLength(seen.body));
    // Types not declared stream through untouched (the placeholder is harmless to its own scoped host).
    await viaTunnel(agent, api(), { method: 'POST', headers: { 'content-type': 'text/plain' }, body: PH });
    expect(tlsUp.seen.at(-1)!.body).toBe(PH);
    const big = await viaTunnel(agent, api(), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ pad: 'x'.repeat(8000) }),
    });
    expect(big.status).toBe(413);
    expect(big.json()).toMatchObject({ error: { code: 'payload_too_large' } });
    // The connection survives the refusal.
    expect((await viaTunnel(agent, api())).status).toBe(200);
    expect(agent.tunnels).toBe(1);
    await t.close();
  });

  it('never hands a secret back in a compressed answer: asks upstream for identity, decodes what comes anyway and masks it', async () => {
    const t = await setup({ secrets: [{}], limits: { maxDecodedBodyBytes: 64 * 1024 } });
    const agent = t.agent();
    const forms = [VALUE, encodeURIComponent(VALUE), Buffer.from(VALUE).toString('base64')];
    for (const coding of ['gzip', 'deflate', 'br', 'gzip, br']) {
      const a = await viaTunnel(agent, api(`/echo?encoding=${encodeURIComponent(coding)}`), {
        headers: { 'x-api-key': PH, 'accept-encoding': 'gzip, deflate, br' },
      });
      expect(a.status, coding).toBe(200);
      expect(tlsUp.seen.at(-1)!.headers['accept-encoding'], coding).toBe('identity');
      // Decoded for the guest: plain JSON, no Content-Encoding left, the echoed value masked.
      expect(a.headers['content-encoding'], coding).toBeUndefined();
      const text = a.body.toString('latin1');
      expect(JSON.parse(text).headers['x-api-key'], coding).toBe('*'.repeat(VALUE.length));
      for (const form of forms) expect(text, coding).not.toContain(form);
    }
    // A coding the proxy cannot read is withheld, not passed on.
    const odd = await viaTunnel(agent, api('/echo?encoding=x-reverse'), { headers: { 'x-api-key': PH } });
    expect(odd.status).toBe(502);
    expect(odd.body.toString('latin1')).not.toContain(VALUE.split('').reverse().join(''));
    // Without a secret in the exchange the answer passes as the upstream sent it.
    const plain = await viaTunnel(agent, api('/echo?encoding=gzip'), { headers: { 'accept-encoding': 'gzip' } });
    expect(plain.headers['content-encoding']).toBe('gzip');
    await t.close();
  });

  it('refuses secrets on protocol upgrades unless the secret allows them, and masks a declined upgrade', async () => {
    const t = await setup({ secrets: [{}, { header: 'x-injected' }] });
    const upgrade = (path: string, headers: Record<string, string>) =>
      new Promise<{ status: number; body: string; head: string }>((resolve, reject) => {
        const req = https.request(api(path), { agent: t.agent() as https.Agent, headers: { connection: 'Upgrade', upgrade: 'echo', ...headers } });
        req.once('upgrade', (res, socket) => {
          socket.once('data', (d: Buffer) => {
            resolve({ status: res.statusCode!, body: d.toString('latin1'), head: JSON.stringify(res.headers) });
            socket.destroy();
          });
        });
        req.once('response', (res) =>
          answerOf(res).then((a) => resolve({ status: a.status, body: a.body.toString('latin1'), head: JSON.stringify(a.headers) }), reject),
        );
        req.once('error', reject);
        req.end();
      });
    const seenBefore = tlsUp.seen.length;
    const refused = await upgrade('/ws-headers', { 'x-api-key': PH });
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body)).toMatchObject({ error: { code: 'egress_secret_scope', details: { secrets: ['secret0'] } } });
    expect(tlsUp.seen.length).toBe(seenBefore);
    // The configured header is not added to an upgrade either: the upstream's echo after the 101 holds no value.
    const ws = await upgrade('/ws-headers', {});
    expect(ws.status).toBe(101);
    expect(JSON.parse(ws.body)['x-injected']).toBeUndefined();
    await t.close();
    // Opted in: substituted; a declined upgrade's answer is masked like any response.
    const o = await setup({ secrets: [{ allowUpgrade: true }] });
    const declined = await new Promise<{ status: number; body: string; head: string }>((resolve, reject) => {
      const req = https.request(api('/decline'), {
        agent: o.agent() as https.Agent,
        headers: { connection: 'Upgrade', upgrade: 'echo', 'x-api-key': PH, authorization: `Bearer ${PH}` },
      });
      req.once('response', (res) =>
        answerOf(res).then((a) => resolve({ status: a.status, body: a.body.toString('latin1'), head: JSON.stringify(a.headers) }), reject),
      );
      req.once('upgrade', () => reject(new Error('upgraded')));
      req.once('error', reject);
      req.end();
    });
    expect(declined.status).toBe(400);
    expect(tlsUp.seen.at(-1)!.headers['x-api-key']).toBe(VALUE);
    for (const form of [VALUE, encodeURIComponent(VALUE), Buffer.from(VALUE).toString('base64')]) expect(declined.body + declined.head).not.toContain(form);
    expect(JSON.parse(declined.body)['x-api-key']).toBe('*'.repeat(VALUE.length));
    await o.close();
  });

  it('substitutes only into requests that go upstream over verified TLS, to port 443 when the scope names no port', async () => {
    const t = await setup({ secrets: [{}, { header: 'x-injected' }] });
    const seenBefore = plainUp.seen.length;
    // Plain http:// in absolute form, and plain HTTP inside a CONNECT tunnel: blocked, nothing substituted.
    const abs = await viaPlainProxy(t.path, `http://api.example.test:${plainUp.port}/echo`, { headers: { 'x-api-key': PH } });
    expect(abs.status).toBe(403);
    expect(abs.json()).toMatchObject({ error: { code: 'egress_secret_scope', details: { reason: expect.stringContaining('clear text') } } });
    const tunnel = await rawExchange(t.path, `CONNECT api.example.test:${plainUp.port} HTTP/1.1\r\nHost: api.example.test:${plainUp.port}\r\n\r\n`);
    expect(tunnel.status).toBe(200);
    const inner = await rawExchange2(tunnel.socket, `GET /echo HTTP/1.1\r\nHost: api.example.test:${plainUp.port}\r\nx-api-key: ${PH}\r\n\r\n`);
    expect(inner).toMatch(/^HTTP\/1.1 403/);
    expect(inner).toContain('egress_secret_scope');
    tunnel.socket.destroy();
    expect(plainUp.seen.length).toBe(seenBefore);
    // A header secret is simply not added in clear text.
    expect((await viaPlainProxy(t.path, `http://api.example.test:${plainUp.port}/echo`)).status).toBe(200);
    expect(plainUp.seen.at(-1)!.headers['x-injected']).toBeUndefined();
    expect(t.events.filter((e) => e.type === 'egress.secret_scope').map((e) => e.data)).toMatchObject([
      { reason: expect.stringContaining('clear text') },
      { reason: expect.stringContaining('clear text') },
    ]);
    await t.close();
    // Opted in to plaintext: substituted over http too.
    const p = await setup({ secrets: [{ allowPlaintext: true }] });
    expect((await viaPlainProxy(p.path, `http://api.example.test:${plainUp.port}/echo`, { headers: { 'x-api-key': PH } })).status).toBe(200);
    expect(plainUp.seen.at(-1)!.headers['x-api-key']).toBe(VALUE);
    await p.close();
    // A scope without a port is 443 only: the upstream on another port is out of scope.
    const q = await setup({ secrets: [{ hosts: ['api.example.test'] }] });
    const off = await viaTunnel(q.agent(), api(), { headers: { 'x-api-key': PH } });
    expect(off.status).toBe(403);
    expect(off.json()).toMatchObject({ error: { code: 'egress_secret_scope', details: { reason: 'not scoped to this host and port' } } });
    await q.close();
  });

  it('reads a secret’s scope, header, approval and value at the moment of use, not when the sandbox started', async () => {
    let cfg: Partial<SecretConfig> = { hosts: ['api.example.test:*'], header: 'x-injected', value: async () => new Redacted(VALUE) };
    const t = await setup({ secrets: [{}], approvalTimeoutMs: 200 });
    t.sbx.setSecrets([
      { name: 'live', placeholder: PH, current: async () => ({ approval: 'none', hosts: [], value: async () => new Redacted(VALUE), ...cfg }) as SecretConfig },
    ]);
    const agent = t.agent();
    expect((await viaTunnel(agent, api())).status).toBe(200);
    expect(tlsUp.seen.at(-1)!.headers['x-injected']).toBe(VALUE);
    // Rotated: the next request carries the new value.
    cfg = { ...cfg, value: async () => new Redacted(`${VALUE}-rotated`) };
    expect((await viaTunnel(agent, api())).status).toBe(200);
    expect(tlsUp.seen.at(-1)!.headers['x-injected']).toBe(`${VALUE}-rotated`);
    // Narrowed to another host: not added here any more, and the placeholder is blocked.
    cfg = { ...cfg, hosts: ['other.example.test:*'] };
    expect((await viaTunnel(agent, api())).status).toBe(200);
    expect(tlsUp.seen.at(-1)!.headers['x-injected']).toBeUndefined();
    expect((await viaTunnel(agent, api(), { headers: { 'x-api-key': PH } })).status).toBe(403);
    // Switched to approval: the next use waits, and nobody answering refuses it.
    cfg = { ...cfg, hosts: ['api.example.test:*'], approval: 'required' };
    const held = await viaTunnel(agent, api());
    expect(held.status).toBe(403);
    expect(held.json()).toMatchObject({ error: { code: 'egress_approval_denied' } });
    // Removed: its placeholder is blocked everywhere.
    t.sbx.setSecrets([{ name: 'live', placeholder: PH, current: async () => Promise.reject(new SandglassError('secret_not_found', 'gone')) }]);
    const gone = await viaTunnel(agent, api(), { headers: { 'x-api-key': PH } });
    expect(gone.status).toBe(403);
    expect(gone.json()).toMatchObject({ error: { code: 'egress_secret_scope', details: { reason: 'the secret no longer exists' } } });
    await t.close();
  });

  it('holds a secret that needs approval until it is approved, and refuses it when denied or not answered', async () => {
    let reads = 0;
    const value = async () => {
      reads++;
      return new Redacted(VALUE);
    };
    const t = await setup({ secrets: [{ approval: 'required', header: 'x-token', value }], approvalTimeoutMs: 400 });
    const agent = t.agent();
    const decideNext = (decision: 'approve' | 'deny') =>
      waitFor(() => t.broker.pending().length > 0, 'a pending approval').then(() => t.broker.decide(t.broker.pending()[0]!.requestId, decision));
    const [approved] = await Promise.all([viaTunnel(agent, api()), decideNext('approve')]);
    expect(approved.status).toBe(200);
    expect(tlsUp.seen.at(-1)!.headers['x-token']).toBe(VALUE);
    expect(reads).toBe(1);
    const [denied] = await Promise.all([viaTunnel(agent, api()), decideNext('deny')]);
    expect(denied.status).toBe(403);
    expect(denied.json()).toMatchObject({ error: { code: 'egress_approval_denied', details: { secret: 'secret0', decision: 'denied' } } });
    const timedOut = await viaTunnel(agent, api());
    expect(timedOut.status).toBe(403);
    expect(timedOut.json()).toMatchObject({ error: { code: 'egress_approval_denied', details: { decision: 'timeout' } } });
    // The value is decrypted only for the approved use.
    expect(reads).toBe(1);
    const asked = t.events.filter((e) => e.type === 'secret.approval_requested');
    expect(asked).toHaveLength(3);
    expect(asked[0]!.data).toMatchObject({ secret: 'secret0', host: 'api.example.test', method: 'GET', path: '/echo' });
    expect(t.events.filter((e) => e.type === 'secret.approval_decided').map((e) => (e.data as { decision: string }).decision)).toEqual([
      'approved',
      'denied',
      'timeout',
    ]);
    await t.close();
  });

  it('lets a time-boxed approval cover the same sandbox and secret until it expires', async () => {
    const clock = new ManualClock(1_000_000);
    const t = await setup({ secrets: [{ approval: 'required', header: 'x-token' }], brokerClock: clock });
    const agent = t.agent();
    const [first] = await Promise.all([
      viaTunnel(agent, api()),
      waitFor(() => t.broker.pending().length > 0, 'a pending approval').then(() =>
        t.broker.decide(t.broker.pending()[0]!.requestId, 'approve', { ttlMs: 60_000 }),
      ),
    ]);
    expect(first.status).toBe(200);
    for (let i = 0; i < 3; i++) expect((await viaTunnel(agent, api())).status).toBe(200);
    expect(t.events.filter((e) => e.type === 'secret.approval_requested')).toHaveLength(1);
    expect(t.events.filter((e) => e.type === 'secret.approval_decided').at(-1)!.data).toMatchObject({ decision: 'approved', grantUntilMs: 1_060_000 });
    clock.advance(60_001);
    const [after] = await Promise.all([
      viaTunnel(agent, api()),
      waitFor(() => t.broker.pending().length > 0, 'a new approval request').then(() => t.broker.decide(t.broker.pending()[0]!.requestId, 'deny')),
    ]);
    expect(after.status).toBe(403);
    expect(t.events.filter((e) => e.type === 'secret.approval_requested')).toHaveLength(2);
    await t.close();
  });

  it('records allowed exchanges with every secret value redacted', async () => {
    const t = await setup({ record: true, secrets: [{}, { header: 'Authorization', format: 'Bearer {value}', hosts: ['api.example.test:*'] }] });
    const a = await viaTunnel(t.agent(), api(`/echo?key=${PH}`), {
      method: 'POST',
      headers: { 'x-api-key': PH, 'content-type': 'text/plain' },
      body: `body-${PH}`,
    });
    expect(a.status).toBe(200);
    await waitFor(() => t.events.some((e) => e.type === 'egress.exchange'), 'the exchange record');
    const ex = t.events.find((e) => e.type === 'egress.exchange')!.data as Extract<EgressEvent, { type: 'egress.exchange' }>['data'];
    expect(ex).toMatchObject({ method: 'POST', status: 200, url: `https://api.example.test:${tlsUp.port}/echo?key=«redacted»` });
    expect(ex.requestHeaders).toContainEqual(['x-api-key', '«redacted»']);
    expect(ex.requestHeaders).toContainEqual(['Authorization', 'Bearer «redacted»']);
    expect(ex.requestBody).toMatchObject({ encoding: 'utf8', data: 'body-«redacted»', sizeBytes: `body-${PH}`.length });
    expect(ex.responseBody.data).toContain('"x-api-key":"');
    expect(JSON.stringify(ex)).not.toContain(VALUE);
    // A compressed echo is decoded for the guest (and masked), so what is recorded is readable and redacted too.
    expect((await viaTunnel(t.agent(), api('/echo?gzip'), { headers: { 'x-api-key': PH } })).status).toBe(200);
    await waitFor(() => t.events.filter((e) => e.type === 'egress.exchange').length === 2, 'the second record');
    const gz = t.events.filter((e) => e.type === 'egress.exchange')[1]!.data as Extract<EgressEvent, { type: 'egress.exchange' }>['data'];
    expect(gz.responseBody.data).toContain('"x-api-key":"');
    expect(JSON.stringify(gz)).not.toContain(VALUE);
    await t.close();
  });
});

describe('limits and failures', () => {
  it('answers 431 to oversized headers and 400 to malformed requests, and closes', async () => {
    const t = await setup({ limits: { maxHeaderBytes: 8 * 1024 } });
    const big = await rawExchange(
      t.path,
      `GET http://api.example.test:${plainUp.port}/ HTTP/1.1\r\nHost: api.example.test\r\nX-Big: ${'a'.repeat(10 * 1024)}\r\n\r\n`,
    );
    expect(big.status).toBe(431);
    expect(JSON.parse(big.body).error.details).toEqual({ field: 'headers', rule: 'at most 8192 bytes' });
    await new Promise((r) => big.socket.once('close', r));
    const bad = await rawExchange(t.path, 'HELLO THERE\r\n\r\n');
    expect(bad.status).toBe(400);
    await new Promise((r) => bad.socket.once('close', r));
    const origin = await viaPlainProxy(t.path, 'http://api.example.test/', { path: '/not-absolute' });
    expect(origin.status).toBe(400);
    // Inside a TLS tunnel, too.
    const s = await tlsTunnel(t.path, `api.example.test:${tlsUp.port}`, t.sbx.caCertPem);
    s.write(`GET / HTTP/1.1\r\nHost: api.example.test\r\nX-Big: ${'b'.repeat(10 * 1024)}\r\n\r\n`);
    expect(await new Promise<string>((resolve) => s.once('data', (d: Buffer) => resolve(d.toString())))).toMatch(/^HTTP\/1.1 431/);
    s.destroy();
    expect(t.events.filter((e) => e.type === 'egress.rejected').map((e) => (e.data as { status: number }).status)).toEqual([431, 400, 431]);
    await t.close();
  });

  it.each([
    'api.example.test',
    'api.example.test:0',
    'api.example.test:65536',
    'api.example.test:-1',
    'bad_host!:443',
    ':443',
    '[::1]',
    '127.1:443',
    'api.example.test:443/x',
  ])('answers 400 to the CONNECT target %j', async (target) => {
    const t = await setup();
    const c = await rawExchange(t.path, `CONNECT ${target} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(c.status).toBe(400);
    expect(JSON.parse(c.body).error).toMatchObject({ code: 'invalid_argument', details: { field: 'target' } });
    c.socket.destroy();
    await t.close();
  });

  it('answers 502 when the client speaks TLS to a port whose upstream does not, and when the upstream certificate is not trusted', async () => {
    const t = await setup();
    const a = await viaTunnel(t.agent(), `https://api.example.test:${plainUp.port}/echo`);
    expect(a.status).toBe(502);
    expect(a.json()).toMatchObject({ error: { code: 'gateway_unavailable', message: expect.stringContaining('TLS handshake') } });
    expect(requests(t.events)[0]).toMatchObject({ allowed: true, status: 502, code: 'gateway_unavailable' });
    await t.close();
    const u = await setup({ trustUpstream: false });
    const b = await viaTunnel(u.agent(), api());
    expect(b.status).toBe(502);
    expect(b.json().error).toMatchObject({ message: expect.stringContaining('not trusted') });
    await u.close();
  });

  it('answers 504 when an upstream hangs before answering or never completes a connection', async () => {
    const t = await setup({ limits: { upstreamResponseTimeoutMs: 300, connectTimeoutMs: 300 } });
    const started = Date.now();
    const hang = await viaTunnel(t.agent(), api('/hang'));
    expect(hang.status).toBe(504);
    expect(hang.json()).toMatchObject({ error: { code: 'timeout', message: expect.stringContaining('did not answer within 300 ms') } });
    expect(Date.now() - started).toBeLessThan(5_000);
    const stuck = await viaTunnel(t.agent(), `https://api.example.test:${silent.port}/`);
    expect(stuck.status).toBe(504);
    expect(stuck.json<{ error: { message: string } }>().error.message).toMatch(/did not complete a connection .*within 300 ms/);
    const plain = await viaPlainProxy(t.path, `http://api.example.test:${silent.port}/`);
    expect(plain.status).toBe(504);
    await t.close();
  });

  it('closes client connections that sit idle, before a request and between requests', async () => {
    const t = await setup({ limits: { idleTimeoutMs: 300 } });
    const silentClient = net.connect(t.path);
    const started = Date.now();
    await new Promise((r) => silentClient.once('close', r));
    expect(Date.now() - started).toBeLessThan(3_000);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    await new Promise<void>((resolve, reject) => {
      const req = http.request(
        { socketPath: t.path, agent, path: `http://api.example.test:${plainUp.port}/echo`, headers: { host: `api.example.test:${plainUp.port}` } },
        (res) => {
          res.resume();
          res.once('end', () => resolve());
        },
      );
      req.once('error', reject);
      req.end();
    });
    expect(t.sbx.activeConnections).toBe(1);
    await waitFor(() => t.sbx.activeConnections === 0, 'the idle keep-alive connection to close', 3_000);
    agent.destroy();
    await t.close();
  });

  it('refuses connections beyond the per-sandbox cap at once, while another sandbox still works', async () => {
    const t = await setup({ limits: { maxConnectionsPerSandbox: 4 }, sandboxes: 2 });
    const held: net.Socket[] = [];
    for (let i = 0; i < 4; i++) {
      const s = net.connect(t.path);
      s.write('GET http://api.example.test/ HTTP/1.1\r\n'); // never finished
      held.push(s);
    }
    await waitFor(() => t.sbx.activeConnections === 4, '4 open connections');
    const started = Date.now();
    const refused = await rawExchange(t.path, `GET http://api.example.test:${plainUp.port}/ HTTP/1.1\r\nHost: api.example.test:${plainUp.port}\r\n\r\n`);
    expect(refused.status).toBe(503);
    expect(JSON.parse(refused.body).error.code).toBe('capacity_exhausted');
    expect(Date.now() - started).toBeLessThan(2_000);
    const other = t.more[0]!;
    expect((await viaPlainProxy(other.path, `http://api.example.test:${plainUp.port}/echo`)).status).toBe(200);
    for (const s of held) s.destroy();
    await waitFor(() => t.sbx.activeConnections === 0, 'the connections to close');
    expect((await viaPlainProxy(t.path, `http://api.example.test:${plainUp.port}/echo`)).status).toBe(200);
    expect(t.events.filter((e) => e.type === 'egress.rejected')).toMatchObject([{ data: { reason: 'connection limit', status: 503 } }]);
    await t.close();
  });

  it('closes a removed sandbox’s connections and accepts no more', async () => {
    const t = await setup();
    const s = await tlsTunnel(t.path, `api.example.test:${tlsUp.port}`, t.sbx.caCertPem);
    const closed = new Promise((r) => s.once('close', r));
    t.proxy.removeSandbox(t.sbx.sandboxId);
    await closed;
    expect(t.sbx.activeConnections).toBe(0);
    await t.close();
  });
});

describe('replay', () => {
  it('connects nowhere from a replay: every kind of request is answered from the recording or refused before a socket opens', async () => {
    const recorded = api('/recorded');
    const replay: ReplaySource = {
      answer: async (r) =>
        r.url === recorded ? { status: 200, headers: [['content-type', 'text/plain']], body: Buffer.from('from the recording') } : undefined,
    };
    const t = await setup({ secrets: [{ allowUpgrade: true, allowPlaintext: true }], replay });
    const sockets = () => tlsUp.sockets + plainUp.sockets;
    const seen = tlsUp.seen.length + plainUp.seen.length;
    const before = sockets();
    /** An upgrade request on a fresh client connection; what the proxy answered, as status and error code. */
    const upgrade = (url: string, agent: http.Agent | false, extra: http.RequestOptions = {}) =>
      new Promise<{ status: number; code: string }>((resolve, reject) => {
        const mod = url.startsWith('https:') ? https : http;
        const req = mod.request(url, { agent, headers: { connection: 'Upgrade', upgrade: 'echo', 'x-api-key': PH }, ...extra });
        req.once('upgrade', (res, socket) => {
          socket.destroy();
          resolve({ status: res.statusCode!, code: 'upgraded' });
        });
        req.once('response', (res) => answerOf(res).then((a) => resolve({ status: a.status, code: a.json<{ error: { code: string } }>().error.code }), reject));
        req.once('error', reject);
        req.end();
      });

    const answered = await viaTunnel(t.agent(), recorded, { headers: { 'x-api-key': PH } });
    expect([answered.status, answered.body.toString()]).toEqual([200, 'from the recording']);
    const denied = { status: 403, code: 'egress_denied' };
    expect((await viaTunnel(t.agent(), api('/not-recorded'))).status).toBe(403);
    expect((await viaPlainProxy(t.path, `http://api.example.test:${plainUp.port}/plain`)).status).toBe(403);
    // wss:// (upgrade inside a TLS tunnel), ws:// in absolute form, a declined upgrade, ws:// inside a plain tunnel.
    expect(await upgrade(api('/ws'), t.agent() as https.Agent)).toEqual(denied);
    const absolute = `http://api.example.test:${plainUp.port}/ws`;
    expect(
      await upgrade(absolute, false, {
        socketPath: t.path,
        path: absolute,
        headers: { host: `api.example.test:${plainUp.port}`, connection: 'Upgrade', upgrade: 'echo' },
      }),
    ).toEqual(denied);
    expect(await upgrade(api('/decline'), t.agent() as https.Agent)).toEqual(denied);
    const tunnel = await rawExchange(t.path, `CONNECT api.example.test:${plainUp.port} HTTP/1.1\r\nHost: api.example.test:${plainUp.port}\r\n\r\n`);
    expect(tunnel.status).toBe(200);
    const inTunnel = await rawExchange2(
      tunnel.socket,
      `GET /ws HTTP/1.1\r\nHost: api.example.test:${plainUp.port}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`,
    );
    tunnel.socket.destroy();
    expect(inTunnel).toMatch(/^HTTP\/1\.1 403 /);
    expect(inTunnel).toContain('"egress_denied"');

    expect(sockets()).toBe(before);
    expect(tlsUp.seen.length + plainUp.seen.length).toBe(seen);
    const unrecorded = t.events.filter((e) => e.type === 'egress.replay_unrecorded').map((e) => (e.data as { url: string }).url);
    expect(unrecorded).toEqual([
      api('/not-recorded'),
      `http://api.example.test:${plainUp.port}/plain`,
      api('/ws'),
      absolute,
      api('/decline'),
      `http://api.example.test:${plainUp.port}/ws`,
    ]);
    await t.close();
  });

  it('opens upstream sockets in one function only, the one that refuses a replay', async () => {
    const { readdirSync, readFileSync } = await import('node:fs');
    const src = new URL('.', import.meta.url).pathname;
    const opens = /\b(?:https?\.(?:request|get)|net\.(?:connect|createConnection)|tls\.connect|new\s+net\.Socket)\s*\(|createConnection\s*[(:]/;
    const hits = readdirSync(src)
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && f !== 'test-support.ts')
      .flatMap((f) =>
        readFileSync(join(src, f), 'utf8')
          .split('\n')
          .map((line, i) => ({ f, i: i + 1, line }))
          .filter((l) => opens.test(l.line)),
      );
    expect(hits.map((h) => `${h.f}: ${h.line.trim()}`)).toEqual([
      "upstream.ts: return https.request({ ...common, agent: sb.httpsAgent, ...(dest.host.kind === 'name' ? { servername: dest.host.host } : {}) });",
      'upstream.ts: return http.request({ ...common, agent: sb.httpAgent });',
    ]);
  });
});

describe('events', () => {
  it('never carry a secret value, in any encoding', () => {
    expect(allEvents.length).toBeGreaterThan(50);
    const text = JSON.stringify(allEvents);
    for (const form of [VALUE, Buffer.from(VALUE).toString('base64'), encodeURIComponent(VALUE), JSON.stringify(VALUE).slice(1, -1)]) {
      expect(text).not.toContain(form);
    }
    expect(allEvents.some((e) => e.type === 'egress.request' && e.data.secrets.length > 0)).toBe(true);
  });
});
