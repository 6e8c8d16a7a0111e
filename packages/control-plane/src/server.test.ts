// The control plane over fastify's inject, with a tiny real HTTP server standing in for the gateway's internal API.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger, ManualClock, verifyAccessToken } from '@sandglass/core';
import { openDatabase, toIso, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { bootstrapLocal, createControlPlane, hashApiKey, singleGateway, upsertTemplate, type ControlPlane, type GatewayDirectory } from './index.js';

const SECRET = Buffer.alloc(32, 7);

/** What the fake gateway does with the next create: run it (recording sandbox.started, as the embedded gateway does) or fail. */
type GatewayMode = 'ok' | 'vm_failed' | 'vm_failed_recorded';

interface SeenRequest {
  method: string;
  url: string;
  authorization?: string;
  body: unknown;
}

let fakeGateway: Server;
let gatewayUrl: string;
let seen: SeenRequest[];
let mode: GatewayMode;

let database: Database;
let events: EventLog;
let clock: ManualClock;
let cp: ControlPlane;
let home: string;
let adminKey: string;

async function readBody(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text === '' ? undefined : JSON.parse(text);
}

beforeAll(async () => {
  fakeGateway = createServer(async (req, res) => {
    const body = await readBody(req);
    seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization, body });
    const reply = (status: number, json?: unknown) => {
      res.writeHead(status, json === undefined ? {} : { 'content-type': 'application/json' });
      res.end(json === undefined ? undefined : JSON.stringify(json));
    };
    if (req.headers.authorization !== `Bearer ${SECRET.toString('hex')}`) return reply(401, { error: { code: 'unauthenticated', message: 'node secret' } });
    if (req.method === 'POST' && req.url === '/internal/v1/sandboxes') {
      const b = body as { id: string; tenantId: string };
      if (mode === 'ok') {
        await events.append({ type: 'sandbox.started', tenantId: b.tenantId, sandboxId: b.id, data: { pid: 4242 } }, { clock });
        return reply(201, { id: b.id, state: 'running', startedAt: toIso(clock.nowMs()), pid: 4242 });
      }
      if (mode === 'vm_failed_recorded') {
        await events.append({ type: 'sandbox.failed', tenantId: b.tenantId, sandboxId: b.id, data: { reason: 'kernel panic', consoleTail: 'panic' } }, { clock });
      }
      return reply(500, { error: { code: 'vm_failed', message: 'The VM exited during restore.', requestId: 'req_gw' } });
    }
    if (req.method === 'DELETE' && req.url?.startsWith('/internal/v1/sandboxes/')) return reply(204);
    if (req.method === 'POST' && req.url?.endsWith('/timeout')) return reply(204);
    reply(404, { error: { code: 'not_found', message: 'no route' } });
  });
  await new Promise<void>((resolve) => fakeGateway.listen(0, '127.0.0.1', resolve));
  gatewayUrl = `http://127.0.0.1:${(fakeGateway.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => fakeGateway.close(() => resolve())));

async function start(gateways: GatewayDirectory = singleGateway({ id: 'node_test', url: gatewayUrl })): Promise<void> {
  cp = createControlPlane({ db: database.db, events, gateways, nodeSecret: SECRET, clock, logger: createLogger('test', 'silent') });
  await cp.app.ready();
}

beforeEach(async () => {
  seen = [];
  mode = 'ok';
  clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
  database = await openDatabase({ url: 'sqlite::memory:' });
  events = new EventLog(database.db);
  home = mkdtempSync(join(tmpdir(), 'sg-cp-'));
  adminKey = await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock });
  for (const [name, status] of [['base', 'ready'], ['slow', 'building'], ['broken', 'failed']] as const) {
    await upsertTemplate(database.db, { name, status, memoryMib: 256 }, { clock });
  }
  await start();
});
afterEach(async () => {
  await cp.close();
  await database.close();
  rmSync(home, { recursive: true, force: true });
});

type Method = 'GET' | 'POST' | 'DELETE';
function call(method: Method, url: string, opts: { key?: string | null; json?: unknown; payload?: string | Buffer; headers?: Record<string, string> } = {}) {
  const key = opts.key === undefined ? adminKey : opts.key;
  return cp.app.inject({
    method,
    url,
    headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...opts.headers },
    ...(opts.json !== undefined ? { payload: opts.json as object } : opts.payload !== undefined ? { payload: opts.payload } : {}),
  });
}

async function createSandbox(key = adminKey, json: unknown = {}) {
  const res = await call('POST', '/v1/sandboxes', { key, json });
  expect(res.statusCode, res.body).toBe(201);
  return res.json() as { id: string; tenantId: string; access: { token: string; gatewayUrl: string; expiresAt: string } };
}

/** A second tenant with a member key, made through the admin API. */
async function tenantB(): Promise<{ tenantId: string; key: string }> {
  const t = await call('POST', '/v1/tenants', { json: { name: 'b' } });
  expect(t.statusCode, t.body).toBe(201);
  const k = await call('POST', `/v1/tenants/${t.json().id}/api-keys`, { json: { name: 'ci' } });
  expect(k.statusCode, k.body).toBe(201);
  return { tenantId: t.json().id, key: k.json().key };
}

/** Everything a rejected request must leave alone. */
async function state() {
  return {
    events: await events.list(),
    sandboxes: await database.db.selectFrom('sandboxes').selectAll().orderBy('id').execute(),
    gatewayCalls: seen.length,
  };
}

describe('health and auth', () => {
  it('answers health without a key', async () => {
    const res = await call('GET', '/v1/health', { key: null });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ status: 'ok', version: '0.1.0' });
  });

  it.each([
    ['no header', {}],
    ['another scheme', { headers: { authorization: `Basic ${adminKey}` } }],
    ['an unknown key', { key: 'sg_' + 'A'.repeat(43) }],
    ['an empty bearer', { headers: { authorization: 'Bearer ' } }],
  ])('rejects %s as unauthenticated, before looking at the body', async (_what, opts) => {
    const before = await state();
    const res = await call('POST', '/v1/sandboxes', { key: null, json: { memoryMib: 1 }, ...opts });
    expect(res.statusCode).toBe(401);
    expect(res.json().error).toMatchObject({ code: 'unauthenticated', requestId: expect.stringMatching(/^req_/) });
    expect(await state()).toEqual(before);
  });

  it('answers not_found for an unknown route, in the wire format', async () => {
    const res = await call('GET', '/v1/nope');
    expect(res.statusCode).toBe(404);
    expect(res.json().error.code).toBe('not_found');
  });

  it('stores only a hash of each key', async () => {
    const rows = await database.db.selectFrom('api_keys').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ key_hash: hashApiKey(adminKey), prefix: adminKey.slice(0, 10), role: 'admin' });
    expect(JSON.stringify(rows)).not.toContain(adminKey);
    expect(JSON.stringify(await events.list())).not.toContain(adminKey);
  });
});

describe('templates', () => {
  it('lists the templates table', async () => {
    const res = await call('GET', '/v1/templates');
    expect(res.statusCode).toBe(200);
    expect(res.json().templates.map((t: { name: string; status: string }) => [t.name, t.status])).toEqual([
      ['base', 'ready'],
      ['broken', 'failed'],
      ['slow', 'building'],
    ]);
  });

  it('upsertTemplate keeps id and createdAt, updates status', async () => {
    const before = await upsertTemplate(database.db, { name: 'slow', status: 'building', memoryMib: 256 });
    clock.advance(60_000);
    const after = await upsertTemplate(database.db, { name: 'slow', status: 'ready', memoryMib: 512, artifactKey: 'tpl/abc' }, { clock });
    expect(after).toEqual({ ...before, status: 'ready', memory_mib: 512, artifact_key: 'tpl/abc' });
    expect(await upsertTemplate(database.db, { name: 'slow', status: 'ready', memoryMib: 512 })).toMatchObject({ artifact_key: 'tpl/abc' });
  });
});

describe('POST /v1/sandboxes', () => {
  it('creates through the gateway and answers 201 with access', async () => {
    const res = await call('POST', '/v1/sandboxes', { json: { memoryMib: 512, vcpus: 2, timeoutS: 60, metadata: { job: '7' } } });
    expect(res.statusCode, res.body).toBe(201);
    const sbx = res.json();
    expect(sbx).toMatchObject({
      id: expect.stringMatching(/^sbx_[a-z2-7]{20}$/),
      template: 'base',
      state: 'running',
      memoryMib: 512,
      vcpus: 2,
      timeoutS: 60,
      metadata: { job: '7' },
      createdAt: '2025-06-01T12:00:00.000Z',
      startedAt: '2025-06-01T12:00:00.000Z',
      expiresAt: '2025-06-01T12:01:00.000Z',
    });
    expect(sbx.access.gatewayUrl).toBe(gatewayUrl);
    expect(sbx.access.expiresAt).toBe('2025-06-01T12:15:00.000Z');
    expect(verifyAccessToken(sbx.access.token, SECRET, clock.nowMs())).toEqual({ sbx: sbx.id, ten: sbx.tenantId, exp: Date.UTC(2025, 5, 1, 12, 15) });

    expect(seen).toEqual([
      {
        method: 'POST',
        url: '/internal/v1/sandboxes',
        authorization: `Bearer ${SECRET.toString('hex')}`,
        body: { id: sbx.id, tenantId: sbx.tenantId, template: 'base', memoryMib: 512, vcpus: 2, timeoutS: 60 },
      },
    ]);
    expect((await events.list({ sandboxId: sbx.id })).map((e) => e.type)).toEqual(['sandbox.created', 'sandbox.started']);
    const { access: _access, ...withoutAccess } = sbx;
    expect((await call('GET', `/v1/sandboxes/${sbx.id}`)).json()).toEqual(withoutAccess);
  });

  it('takes every default from an empty body, or no body at all', async () => {
    for (const opts of [{ json: {} }, {}]) {
      const res = await call('POST', '/v1/sandboxes', opts);
      expect(res.statusCode, res.body).toBe(201);
      expect(res.json()).toMatchObject({ template: 'base', memoryMib: 256, vcpus: 1, timeoutS: 300, metadata: {} });
    }
  });

  const tooMany = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v']));
  it.each([
    ['memoryMib below the minimum', { json: { memoryMib: 64 } }, 400, 'invalid_argument', 'memoryMib'],
    ['memoryMib above the maximum', { json: { memoryMib: 16385 } }, 400, 'invalid_argument', 'memoryMib'],
    ['memoryMib as a string', { json: { memoryMib: '512' } }, 400, 'invalid_argument', 'memoryMib'],
    ['memoryMib fractional', { json: { memoryMib: 256.5 } }, 400, 'invalid_argument', 'memoryMib'],
    ['vcpus zero', { json: { vcpus: 0 } }, 400, 'invalid_argument', 'vcpus'],
    ['vcpus nine', { json: { vcpus: 9 } }, 400, 'invalid_argument', 'vcpus'],
    ['a negative timeoutS', { json: { timeoutS: -5 } }, 400, 'invalid_argument', 'timeoutS'],
    ['timeoutS over a day', { json: { timeoutS: 86401 } }, 400, 'invalid_argument', 'timeoutS'],
    ['an unknown field (typo)', { json: { memorymib: 512 } }, 400, 'invalid_argument', 'memorymib'],
    ['33 metadata entries', { json: { metadata: tooMany } }, 400, 'invalid_argument', 'metadata'],
    ['a non-string metadata value', { json: { metadata: { n: 1 } } }, 400, 'invalid_argument', 'metadata.n'],
    ['an empty template name', { json: { template: '' } }, 400, 'invalid_argument', 'template'],
    ['a body that is not an object', { json: [1, 2] }, 400, 'invalid_argument', 'body'],
    ['malformed JSON', { payload: '{"memoryMib": 5', headers: { 'content-type': 'application/json' } }, 400, 'malformed_json', undefined],
    ['an empty JSON body', { payload: '', headers: { 'content-type': 'application/json' } }, 400, 'malformed_json', undefined],
    ['a wrong content type', { payload: 'memoryMib=512', headers: { 'content-type': 'text/plain' } }, 400, 'invalid_argument', 'content-type'],
    ['a form content type', { payload: 'memoryMib=512', headers: { 'content-type': 'application/x-www-form-urlencoded' } }, 400, 'invalid_argument', 'content-type'],
    ['a body over 1 MiB', { payload: JSON.stringify({ metadata: { a: 'x'.repeat(1024 * 1024) } }), headers: { 'content-type': 'application/json' } }, 413, 'payload_too_large', undefined],
  ] as const)('rejects %s, changing nothing', async (_what, opts, status, code, field) => {
    const before = await state();
    const res = await call('POST', '/v1/sandboxes', opts as Parameters<typeof call>[2]);
    expect(res.statusCode, res.body).toBe(status);
    const error = res.json().error;
    expect(error.code).toBe(code);
    expect(error.requestId).toMatch(/^req_/);
    if (field !== undefined) {
      expect(error.details.field).toBe(field);
      expect(error.message).toContain(field);
    }
    expect(await state()).toEqual(before);
  });

  it.each([
    ['an unknown template', 'nope', 404, 'template_not_found'],
    ['a template still building', 'slow', 503, 'template_not_ready'],
    ['a template that failed to build', 'broken', 503, 'template_not_ready'],
  ])('refuses %s, changing nothing', async (_what, template, status, code) => {
    const before = await state();
    const res = await call('POST', '/v1/sandboxes', { json: { template } });
    expect(res.statusCode).toBe(status);
    expect(res.json().error.code).toBe(code);
    expect(await state()).toEqual(before);
  });

  it('finds a template by id as well as by name', async () => {
    const [base] = (await call('GET', '/v1/templates')).json().templates;
    expect((await call('POST', '/v1/sandboxes', { json: { template: base.id } })).statusCode).toBe(201);
  });

  it('records the failure when the gateway reports one, and returns the gateway’s error', async () => {
    mode = 'vm_failed';
    const res = await call('POST', '/v1/sandboxes');
    expect(res.statusCode).toBe(500);
    expect(res.json().error).toMatchObject({ code: 'vm_failed', message: 'The VM exited during restore.' });
    const [row] = await database.db.selectFrom('sandboxes').selectAll().execute();
    expect(row).toMatchObject({ state: 'failed', failure_reason: 'The VM exited during restore.' });
    expect((await events.list({ sandboxId: row!.id })).map((e) => e.type)).toEqual(['sandbox.created', 'sandbox.failed']);
  });

  it('does not duplicate a failure the gateway recorded itself', async () => {
    mode = 'vm_failed_recorded';
    expect((await call('POST', '/v1/sandboxes')).statusCode).toBe(500);
    const [row] = await database.db.selectFrom('sandboxes').selectAll().execute();
    expect(row).toMatchObject({ state: 'failed', failure_reason: 'kernel panic' });
    expect((await events.list({ sandboxId: row!.id })).map((e) => e.type)).toEqual(['sandbox.created', 'sandbox.failed']);
  });

  it('answers gateway_unavailable when the gateway cannot be reached, and the sandbox ends failed', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    await cp.close();
    await start(singleGateway({ id: 'node_dead', url: deadUrl }));

    const res = await call('POST', '/v1/sandboxes');
    expect(res.statusCode).toBe(502);
    expect(res.json().error).toMatchObject({ code: 'gateway_unavailable', message: expect.stringContaining('node_dead') });
    const [row] = await database.db.selectFrom('sandboxes').selectAll().execute();
    expect(row).toMatchObject({ state: 'failed', failure_reason: expect.stringContaining('cannot be reached') });
  });

  it('treats a gateway refusing the node secret as internal, not as the caller’s fault', async () => {
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl }),
      nodeSecret: Buffer.alloc(32, 1),
      clock,
      logger: createLogger('test', 'silent'),
    });
    const res = await call('POST', '/v1/sandboxes');
    expect(res.statusCode).toBe(500);
    expect(res.json().error.code).toBe('internal');
    expect(res.body).not.toContain('node secret');
  });
});

describe('sandboxes of a tenant', () => {
  it('lists own sandboxes only, newest first, filtered by state', async () => {
    const b = await tenantB();
    const a1 = await createSandbox();
    clock.advance(1000);
    const a2 = await createSandbox();
    const b1 = await createSandbox(b.key);
    expect((await call('DELETE', `/v1/sandboxes/${a1.id}`)).statusCode).toBe(204);

    const mine = (await call('GET', '/v1/sandboxes')).json().sandboxes.map((s: { id: string }) => s.id);
    expect(mine).toEqual([a2.id, a1.id]);
    expect((await call('GET', '/v1/sandboxes?state=running')).json().sandboxes.map((s: { id: string }) => s.id)).toEqual([a2.id]);
    expect((await call('GET', '/v1/sandboxes', { key: b.key })).json().sandboxes.map((s: { id: string }) => s.id)).toEqual([b1.id]);
    const bad = await call('GET', '/v1/sandboxes?state=sleeping');
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.details.field).toBe('querystring.state');
  });

  it('keeps tenant B away from A’s sandbox, answering exactly as for an unknown id', async () => {
    const b = await tenantB();
    const a = await createSandbox();
    const unknown = 'sbx_aaaaaaaaaaaaaaaaaaaa';
    const before = await state();
    for (const [method, suffix, json] of [
      ['GET', '', undefined],
      ['DELETE', '', undefined],
      ['POST', '/timeout', { timeoutS: 10 }],
      ['POST', '/access', undefined],
      ['GET', '/events', undefined],
    ] as const) {
      const theirs = await call(method, `/v1/sandboxes/${a.id}${suffix}`, { key: b.key, json });
      const none = await call(method, `/v1/sandboxes/${unknown}${suffix}`, { key: b.key, json });
      expect(theirs.statusCode, `${method} ${suffix}`).toBe(404);
      expect(theirs.json().error.code).toBe('sandbox_not_found');
      expect(theirs.json().error.message.replace(a.id, 'ID')).toBe(none.json().error.message.replace(unknown, 'ID'));
    }
    expect(await state()).toEqual(before);
    expect((await call('GET', `/v1/sandboxes/${a.id}`)).json().state).toBe('running');
  });

  it('answers sandbox_not_found for an unknown id on every sandbox route', async () => {
    for (const [method, suffix] of [['GET', ''], ['DELETE', ''], ['POST', '/access'], ['GET', '/events']] as const) {
      const res = await call(method, `/v1/sandboxes/sbx_nope${suffix}`);
      expect(res.statusCode).toBe(404);
      expect(res.json().error.code).toBe('sandbox_not_found');
    }
  });
});

describe('DELETE /v1/sandboxes/{id}', () => {
  it('tells the gateway, then records the kill; a second delete is 204 and records nothing', async () => {
    const sbx = await createSandbox();
    seen = [];
    clock.advance(5_000);
    const res = await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
    expect(seen.map((r) => `${r.method} ${r.url}`)).toEqual([`DELETE /internal/v1/sandboxes/${sbx.id}`]);
    expect((await call('GET', `/v1/sandboxes/${sbx.id}`)).json()).toMatchObject({ state: 'ended', endReason: 'killed', endedAt: '2025-06-01T12:00:05.000Z' });

    const before = await state();
    expect((await call('DELETE', `/v1/sandboxes/${sbx.id}`)).statusCode).toBe(204);
    expect(await state()).toEqual(before);
  });
});

describe('POST /v1/sandboxes/{id}/timeout and /access', () => {
  it('moves the expiry to now + timeoutS on the gateway and in the log', async () => {
    const sbx = await createSandbox();
    clock.advance(10_000);
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/timeout`, { json: { timeoutS: 3600 } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ timeoutS: 3600, expiresAt: '2025-06-01T13:00:10.000Z' });
    expect(seen.at(-1)).toMatchObject({ method: 'POST', url: `/internal/v1/sandboxes/${sbx.id}/timeout`, body: { expiresAt: '2025-06-01T13:00:10.000Z' } });
    expect((await events.list({ sandboxId: sbx.id })).at(-1)).toMatchObject({ type: 'sandbox.extended', data: { timeoutS: 3600 } });
  });

  it.each([
    ['zero', { timeoutS: 0 }, 'timeoutS'],
    ['missing', {}, 'timeoutS'],
    ['an extra field', { timeoutS: 5, reason: 'x' }, 'reason'],
  ])('rejects a timeoutS %s', async (_what, json, field) => {
    const sbx = await createSandbox();
    const before = await state();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/timeout`, { json });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.details.field).toBe(field);
    expect(await state()).toEqual(before);
  });

  it('issues fresh access while it runs, and refuses both once it ended', async () => {
    const sbx = await createSandbox();
    clock.advance(60_000);
    const access = await call('POST', `/v1/sandboxes/${sbx.id}/access`);
    expect(access.statusCode).toBe(200);
    expect(access.json()).toMatchObject({ gatewayUrl, expiresAt: '2025-06-01T12:16:00.000Z' });
    expect(verifyAccessToken(access.json().token, SECRET, clock.nowMs()).sbx).toBe(sbx.id);

    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/access`)).json().error.code).toBe('sandbox_not_running');
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/timeout`, { json: { timeoutS: 5 } })).json().error.code).toBe('sandbox_not_running');
  });

  it('gives clients the public gateway URL when one is set', async () => {
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl }),
      nodeSecret: SECRET,
      clock,
      logger: createLogger('test', 'silent'),
      publicGatewayUrl: 'https://gw.example',
    });
    expect((await createSandbox()).access.gatewayUrl).toBe('https://gw.example');
  });
});

describe('GET /v1/sandboxes/{id}/events', () => {
  it('lists the sandbox’s chained events and pages by seq', async () => {
    const sbx = await createSandbox();
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    const all = (await call('GET', `/v1/sandboxes/${sbx.id}/events`)).json().events;
    expect(all.map((e: { type: string }) => e.type)).toEqual(['sandbox.created', 'sandbox.started', 'sandbox.killed']);
    expect(all[0]).toMatchObject({ sandboxId: sbx.id, tenantId: sbx.tenantId, data: { template: 'base', gatewayId: 'node_test' } });
    expect(all[1].prevHash).toBe(all[0].hash);
    const page = (await call('GET', `/v1/sandboxes/${sbx.id}/events?afterSeq=${all[0].seq}&limit=1`)).json().events;
    expect(page).toEqual([all[1]]);
    const bad = await call('GET', `/v1/sandboxes/${sbx.id}/events?limit=0`);
    expect(bad.json().error).toMatchObject({ code: 'invalid_argument', details: { field: 'querystring.limit' } });
  });
});

describe('admin routes', () => {
  it('creates tenants and keys that work, and records both', async () => {
    const b = await tenantB();
    const res = await call('GET', '/v1/sandboxes', { key: b.key });
    expect(res.statusCode).toBe(200);
    const types = (await events.list({ tenantId: b.tenantId })).map((e) => e.type);
    expect(types).toEqual(['tenant.created', 'api_key.created']);
  });

  it('refuses a member key', async () => {
    const b = await tenantB();
    const before = await state();
    for (const [url, json] of [['/v1/tenants', { name: 'c' }], [`/v1/tenants/${b.tenantId}/api-keys`, { role: 'admin' }]] as const) {
      const res = await call('POST', url, { key: b.key, json });
      expect(res.statusCode).toBe(403);
      expect(res.json().error.code).toBe('permission_denied');
    }
    expect(await state()).toEqual(before);
  });

  it('answers conflict for a taken name, tenant_not_found for an unknown tenant, and checks fields', async () => {
    await tenantB();
    const dup = await call('POST', '/v1/tenants', { json: { name: 'b' } });
    expect(dup.statusCode).toBe(409);
    expect(dup.json().error.code).toBe('conflict');
    const missing = await call('POST', '/v1/tenants/ten_nope/api-keys', { json: {} });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('tenant_not_found');
    for (const [json, field] of [[{}, 'name'], [{ name: 'has space' }, 'name'], [{ name: 'c', plan: 'pro' }, 'plan']] as const) {
      const res = await call('POST', '/v1/tenants', { json });
      expect(res.json().error.details.field).toBe(field);
    }
    const role = await call('POST', '/v1/tenants/ten_nope/api-keys', { json: { role: 'owner' } });
    expect(role.json().error.details.field).toBe('role');
  });

  it('makes admin keys when asked', async () => {
    const b = await tenantB();
    const k = await call('POST', `/v1/tenants/${b.tenantId}/api-keys`, { json: { role: 'admin' } });
    expect(k.json()).toMatchObject({ tenantId: b.tenantId, role: 'admin', key: expect.stringMatching(/^sg_[A-Za-z0-9_-]{43}$/) });
    expect((await call('POST', '/v1/tenants', { key: k.json().key, json: { name: 'c' } })).statusCode).toBe(201);
  });
});

describe('bootstrapLocal', () => {
  it('writes the admin key once, mode 0600, and reuses it', async () => {
    const keyFile = join(home, 'admin-key');
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    expect(await bootstrapLocal({ db: database.db, events, keyFile, clock })).toBe(adminKey);
    expect(await database.db.selectFrom('tenants').select('name').execute()).toEqual([{ name: 'default' }]);
    expect(await database.db.selectFrom('api_keys').select('id').execute()).toHaveLength(1);
  });

  it('registers an existing key file again in a fresh database', async () => {
    const fresh = await openDatabase({ url: 'sqlite::memory:' });
    try {
      const freshEvents = new EventLog(fresh.db);
      expect(await bootstrapLocal({ db: fresh.db, events: freshEvents, keyFile: join(home, 'admin-key'), clock })).toBe(adminKey);
      expect(await fresh.db.selectFrom('api_keys').select('key_hash').execute()).toEqual([{ key_hash: hashApiKey(adminKey) }]);
      expect((await freshEvents.verifyChain()).ok).toBe(true);
    } finally {
      await fresh.close();
    }
  });

  it('refuses a key file that holds something else', async () => {
    const keyFile = join(home, 'other-key');
    await import('node:fs').then((fs) => fs.writeFileSync(keyFile, 'hunter2\n'));
    await expect(bootstrapLocal({ db: database.db, events, keyFile, clock })).rejects.toThrow(/does not hold a Sandglass API key/);
  });
});
