// Waking a paused sandbox on a cluster node: a gateway that forgot a paused sandbox hands a request's credential to the
// control plane (POST /node/v1/sandboxes/{id}/wake), which verifies it itself and resumes the sandbox when it opted in
// (autoResume). Real parts (cluster-harness.ts): PostgreSQL, an S3 server, one control plane behind haproxy, two gateways.
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';
import { Cluster } from './cluster-harness.js';
import { home as sharedHome } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'sg-cluster-wake-'));
const cluster = new Cluster({
  dir,
  artifactsFrom: sharedHome,
  basePort: Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 300,
  controlPlanes: 1,
  gateways: 2,
  deadAfterS: 6,
  heartbeatIntervalS: 1,
});
let config: ConnectionConfig;
const HTTP_PORT = 8000;

beforeAll(async () => {
  try {
    await cluster.start();
  } catch (err) {
    for (const name of ['cp1', 'gateway-n1', 'gateway-n2']) console.error(`--- ${name}.log ---\n${cluster.log(name).slice(-4000)}`);
    throw err;
  }
  // A pause captures the whole guest into the S3 store: minutes on a loaded 2-core host, past the SDK's default 60 s.
  config = { apiUrl: cluster.apiUrl, apiKey: cluster.adminKey, requestTimeoutMs: 600_000 };
}, 900_000);

afterAll(async () => {
  await cluster.stop();
  if (!process.env.SANDGLASS_KEEP_CLUSTER) rmSync(dir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  body: string;
  headers: http.IncomingHttpHeaders;
}

/** A plain HTTP request to a gateway's data plane (no redirects followed, no connection reuse). */
function send(nodeId: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const url = new URL(cluster.gatewayInfo.get(nodeId)!.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path, headers, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString('utf8'), headers: res.headers }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

async function cp(method: string, path: string, opts: { key?: string; body?: unknown } = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${cluster.apiUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${opts.key ?? cluster.adminKey}`, ...(opts.body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(opts.body === undefined ? {} : { body: JSON.stringify(opts.body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** The node API call a node makes, with the key that node holds: what a compromised node can send. */
async function asNode(nodeId: string, path: string, body: unknown): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${cluster.apiUrl}${path}`, {
    method: 'POST',
    headers: { ...cluster.nodeHeaders(nodeId), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const parsed = (await res.json().catch(() => ({}))) as { error?: { code?: string } };
  return { status: res.status, code: parsed.error?.code };
}

const code = (a: Answer) => (JSON.parse(a.body) as { error?: { code?: string } }).error?.code;
const info = async (id: string) => (await cp('GET', `/v1/sandboxes/${id}`)).body as { state: string; gatewayId?: string };
const resumes = async (id: string) =>
  ((await cp('GET', `/v1/sandboxes/${id}/events?limit=1000`)).body.events as Array<{ type: string; data: any }>).filter((e) => e.type === 'sandbox.resumed');
const tokenOf = async (id: string, key?: string) => (await cp('POST', `/v1/sandboxes/${id}/access`, { key })).body.token as string;
const hi = (id: string) => `/v1/sandboxes/${id}/ports/${HTTP_PORT}/hi.txt`;

async function until(what: string, fn: () => Promise<boolean>, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** A sandbox serving /tmp/www on HTTP_PORT from a process in its memory, and the node it runs on. */
async function serving(opts: { autoResume?: boolean }): Promise<{ s: Sandbox; node: string; other: string }> {
  const s = await Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 3600, ...opts });
  await s.files.write('/tmp/www/hi.txt', `hello from ${s.id}`);
  await s.commands.run(`cd /tmp/www && exec python3 -m http.server ${HTTP_PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
  await until('the guest server', async () => (await s.ports.list()).some((p) => p.port === HTTP_PORT));
  const node = (await info(s.id)).gatewayId!;
  return { s, node, other: node === 'n1' ? 'n2' : 'n1' };
}

describe('a cluster node and a paused sandbox it no longer runs', () => {
  // One opted-in sandbox paused again for each step, one without the opt-in: pauses are the slow part here.
  let opted: { s: Sandbox; node: string; other: string };
  let plain: { s: Sandbox; node: string; other: string };
  /** A real token of `plain`, taken while it ran: a paused sandbox is handed no new token. */
  let plainToken: string;

  afterAll(async () => {
    for (const x of [opted, plain]) await x?.s.kill().catch(() => undefined);
  });

  it('opted in: no credential is 401 and wakes nothing; concurrent requests with its token resume it once, and its memory answers', async () => {
    opted = await serving({ autoResume: true });
    const { s, node } = opted;
    const token = await tokenOf(s.id);
    await s.pause();
    expect((await info(s.id)).state).toBe('paused');
    const anonymous = await send(node, hi(s.id));
    expect([anonymous.status, code(anonymous)]).toEqual([401, 'unauthenticated']);
    expect((await info(s.id)).state).toBe('paused');
    expect(await resumes(s.id)).toEqual([]);

    const answers = await Promise.all(Array.from({ length: 8 }, () => send(node, hi(s.id), { 'x-sandglass-access-token': token })));
    expect(answers.map((a) => [a.status, a.body])).toEqual(Array.from({ length: 8 }, () => [200, `hello from ${s.id}`]));
    expect(await info(s.id)).toMatchObject({ state: 'running', gatewayId: node });
    const resumed = await resumes(s.id);
    expect(resumed).toHaveLength(1);
    expect(resumed[0]!.data).toMatchObject({ trigger: 'request' });
  });

  it('opted in: a request to the other node resumes it on its own node and is told it is not there; a signed port URL wakes it too', async () => {
    const { s, node, other } = opted;
    const token = await tokenOf(s.id);
    const url = new URL((await s.ports.url(HTTP_PORT, { form: 'path' })).url);
    await s.pause();
    // The other node does not run it: the control plane resumes it where placement puts it (its last node, alive), and
    // the other node answers what it answers for any sandbox it does not run.
    const away = await send(other, hi(s.id), { 'x-sandglass-access-token': token });
    expect([away.status, code(away)]).toEqual([404, 'sandbox_not_found']);
    expect(await info(s.id)).toMatchObject({ state: 'running', gatewayId: node });
    expect((await send(node, hi(s.id), { 'x-sandglass-access-token': token })).body).toBe(`hello from ${s.id}`);

    await s.pause();
    const byUrl = await send(node, url.pathname + url.search);
    expect(byUrl.status).toBe(302);
    expect(String(byUrl.headers['set-cookie'])).toMatch(/sandglass_port_access=sgpu_/);
    expect((await info(s.id)).state).toBe('running');
    expect(await resumes(s.id)).toHaveLength(3);
  });

  it('not opted in: sandbox_paused (409) from either node, and it stays paused', async () => {
    plain = await serving({});
    const { s, node, other } = plain;
    const token = await tokenOf(s.id);
    plainToken = token;
    await s.pause();
    for (const n of [node, other]) {
      const a = await send(n, hi(s.id), { 'x-sandglass-access-token': token });
      expect([a.status, code(a)]).toEqual([409, 'sandbox_paused']);
    }
    expect((await info(s.id)).state).toBe('paused');
    expect(await resumes(s.id)).toEqual([]);
  });

  it("refused, and it stays paused: a revoked key's token (by the node, and by the control plane itself), and a node's wake without the sandbox's credential", async () => {
    const { s, node, other } = opted;
    const made = await cp('POST', '/v1/api-keys', { body: { name: `wake-${s.id}` } });
    const memberToken = await tokenOf(s.id, made.body.key as string);
    const real = await tokenOf(s.id);
    const forTheOther = plainToken;
    // Paused already when a step above failed after its pause: what this test asks holds either way.
    if ((await info(s.id)).state !== 'paused') await s.pause();
    const before = (await resumes(s.id)).length;
    expect((await cp('DELETE', `/v1/api-keys/${made.body.id as string}`)).status).toBe(200);
    const a = await send(node, hi(s.id), { 'x-sandglass-access-token': memberToken });
    expect([a.status, code(a)]).toEqual([401, 'api_key_revoked']);
    const path = `/node/v1/sandboxes/${s.id}/wake`;
    // A node that was never told of the revocation (or ignores it) passes the token on: the database says no.
    expect(await asNode(node, path, { credential: memberToken })).toEqual({ status: 401, code: 'api_key_revoked' });
    // Claims of its own choosing under a MAC it cannot make: the victim's id, tenant and key read off a real token.
    const claims = JSON.parse(Buffer.from(real.slice('sgat_'.length).split('.')[0]!, 'base64url').toString('utf8')) as Record<string, unknown>;
    const body = Buffer.from(JSON.stringify({ ...claims, exp: Date.now() + 3_600_000 })).toString('base64url');
    const forged = `sgat_${body}.${Buffer.alloc(32, 7).toString('base64url')}`;
    expect(await asNode(other, path, { credential: forged })).toEqual({ status: 401, code: 'unauthenticated' });
    // A real token of another sandbox (a request of that one passed through the node), for this sandbox's id.
    expect(await asNode(other, path, { credential: forTheOther })).toEqual({ status: 403, code: 'permission_denied' });
    expect((await asNode(other, path, {})).status).toBe(400);
    expect((await info(s.id)).state).toBe('paused');
    expect(await resumes(s.id)).toHaveLength(before);
  });
});
