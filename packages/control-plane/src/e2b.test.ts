// The E2B layer (/e2b) over fastify's inject and with the real e2b SDK, a small real HTTP server standing in for the gateway's internal API; every answer is held against spec/e2b.yaml.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Sandbox as E2bSandbox } from 'e2b';
import {
  createLogger,
  derefSchema,
  deriveNodeKeys,
  loadOpenApi,
  ManualClock,
  newId,
  trafficTokenKey,
  verifyAccessToken,
  verifyTrafficToken,
} from '@sandglass/core';
import { openDatabase, toIso, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { bootstrapLocal, createControlPlane, E2B_ENVD_TOKEN_TTL_MS, LONGEST_TOKEN_TTL_MS, singleGateway, upsertTemplate, type ControlPlane } from './index.js';
import { E2B_SPEC } from './e2b.js';

const SECRET = Buffer.alloc(32, 9);
const NODE_KEYS = deriveNodeKeys(SECRET);

interface SeenRequest {
  method: string;
  url: string;
  body: unknown;
}

let fakeGateway: Server;
let gatewayUrl: string;
let seen: SeenRequest[];
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

async function recordSnapshot(sandboxId: string, reason: 'manual' | 'pause') {
  const sbx = await database.db.selectFrom('sandboxes').selectAll().where('id', '=', sandboxId).executeTakeFirstOrThrow();
  const snapshotId = newId('snap');
  const data = {
    snapshotId,
    parentId: null,
    reason,
    name: null,
    pinned: false,
    sizeAddedBytes: 4096,
    memoryMib: sbx.memory_mib,
    vcpus: sbx.vcpus,
    template: sbx.template,
  };
  await events.append({ type: 'snapshot.taken', tenantId: sbx.tenant_id, sandboxId, data }, { clock });
  const row = await database.db.selectFrom('snapshots').selectAll().where('id', '=', snapshotId).executeTakeFirstOrThrow();
  return {
    id: row.id,
    sandboxId,
    parentId: null,
    takenAt: row.taken_at,
    reason,
    name: null,
    pinned: false,
    sizeAddedBytes: 4096,
    memoryMib: row.memory_mib,
    vcpus: row.vcpus,
    template: row.template,
    memory: true,
  };
}

/** One of the gateway's metric samples, `atMs` after the test's epoch, with `cpuUsedPct` to tell samples apart. */
const sample = (atMs: number, cpuUsedPct: number) => ({
  timestamp: toIso(Date.UTC(2025, 5, 1, 12) + atMs),
  cpuCount: 1,
  cpuUsedPct,
  memUsedBytes: 100,
  memTotalBytes: 200,
  memCacheBytes: 30,
  diskUsedBytes: 400,
  diskTotalBytes: 800,
});

/** The gateway's internal API as the control plane uses it, recording what the real gateway records. */
beforeAll(async () => {
  fakeGateway = createServer(async (req, res) => {
    const body = await readBody(req);
    seen.push({ method: req.method!, url: req.url!, body });
    const reply = (status: number, json?: unknown) => {
      res.writeHead(status, json === undefined ? {} : { 'content-type': 'application/json' });
      res.end(json === undefined ? undefined : JSON.stringify(json));
    };
    if (req.headers.authorization !== `Bearer ${NODE_KEYS.internalBearer.toString('hex')}`)
      return reply(401, { error: { code: 'unauthenticated', message: 'node secret' } });
    const url = new URL(req.url!, 'http://gw');
    if (req.method === 'POST' && url.pathname === '/internal/v1/templates/prepare') return reply(200, { key: 'tpl-key' });
    if (req.method === 'POST' && url.pathname === '/internal/v1/sandboxes') {
      const b = body as { id: string; tenantId: string };
      await events.append({ type: 'sandbox.started', tenantId: b.tenantId, sandboxId: b.id, data: { pid: 1 } }, { clock });
      return reply(201, { id: b.id, state: 'running', startedAt: toIso(clock.nowMs()), pid: 1 });
    }
    if (req.method === 'DELETE' && url.pathname.startsWith('/internal/v1/sandboxes/')) return reply(204);
    if (req.method === 'GET' && url.pathname.endsWith('/metrics')) return reply(200, { intervalS: 5, metrics: [sample(0, 10), sample(5_000, 20)] });
    if (req.method === 'POST' && url.pathname.endsWith('/timeout')) return reply(204);
    if (req.method === 'PUT' && url.pathname.endsWith('/network')) return reply(204);
    if (req.method === 'POST' && url.pathname === '/internal/v1/revoked-keys') return reply(204);
    const [, id, action] = /^\/internal\/v1\/sandboxes\/([^/]+)\/(snapshots|pause|resume)$/.exec(url.pathname) ?? [];
    if (req.method === 'POST' && action === 'snapshots') return reply(201, { snapshot: await recordSnapshot(id!, 'manual') });
    if (req.method === 'POST' && action === 'pause') {
      const snapshot = await recordSnapshot(id!, 'pause');
      await events.append({ type: 'sandbox.paused', tenantId: (await row(id!)).tenant_id, sandboxId: id, data: { snapshotId: snapshot.id } }, { clock });
      return reply(200, { snapshot });
    }
    if (req.method === 'POST' && action === 'resume') {
      const b = body as { snapshotId: string; tenantId: string };
      await events.append({ type: 'sandbox.resumed', tenantId: b.tenantId, sandboxId: id, data: { snapshotId: b.snapshotId, pid: 2 } }, { clock });
      return reply(200, { id, state: 'running', startedAt: toIso(clock.nowMs()), pid: 2 });
    }
    if (req.method === 'POST' && url.pathname === '/internal/v1/forks') {
      const b = body as { snapshotId: string; tenantId: string; sandboxes: { id: string }[] };
      const sandboxes = [];
      for (const { id: forkId } of b.sandboxes) {
        await events.append({ type: 'sandbox.started', tenantId: b.tenantId, sandboxId: forkId, data: { pid: 3 } }, { clock });
        sandboxes.push({ id: forkId, tenantId: b.tenantId, state: 'running', pid: 3, startedAt: toIso(clock.nowMs()), expiresAt: toIso(clock.nowMs()) });
      }
      return reply(200, { sandboxes });
    }
    reply(404, { error: { code: 'not_found', message: 'no route' } });
  });
  await new Promise<void>((resolve) => fakeGateway.listen(0, '127.0.0.1', resolve));
  gatewayUrl = `http://127.0.0.1:${(fakeGateway.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => fakeGateway.close(() => resolve())));

const row = (id: string) => database.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

beforeEach(async () => {
  seen = [];
  violations = [];
  clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
  database = await openDatabase({ url: 'sqlite::memory:' });
  events = new EventLog(database.db);
  home = mkdtempSync(join(tmpdir(), 'sg-e2b-'));
  adminKey = await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock });
  await upsertTemplate(database.db, { name: 'base', status: 'ready', memoryMib: 512 }, { clock });
  cp = createControlPlane({
    db: database.db,
    events,
    gateways: singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
    nodeSecret: SECRET,
    clock,
    logger: createLogger('test', 'silent'),
  });
  await cp.app.ready();
});
afterEach(async () => {
  expect(violations, violations.join('\n')).toEqual([]);
  await cp.close();
  await database.close();
  rmSync(home, { recursive: true, force: true });
});

// Every answer of a route spec/e2b.yaml declares must match it.
const spec = loadOpenApi(E2B_SPEC);
const ajv = addFormats.default(new Ajv2020({ strict: false, allErrors: true }));
let violations: string[];

function checkAgainstSpec(method: string, url: string, status: number, body: string): void {
  const pathname = url.split('?')[0]!.replace(/^\/e2b/, '');
  const template = Object.keys(spec.paths).find((t) => new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(pathname));
  const op =
    template === undefined
      ? undefined
      : (spec.paths[template]![method.toLowerCase()] as
          | { responses: Record<string, { $ref?: string; content?: Record<string, { schema: unknown }> }> }
          | undefined);
  const where = `${method} ${pathname} → ${status}`;
  // Unserved routes (404, 501) and errors all answer the Error schema.
  const declared = op?.responses[String(status)] ?? { $ref: '#/components/responses/Error' };
  const resolved = declared.$ref
    ? (spec as unknown as { components: { responses: Record<string, typeof declared> } }).components.responses[declared.$ref.split('/').pop()!]!
    : declared;
  const schema = resolved.content?.['application/json']?.schema;
  if (!schema) return void (body === '' || violations.push(`${where}: a body where the spec declares none`));
  if (!ajv.validate(derefSchema(spec, schema) as object, JSON.parse(body))) violations.push(`${where}: ${ajv.errorsText(ajv.errors)} in ${body.slice(0, 300)}`);
}

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
async function call(method: Method, url: string, opts: { key?: string | null; json?: unknown; headers?: Record<string, string> } = {}) {
  const key = opts.key === undefined ? adminKey : opts.key;
  const res = await cp.app.inject({
    method,
    url: `/e2b${url}`,
    headers: { ...(key === null ? {} : { 'x-api-key': key }), ...opts.headers },
    ...(opts.json !== undefined ? { payload: opts.json as object } : {}),
  });
  checkAgainstSpec(method, url, res.statusCode, res.body);
  return res;
}

async function create(json: Record<string, unknown> = {}, key = adminKey): Promise<{ sandboxID: string; envdAccessToken: string; trafficAccessToken: string }> {
  const res = await call('POST', '/v2/sandboxes', { key, json: { templateID: 'base', ...json } });
  expect(res.statusCode, res.body).toBe(201);
  return res.json();
}

async function otherTenantKey(): Promise<string> {
  const t = await cp.app.inject({ method: 'POST', url: '/v1/tenants', headers: { authorization: `Bearer ${adminKey}` }, payload: { name: 'b' } });
  const k = await cp.app.inject({ method: 'POST', url: `/v1/tenants/${t.json().id}/api-keys`, headers: { authorization: `Bearer ${adminKey}` }, payload: {} });
  return k.json().key;
}

const created = () => seen.filter((r) => r.method === 'POST' && r.url === '/internal/v1/sandboxes');

/** A version of a tenant's own template, as a finished build publishes it. */
async function addVersion(tenantId: string, name: string, version: number) {
  const values = {
    id: newId('tpl'),
    tenant_id: tenantId,
    name,
    version,
    snapshot_id: newId('snap'),
    memory_mib: 1024,
    vcpus: 2,
    disk_mib: 2048,
    envs: '{}',
    user: null,
    workdir: null,
    start: null,
    build_id: null,
    created_at: toIso(clock.nowMs()),
  };
  await database.db.insertInto('template_versions').values(values).execute();
  return values;
}

describe('auth and errors', () => {
  it.each([
    ['no key', {}],
    ['an unknown key', { key: `sg_${'A'.repeat(43)}` }],
  ])('answers %s with 401 in E2B’s format, before the body', async (_what, opts) => {
    const res = await call('POST', '/v2/sandboxes', { key: null, json: { templateID: 123 }, ...opts });
    expect(res.statusCode).toBe(401);
    expect(res.json()).toMatchObject({ code: 401, error_code: 'unauthenticated', message: expect.any(String) });
    expect(created()).toEqual([]);
  });

  it('takes the key as a bearer too, and a Sandglass-format 401 never reaches /e2b', async () => {
    const res = await call('GET', '/v2/sandboxes', { key: null, headers: { authorization: `Bearer ${adminKey}` } });
    expect(res.statusCode).toBe(200);
    const anon = await call('GET', '/nope', { key: null });
    expect(anon.json()).toEqual({ code: 401, error_code: 'unauthenticated', message: expect.any(String) });
  });

  it('answers 501 naming the feature for E2B routes Sandglass does not serve, and 404 in E2B format for unknown ones', async () => {
    for (const [method, url] of [
      ['GET', '/v2/templates'],
      ['GET', '/teams/team_x/metrics'],
      ['POST', '/sandboxes/sbx_x/refreshes'],
      ['GET', '/volumes'],
    ] as const) {
      const res = await call(method, url, { json: method === 'POST' ? {} : undefined });
      expect(res.statusCode, url).toBe(501);
      expect(res.json().message).toMatch(/not supported by Sandglass's E2B compatibility layer; see docs\/e2b.md/);
    }
    const res = await call('GET', '/v9/nothing');
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ code: 404, error_code: 'not_found' });
  });

  it('answers Template.exists by name: the template, or 404', async () => {
    const base = await call('GET', '/templates/aliases/base');
    expect(base.statusCode, base.body).toBe(200);
    expect(base.json()).toEqual({ templateID: expect.stringMatching(/^tpl_/), public: true });
    // By its name only, as E2B's aliases: the id and an unknown name are no alias.
    expect((await call('GET', `/templates/aliases/${base.json().templateID}`)).json()).toMatchObject({ code: 404, error_code: 'template_not_found' });
    expect((await call('GET', '/templates/aliases/nope')).statusCode).toBe(404);
    expect((await call('GET', '/templates/aliases/base', { key: null })).statusCode).toBe(401);
  });

  it('lists running sandboxes on the v1 route (GET /sandboxes) as v2 does with state=running, filtered by metadata', async () => {
    const a = await create({ metadata: { k: 'a' } });
    clock.advance(1000);
    const b = await create({ metadata: { k: 'b' } });
    clock.advance(1000);
    const paused = await create({ metadata: { k: 'a' } });
    expect((await call('POST', `/sandboxes/${paused.sandboxID}/pause`, { json: {} })).statusCode).toBe(204);
    await create({}, await otherTenantKey());
    const v1 = await call('GET', '/sandboxes');
    expect(v1.statusCode, v1.body).toBe(200);
    expect(v1.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([b.sandboxID, a.sandboxID]);
    expect(v1.json()).toEqual((await call('GET', '/v2/sandboxes?state=running')).json());
    const filtered = await call('GET', `/sandboxes?metadata=${encodeURIComponent('k=a')}`);
    expect(filtered.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([a.sandboxID]);
  });

  it("answers the metrics of many sandboxes (GET /sandboxes/metrics): each running one's newest sample, the rest left out", async () => {
    const a = await create();
    const b = await create();
    const paused = await create();
    await call('POST', `/sandboxes/${paused.sandboxID}/pause`, { json: {} });
    const theirs = await create({}, await otherTenantKey());
    seen = [];
    const ids = [a.sandboxID, b.sandboxID, paused.sandboxID, theirs.sandboxID, 'sbx_unknown', a.sandboxID];
    const res = await call('GET', `/sandboxes/metrics?sandbox_ids=${ids.join(',')}`);
    expect(res.statusCode, res.body).toBe(200);
    const newest = {
      timestamp: toIso(Date.UTC(2025, 5, 1, 12, 0, 5)),
      timestampUnix: Date.UTC(2025, 5, 1, 12, 0, 5) / 1000,
      cpuCount: 1,
      cpuUsedPct: 20,
      memUsed: 100,
      memTotal: 200,
      memCache: 30,
      diskUsed: 400,
      diskTotal: 800,
    };
    expect(res.json()).toEqual({ sandboxes: { [a.sandboxID]: newest, [b.sandboxID]: newest } });
    // Only the tenant's running sandboxes were asked of their gateway, each once.
    expect(seen.map((r) => r.url).sort()).toEqual([a.sandboxID, b.sandboxID].map((id) => `/internal/v1/sandboxes/${id}/metrics`).sort());
    expect((await call('GET', '/sandboxes/metrics')).statusCode).toBe(400);
    const tooMany = Array.from({ length: 101 }, (_, i) => `sbx_${i}`).join(',');
    expect((await call('GET', `/sandboxes/metrics?sandbox_ids=${tooMany}`)).statusCode).toBe(400);
  });

  it("lists the platform's templates (public) and the tenant's own (newest version, not public) with their figures", async () => {
    const mine = await create();
    const tenantId = (await row(mine.sandboxID)).tenant_id;
    const v1 = await addVersion(tenantId, 'mine', 1);
    clock.advance(60_000);
    const v2 = await addVersion(tenantId, 'mine', 2);
    await addVersion('ten_other', 'theirs', 1);
    const res = await call('GET', '/templates');
    expect(res.statusCode, res.body).toBe(200);
    const [base, own, ...rest] = res.json();
    expect(rest).toEqual([]);
    expect(base).toMatchObject({
      templateID: expect.stringMatching(/^tpl_/),
      public: true,
      names: ['base'],
      aliases: ['base'],
      buildStatus: 'ready',
      buildCount: 1,
      memoryMB: 512,
      cpuCount: 1,
      spawnCount: 1,
      lastSpawnedAt: (await row(mine.sandboxID)).created_at,
      createdBy: null,
    });
    expect(base.buildID).toBe(base.templateID);
    expect(own).toMatchObject({
      templateID: v2.id,
      buildID: v2.id,
      public: false,
      names: ['mine'],
      buildCount: 2,
      cpuCount: 2,
      memoryMB: 1024,
      diskSizeMB: 2048,
      createdAt: v1.created_at,
      updatedAt: v2.created_at,
      spawnCount: 0,
      lastSpawnedAt: null,
    });
    // The same id as Template.exists answers for that name.
    expect((await call('GET', '/templates/aliases/mine')).json().templateID).toBe(own.templateID);
  });

  it('lists a template another tenant published for every tenant as public, and gives it by name, unless its own name wins', async () => {
    const tenantId = (await row((await create()).sandboxID)).tenant_id;
    const theirs = await addVersion('ten_publisher', 'shared', 1);
    await addVersion('ten_publisher', 'hidden', 1);
    await addVersion('ten_publisher', 'clash', 1);
    const own = await addVersion(tenantId, 'clash', 1);
    for (const name of ['shared', 'clash']) {
      await database.db
        .insertInto('published_templates')
        .values({ name, tenant_id: 'ten_publisher', published_at: toIso(clock.nowMs()) })
        .execute();
    }
    const listed = (await call('GET', '/templates')).json() as Array<{ names: string[]; templateID: string; public: boolean }>;
    expect(listed.map((t) => [t.names[0], t.templateID, t.public])).toEqual([
      ['base', expect.stringMatching(/^tpl_/), true],
      ['clash', own.id, false],
      ['shared', theirs.id, true],
    ]);
    const one = await call('GET', '/templates/shared');
    expect(one.statusCode, one.body).toBe(200);
    expect(one.json()).toMatchObject({ templateID: theirs.id, public: true, builds: [{ buildID: theirs.id }] });
    expect((await call('GET', '/templates/clash')).json()).toMatchObject({ templateID: own.id, public: false });
    // An unpublished template of another tenant stays unknown.
    expect((await call('GET', '/templates/hidden')).statusCode).toBe(404);
  });

  it('gives one template by id or name with its builds, newest first and paged; another tenant’s is 404', async () => {
    const tenantId = (await row((await create()).sandboxID)).tenant_id;
    const versions = [];
    for (let v = 1; v <= 3; v++) {
      clock.advance(60_000);
      versions.push(await addVersion(tenantId, 'mine', v));
    }
    await addVersion('ten_other', 'theirs', 1);
    const byName = await call('GET', '/templates/mine');
    expect(byName.statusCode, byName.body).toBe(200);
    expect(byName.json()).toMatchObject({ templateID: versions[2]!.id, public: false, names: ['mine'] });
    expect(byName.json().builds.map((b: { buildID: string }) => b.buildID)).toEqual(versions.map((v) => v.id).reverse());
    expect(byName.json().builds[0]).toEqual({
      buildID: versions[2]!.id,
      status: 'ready',
      createdAt: versions[2]!.created_at,
      updatedAt: versions[2]!.created_at,
      finishedAt: versions[2]!.created_at,
      cpuCount: 2,
      memoryMB: 1024,
      diskSizeMB: 2048,
      envdVersion: expect.any(String),
    });
    // An older version's id names the same template.
    expect((await call('GET', `/templates/${versions[0]!.id}`)).json().templateID).toBe(versions[2]!.id);
    const first = await call('GET', '/templates/mine?limit=2');
    expect(first.json().builds).toHaveLength(2);
    const next = first.headers['x-next-token'] as string;
    const second = await call('GET', `/templates/mine?limit=2&nextToken=${next}`);
    expect(second.json().builds.map((b: { buildID: string }) => b.buildID)).toEqual([versions[0]!.id]);
    expect(second.headers['x-next-token']).toBeUndefined();
    const base = await call('GET', '/templates/base');
    expect(base.json()).toMatchObject({ public: true, names: ['base'], builds: [{ status: 'ready', memoryMB: 512 }] });
    expect((await call('GET', `/templates/${base.json().templateID}`)).json().names).toEqual(['base']);
    expect((await call('GET', '/templates/theirs')).json()).toMatchObject({ code: 404, error_code: 'template_not_found' });
    expect((await call('GET', '/templates/nope')).statusCode).toBe(404);
  });

  it('deletes only snapshots through DELETE /templates/{id}: a template is refused, an unknown id is 404', async () => {
    const template = await call('DELETE', '/templates/base');
    expect([template.statusCode, template.json().message]).toEqual([400, expect.stringContaining('templateID')]);
    expect((await call('GET', '/templates/aliases/base')).statusCode).toBe(200);
    expect((await call('DELETE', '/templates/snap_unknown')).json()).toMatchObject({ code: 404, error_code: 'snapshot_not_found' });
    expect((await call('GET', '/snapshots')).json()).toEqual([]);
    expect((await call('GET', '/snapshots?limit=0')).statusCode).toBe(400);
    expect((await call('POST', '/sandboxes/sbx_x/snapshots', { json: { name: 'a b' } })).statusCode).toBe(400);
  });

  it('answers a validation error as 400 naming the field', async () => {
    const res = await call('POST', '/v2/sandboxes', { json: { templateID: 'base', timeout: 0 } });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 400, error_code: 'invalid_argument', message: expect.stringContaining('timeout') });
  });
});

describe('create', () => {
  it('creates from the template with E2B’s defaults and hands out a 7-day envd token for that sandbox', async () => {
    const sbx = await create({ metadata: { team: 'a' } });
    const r = await row(sbx.sandboxID);
    expect(r).toMatchObject({ template: 'base', memory_mib: 512, timeout_s: 300, state: 'running', network: null });
    const claims = verifyAccessToken(sbx.envdAccessToken, NODE_KEYS.accessToken, clock.nowMs());
    expect(claims).toMatchObject({ sbx: sbx.sandboxID, exp: clock.nowMs() + E2B_ENVD_TOKEN_TTL_MS });
    const body = (await call('GET', `/sandboxes/${sbx.sandboxID}`)).json();
    expect(body).toMatchObject({
      sandboxID: sbx.sandboxID,
      alias: 'base',
      clientID: 'sandglass',
      envdVersion: '0.6.3',
      cpuCount: 1,
      memoryMB: 512,
      metadata: { team: 'a' },
    });
  });

  it('hands out a traffic token for the guest ports alone: same sandbox, expiry and key as the envd token, never one for the other', async () => {
    const sbx = await create({ network: { allowPublicTraffic: false } });
    const envd = verifyAccessToken(sbx.envdAccessToken, NODE_KEYS.accessToken, clock.nowMs());
    const traffic = verifyTrafficToken(sbx.trafficAccessToken, trafficTokenKey(NODE_KEYS.accessToken), clock.nowMs());
    expect(traffic).toEqual({ sbx: sbx.sandboxID, ten: envd.ten, exp: envd.exp, kid: envd.kid });
    expect(() => verifyAccessToken(sbx.trafficAccessToken, NODE_KEYS.accessToken, clock.nowMs())).toThrow(/malformed/);
    expect(() => verifyTrafficToken(sbx.envdAccessToken, trafficTokenKey(NODE_KEYS.accessToken), clock.nowMs())).toThrow(/malformed/);
    // Under the access-token key itself (not the one derived for traffic) it does not verify.
    expect(() => verifyTrafficToken(sbx.trafficAccessToken, NODE_KEYS.accessToken, clock.nowMs())).toThrow(/not valid/);
    expect((await call('GET', `/sandboxes/${sbx.sandboxID}`)).json()).not.toHaveProperty('trafficAccessToken');
  });

  it('never signs an envd token past its key’s own expiry', async () => {
    const res = await cp.app.inject({ method: 'POST', url: '/v1/api-keys', headers: { authorization: `Bearer ${adminKey}` }, payload: { expiresInS: 3600 } });
    const sbx = await create({}, res.json().key);
    expect(verifyAccessToken(sbx.envdAccessToken, NODE_KEYS.accessToken, clock.nowMs()).exp).toBe(clock.nowMs() + 3600_000);
  });

  it('maps allowOut and denyOut onto Sandglass rules, allowOut winning as in E2B', async () => {
    const sbx = await create({
      network: {
        allowOut: ['api.example.com', '*.pypi.org', '8.8.8.8', '1.1.1.1/32', '2606:4700::1111'],
        denyOut: ['0.0.0.0/0', '::/0', '9.9.9.9', '8.8.8.8/32'],
      },
    });
    const policy = { allow: ['api.example.com', '*.pypi.org', '8.8.8.8:*', '1.1.1.1:*', '[2606:4700::1111]:*'], deny: ['9.9.9.9:*'] };
    expect(created()[0]!.body).toMatchObject({ network: policy });
    expect(JSON.parse((await row(sbx.sandboxID)).network!)).toEqual(policy);
  });

  it.each([
    [{ allow_internet_access: true }, 'allow_internet_access'],
    [{ network: { allowOut: ['example.com', '10.0.0.0/8'] } }, 'network.allowOut[1]'],
    [{ network: { allowOut: ['*'] } }, 'network.allowOut[0]'],
    [{ network: { allowOut: ['10.1.2.3'] } }, 'network.allowOut[0]'],
    [{ network: { denyOut: ['example.com'] } }, 'network.denyOut[0]'],
    [{ network: { denyOut: ['192.0.2.0/24'] } }, 'network.denyOut[0]'],
    [{ network: { rules: { 'api.example.com': [{ transform: { headers: { a: 'b' } } }] } } }, 'network.rules'],
    [{ network: { egressProxy: { address: 'proxy:1080' } } }, 'network.egressProxy'],
    [{ network: { allowPublicTraffic: true } }, 'network.allowPublicTraffic'],
    [{ autoPauseMemory: false }, 'autoPauseMemory'],
    [{ autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } }, 'autoResume.enabled'],
    [{ volumeMounts: [{ name: 'v', path: '/data' }] }, 'volumeMounts'],
    [{ mcp: { github: {} } }, 'mcp'],
    [{ iam: { tokens: {} } }, 'iam'],
    [{ envVars: { '1BAD': 'x' } }, 'envVars.1BAD'],
    [{ envVars: { GOOD: 'a\u0000b' } }, 'envVars.GOOD'],
  ])('refuses %j with 400 naming %s, creating nothing', async (json, field) => {
    const res = await call('POST', '/v2/sandboxes', { json: { templateID: 'base', ...json } });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().message).toContain(field);
    expect(created()).toEqual([]);
    expect(await database.db.selectFrom('sandboxes').selectAll().execute()).toEqual([]);
  });

  it('maps autoPause and autoResume onto onTimeout pause and autoResume: in the node request, the row and getInfo', async () => {
    const res = await call('POST', '/v2/sandboxes', { json: { templateID: 'base', autoPause: true, autoPauseMemory: true, autoResume: { enabled: true } } });
    expect(res.statusCode, res.body).toBe(201);
    expect(created()[0]!.body).toMatchObject({ onTimeout: 'pause' });
    expect(await row(res.json().sandboxID)).toMatchObject({ on_timeout: 'pause', auto_resume: 1 });
    const info = await call('GET', `/sandboxes/${res.json().sandboxID as string}`);
    expect(info.json().lifecycle).toEqual({ onTimeout: 'pause', autoResume: true, keepMemory: true });
    const plain = await call('POST', '/v2/sandboxes', { json: { templateID: 'base' } });
    expect(await row(plain.json().sandboxID)).toMatchObject({ on_timeout: 'kill', auto_resume: 0, on_timeout_keep_memory: 1 });
  });

  it('maps autoPauseMemory false onto a disk-only pause at the timeout: in the event, the node request, the row and getInfo', async () => {
    const res = await call('POST', '/v2/sandboxes', { json: { templateID: 'base', autoPause: true, autoPauseMemory: false } });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().sandboxID as string;
    expect(created()[0]!.body).toMatchObject({ onTimeout: 'pause', onTimeoutKeepMemory: false });
    expect(await row(id)).toMatchObject({ on_timeout: 'pause', on_timeout_keep_memory: 0, auto_resume: 0 });
    const [createdEvent] = await database.db.selectFrom('events').select('data').where('sandbox_id', '=', id).where('type', '=', 'sandbox.created').execute();
    expect(JSON.parse(createdEvent!.data)).toMatchObject({ onTimeout: 'pause', onTimeoutKeepMemory: false });
    expect((await call('GET', `/sandboxes/${id}`)).json().lifecycle).toEqual({ onTimeout: 'pause', autoResume: false, keepMemory: false });
    // The resume after such a pause carries the choice on: the next timeout pauses without memory again.
    await call('POST', `/sandboxes/${id}/pause`, { json: {} });
    seen = [];
    expect((await call('POST', `/sandboxes/${id}/connect`, { json: { timeout: 60 } })).statusCode).toBe(201);
    expect(seen.find((r) => r.url.endsWith('/resume'))!.body).toMatchObject({ onTimeout: 'pause', onTimeoutKeepMemory: false });
  });

  it('takes the v1 create of releases before 2.51, their defaults allow_internet_access and secure meaning the default policy', async () => {
    // What e2b@2.7.0 … 2.50.0 send for Sandbox.create() and for Sandbox.create({ network: { allowOut } }).
    const plain = await call('POST', '/sandboxes', { json: { templateID: 'base', timeout: 300, secure: true, allow_internet_access: true, autoPause: false } });
    expect(plain.statusCode, plain.body).toBe(201);
    expect(await row(plain.json().sandboxID)).toMatchObject({ template: 'base', timeout_s: 300, state: 'running', network: null });
    const allowing = await call('POST', '/sandboxes', {
      json: { templateID: 'base', secure: true, allow_internet_access: true, network: { allowOut: ['api.example.com'] } },
    });
    expect(allowing.statusCode, allowing.body).toBe(201);
    expect(JSON.parse((await row(allowing.json().sandboxID)).network!)).toEqual({ allow: ['api.example.com'], deny: [] });
    // The rest is checked as on v2: what cannot be honoured is refused, naming the field, creating nothing.
    const wide = await call('POST', '/sandboxes', { json: { templateID: 'base', allow_internet_access: true, network: { allowOut: ['10.0.0.0/8'] } } });
    expect([wide.statusCode, wide.json().message]).toEqual([400, expect.stringContaining('network.allowOut[0]')]);
    expect(created()).toHaveLength(2);
    // v2 sends the field only when the caller set it: there true asks for every host, and stays refused.
    const v2 = await call('POST', '/v2/sandboxes', { json: { templateID: 'base', allow_internet_access: true, secure: true } });
    expect([v2.statusCode, v2.json().message]).toEqual([400, expect.stringContaining('would open every host')]);
    expect(created()).toHaveLength(2);
  });

  it('keeps envVars with the sandbox, gives them to the gateway, and logs only their names', async () => {
    const sbx = await create({ envVars: { PROJECT: 'alpha', TOKENISH: 'v3ry-s3cret-value' } });
    expect(created()[0]!.body).toMatchObject({ envs: { PROJECT: 'alpha', TOKENISH: 'v3ry-s3cret-value' } });
    const logged = JSON.stringify(await events.list());
    expect(logged).toContain('TOKENISH');
    expect(logged).not.toContain('v3ry-s3cret-value');
    expect(await database.db.selectFrom('sandbox_envs').selectAll().execute()).toEqual([
      { sandbox_id: sbx.sandboxID, tenant_id: (await row(sbx.sandboxID)).tenant_id, envs: JSON.stringify({ PROJECT: 'alpha', TOKENISH: 'v3ry-s3cret-value' }) },
    ]);
  });
});

describe('list', () => {
  it('pages with X-Next-Token in start order, and filters by state, metadata, template and start time', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      clock.advance(1000);
      ids.push((await create({ metadata: { i: String(i), 'a b': i % 2 === 0 ? 'x&y=z' : 'no' } })).sandboxID);
    }
    await call('DELETE', `/sandboxes/${ids[4]}`);
    await call('POST', `/sandboxes/${ids[3]}/pause`);

    const first = await call('GET', '/v2/sandboxes?limit=2');
    expect(first.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[3], ids[2]]);
    const token = first.headers['x-next-token'] as string;
    const second = await call('GET', `/v2/sandboxes?limit=2&nextToken=${token}`);
    expect(second.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[1], ids[0]]);
    expect(second.headers['x-next-token']).toBeUndefined();

    const asc = await call('GET', '/v2/sandboxes?order=asc&state=running');
    expect(asc.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[0], ids[1], ids[2]]);
    const both = await call('GET', '/v2/sandboxes?state=running,paused');
    expect(both.json()).toHaveLength(4);
    const paused = await call('GET', '/v2/sandboxes?state=paused');
    expect(paused.json()).toMatchObject([{ sandboxID: ids[3], state: 'paused' }]);

    // As the SDK sends it: pairs percent-encoded, then the whole string encoded as one query value.
    const metadata = encodeURIComponent(new URLSearchParams({ [encodeURIComponent('a b')]: encodeURIComponent('x&y=z') }).toString());
    const byMeta = await call('GET', `/v2/sandboxes?metadata=${metadata}`);
    expect(byMeta.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[2], ids[0]]);

    const after = await call('GET', `/v2/sandboxes?startedAfter=${encodeURIComponent(toIso(Date.UTC(2025, 5, 1, 12) + 2500))}`);
    expect(after.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[3], ids[2]]);
    // "At or after", as E2B's API says: a sandbox started exactly then is listed.
    const atStart = await call('GET', `/v2/sandboxes?startedAfter=${encodeURIComponent(toIso(Date.UTC(2025, 5, 1, 12) + 2000))}`);
    expect(atStart.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[3], ids[2], ids[1]]);
    expect((await call('GET', '/v2/sandboxes?template=nope')).json()).toEqual([]);
    expect((await call('GET', '/v2/sandboxes?template=base')).json()).toHaveLength(4);
  });

  it.each(['limit=0', 'limit=101', 'state=ended', 'order=sideways', 'nextToken=garbage', 'startedAfter=yesterday'])('answers 400 for %s', async (q) => {
    const res = await call('GET', `/v2/sandboxes?${q}`);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().code).toBe(400);
  });
});

describe('one sandbox', () => {
  it('hides another tenant’s sandboxes and ended ones as 404', async () => {
    const sbx = await create();
    const other = await otherTenantKey();
    for (const [method, url] of [
      ['GET', `/sandboxes/${sbx.sandboxID}`],
      ['DELETE', `/sandboxes/${sbx.sandboxID}`],
      ['POST', `/sandboxes/${sbx.sandboxID}/pause`],
      ['POST', `/v2/sandboxes/${sbx.sandboxID}/connect`],
      ['POST', `/sandboxes/${sbx.sandboxID}/fork`],
    ] as const) {
      const res = await call(method, url, { key: other, json: method === 'POST' ? {} : undefined });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
    }
    expect((await call('GET', '/v2/sandboxes', { key: other })).json()).toEqual([]);
    expect((await call('DELETE', `/sandboxes/${sbx.sandboxID}`)).statusCode).toBe(204);
    expect((await call('DELETE', `/sandboxes/${sbx.sandboxID}`)).statusCode).toBe(404);
    expect((await call('GET', `/sandboxes/${sbx.sandboxID}`)).statusCode).toBe(404);
    expect((await call('DELETE', '/sandboxes/sbx_unknown')).statusCode).toBe(404);
  });

  it('sets the timeout, pauses once (then 409), connects a paused one with 201 and a running one with 200', async () => {
    const sbx = await create({ envVars: { KEEP: 'me' } });
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/timeout`, { json: { timeout: 60 } })).statusCode).toBe(204);
    expect((await row(sbx.sandboxID)).expires_at).toBe(toIso(clock.nowMs() + 60_000));

    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/pause`)).statusCode).toBe(204);
    const again = await call('POST', `/sandboxes/${sbx.sandboxID}/pause`);
    expect(again.statusCode).toBe(409);
    expect((await call('GET', `/sandboxes/${sbx.sandboxID}`)).json()).not.toHaveProperty('envdAccessToken');
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/resume`, { json: { timeout: 10 } })).statusCode).toBe(201);
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/resume`)).statusCode).toBe(409);
    await call('POST', `/sandboxes/${sbx.sandboxID}/pause`);

    const resumed = await call('POST', `/v2/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 120 } });
    expect(resumed.statusCode).toBe(201);
    const resumes = seen.filter((r) => r.url.endsWith('/resume'));
    expect(resumes.at(-1)!.body).toMatchObject({ envs: { KEEP: 'me' } });
    expect((await row(sbx.sandboxID)).expires_at).toBe(toIso(clock.nowMs() + 120_000));

    // Running: a shorter timeout leaves the expiry alone, a longer one moves it.
    const running = await call('POST', `/v2/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 30 } });
    expect(running.statusCode).toBe(200);
    expect((await row(sbx.sandboxID)).expires_at).toBe(toIso(clock.nowMs() + 120_000));
    await call('POST', `/v2/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 600 } });
    expect((await row(sbx.sandboxID)).expires_at).toBe(toIso(clock.nowMs() + 600_000));
    expect(verifyAccessToken(running.json().envdAccessToken, NODE_KEYS.accessToken, clock.nowMs()).sbx).toBe(sbx.sandboxID);
  });

  it('pauses without memory when asked (pause({ keepMemory: false })): the node is told to keep the disk alone', async () => {
    const sbx = await create();
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/pause`, { json: { memory: false } })).statusCode).toBe(204);
    const pauses = seen.filter((r) => r.url.endsWith('/pause'));
    expect(pauses.at(-1)!.body).toEqual({ keepMemory: false });
    expect((await row(sbx.sandboxID)).state).toBe('paused');
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/resume`, { json: { timeout: 10 } })).statusCode).toBe(201);
    // The default (and memory: true) is the whole VM, as before: nothing new in the node request.
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/pause`, { json: { memory: true } })).statusCode).toBe(204);
    expect(seen.filter((r) => r.url.endsWith('/pause')).at(-1)!.body).toEqual({});
  });

  it("boots a paused sandbox over its disk on connect with memory: false (onResume 'reboot'); a running one is left as it is", async () => {
    const sbx = await create();
    await call('POST', `/sandboxes/${sbx.sandboxID}/pause`, { json: {} });
    const resumes = () => seen.filter((r) => r.url.endsWith('/resume')).map((r) => (r.body as { coldBoot?: boolean }).coldBoot);
    const booted = await call('POST', `/v2/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 60, memory: false } });
    expect(booted.statusCode, booted.body).toBe(201);
    expect(resumes()).toEqual([true]);
    expect((await call('POST', `/v2/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 60, memory: false } })).statusCode).toBe(200);
    // Without it, a resume restores memory, as before: nothing new in the node request.
    await call('POST', `/sandboxes/${sbx.sandboxID}/pause`, { json: {} });
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 60 } })).statusCode).toBe(201);
    expect(resumes()).toEqual([true, undefined]);
  });

  it('connects the same way under v1, the route of releases before 2.51', async () => {
    const sbx = await create();
    await call('POST', `/sandboxes/${sbx.sandboxID}/pause`);
    const resumed = await call('POST', `/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 120 } });
    expect(resumed.statusCode, resumed.body).toBe(201);
    expect((await row(sbx.sandboxID)).state).toBe('running');
    const running = await call('POST', `/sandboxes/${sbx.sandboxID}/connect`, { json: { timeout: 600 } });
    expect(running.statusCode).toBe(200);
    expect((await row(sbx.sandboxID)).expires_at).toBe(toIso(clock.nowMs() + 600_000));
    const other = await otherTenantKey();
    expect((await call('POST', `/sandboxes/${sbx.sandboxID}/connect`, { key: other, json: {} })).statusCode).toBe(404);
  });

  it('forks from a snapshot taken now, one result per fork, the forks inheriting the source’s envs', async () => {
    const sbx = await create({ envVars: { FROM: 'source' } });
    const res = await call('POST', `/sandboxes/${sbx.sandboxID}/fork`, { json: { count: 2, timeout: 60 } });
    expect(res.statusCode, res.body).toBe(201);
    const results = res.json() as Array<{ sandbox: { sandboxID: string } }>;
    expect(results).toHaveLength(2);
    const manual = await database.db.selectFrom('snapshots').selectAll().where('sandbox_id', '=', sbx.sandboxID).execute();
    expect(manual.map((s) => s.reason)).toEqual(['manual']);
    const fork = seen.find((r) => r.url === '/internal/v1/forks')!;
    expect(fork.body).toMatchObject({ snapshotId: manual[0]!.id, envs: { FROM: 'source' } });
    for (const r of results) expect(await row(r.sandbox.sandboxID)).toMatchObject({ state: 'running', timeout_s: 60 });
  });

  it('replaces the network with PUT, refusing what it cannot express', async () => {
    const sbx = await create({ network: { allowOut: ['a.example.com'] } });
    expect((await call('PUT', `/sandboxes/${sbx.sandboxID}/network`, { json: { allowOut: ['b.example.com'] } })).statusCode).toBe(204);
    expect(JSON.parse((await row(sbx.sandboxID)).network!)).toEqual({ allow: ['b.example.com'], deny: [] });
    const bad = await call('PUT', `/sandboxes/${sbx.sandboxID}/network`, { json: { allow_internet_access: true } });
    expect(bad.statusCode).toBe(400);
    expect(JSON.parse((await row(sbx.sandboxID)).network!)).toEqual({ allow: ['b.example.com'], deny: [] });
  });
});

describe('envs on Sandglass’s own API', () => {
  it.each([
    ['a bad name', { 'BAD-NAME': 'x' }, 'envs'],
    ['a NUL in a value', { A: 'x\u0000' }, 'envs.A'],
    ['more than 64 KiB', Object.fromEntries(Array.from({ length: 3 }, (_, i) => [`V${i}`, 'x'.repeat(30_000)])), 'envs'],
  ])('refuses envs with %s, naming the field', async (_what, envs, field) => {
    const res = await cp.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: { authorization: `Bearer ${adminKey}` }, payload: { envs } });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error.message).toContain(field);
    expect(created()).toEqual([]);
  });
});

describe('revocation covers envd tokens', () => {
  it('tells gateways to refuse a revoked key’s tokens for the longest token lifetime', async () => {
    const k = await cp.app.inject({ method: 'POST', url: '/v1/api-keys', headers: { authorization: `Bearer ${adminKey}` }, payload: {} });
    await cp.app.inject({ method: 'DELETE', url: `/v1/api-keys/${k.json().id}`, headers: { authorization: `Bearer ${adminKey}` } });
    const told = seen.find((r) => r.url === '/internal/v1/revoked-keys')!;
    expect(told.body).toEqual({ keyIds: [k.json().id], untilMs: clock.nowMs() + LONGEST_TOKEN_TTL_MS });
    expect(LONGEST_TOKEN_TTL_MS).toBeGreaterThanOrEqual(E2B_ENVD_TOKEN_TTL_MS);
  });
});

describe('the real e2b SDK', () => {
  it('lists page by page, reads info, pauses (false the second time) and kills (false for unknown)', async () => {
    const apiUrl = `${(await cp.listen(0)).replace('localhost', '127.0.0.1')}/e2b`;
    const opts = { apiUrl, apiKey: adminKey, sandboxUrl: 'http://127.0.0.1:9/e2b' };
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      clock.advance(1000);
      ids.push((await create({ metadata: { n: String(i) } })).sandboxID);
    }
    const paginator = E2bSandbox.list({ ...opts, limit: 2 });
    const pages = [await paginator.nextItems()];
    expect(paginator.hasNext).toBe(true);
    pages.push(await paginator.nextItems());
    expect(paginator.hasNext).toBe(false);
    expect(pages.map((p) => p.map((s) => s.sandboxId))).toEqual([[ids[2], ids[1]], [ids[0]]]);
    const filtered = await E2bSandbox.list({ ...opts, query: { metadata: { n: '1' }, state: ['running'] } }).nextItems();
    expect(filtered.map((s) => s.sandboxId)).toEqual([ids[1]]);

    const info = await E2bSandbox.getInfo(ids[0]!, opts);
    expect(info).toMatchObject({ sandboxId: ids[0], name: 'base', state: 'running', cpuCount: 1, memoryMB: 512, metadata: { n: '0' } });
    expect(await E2bSandbox.pause(ids[0]!, opts)).toBe(true);
    expect(await E2bSandbox.pause(ids[0]!, opts)).toBe(false);
    expect(await E2bSandbox.kill(ids[1]!, opts)).toBe(true);
    expect(await E2bSandbox.kill(ids[1]!, opts)).toBe(false);
    await expect(E2bSandbox.getInfo('sbx_unknown', opts)).rejects.toThrow(/not found/);
    await expect(E2bSandbox.list({ ...opts, apiKey: `sg_${'B'.repeat(43)}` }).nextItems()).rejects.toThrow(/Unauthorized/);
  });
});
