// A hostile guest and a hostile tenant against the egress boundary, with real VMs: reaching the node through a policy,
// reading a secret back, sending it in clear text, outliving a scope change, and path tricks past a path rule.
import net from 'node:net';
import { networkInterfaces } from 'node:os';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Sandbox, Secrets } from '@sandglass/sdk';
import { internalRange } from '@sandglass/egress';
import { startHttpsUpstream, startHttpUpstream, type Upstream } from '@sandglass/egress/test-support';
import { api, apiUrl, checkResponsesAgainstSpec, config, gatewayUrl } from '../helpers.js';

checkResponsesAgainstSpec();

const pki = inject('egressPki');
// ports[0] and [1] belong to tests/egress.test.ts; the operator opened all of them (SANDGLASS_EGRESS_PRIVATE_ALLOW).
const ports = inject('egressUpstreamPorts');
const VALUE = `sec_${Date.now().toString(36)}Q9+v/al=ue&x`;
const made: Sandbox[] = [];
let up: Upstream;
let other: Upstream;
let plain: Upstream;
/** A listener on a loopback port the operator did not open: it must never see a connection. */
let trap: net.Server;
let trapPort = 0;
let trapConnections = 0;

beforeAll(async () => {
  up = await startHttpsUpstream(pki, ports[2]);
  other = await startHttpsUpstream(pki, ports[3]);
  plain = await startHttpUpstream(ports[4]);
  trap = net.createServer((s) => {
    trapConnections++;
    s.destroy();
  });
  await new Promise<void>((r) => trap.listen(0, '127.0.0.1', () => r()));
  trapPort = (trap.address() as net.AddressInfo).port;
  const hosts = [`api.example.test:${up.port}`];
  await Secrets.set('SEC_LEAK', VALUE, { ...config(), hosts });
  await Secrets.set('SEC_UPGRADE', `up-${VALUE}`, { ...config(), hosts, allowUpgrade: true });
  await Secrets.set('SEC_PLAIN', `pl-${VALUE}`, { ...config(), hosts: [`api.example.test:${plain.port}`] });
  await Secrets.set('SEC_BARE', `ba-${VALUE}`, { ...config(), hosts: ['api.example.test'] });
  await Secrets.set('SEC_LIVE', `li-${VALUE}`, { ...config(), hosts, header: 'x-live' });
});

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
  await Promise.all([up?.close(), other?.close(), plain?.close()]);
  await new Promise((r) => trap?.close(r));
});

async function sandbox(allow: string[], secrets: string[] = []): Promise<Sandbox> {
  const s = await Sandbox.create({ ...config(), timeoutS: 1200, snapshotIntervalS: 3600, network: { allow }, secrets });
  made.push(s);
  return s;
}

async function sh(s: Sandbox, cmd: string): Promise<string> {
  try {
    const r = await s.commands.run(cmd, { timeoutMs: 90_000 });
    return r.stdout + r.stderr;
  } catch (e) {
    const r = e as { stdout?: string; stderr?: string };
    return `${r.stdout ?? ''}${r.stderr ?? ''}`;
  }
}

/**
 * Sends one request through the guest's proxy over TLS (CONNECT, the sandbox's CA) with Python, and returns every byte
 * the guest received after the handshake, base64 on the wire back to the test. `{NAME}` in the request is replaced by
 * the environment variable NAME (a placeholder).
 */
async function rawTls(s: Sandbox, host: string, port: number, request: string): Promise<Buffer> {
  const script = `
import base64, os, re, socket, ssl, sys
req = re.sub(r'\\{([A-Z_]+)\\}', lambda m: os.environ[m.group(1)], ${JSON.stringify(request)})
s = socket.create_connection(('127.0.0.1', 3128))
s.sendall(b'CONNECT ${host}:${port} HTTP/1.1\\r\\nHost: ${host}:${port}\\r\\n\\r\\n')
head = b''
while b'\\r\\n\\r\\n' not in head:
    d = s.recv(4096)
    if not d: break
    head += d
out = head
if head.startswith(b'HTTP/1.1 200'):
    t = ssl.create_default_context(cafile=os.environ['SSL_CERT_FILE']).wrap_socket(s, server_hostname='${host}')
    t.sendall(req.encode())
    t.settimeout(4)
    try:
        while True:
            d = t.recv(65536)
            if not d: break
            out += d
    except (socket.timeout, ssl.SSLError, OSError):
        pass
sys.stdout.write(base64.b64encode(out).decode())
`;
  const r = await s.commands.run(`python3 -c ${shellQuote(script)}`, { timeoutMs: 90_000 });
  return Buffer.from(r.stdout.trim(), 'base64');
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** What a client could make of the bytes: as received, and the body decoded by every content coding it might be in. */
function readings(raw: Buffer): Buffer[] {
  const out = [raw];
  const end = raw.indexOf('\r\n\r\n');
  const body = end >= 0 ? raw.subarray(end + 4) : raw;
  for (const decode of [gunzipSync, inflateSync, brotliDecompressSync]) {
    try {
      out.push(decode(body));
    } catch {
      // not in this coding
    }
  }
  return out;
}

/** How often any form of a secret value (raw, base64, URL-encoded) occurs in what the guest received. */
function leaks(received: Buffer[], values: string[]): string[] {
  const needles = values.flatMap((v) => [v, Buffer.from(v).toString('base64'), encodeURIComponent(v)]);
  const hits: string[] = [];
  for (const r of received.flatMap(readings)) for (const n of needles) if (r.includes(n)) hits.push(n);
  return hits;
}

const status = (raw: Buffer) =>
  /^HTTP\/1\.1 200 Connection Established\r\n\r\nHTTP\/1\.1 (\d{3})/.exec(raw.toString('latin1'))?.[1] ?? raw.toString('latin1').slice(0, 40);

describe('egress boundary, from inside a guest', () => {
  it('(2) no tenant policy reaches the node: loopback, gateway, own addresses, internal IPs in every spelling', async () => {
    const gatewayPort = Number(new URL(gatewayUrl).port);
    const apiPort = Number(new URL(apiUrl).port);
    // Internal IPs cannot even be written into a policy, in any form.
    for (const rule of [
      `127.0.0.1:${gatewayPort}`,
      '127.0.0.1:*',
      `[::1]:${gatewayPort}`,
      `[::ffff:127.0.0.1]:${gatewayPort}`,
      '169.254.169.254',
      '10.1.2.3:5432',
      '100.64.0.1',
      '[fd00:ec2::254]',
      '[64:ff9b::7f00:1]:80',
      '[2002:7f00:1::]:80',
      '[2001::1]:80',
    ]) {
      const r = await api('POST', '/v1/sandboxes', { body: { network: { allow: [rule] } } });
      expect(r.status, rule).toBe(400);
      expect(r.body!.error, rule).toMatchObject({ code: 'policy_invalid', details: { field: 'network.allow[0]' } });
    }
    // A name that resolves to loopback (the operator's own resolver entry) on ports the operator did not open, and the
    // node's own non-loopback addresses that a policy can name: refused before any connection.
    const own = Object.values(networkInterfaces())
      .flat()
      .map((a) => a!.address.split('%')[0]!)
      .filter((ip) => internalRange(ip) === undefined);
    const ownRules = own.map((ip) => (ip.includes(':') ? `[${ip}]:${gatewayPort}` : `${ip}:${gatewayPort}`));
    const s = await sandbox([`api.example.test:${gatewayPort}`, `api.example.test:${apiPort}`, `api.example.test:${trapPort}`, ...ownRules]);
    const targets = [
      `http://api.example.test:${gatewayPort}/v1/sandboxes`,
      `http://api.example.test:${apiPort}/v1/health`,
      `http://api.example.test:${trapPort}/`,
      ...own.map((ip) => `http://${ip.includes(':') ? `[${ip}]` : ip}:${gatewayPort}/internal/v1/sandboxes`),
    ];
    for (const url of targets) {
      const out = await sh(s, `curl -sS -m 20 --proxy http://127.0.0.1:3128 ${shellQuote(url)}`);
      expect(out, url).toContain('egress_denied');
    }
    // Other spellings of 127.0.0.1 are not addresses at all.
    for (const host of ['2130706433', '0177.0.0.1', '0x7f.1', '127.1']) {
      const out = await sh(
        s,
        `printf 'GET http://${host}:${trapPort}/ HTTP/1.1\\r\\nHost: ${host}:${trapPort}\\r\\nConnection: close\\r\\n\\r\\n' | python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',3128)); s.sendall(sys.stdin.buffer.read()); print(s.recv(4096)[:12].decode())"`,
      );
      expect(out, host).toMatch(/HTTP\/1.1 4\d\d/);
    }
    const denials = (await s.events())
      .filter((e) => e.type === 'egress.request')
      .map((e) => e.data as { host: string; port: number; allowed: boolean; reason: string });
    for (const port of [gatewayPort, apiPort, trapPort]) {
      expect(
        denials.find((d) => d.host === 'api.example.test' && d.port === port),
        String(port),
      ).toMatchObject({ allowed: false, reason: 'internal address' });
    }
    for (const ip of own)
      expect(
        denials.find((d) => d.host === ip && d.port === gatewayPort),
        ip,
      ).toMatchObject({ allowed: false, reason: 'internal address' });
    expect(trapConnections).toBe(0);
  });

  it('(3)(4)(6) the value never comes back, never goes in clear text or off port 443, and path tricks are refused', async () => {
    const s = await sandbox(
      [`api.example.test:${up.port}`, `api.example.test:${plain.port}`, `other.example.test:${other.port} GET /allowed`],
      ['SEC_LEAK', 'SEC_UPGRADE', 'SEC_PLAIN', 'SEC_BARE'],
    );
    const h = `api.example.test:${up.port}`;
    const received: Buffer[] = [];
    // (3) The upstream echoes the request back, compressed whatever the guest asked for.
    for (const coding of ['gzip', 'deflate', 'br']) {
      const raw = await rawTls(
        s,
        'api.example.test',
        up.port,
        `GET /echo?encoding=${coding} HTTP/1.1\r\nHost: ${h}\r\nAccept-Encoding: gzip, deflate, br\r\nx-api-key: {SEC_LEAK}\r\nConnection: close\r\n\r\n`,
      );
      expect(status(raw), coding).toBe('200');
      expect(up.seen.at(-1)!.headers['x-api-key']).toBe(VALUE);
      expect(up.seen.at(-1)!.headers['accept-encoding']).toBe('identity');
      received.push(raw);
    }
    // (3) A declined upgrade, and a WebSocket 101 whose first frame bytes echo the request: a secret that did not opt in
    // is refused on upgrades; one that did is masked on the declined path.
    const seenBefore = up.seen.length;
    for (const path of ['/decline', '/ws-headers']) {
      const raw = await rawTls(
        s,
        'api.example.test',
        up.port,
        `GET ${path} HTTP/1.1\r\nHost: ${h}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nx-api-key: {SEC_LEAK}\r\n\r\n`,
      );
      expect(status(raw), path).toBe('403');
      received.push(raw);
    }
    expect(up.seen.length).toBe(seenBefore);
    const declined = await rawTls(
      s,
      'api.example.test',
      up.port,
      `GET /decline HTTP/1.1\r\nHost: ${h}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nx-api-key: {SEC_UPGRADE}\r\nAuthorization: Bearer {SEC_UPGRADE}\r\n\r\n`,
    );
    expect(status(declined)).toBe('400');
    expect(up.seen.at(-1)!.headers['x-api-key']).toBe(`up-${VALUE}`);
    received.push(declined);
    expect(leaks(received, [VALUE, `up-${VALUE}`, `Bearer up-${VALUE}`])).toEqual([]);

    // (4) Clear text: plain http:// and plain HTTP inside a CONNECT tunnel get no substitution; nor does a port other
    // than 443 for a scope that names none.
    const plainBefore = plain.seen.length;
    const abs = await sh(s, `curl -sS -H "x-api-key: $SEC_PLAIN" http://api.example.test:${plain.port}/echo`);
    expect(abs).toContain('egress_secret_scope');
    const tunnelled = await sh(s, `curl -sS -p -H "x-api-key: $SEC_PLAIN" http://api.example.test:${plain.port}/echo`);
    expect(tunnelled).toContain('egress_secret_scope');
    expect(plain.seen.length).toBe(plainBefore);
    const bare = await sh(s, `curl -sS -H "x-api-key: $SEC_BARE" https://${h}/echo`);
    expect(bare).toContain('egress_secret_scope');
    expect(up.seen.some((x) => JSON.stringify(x.headers).includes(`ba-${VALUE}`) || JSON.stringify(x.headers).includes(`pl-${VALUE}`))).toBe(false);
    const scope = (await s.events()).filter((e) => e.type === 'egress.secret_scope').map((e) => e.data as { secret: string; reason: string });
    expect(scope).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ secret: 'SEC_PLAIN', reason: expect.stringContaining('clear text') }),
        expect.objectContaining({ secret: 'SEC_BARE', reason: 'not scoped to this host and port' }),
      ]),
    );

    // (6) A path rule: encoded slashes, backslashes and dot segments never get past it.
    const otherBefore = other.seen.length;
    expect(await sh(s, `curl -sS -o /dev/null -w '%{http_code}' https://other.example.test:${other.port}/allowed/x`)).toBe('200');
    for (const sneaky of [
      '/allowed/%2e%2e%2Fadmin',
      '/allowed/..%2fadmin',
      '/allowed%2F..%2Fadmin',
      '/allowed/..%5cadmin',
      '/allowed/%2e%2e/admin',
      '/allowed/..;/admin',
      '/allowed/%252e%252e/admin',
      '//allowed/../admin',
    ]) {
      const out = await sh(s, `curl -sS --path-as-is https://other.example.test:${other.port}${sneaky}`);
      expect(out, sneaky).toContain('egress_denied');
      expect(out, sneaky).toContain('ambiguous path');
    }
    expect(other.seen.length).toBe(otherBefore + 1);
  });

  it('(5) a secret narrowed, rotated or switched to approval while the sandbox runs applies to the next request', async () => {
    const s = await sandbox([`api.example.test:${up.port}`, `other.example.test:${other.port}`], ['SEC_LIVE']);
    const call = () => sh(s, `curl -sS -m 60 -o /dev/null -w '%{http_code}' https://api.example.test:${up.port}/echo`);
    expect(await call()).toBe('200');
    expect(up.seen.at(-1)!.headers['x-live']).toBe(`li-${VALUE}`);
    await Secrets.set('SEC_LIVE', `li2-${VALUE}`, { ...config(), hosts: [`api.example.test:${up.port}`], header: 'x-live' });
    expect(await call()).toBe('200');
    expect(up.seen.at(-1)!.headers['x-live']).toBe(`li2-${VALUE}`);
    await Secrets.set('SEC_LIVE', `li2-${VALUE}`, { ...config(), hosts: [`other.example.test:${other.port}`], header: 'x-live' });
    expect(await call()).toBe('200');
    expect(up.seen.at(-1)!.headers['x-live']).toBeUndefined();
    expect(await sh(s, `curl -sS -H "x-api-key: $SEC_LIVE" https://api.example.test:${up.port}/echo`)).toContain('egress_secret_scope');
    await Secrets.set('SEC_LIVE', `li2-${VALUE}`, { ...config(), hosts: [`api.example.test:${up.port}`], header: 'x-live', approval: 'required' });
    const seen = up.seen.length;
    // Nobody approves: the request is held, then refused when the approval times out (4 s in the test server).
    expect(await call()).toBe('403');
    expect(up.seen.length).toBe(seen);
    expect((await s.events()).some((e) => e.type === 'secret.approval_requested' && (e.data as { secret: string }).secret === 'SEC_LIVE')).toBe(true);
  });
});
