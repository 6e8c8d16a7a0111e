// The control plane over fastify's inject, with a tiny real HTTP server standing in for the gateway's internal API; every response is held against the spec.
import { createPublicKey, verify } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { Writable } from 'node:stream';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { pino } from 'pino';
import addFormats from 'ajv-formats';
import { createLogger, derefSchema, deriveNodeKeys, loadOpenApi, ManualClock, newId, verifyAccessToken } from '@sandglass/core';
import { openDatabase, toIso, type Database } from '@sandglass/db';
import { createTestDatabase, resetTestDatabase } from '@sandglass/db/test-postgres';
import { canonicalJson, EventLog } from '@sandglass/events';
import { LocalKeyring } from '@sandglass/kms';
import {
  bootstrapLocal,
  CONTROL_PLANE_SPEC,
  createControlPlane,
  hashApiKey,
  singleGateway,
  toSnapshot,
  upsertTemplate,
  type ControlPlane,
  type ControlPlaneOptions,
  type GatewayDirectory,
  type Snapshot,
  SecretStore,
} from './index.js';

/** SQLite here; server.postgres.test.ts runs this suite again on PostgreSQL, one database emptied before each test. */
let postgresUrl: string | undefined;
async function databaseUrl(): Promise<string> {
  if (process.env.SANDGLASS_TEST_DIALECT !== 'postgres') return 'sqlite::memory:';
  if (postgresUrl) await resetTestDatabase(postgresUrl);
  else postgresUrl = await createTestDatabase(inject('postgresUrl'), `cp_test_${process.pid}`, { template: inject('postgresMigrated') });
  return postgresUrl;
}

const SECRET = Buffer.alloc(32, 7);
const NODE_KEYS = deriveNodeKeys(SECRET);

/** What the fake gateway does with the next create: run it (recording sandbox.started, as the embedded gateway does) or fail. */
type GatewayMode = 'ok' | 'vm_failed' | 'vm_failed_recorded';
/** What it does with a fork: start every one, fail the ones after the first (recording sandbox.failed), fail all that way, or answer 500 for the whole call. */
type ForkMode = 'ok' | 'partial' | 'none' | 'down';

interface SeenRequest {
  method: string;
  url: string;
  authorization?: string;
  body: unknown;
}

let fakeGateway: Server;
let gatewayUrl: string;
let seen: SeenRequest[];
/** Bodies of the template prepares the control plane asked for, in order. */
let prepared: unknown[] = [];
let mode: GatewayMode;
let forkMode: ForkMode;
/** Set: the fake gateway has measured that it cannot keep a snapshot interval below this many seconds. */
let gatewayMinimumIntervalS: number | undefined;
/** What the fake gateway's approval broker holds, by sandbox id. */
let pendingApprovals: Map<string, Record<string, unknown>[]>;
/** Every response body the control plane gave in this test, to search for secret values. */
let bodies: string[];

let database: Database;
let events: EventLog;
let clock: ManualClock;
let cp: ControlPlane;
let home: string;
let adminKey: string;
let keys: LocalKeyring;

/** The gateway's side of taking a snapshot: it records snapshot.taken, parented on the sandbox's latest snapshot. */
async function recordSnapshot(sandboxId: string, reason: Snapshot['reason'], name: string | null = null, opts: { memory?: false } = {}): Promise<Snapshot> {
  const sbx = await database.db.selectFrom('sandboxes').selectAll().where('id', '=', sandboxId).executeTakeFirstOrThrow();
  const parent = await database.db.selectFrom('snapshots').select('id').where('sandbox_id', '=', sandboxId).orderBy('taken_at', 'desc').executeTakeFirst();
  const snapshotId = newId('snap');
  const data = {
    snapshotId,
    parentId: parent?.id ?? null,
    reason,
    name,
    pinned: name !== null,
    sizeAddedBytes: 4096,
    memoryMib: sbx.memory_mib,
    vcpus: sbx.vcpus,
    template: sbx.template,
    ...opts,
  };
  await events.append({ type: 'snapshot.taken', tenantId: sbx.tenant_id, sandboxId, data }, { clock });
  return toSnapshot(await database.db.selectFrom('snapshots').selectAll().where('id', '=', snapshotId).executeTakeFirstOrThrow());
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text === '' ? undefined : JSON.parse(text);
}

beforeAll(async () => {
  fakeGateway = createServer(async (req, res) => {
    const body = await readBody(req);
    const reply = (status: number, json?: unknown) => {
      res.writeHead(status, json === undefined ? {} : { 'content-type': 'application/json' });
      res.end(json === undefined ? undefined : JSON.stringify(json));
    };
    // Every create asks for its size's template first; kept apart so `seen` lists what acts on sandboxes.
    // The gateway's refusal of an interval it measured it cannot keep (CaptureTimes), at prepare and at an update.
    const interval = body as { snapshotIntervalS?: number; bestEffort?: boolean } | undefined;
    const unachievable =
      gatewayMinimumIntervalS !== undefined &&
      interval?.snapshotIntervalS !== undefined &&
      interval.snapshotIntervalS < gatewayMinimumIntervalS &&
      !interval.bestEffort;
    const refuseInterval = () =>
      reply(400, {
        error: { code: 'snapshot_interval_unachievable', message: 'too short', details: { field: 'snapshotIntervalS', minimumS: gatewayMinimumIntervalS } },
      });
    if (req.method === 'POST' && req.url === '/internal/v1/templates/prepare') {
      prepared.push(body);
      if (unachievable) return refuseInterval();
      return reply(200, { key: 'tpl-key' });
    }
    seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization, body });
    if (req.headers.authorization !== `Bearer ${NODE_KEYS.internalBearer.toString('hex')}`)
      return reply(401, { error: { code: 'unauthenticated', message: 'node secret' } });
    if (req.method === 'POST' && req.url === '/internal/v1/sandboxes') {
      const b = body as { id: string; tenantId: string };
      if (mode === 'ok') {
        await events.append({ type: 'sandbox.started', tenantId: b.tenantId, sandboxId: b.id, data: { pid: 4242 } }, { clock });
        return reply(201, { id: b.id, state: 'running', startedAt: toIso(clock.nowMs()), pid: 4242 });
      }
      if (mode === 'vm_failed_recorded') {
        await events.append(
          { type: 'sandbox.failed', tenantId: b.tenantId, sandboxId: b.id, data: { reason: 'kernel panic', consoleTail: 'panic' } },
          { clock },
        );
      }
      return reply(500, { error: { code: 'vm_failed', message: 'The VM exited during restore.', requestId: 'req_gw' } });
    }
    if (req.method === 'DELETE' && req.url?.startsWith('/internal/v1/sandboxes/')) return reply(204);
    if (req.method === 'POST' && req.url?.endsWith('/timeout')) return reply(204);
    if (req.method === 'PUT' && req.url?.endsWith('/snapshot-interval')) return unachievable ? refuseInterval() : reply(204);
    if (req.method === 'PUT' && req.url?.endsWith('/network')) return reply(204);
    const url = new URL(req.url!, 'http://gw');
    const approvals = /^\/internal\/v1\/sandboxes\/([^/]+)\/approvals(?:\/([^/]+))?$/.exec(url.pathname);
    if (approvals && req.method === 'GET' && approvals[2] === undefined) return reply(200, { approvals: pendingApprovals.get(approvals[1]!) ?? [] });
    if (approvals && req.method === 'POST' && approvals[2] !== undefined) {
      const list = pendingApprovals.get(approvals[1]!) ?? [];
      const i = list.findIndex((a) => a.requestId === approvals[2]);
      if (i < 0) return reply(404, { error: { code: 'approval_not_found', message: `No pending approval request ${approvals[2]}.`, requestId: 'req_gw' } });
      list.splice(i, 1);
      return reply(204);
    }
    const [, sandboxId, action] = /^\/internal\/v1\/sandboxes\/([^/]+)\/(snapshots|pause|resume)$/.exec(url.pathname) ?? [];
    if (req.method === 'POST' && action === 'snapshots')
      return reply(201, { snapshot: await recordSnapshot(sandboxId!, 'manual', (body as { name?: string }).name ?? null) });
    if (req.method === 'POST' && action === 'pause') {
      const snapshot = await recordSnapshot(sandboxId!, 'pause');
      const sbx = await database.db.selectFrom('sandboxes').select('tenant_id').where('id', '=', sandboxId!).executeTakeFirstOrThrow();
      await events.append({ type: 'sandbox.paused', tenantId: sbx.tenant_id, sandboxId, data: { snapshotId: snapshot.id } }, { clock });
      return reply(200, { snapshot });
    }
    if (req.method === 'POST' && action === 'resume') {
      const b = body as { snapshotId: string; tenantId: string };
      await events.append({ type: 'sandbox.resumed', tenantId: b.tenantId, sandboxId, data: { snapshotId: b.snapshotId, pid: 4343 } }, { clock });
      return reply(200, { id: sandboxId, state: 'running', startedAt: toIso(clock.nowMs()), pid: 4343 });
    }
    if (req.method === 'POST' && url.pathname === '/internal/v1/forks') {
      if (forkMode === 'down') return reply(500, { error: { code: 'snapshot_corrupt', message: 'A chunk failed verification.', requestId: 'req_gw' } });
      const b = body as { snapshotId: string; tenantId: string; sandboxes: { id: string }[] };
      const source = await database.db.selectFrom('snapshots').select('sandbox_id').where('id', '=', b.snapshotId).executeTakeFirstOrThrow();
      const sandboxes = [];
      for (const [i, { id }] of b.sandboxes.entries()) {
        if (forkMode === 'none' || (forkMode === 'partial' && i > 0)) {
          await events.append({ type: 'sandbox.failed', tenantId: b.tenantId, sandboxId: id, data: { reason: 'no memory left' } }, { clock });
          sandboxes.push({ id, error: { code: 'capacity_exhausted', message: `fork ${i} found no memory left` } });
          continue;
        }
        await events.append({ type: 'sandbox.started', tenantId: b.tenantId, sandboxId: id, data: { pid: 5000 + i } }, { clock });
        await events.append(
          { type: 'sandbox.forked', tenantId: b.tenantId, sandboxId: id, data: { snapshotId: b.snapshotId, sourceSandboxId: source.sandbox_id } },
          { clock },
        );
        sandboxes.push({ id, tenantId: b.tenantId, state: 'running', pid: 5000 + i, startedAt: toIso(clock.nowMs()), expiresAt: toIso(clock.nowMs()) });
      }
      return reply(200, { sandboxes });
    }
    const snapshotDelete = /^\/internal\/v1\/snapshots\/([^/]+)$/.exec(url.pathname);
    if (req.method === 'DELETE' && snapshotDelete) {
      const tenantId = url.searchParams.get('tenantId')!;
      const snap = await database.db
        .selectFrom('snapshots')
        .selectAll()
        .where('id', '=', snapshotDelete[1]!)
        .where('tenant_id', '=', tenantId)
        .executeTakeFirst();
      if (!snap) return reply(404, { error: { code: 'snapshot_not_found', message: 'no snapshot' } });
      await events.append({ type: 'snapshot.deleted', tenantId, sandboxId: snap.sandbox_id, data: { snapshotId: snap.id, why: 'user' } }, { clock });
      return reply(204);
    }
    reply(404, { error: { code: 'not_found', message: 'no route' } });
  });
  await new Promise<void>((resolve) => fakeGateway.listen(0, '127.0.0.1', resolve));
  gatewayUrl = `http://127.0.0.1:${(fakeGateway.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => fakeGateway.close(() => resolve())));

async function start(
  gateways: GatewayDirectory = singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
  extra: Partial<ControlPlaneOptions> = {},
): Promise<void> {
  cp = createControlPlane({
    db: database.db,
    events,
    gateways,
    nodeSecret: SECRET,
    clock,
    logger: createLogger('test', 'silent'),
    keys,
    auditSigner: keys,
    ...extra,
  });
  await cp.app.ready();
}

beforeEach(async () => {
  seen = [];
  prepared = [];
  mode = 'ok';
  gatewayMinimumIntervalS = undefined;
  forkMode = 'ok';
  pendingApprovals = new Map();
  bodies = [];
  violations = [];
  clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
  database = await openDatabase({ url: await databaseUrl() });
  events = new EventLog(database.db);
  home = mkdtempSync(join(tmpdir(), 'sg-cp-'));
  keys = new LocalKeyring({ dir: join(home, 'keys') });
  adminKey = await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock });
  for (const [name, status] of [
    ['base', 'ready'],
    ['slow', 'building'],
    ['broken', 'failed'],
  ] as const) {
    await upsertTemplate(database.db, { name, status, memoryMib: 256 }, { clock });
  }
  await start();
});
afterEach(async () => {
  expect(violations, violations.join('\n')).toEqual([]);
  await cp.close();
  await database.close();
  rmSync(home, { recursive: true, force: true });
});

// Every answer of a route the spec declares must match it, as the integration suite checks against the real server.
const spec = loadOpenApi(CONTROL_PLANE_SPEC);
const ajv = addFormats.default(new Ajv2020({ strict: false, allErrors: true }));
let violations: string[];

function checkAgainstSpec(method: string, url: string, status: number, body: string): void {
  const pathname = url.split('?')[0]!;
  const template = Object.keys(spec.paths).find((t) => new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(pathname));
  // An unknown route answers not_found, which no operation declares.
  if (!template) return;
  const where = `${method} ${pathname} → ${status}`;
  const op = spec.paths[template]![method.toLowerCase()] as
    | { responses: Record<string, { $ref?: string; content?: Record<string, { schema: unknown }> }> }
    | undefined;
  const declared = op?.responses[String(status)];
  if (!declared) return void violations.push(`${where}: not in spec`);
  const resolved = declared.$ref
    ? (spec as unknown as { components: { responses: Record<string, typeof declared> } }).components.responses[declared.$ref.split('/').pop()!]!
    : declared;
  const schema = resolved.content?.['application/json']?.schema;
  // A body of another type (the audit export's JSON lines) is the spec's too; only no content at all means no body.
  if (!schema) return void (body === '' || resolved.content !== undefined || violations.push(`${where}: a body where the spec declares none`));
  if (!ajv.validate(derefSchema(spec, schema) as object, JSON.parse(body))) violations.push(`${where}: ${ajv.errorsText(ajv.errors)} in ${body.slice(0, 300)}`);
}

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
async function call(
  method: Method,
  url: string,
  opts: { key?: string | null; json?: unknown; payload?: string | Buffer; headers?: Record<string, string> } = {},
) {
  const key = opts.key === undefined ? adminKey : opts.key;
  const res = await cp.app.inject({
    method,
    url,
    headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...opts.headers },
    ...(opts.json !== undefined ? { payload: opts.json as object } : opts.payload !== undefined ? { payload: opts.payload } : {}),
  });
  checkAgainstSpec(method, url, res.statusCode, res.body);
  bodies.push(res.body);
  return res;
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
    expect(rows[0]).toMatchObject({ key_hash: hashApiKey(adminKey), prefix: adminKey.slice(0, 10), role: 'operator' });
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

describe('custom templates', () => {
  /** A sandbox of the caller's with one snapshot: what a build leaves to publish. */
  async function builtSnapshot(key = adminKey) {
    const sbx = await createSandbox(key, { network: { allow: ['example.com'] } });
    return { sbx, snap: await recordSnapshot(sbx.id, 'manual') };
  }

  it('runs one build per name: a second is refused naming the first, a stale one ends failed and frees the name', async () => {
    const first = await call('POST', '/v1/template-builds', { json: { name: 'tools' } });
    expect(first.statusCode, first.body).toBe(201);
    const second = await call('POST', '/v1/template-builds', { json: { name: 'tools' } });
    expect(second.statusCode).toBe(409);
    expect(second.json().error).toMatchObject({ code: 'template_build_in_progress', details: { field: 'name', buildId: first.json().id } });
    // Another name builds meanwhile.
    expect((await call('POST', '/v1/template-builds', { json: { name: 'other' } })).statusCode).toBe(201);
    // Reports keep it alive; silence past the stale limit ends it.
    clock.advance(50_000);
    const report = await call('POST', `/v1/template-builds/${first.json().id}/log`, {
      json: { lines: [{ stream: 'stdout', text: 'step one' }], step: { index: 0, name: 'run: one', status: 'done', durationMs: 5 } },
    });
    expect(report.statusCode, report.body).toBe(204);
    clock.advance(50_000);
    expect((await call('POST', '/v1/template-builds', { json: { name: 'tools' } })).statusCode).toBe(409);
    clock.advance(61_000);
    const third = await call('POST', '/v1/template-builds', { json: { name: 'tools' } });
    expect(third.statusCode, third.body).toBe(201);
    const stale = (await call('GET', `/v1/template-builds/${first.json().id}`)).json();
    expect(stale).toMatchObject({ status: 'failed', steps: [{ index: 0, status: 'done' }] });
    expect(stale.error.message).toMatch(/stopped reporting/);
    const late = await call('POST', `/v1/template-builds/${first.json().id}/log`, { json: { lines: [{ stream: 'stdout', text: 'late' }] } });
    expect(late.json().error.code).toBe('conflict');
    const log = (await call('GET', `/v1/template-builds/${first.json().id}/log`)).json();
    expect(log).toEqual({ lines: [expect.objectContaining({ n: 0, stream: 'stdout', text: 'step one' })], nextLine: 1, status: 'failed' });
  });

  it('publishes a build as a version, numbers versions, pins the snapshot and guards it', async () => {
    const { snap } = await builtSnapshot();
    const build = (await call('POST', '/v1/template-builds', { json: { name: 'tools' } })).json();
    // While the build runs, a publication without it is refused; a wrong build id too.
    const without = await call('POST', '/v1/templates', { json: { name: 'tools', snapshotId: snap.id } });
    expect(without.json().error.code).toBe('template_build_in_progress');
    const v1 = await call('POST', '/v1/templates', {
      json: { name: 'tools', snapshotId: snap.id, buildId: build.id, envs: { A: '1' }, start: { cmd: 'srv' } },
    });
    expect(v1.statusCode, v1.body).toBe(201);
    expect(v1.json()).toMatchObject({ name: 'tools', version: 1, snapshotId: snap.id, envs: { A: '1' }, start: { cmd: 'srv' }, buildId: build.id });
    expect((await call('GET', `/v1/template-builds/${build.id}`)).json()).toMatchObject({ status: 'ready', versionId: v1.json().id });
    const again = await call('POST', '/v1/templates', { json: { name: 'tools', snapshotId: snap.id, buildId: build.id } });
    expect(again.json().error).toMatchObject({ code: 'conflict', details: { field: 'buildId' } });
    expect((await call('GET', `/v1/snapshots/${snap.id}`)).json()).toMatchObject({ pinned: true, name: 'tpl-tools-v1' });
    expect((await call('PATCH', `/v1/snapshots/${snap.id}`, { json: { name: null } })).json().error.code).toBe('conflict');
    expect((await call('DELETE', `/v1/snapshots/${snap.id}`)).json().error.code).toBe('conflict');
    const { snap: snap2 } = await builtSnapshot();
    const v2 = await call('POST', '/v1/templates', { json: { name: 'tools', snapshotId: snap2.id } });
    expect(v2.json()).toMatchObject({ version: 2, buildId: null });
    const detail = (await call('GET', '/v1/templates/tools')).json();
    expect(detail.template).toMatchObject({ name: 'tools', custom: true, version: 2, id: v2.json().id });
    expect(detail.versions.map((v: { version: number }) => v.version)).toEqual([2, 1]);
    expect((await call('POST', '/v1/templates', { json: { name: 'base', snapshotId: snap.id } })).json().error.details.field).toBe('name');
    // Deleting version 1 unpins its snapshot; version 2 remains the template.
    expect((await call('DELETE', '/v1/templates/tools?version=1')).statusCode).toBe(204);
    expect((await call('GET', `/v1/snapshots/${snap.id}`)).json()).toMatchObject({ pinned: false, name: null });
    expect((await call('DELETE', '/v1/templates/tools?version=1')).json().error).toMatchObject({ code: 'template_not_found', details: { field: 'version' } });
    expect((await call('DELETE', '/v1/templates/base')).json().error.code).toBe('permission_denied');
  });

  it("creates a sandbox from a version as a fork with its own network, no secrets, the template's variables, user and workdir", async () => {
    const { snap } = await builtSnapshot();
    const start = { cmd: 'serve', user: 'app', workdir: '/srv', ready: { cmd: 'curl -sf localhost', timeoutS: 30, intervalMs: 500 } };
    const v = (
      await call('POST', '/v1/templates', {
        json: { name: 'tools', snapshotId: snap.id, envs: { A: '1', B: 'template' }, user: 'app', workdir: '/srv', start },
      })
    ).json();
    expect(v).toMatchObject({ user: 'app', workdir: '/srv', start });
    seen = [];
    const created = await createSandbox(adminKey, { template: 'tools', envs: { B: 'mine' }, timeoutS: 60 });
    expect(created).toMatchObject({ template: 'tools' });
    const fork = seen.find((r) => r.url === '/internal/v1/forks');
    expect(fork?.body).toEqual({
      snapshotId: snap.id,
      tenantId: created.tenantId,
      network: { allow: [], deny: [] },
      secrets: [],
      envs: { A: '1', B: 'mine' },
      defaults: { user: 'app', workdir: '/srv' },
      sandboxes: [{ id: created.id, timeoutS: 60, snapshotIntervalS: expect.any(Number) }],
    });
    // By version id too; another tenant knows neither.
    expect(await createSandbox(adminKey, { template: v.id })).toMatchObject({ template: 'tools' });
    const b = await tenantB();
    for (const template of ['tools', v.id]) {
      expect((await call('POST', '/v1/sandboxes', { key: b.key, json: { template } })).json().error.code).toBe('template_not_found');
    }
    expect((await call('GET', '/v1/templates/tools', { key: b.key })).json().error.code).toBe('template_not_found');
    expect((await call('POST', '/v1/templates', { key: b.key, json: { name: 'mine', snapshotId: snap.id } })).json().error.code).toBe('snapshot_not_found');
  });

  it("publishes an operator's template for every tenant: listed read-only, created from under its publisher's key, withdrawn", async () => {
    const { sbx, snap } = await builtSnapshot();
    const v = (await call('POST', '/v1/templates', { json: { name: 'tools', snapshotId: snap.id, envs: { A: '1' } } })).json();
    const b = await tenantB();
    const before = await state();
    // Only an operator key publishes, naming the field; the refusal changes nothing.
    const refused = await call('PATCH', '/v1/templates/tools', { key: b.key, json: { public: true } });
    expect(refused.json().error).toMatchObject({ code: 'permission_denied', details: { field: 'public' } });
    expect((await call('PATCH', '/v1/templates/base', { json: { public: true } })).json().error).toMatchObject({ code: 'permission_denied' });
    expect(await state()).toEqual(before);
    expect((await call('POST', '/v1/sandboxes', { key: b.key, json: { template: 'tools' } })).json().error.code).toBe('template_not_found');

    const published = await call('PATCH', '/v1/templates/tools', { json: { public: true } });
    expect(published.statusCode, published.body).toBe(200);
    expect(published.json()).toMatchObject({ name: 'tools', public: true, readOnly: false });
    const listed = (await call('GET', '/v1/templates', { key: b.key })).json().templates;
    expect(listed.find((t: { name: string }) => t.name === 'tools')).toMatchObject({ id: v.id, custom: true, public: true, readOnly: true });
    const detail = (await call('GET', '/v1/templates/tools', { key: b.key })).json();
    expect(detail.template).toMatchObject({ public: true, readOnly: true });
    expect(detail.versions.map((x: { id: string }) => x.id)).toEqual([v.id]);
    // Used, never changed: no pool, no delete, no publication by another tenant's keys.
    expect((await call('PATCH', '/v1/templates/tools', { key: b.key, json: { warmPoolSize: 1 } })).json().error).toMatchObject({
      code: 'permission_denied',
      details: { field: 'warmPoolSize' },
    });
    expect((await call('DELETE', '/v1/templates/tools', { key: b.key })).json().error.code).toBe('permission_denied');
    // Its build snapshot stays the publisher's alone.
    expect((await call('GET', `/v1/snapshots/${snap.id}`, { key: b.key })).json().error.code).toBe('snapshot_not_found');
    expect((await call('POST', '/v1/forks', { key: b.key, json: { snapshotId: snap.id } })).json().error.code).toBe('snapshot_not_found');
    expect((await call('POST', '/v1/forks', { key: b.key, json: { sandboxId: sbx.id } })).json().error.code).toBe('sandbox_not_found');

    // By name and by version id: a fork of the publisher's snapshot, read under the publisher's key, into tenant b.
    for (const template of ['tools', v.id]) {
      seen = [];
      const created = await createSandbox(b.key, { template });
      expect(created.tenantId).toBe(b.tenantId);
      const fork = seen.find((r) => r.url === '/internal/v1/forks');
      expect(fork?.body).toMatchObject({ snapshotId: snap.id, tenantId: b.tenantId, sourceTenantId: sbx.tenantId, envs: { A: '1' } });
    }
    // The publisher's own creates name no other tenant.
    seen = [];
    await createSandbox(adminKey, { template: 'tools' });
    expect(seen.find((r) => r.url === '/internal/v1/forks')?.body).not.toHaveProperty('sourceTenantId');

    // A tenant's own template of that name wins over the published one.
    const own = await builtSnapshot(b.key);
    const mine = (await call('POST', '/v1/templates', { key: b.key, json: { name: 'tools', snapshotId: own.snap.id } })).json();
    expect((await call('GET', '/v1/templates', { key: b.key })).json().templates.filter((t: { name: string }) => t.name === 'tools')).toEqual([
      expect.objectContaining({ id: mine.id, readOnly: false, public: false }),
    ]);
    seen = [];
    await createSandbox(b.key, { template: 'tools' });
    expect(seen.find((r) => r.url === '/internal/v1/forks')?.body).toMatchObject({ snapshotId: own.snap.id, tenantId: b.tenantId });
    expect(seen.find((r) => r.url === '/internal/v1/forks')?.body).not.toHaveProperty('sourceTenantId');
    expect((await call('DELETE', '/v1/templates/tools', { key: b.key })).statusCode).toBe(204);

    // Withdrawn: gone from the other tenant's list, refused by name and by id, recorded in the publisher's log.
    expect((await call('PATCH', '/v1/templates/tools', { json: { public: false } })).json()).toMatchObject({ public: false });
    expect((await call('GET', '/v1/templates', { key: b.key })).json().templates.map((t: { name: string }) => t.name)).not.toContain('tools');
    for (const template of ['tools', v.id]) {
      expect((await call('POST', '/v1/sandboxes', { key: b.key, json: { template } })).json().error.code).toBe('template_not_found');
    }
    const changes = await events.list({ tenantId: sbx.tenantId, types: ['template.visibility_changed'] });
    expect(changes.map((e) => e.data)).toEqual([
      { name: 'tools', public: true, keyId: expect.any(String) },
      { name: 'tools', public: false, keyId: expect.any(String) },
    ]);
  });

  it('forgets a cached step whose snapshot is gone', async () => {
    const { snap } = await builtSnapshot();
    const key = 'ab'.repeat(32);
    expect((await call('GET', `/v1/template-cache/${key}`)).json().error.code).toBe('not_found');
    expect((await call('PUT', `/v1/template-cache/${key}`, { json: { snapshotId: snap.id } })).json()).toMatchObject({ key, snapshotId: snap.id });
    expect((await call('GET', `/v1/template-cache/${key}`)).json()).toMatchObject({ snapshotId: snap.id });
    expect((await call('DELETE', `/v1/snapshots/${snap.id}`)).statusCode).toBe(204);
    expect((await call('GET', `/v1/template-cache/${key}`)).json().error.code).toBe('not_found');
  });

  it('bounds the step cache, least recently used first, never evicting a step a running build used', async () => {
    await cp.close();
    await start(undefined, { templateCacheEntries: 2 });
    const { sbx } = await builtSnapshot();
    const snaps: Snapshot[] = [];
    for (const i of [0, 1, 2, 3]) snaps.push(await recordSnapshot(sbx.id, 'manual', `tb-tools-${i}-${'ab'.repeat(8)}`));
    const key = (i: number) => String(i).repeat(64);
    const put = async (i: number) => {
      const res = await call('PUT', `/v1/template-cache/${key(i)}`, { json: { snapshotId: snaps[i]!.id } });
      expect(res.statusCode, res.body).toBe(200);
      clock.advance(1000);
    };
    // Read from the table, not through GET: a look-up is a use and would reorder what it checks.
    const kept = async () => (await database.db.selectFrom('template_cache').select('key').orderBy('key').execute()).map((r) => Number(r.key[0]));
    const nameOf = async (i: number) => (await call('GET', `/v1/snapshots/${snaps[i]!.id}`)).json().name;

    await put(0);
    await put(1);
    expect((await call('GET', `/v1/template-cache/${key(0)}`)).statusCode).toBe(200);
    clock.advance(1000);
    await put(2);
    // Step 1 was the least recently used (step 0 was looked up since): it goes, and its snapshot loses the builder's pin.
    expect(await kept()).toEqual([0, 2]);
    expect([await nameOf(0), await nameOf(1)]).toEqual([snaps[0]!.name, null]);

    // A running build looked steps 0 and 2 up: storing its next step keeps all three, over the bound.
    const build = await call('POST', '/v1/template-builds', { json: { name: 'tools' } });
    expect(build.statusCode, build.body).toBe(201);
    clock.advance(1000);
    for (const i of [0, 2]) expect((await call('GET', `/v1/template-cache/${key(i)}`)).statusCode).toBe(200);
    await put(3);
    expect(await kept()).toEqual([0, 2, 3]);
    expect(await nameOf(0)).toBe(snaps[0]!.name);

    // Once the build has ended (stale: its builder went silent), the next store evicts back to the bound.
    clock.advance(61_000);
    await put(3);
    expect(await kept()).toEqual([2, 3]);
    expect(await nameOf(0)).toBeNull();
    expect((await call('GET', `/v1/template-builds/${build.json().id}`)).json().status).toBe('failed');
  });

  it("leaves a version's snapshot pinned when its step is evicted, and unpins it when the version goes too", async () => {
    await cp.close();
    await start(undefined, { templateCacheEntries: 1 });
    const { sbx } = await builtSnapshot();
    const step = await recordSnapshot(sbx.id, 'manual', 'tb-tools-0-abababababababab');
    const other = await recordSnapshot(sbx.id, 'manual', 'tb-tools-1-abababababababab');
    expect((await call('PUT', `/v1/template-cache/${'a'.repeat(64)}`, { json: { snapshotId: step.id } })).statusCode).toBe(200);
    expect((await call('POST', '/v1/templates', { json: { name: 'tools', snapshotId: step.id } })).statusCode).toBe(201);
    clock.advance(1000);
    expect((await call('PUT', `/v1/template-cache/${'b'.repeat(64)}`, { json: { snapshotId: other.id } })).statusCode).toBe(200);
    expect((await call('GET', `/v1/template-cache/${'a'.repeat(64)}`)).json().error.code).toBe('not_found');
    expect((await call('GET', `/v1/snapshots/${step.id}`)).json()).toMatchObject({ name: step.name, pinned: true });
    expect((await call('DELETE', '/v1/templates/tools')).statusCode).toBe(204);
    expect((await call('GET', `/v1/snapshots/${step.id}`)).json()).toMatchObject({ name: null, pinned: false });
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
    expect(verifyAccessToken(sbx.access.token, NODE_KEYS.accessToken, clock.nowMs())).toEqual({
      sbx: sbx.id,
      ten: sbx.tenantId,
      exp: Date.UTC(2025, 5, 1, 12, 15),
      kid: expect.stringMatching(/^key_/),
    });

    expect(seen).toEqual([
      {
        method: 'POST',
        url: '/internal/v1/sandboxes',
        authorization: `Bearer ${NODE_KEYS.internalBearer.toString('hex')}`,
        body: { id: sbx.id, tenantId: sbx.tenantId, template: 'base', memoryMib: 512, vcpus: 2, timeoutS: 60, snapshotIntervalS: 60 },
      },
    ]);
    expect(prepared).toEqual([{ template: 'base', memoryMib: 512, vcpus: 2, snapshotIntervalS: 60, bestEffort: false }]);
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
    ['a disk-only timeout pause with no pause', { json: { onTimeoutKeepMemory: false } }, 400, 'invalid_argument', 'onTimeoutKeepMemory'],
    [
      'a disk-only timeout pause with onTimeout kill',
      { json: { onTimeout: 'kill', onTimeoutKeepMemory: false } },
      400,
      'invalid_argument',
      'onTimeoutKeepMemory',
    ],
    ['a body that is not an object', { json: [1, 2] }, 400, 'invalid_argument', 'body'],
    ['malformed JSON', { payload: '{"memoryMib": 5', headers: { 'content-type': 'application/json' } }, 400, 'malformed_json', undefined],
    ['an empty JSON body', { payload: '', headers: { 'content-type': 'application/json' } }, 400, 'malformed_json', undefined],
    ['a wrong content type', { payload: 'memoryMib=512', headers: { 'content-type': 'text/plain' } }, 400, 'invalid_argument', 'content-type'],
    [
      'a form content type',
      { payload: 'memoryMib=512', headers: { 'content-type': 'application/x-www-form-urlencoded' } },
      400,
      'invalid_argument',
      'content-type',
    ],
    [
      'a body over 1 MiB',
      { payload: JSON.stringify({ metadata: { a: 'x'.repeat(1024 * 1024) } }), headers: { 'content-type': 'application/json' } },
      413,
      'payload_too_large',
      undefined,
    ],
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

  it('answers gateway_unavailable when the gateway cannot be reached, and records no sandbox', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    await cp.close();
    await start(singleGateway({ id: 'node_dead', url: deadUrl, internalUrl: deadUrl }));

    const res = await call('POST', '/v1/sandboxes');
    expect(res.statusCode).toBe(502);
    expect(res.json().error).toMatchObject({ code: 'gateway_unavailable', message: expect.stringContaining('node_dead') });
    // The template is asked for before the sandbox is recorded: an unreachable node leaves nothing behind.
    expect(await database.db.selectFrom('sandboxes').selectAll().execute()).toEqual([]);
  });

  it('treats a gateway refusing the node secret as internal, not as the caller’s fault', async () => {
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
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
      ['GET', '/audit/export', undefined],
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
    for (const [method, suffix] of [
      ['GET', ''],
      ['DELETE', ''],
      ['POST', '/access'],
      ['GET', '/events'],
      ['GET', '/audit/export'],
    ] as const) {
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
    expect(verifyAccessToken(access.json().token, NODE_KEYS.accessToken, clock.nowMs()).sbx).toBe(sbx.id);

    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/access`)).json().error.code).toBe('sandbox_not_running');
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/timeout`, { json: { timeoutS: 5 } })).json().error.code).toBe('sandbox_not_running');
  });

  it('gives clients the public gateway URL when one is set', async () => {
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
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

describe('audit export', () => {
  it('streams the header, the events as /events serves them and a trailer signed by the published key', async () => {
    const sbx = await createSandbox();
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    const res = await call('GET', `/v1/sandboxes/${sbx.id}/audit/export`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toBe('application/x-ndjson');
    const [header, ...rest] = res.body
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const trailer = rest.pop()!;
    const served = (await call('GET', `/v1/sandboxes/${sbx.id}/events`)).json().events;
    expect(rest).toEqual(served);
    expect(header).toEqual({ format: 'sandglass-audit/1', sandboxId: sbx.id, tenantId: sbx.tenantId, exportedAt: toIso(clock.nowMs()), count: 3 });

    // The key needs no API key to fetch; the trailer names it and its signature verifies over the signed fields.
    const published = await call('GET', '/v1/audit/public-key', { key: null });
    expect(published.statusCode).toBe(200);
    const { keyId, publicKeyPem } = published.json();
    expect(publicKeyPem).toBe(await keys.auditPublicKeyPem());
    const { signature, ...signed } = trailer as { signature: string };
    expect(signed).toEqual({
      format: 'sandglass-audit/1',
      sandboxId: sbx.id,
      tenantId: sbx.tenantId,
      exportedAt: header!.exportedAt,
      count: 3,
      headHash: served[2].hash,
      keyId,
    });
    expect(verify(null, Buffer.from(canonicalJson(signed)), createPublicKey(publicKeyPem), Buffer.from(signature, 'base64'))).toBe(true);
  });

  it('answers key_unavailable, before any line, where the deployment has no audit key', async () => {
    const sbx = await createSandbox();
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
      nodeSecret: SECRET,
      clock,
      logger: createLogger('test', 'silent'),
    });
    for (const url of [`/v1/sandboxes/${sbx.id}/audit/export`, '/v1/audit/public-key']) {
      const res = await call('GET', url);
      expect(res.statusCode, url).toBe(503);
      expect(res.json().error.code).toBe('key_unavailable');
    }
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
    for (const [url, json] of [
      ['/v1/tenants', { name: 'c' }],
      [`/v1/tenants/${b.tenantId}/api-keys`, { role: 'admin' }],
    ] as const) {
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
    for (const [json, field] of [
      [{}, 'name'],
      [{ name: 'has space' }, 'name'],
      [{ name: 'c', plan: 'pro' }, 'plan'],
    ] as const) {
      const res = await call('POST', '/v1/tenants', { json });
      expect(res.json().error.details.field).toBe(field);
    }
    const role = await call('POST', '/v1/tenants/ten_nope/api-keys', { json: { role: 'owner' } });
    expect(role.json().error.details.field).toBe('role');
  });

  it('makes admin keys when asked, which manage their own tenant’s keys but create no tenants', async () => {
    const b = await tenantB();
    const k = await call('POST', `/v1/tenants/${b.tenantId}/api-keys`, { json: { role: 'admin' } });
    expect(k.json()).toMatchObject({ tenantId: b.tenantId, role: 'admin', key: expect.stringMatching(/^sg_[A-Za-z0-9_-]{43}$/) });
    expect((await call('POST', `/v1/tenants/${b.tenantId}/api-keys`, { key: k.json().key, json: {} })).statusCode).toBe(201);
    const tenant = await call('POST', '/v1/tenants', { key: k.json().key, json: { name: 'c' } });
    expect(tenant.statusCode).toBe(403);
    expect(tenant.json().error.code).toBe('permission_denied');
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

/** A running sandbox with rolling snapshots the gateway took at 12:00:10, 12:00:20 and 12:00:30. */
async function sandboxWithTimeline(key = adminKey, json: unknown = {}) {
  const sbx = await createSandbox(key, json);
  const snapshots: Snapshot[] = [];
  for (let i = 0; i < 3; i++) {
    clock.advance(10_000);
    snapshots.push(await recordSnapshot(sbx.id, 'rolling'));
  }
  clock.advance(5_000);
  seen = [];
  return { sbx, snapshots };
}

const at = (s: number) => toIso(Date.UTC(2025, 5, 1, 12, 0, s));

describe('snapshot interval', () => {
  it('is 60 s by default, passed to the gateway and recorded, and changes through the gateway then the log', async () => {
    const sbx = await createSandbox(adminKey, { snapshotIntervalS: 15 });
    expect(seen[0]!.body).toMatchObject({ snapshotIntervalS: 15 });
    expect((await events.list({ sandboxId: sbx.id }))[0]!.data).toMatchObject({ snapshotIntervalS: 15 });
    expect(sbx).toMatchObject({ snapshotIntervalS: 15, sourceSnapshotId: null, diskMib: null, pausedAt: null });
    expect((await createSandbox()) as unknown).toMatchObject({ snapshotIntervalS: 60 });

    seen = [];
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { json: { snapshotIntervalS: 300 } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ id: sbx.id, snapshotIntervalS: 300 });
    expect(seen).toMatchObject([{ method: 'PUT', url: `/internal/v1/sandboxes/${sbx.id}/snapshot-interval`, body: { snapshotIntervalS: 300 } }]);
    expect((await events.list({ sandboxId: sbx.id })).at(-1)).toMatchObject({ type: 'sandbox.configured', data: { snapshotIntervalS: 300 } });
  });

  it.each([
    ['4 s on create', 'POST', '/v1/sandboxes', { snapshotIntervalS: 4 }, 'snapshotIntervalS'],
    ['over a day on create', 'POST', '/v1/sandboxes', { snapshotIntervalS: 86401 }, 'snapshotIntervalS'],
    ['4 s', 'POST', '/v1/sandboxes/SBX/snapshot-interval', { snapshotIntervalS: 4 }, 'snapshotIntervalS'],
    ['missing', 'POST', '/v1/sandboxes/SBX/snapshot-interval', {}, 'snapshotIntervalS'],
    ['a fraction', 'POST', '/v1/sandboxes/SBX/snapshot-interval', { snapshotIntervalS: 7.5 }, 'snapshotIntervalS'],
  ] as const)('rejects an interval %s, changing nothing', async (_what, method, url, json, field) => {
    const sbx = await createSandbox();
    const before = await state();
    const res = await call(method, url.replace('SBX', sbx.id), { json });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect(res.json().error.message).toContain(field);
    expect(await state()).toEqual(before);
  });

  it('refuses an interval the node cannot keep with its minimum, at update and at create, changing nothing, unless best-effort', async () => {
    const sbx = await createSandbox(adminKey, { snapshotIntervalS: 60 });
    gatewayMinimumIntervalS = 9;
    const before = await state();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { json: { snapshotIntervalS: 5 } });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'snapshot_interval_unachievable', details: { field: 'snapshotIntervalS', minimumS: 9 } });
    expect({ ...(await state()), gatewayCalls: 0 }).toEqual({ ...before, gatewayCalls: 0 });
    const forced = await call('POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { json: { snapshotIntervalS: 5, bestEffort: true } });
    expect(forced.statusCode, forced.body).toBe(200);
    expect(forced.json().snapshotIntervalS).toBe(5);
    expect(seen.at(-1)).toMatchObject({ method: 'PUT', body: { snapshotIntervalS: 5, bestEffort: true } });

    prepared = [];
    const sandboxesBefore = (await state()).sandboxes;
    const created = await call('POST', '/v1/sandboxes', { json: { snapshotIntervalS: 5 } });
    expect(created.statusCode).toBe(400);
    expect(created.json().error).toMatchObject({ code: 'snapshot_interval_unachievable', details: { field: 'snapshotIntervalS', minimumS: 9 } });
    expect((await state()).sandboxes).toEqual(sandboxesBefore);
    expect(prepared).toMatchObject([{ snapshotIntervalS: 5, bestEffort: false }]);
    expect((await call('POST', '/v1/sandboxes', { json: { snapshotIntervalS: 5, snapshotBestEffort: true } })).statusCode).toBe(201);
  });

  it('records a paused sandbox’s new interval without a gateway call, and refuses an ended one', async () => {
    const sbx = await createSandbox();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    seen = [];
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { json: { snapshotIntervalS: 30 } })).json().snapshotIntervalS).toBe(30);
    expect(seen).toEqual([]);
    const resumed = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(seen.at(-1)!.body).toMatchObject({ snapshotIntervalS: 30 });
    expect(resumed.json().snapshotIntervalS).toBe(30);

    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { json: { snapshotIntervalS: 30 } });
    expect(res.json().error.code).toBe('sandbox_not_running');
  });
});

describe('snapshots', () => {
  it('lists the timeline oldest first, whatever order the snapshots were recorded in', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    // An event recorded later can carry an earlier time (another writer's clock): the order is takenAt, not insertion.
    clock.advance(-30_000);
    await recordSnapshot(sbx.id, 'manual', 'early');
    clock.advance(30_000);
    const res = await call('GET', `/v1/sandboxes/${sbx.id}/snapshots`);
    expect(res.statusCode).toBe(200);
    const timeline: Snapshot[] = res.json().snapshots;
    expect(timeline.map((s) => s.takenAt)).toEqual([at(5), at(10), at(20), at(30)]);
    expect(timeline.slice(1)).toEqual(snapshots);
    expect(timeline[2]).toMatchObject({
      sandboxId: sbx.id,
      parentId: snapshots[0]!.id,
      reason: 'rolling',
      name: null,
      pinned: false,
      sizeAddedBytes: 4096,
      memoryMib: 256,
      vcpus: 1,
      template: 'base',
      memory: true,
    });
    expect((await call('GET', `/v1/snapshots/${snapshots[1]!.id}`)).json()).toEqual(snapshots[1]);
  });

  it("says which snapshots are disk-only (snapshot.taken's memory: false), in the timeline and by id", async () => {
    const { sbx } = await sandboxWithTimeline();
    const diskOnly = await recordSnapshot(sbx.id, 'pause', null, { memory: false });
    const timeline: Snapshot[] = (await call('GET', `/v1/sandboxes/${sbx.id}/snapshots`)).json().snapshots;
    expect(timeline.map((s) => [s.reason, s.memory])).toEqual([
      ['rolling', true],
      ['rolling', true],
      ['rolling', true],
      ['pause', false],
    ]);
    expect((await call('GET', `/v1/snapshots/${diskOnly.id}`)).json()).toMatchObject({ id: diskOnly.id, memory: false });
  });

  it('shows the cadence asked for against the one the timeline achieved, and whether the sandbox is behind', async () => {
    const sbx = await createSandbox(adminKey, { snapshotIntervalS: 5 });
    const cadence = async () => (await call('GET', `/v1/sandboxes/${sbx.id}/snapshots`)).json().cadence;
    // Less than one interval since it started: nothing to say yet.
    expect(await cadence()).toEqual({ intervalS: 5, achievedIntervalS: null, windowS: 0, takenInWindow: 0, behind: false });
    // A snapshot every 10 s for two minutes, against 5 s asked: the last 50 s hold 5.
    for (let i = 0; i < 12; i++) {
      clock.advance(10_000);
      await recordSnapshot(sbx.id, 'rolling');
    }
    clock.advance(5_000);
    expect(await cadence()).toEqual({ intervalS: 5, achievedIntervalS: 10, windowS: 50, takenInWindow: 5, behind: false });
    const report = { intervalS: 5, achievedIntervalS: 10, windowS: 50, takenInWindow: 5 };
    await events.append({ type: 'snapshot.behind', tenantId: sbx.tenantId, sandboxId: sbx.id, data: { ...report, lateS: 5, why: 'slots_full' } }, { clock });
    expect((await cadence()).behind).toBe(true);
    await events.append({ type: 'snapshot.caught_up', tenantId: sbx.tenantId, sandboxId: sbx.id, data: { ...report, behindForS: 60 } }, { clock });
    expect((await cadence()).behind).toBe(false);
    // A new interval starts a new window.
    await call('POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { json: { snapshotIntervalS: 60 } });
    expect(await cadence()).toMatchObject({ intervalS: 60, achievedIntervalS: null, windowS: 0 });
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    expect(await cadence()).toEqual({ intervalS: 60, achievedIntervalS: null, windowS: 0, takenInWindow: 0, behind: false });
  });

  it('takes a named (pinned) snapshot through the gateway', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`, { json: { name: 'before-migration_2.1' } });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toMatchObject({
      sandboxId: sbx.id,
      reason: 'manual',
      name: 'before-migration_2.1',
      pinned: true,
      parentId: snapshots[2]!.id,
      takenAt: at(35),
    });
    expect(seen).toMatchObject([{ method: 'POST', url: `/internal/v1/sandboxes/${sbx.id}/snapshots`, body: { name: 'before-migration_2.1' } }]);
    const unnamed = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`);
    expect(unnamed.json()).toMatchObject({ name: null, pinned: false });
    expect(seen.at(-1)!.body).toEqual({});
  });

  it.each([
    ['an empty name', { name: '' }, 'name'],
    ['a name with a space', { name: 'a b' }, 'name'],
    ['a name of 65 characters', { name: 'x'.repeat(65) }, 'name'],
    ['an unknown field', { name: 'a', pin: true }, 'pin'],
  ])('refuses %s, changing nothing', async (_what, json, field) => {
    const sbx = await createSandbox();
    const before = await state();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`, { json });
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect(await state()).toEqual(before);
  });

  it('names, renames and unnames a snapshot after the fact, recording snapshot.named and pinning only a named one', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    const id = snapshots[1]!.id;
    const named = await call('PATCH', `/v1/snapshots/${id}`, { json: { name: 'good.state-1' } });
    expect(named.statusCode, named.body).toBe(200);
    expect(named.json()).toEqual({ ...snapshots[1], name: 'good.state-1', pinned: true });
    expect((await call('GET', `/v1/snapshots/${id}`)).json()).toEqual(named.json());
    const renamed = await call('PATCH', `/v1/snapshots/${id}`, { json: { name: 'better' } });
    expect(renamed.json()).toMatchObject({ name: 'better', pinned: true });
    const cleared = await call('PATCH', `/v1/snapshots/${id}`, { json: { name: null } });
    expect(cleared.json()).toEqual(snapshots[1]);
    expect(seen).toEqual([]);
    const log = (await events.list({ sandboxId: sbx.id })).filter((e) => e.type === 'snapshot.named');
    expect(log.map((e) => e.data)).toEqual([
      { snapshotId: id, name: 'good.state-1', previousName: null },
      { snapshotId: id, name: 'better', previousName: 'good.state-1' },
      { snapshotId: id, name: null, previousName: 'better' },
    ]);
    // A sandbox that has ended keeps its timeline, and it can still be named.
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    expect((await call('PATCH', `/v1/snapshots/${snapshots[2]!.id}`, { json: { name: 'last' } })).json()).toMatchObject({ name: 'last', pinned: true });
    const live = await database.db.selectFrom('snapshots').selectAll().orderBy('id').execute();
    await events.rebuildProjections();
    expect(await database.db.selectFrom('snapshots').selectAll().orderBy('id').execute()).toEqual(live);
  });

  it.each([
    ['an empty name', { name: '' }, 'name'],
    ['a name with a slash', { name: 'a/b' }, 'name'],
    ['a name of 65 characters', { name: 'x'.repeat(65) }, 'name'],
    ['a number', { name: 7 }, 'name'],
    ['no name at all', {}, 'name'],
    ['an unknown field', { name: 'a', pinned: false }, 'pinned'],
  ])('refuses to name a snapshot with %s, changing nothing', async (_what, json, field) => {
    const { snapshots } = await sandboxWithTimeline();
    const before = { ...(await state()), snapshots: await database.db.selectFrom('snapshots').selectAll().orderBy('id').execute() };
    const res = await call('PATCH', `/v1/snapshots/${snapshots[0]!.id}`, { json });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect({ ...(await state()), snapshots: await database.db.selectFrom('snapshots').selectAll().orderBy('id').execute() }).toEqual(before);
  });

  it('snapshots only a running sandbox', async () => {
    const sbx = await createSandbox();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    const paused = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`);
    expect(paused.statusCode).toBe(409);
    expect(paused.json().error).toMatchObject({ code: 'sandbox_not_running', message: expect.stringContaining('already paused') });
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`)).json().error.code).toBe('sandbox_not_running');
  });

  it('deletes through the gateway of the snapshot’s sandbox, with the tenant', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    const res = await call('DELETE', `/v1/snapshots/${snapshots[1]!.id}`);
    expect(res.statusCode, res.body).toBe(204);
    expect(seen.map((r) => `${r.method} ${r.url}`)).toEqual([`DELETE /internal/v1/snapshots/${snapshots[1]!.id}?tenantId=${sbx.tenantId}`]);
    expect((await call('GET', `/v1/sandboxes/${sbx.id}/snapshots`)).json().snapshots.map((s: Snapshot) => s.id)).toEqual([snapshots[0]!.id, snapshots[2]!.id]);
    const again = await call('GET', `/v1/snapshots/${snapshots[1]!.id}`);
    expect(again.statusCode).toBe(404);
    expect(again.json().error.code).toBe('snapshot_not_found');
    expect((await call('DELETE', `/v1/snapshots/${snapshots[1]!.id}`)).json().error.code).toBe('snapshot_not_found');
  });

  it('keeps tenant B away from A’s snapshots, answering exactly as for unknown ids', async () => {
    const b = await tenantB();
    const { sbx, snapshots } = await sandboxWithTimeline();
    const mine = await createSandbox(b.key);
    await call('POST', `/v1/sandboxes/${mine.id}/pause`, { key: b.key });
    const snap = snapshots[0]!.id;
    const unknown = 'snap_aaaaaaaaaaaaaaaaaaaa';
    const before = await state();
    for (const [method, url, json] of [
      ['GET', '/v1/snapshots/SNAP', undefined],
      ['DELETE', '/v1/snapshots/SNAP', undefined],
      ['PATCH', '/v1/snapshots/SNAP', { name: 'mine-now' }],
      ['POST', '/v1/forks', { snapshotId: 'SNAP' }],
      ['POST', `/v1/sandboxes/${mine.id}/resume`, { snapshotId: 'SNAP' }],
    ] as const) {
      const withId = (id: string) => (json === undefined ? undefined : 'name' in json ? json : { snapshotId: id });
      const theirs = await call(method, url.replace('SNAP', snap), { key: b.key, json: withId(snap) });
      const none = await call(method, url.replace('SNAP', unknown), { key: b.key, json: withId(unknown) });
      expect(theirs.statusCode, `${method} ${url}`).toBe(404);
      expect(theirs.json().error.code).toBe('snapshot_not_found');
      expect(theirs.json().error.message.replace(snap, 'ID')).toBe(none.json().error.message.replace(unknown, 'ID'));
    }
    for (const [method, url, json] of [
      ['GET', `/v1/sandboxes/${sbx.id}/snapshots`, undefined],
      ['POST', `/v1/sandboxes/${sbx.id}/snapshots`, undefined],
      ['POST', `/v1/sandboxes/${sbx.id}/pause`, undefined],
      ['POST', `/v1/sandboxes/${sbx.id}/resume`, undefined],
      ['POST', `/v1/sandboxes/${sbx.id}/snapshot-interval`, { snapshotIntervalS: 10 }],
      ['POST', '/v1/forks', { sandboxId: sbx.id }],
    ] as const) {
      const res = await call(method, url, { key: b.key, json });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.json().error.code).toBe('sandbox_not_found');
    }
    expect(await state()).toEqual(before);
  });
});

describe('pause and resume', () => {
  it('pauses a running sandbox into a pause snapshot, and refuses to pause it twice', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    expect(res.statusCode, res.body).toBe(200);
    const { sandbox, snapshot } = res.json();
    expect(sandbox).toMatchObject({ id: sbx.id, state: 'paused', pausedAt: at(35) });
    expect(snapshot).toMatchObject({ sandboxId: sbx.id, reason: 'pause', parentId: snapshots[2]!.id, takenAt: at(35) });
    expect(seen.map((r) => `${r.method} ${r.url}`)).toEqual([`POST /internal/v1/sandboxes/${sbx.id}/pause`]);

    const before = await state();
    const again = await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    expect(again.statusCode).toBe(409);
    expect(again.json().error).toMatchObject({ code: 'sandbox_not_running', message: expect.stringContaining('already paused') });
    expect(await state()).toEqual(before);
  });

  it('gives no access to a paused sandbox, and keeps a new timeout for its resume', async () => {
    const sbx = await createSandbox();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    const access = await call('POST', `/v1/sandboxes/${sbx.id}/access`);
    expect(access.statusCode).toBe(409);
    expect(access.json().error).toMatchObject({ code: 'sandbox_not_running', message: expect.stringContaining('resume') });
    seen = [];
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/timeout`, { json: { timeoutS: 3600 } })).json()).toMatchObject({ state: 'paused', timeoutS: 3600 });
    expect(seen).toEqual([]);
    clock.advance(60_000);
    const resumed = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(resumed.json()).toMatchObject({ timeoutS: 3600, expiresAt: toIso(clock.nowMs() + 3_600_000) });
    expect(seen.at(-1)!.body).toMatchObject({ timeoutS: 3600 });
  });

  it('tells the node to boot over the disk on a resume with coldBoot, and only then', async () => {
    const sbx = await createSandbox();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    seen = [];
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { coldBoot: true } })).statusCode).toBe(200);
    expect(seen.at(-1)!.body).toMatchObject({ coldBoot: true });
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { coldBoot: false } })).statusCode).toBe(200);
    expect(seen.at(-1)!.body).not.toHaveProperty('coldBoot');
    const bad = await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { coldBoot: 'yes' } });
    expect([bad.statusCode, bad.json().error.details.field]).toEqual([400, 'coldBoot']);
  });

  it('refuses to pause an ended sandbox, and to resume a running one', async () => {
    const sbx = await createSandbox();
    const running = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(running.statusCode).toBe(409);
    expect(running.json().error).toMatchObject({ code: 'sandbox_running', message: expect.stringContaining('pause it') });
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/pause`)).json().error.code).toBe('sandbox_not_running');
    const ended = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(ended.json().error).toMatchObject({ code: 'sandbox_not_running', message: expect.stringContaining('fork') });
  });

  it('resumes from the latest snapshot by default, with fresh access and a fresh expiry', async () => {
    const { sbx } = await sandboxWithTimeline();
    const { snapshot } = (await call('POST', `/v1/sandboxes/${sbx.id}/pause`)).json();
    clock.advance(60_000);
    seen = [];
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(res.statusCode, res.body).toBe(200);
    const resumed = res.json();
    expect(resumed).toMatchObject({ id: sbx.id, state: 'running', pausedAt: null, expiresAt: toIso(clock.nowMs() + 300_000) });
    expect(verifyAccessToken(resumed.access.token, NODE_KEYS.accessToken, clock.nowMs()).sbx).toBe(sbx.id);
    expect(seen).toMatchObject([
      {
        method: 'POST',
        url: `/internal/v1/sandboxes/${sbx.id}/resume`,
        body: { snapshotId: snapshot.id, tenantId: sbx.tenantId, timeoutS: 300, snapshotIntervalS: 60 },
      },
    ]);
  });

  it('resumes from the latest snapshot at or before `at`, or from a named snapshot', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    for (const [when, expected] of [
      [at(20), snapshots[1]],
      ['2025-06-01T14:00:25+02:00', snapshots[1]],
      [at(29), snapshots[1]],
      [at(10), snapshots[0]],
    ] as const) {
      seen = [];
      expect((await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { at: when } })).statusCode).toBe(200);
      expect((seen[0]!.body as { snapshotId: string }).snapshotId, when).toBe(expected!.id);
      await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    }
    seen = [];
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { snapshotId: snapshots[0]!.id } })).statusCode).toBe(200);
    expect(seen[0]!.body).toMatchObject({ snapshotId: snapshots[0]!.id });
  });

  it('answers snapshot_out_of_range, naming the oldest snapshot, for a time before it', async () => {
    const { sbx } = await sandboxWithTimeline();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    const before = await state();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { at: at(9) } });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({
      code: 'snapshot_out_of_range',
      details: { field: 'at', oldest: at(10) },
      message: expect.stringContaining(at(10)),
    });
    expect(await state()).toEqual(before);
  });

  it('refuses a snapshot of another sandbox as snapshot_not_found', async () => {
    const { sbx } = await sandboxWithTimeline();
    const other = await sandboxWithTimeline();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    const before = await state();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json: { snapshotId: other.snapshots[0]!.id } });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toMatchObject({ code: 'snapshot_not_found', details: { field: 'snapshotId' } });
    expect(await state()).toEqual(before);
  });

  it.each([
    ['both at and snapshotId', { at: '2025-06-01T12:00:20Z', snapshotId: 'snap_x' }, 'at'],
    ['a time that is not one', { at: 'yesterday' }, 'at'],
    ['an unknown field', { when: '2025-06-01T12:00:20Z' }, 'when'],
  ])('refuses a resume with %s, changing nothing', async (_what, json, field) => {
    const { sbx } = await sandboxWithTimeline();
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    const before = await state();
    const res = await call('POST', `/v1/sandboxes/${sbx.id}/resume`, { json });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect(await state()).toEqual(before);
  });
});

describe('POST /v1/forks', () => {
  it('starts count forks from a snapshot, each recorded with its source, shape and interval', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline(adminKey, { memoryMib: 512, vcpus: 2, snapshotIntervalS: 20 });
    const res = await call('POST', '/v1/forks', { json: { snapshotId: snapshots[1]!.id, count: 3, timeoutS: 600, metadata: { run: 'a' } } });
    expect(res.statusCode, res.body).toBe(201);
    const { snapshotId, sandboxes } = res.json();
    expect(snapshotId).toBe(snapshots[1]!.id);
    expect(sandboxes).toHaveLength(3);
    expect(new Set(sandboxes.map((s: { id: string }) => s.id)).size).toBe(3);
    for (const fork of sandboxes) {
      expect(fork).toMatchObject({
        state: 'running',
        template: 'base',
        memoryMib: 512,
        vcpus: 2,
        timeoutS: 600,
        metadata: { run: 'a' },
        snapshotIntervalS: 20,
        sourceSnapshotId: snapshotId,
      });
      expect(fork.id).not.toBe(sbx.id);
      expect(verifyAccessToken(fork.access.token, NODE_KEYS.accessToken, clock.nowMs()).sbx).toBe(fork.id);
      expect((await events.list({ sandboxId: fork.id })).map((e) => e.type)).toEqual(['sandbox.created', 'sandbox.started', 'sandbox.forked']);
      expect((await events.list({ sandboxId: fork.id }))[0]!.data).toMatchObject({
        sourceSnapshotId: snapshotId,
        snapshotIntervalS: 20,
        gatewayId: 'node_test',
      });
    }
    expect(seen).toEqual([
      {
        method: 'POST',
        url: '/internal/v1/forks',
        authorization: `Bearer ${NODE_KEYS.internalBearer.toString('hex')}`,
        body: { snapshotId, tenantId: sbx.tenantId, sandboxes: sandboxes.map((s: { id: string }) => ({ id: s.id, timeoutS: 600, snapshotIntervalS: 20 })) },
      },
    ]);
  });

  it('forks a sandbox at a time, or at its latest snapshot; one fork and a timeout of 300 s by default', async () => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    const atTime = await call('POST', '/v1/forks', { json: { sandboxId: sbx.id, at: at(25) } });
    expect(atTime.statusCode, atTime.body).toBe(201);
    expect(atTime.json().snapshotId).toBe(snapshots[1]!.id);
    expect(atTime.json().sandboxes).toHaveLength(1);
    expect(atTime.json().sandboxes[0]).toMatchObject({ timeoutS: 300, metadata: {} });
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    // An ended sandbox still forks from its timeline.
    expect((await call('POST', '/v1/forks', { json: { sandboxId: sbx.id } })).json().snapshotId).toBe(snapshots[2]!.id);
    const early = await call('POST', '/v1/forks', { json: { sandboxId: sbx.id, at: at(1) } });
    expect(early.json().error).toMatchObject({ code: 'snapshot_out_of_range', details: { field: 'at', oldest: at(10) } });
  });

  it('answers snapshot_not_found for a sandbox without snapshots', async () => {
    const sbx = await createSandbox();
    const res = await call('POST', '/v1/forks', { json: { sandboxId: sbx.id } });
    expect(res.statusCode).toBe(404);
    expect(res.json().error.code).toBe('snapshot_not_found');
  });

  it.each([
    ['count 0', { snapshotId: 'S', count: 0 }, 'count'],
    ['count 17', { snapshotId: 'S', count: 17 }, 'count'],
    ['a fractional count', { snapshotId: 'S', count: 1.5 }, 'count'],
    ['timeoutS 0', { snapshotId: 'S', timeoutS: 0 }, 'timeoutS'],
    ['both snapshotId and sandboxId', { snapshotId: 'S', sandboxId: 'X' }, 'sandboxId'],
    ['neither snapshotId nor sandboxId', { count: 2 }, 'snapshotId'],
    ['at with snapshotId', { snapshotId: 'S', at: '2025-06-01T12:00:20Z' }, 'at'],
    ['an unknown field', { snapshotId: 'S', copies: 2 }, 'copies'],
    ['an empty body', {}, 'snapshotId'],
  ])('refuses %s, changing nothing', async (_what, json, field) => {
    const { sbx, snapshots } = await sandboxWithTimeline();
    const body = JSON.parse(JSON.stringify(json).replace('"S"', JSON.stringify(snapshots[0]!.id)).replace('"X"', JSON.stringify(sbx.id)));
    const before = await state();
    const res = await call('POST', '/v1/forks', { json: body });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect(res.json().error.message).toContain(field);
    expect(await state()).toEqual(before);
  });

  it('answers the forks that started and leaves the others failed', async () => {
    const { snapshots } = await sandboxWithTimeline();
    forkMode = 'partial';
    const res = await call('POST', '/v1/forks', { json: { snapshotId: snapshots[0]!.id, count: 3 } });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().sandboxes).toHaveLength(1);
    const forks = await database.db.selectFrom('sandboxes').selectAll().where('source_snapshot_id', '=', snapshots[0]!.id).execute();
    expect(forks.map((f) => f.state).sort()).toEqual(['failed', 'failed', 'running']);
    for (const f of forks.filter((f) => f.state === 'failed')) {
      // The gateway recorded these failures; the control plane does not add its own.
      expect((await events.list({ sandboxId: f.id })).map((e) => e.type)).toEqual(['sandbox.created', 'sandbox.failed']);
    }
  });

  it('answers the first failure when no fork started', async () => {
    const { snapshots } = await sandboxWithTimeline();
    forkMode = 'none';
    const res = await call('POST', '/v1/forks', { json: { snapshotId: snapshots[0]!.id, count: 2 } });
    expect(res.statusCode).toBe(503);
    expect(res.json().error).toMatchObject({ code: 'capacity_exhausted', message: 'fork 0 found no memory left' });
  });

  it('records every fork as failed when the gateway call fails as a whole, and returns its error', async () => {
    const { snapshots } = await sandboxWithTimeline();
    forkMode = 'down';
    const res = await call('POST', '/v1/forks', { json: { snapshotId: snapshots[0]!.id, count: 2 } });
    expect(res.statusCode).toBe(500);
    expect(res.json().error).toMatchObject({ code: 'snapshot_corrupt', message: 'A chunk failed verification.' });
    const forks = await database.db.selectFrom('sandboxes').selectAll().where('source_snapshot_id', '=', snapshots[0]!.id).execute();
    expect(forks).toHaveLength(2);
    expect(forks.map((f) => [f.state, f.failure_reason])).toEqual([
      ['failed', 'A chunk failed verification.'],
      ['failed', 'A chunk failed verification.'],
    ]);
  });
});

const TOKEN = 'ghp_s3cr3t-value-that-must-never-leak';
const githubToken = { value: TOKEN, hosts: ['api.github.com', '*.githubusercontent.example'], header: 'Authorization', format: 'Bearer {value}' };

/** Everything a rejected secret write must leave alone. */
async function secretState() {
  return { ...(await state()), secrets: await database.db.selectFrom('secrets').selectAll().orderBy('name').execute() };
}

/** The value must not be in any response, event or stored row, in clear or as base64. */
async function expectNowhere(value: string) {
  const everything = [
    ...bodies,
    JSON.stringify(await events.list()),
    JSON.stringify(await database.db.selectFrom('secrets').selectAll().execute()),
    JSON.stringify(await database.db.selectFrom('sandboxes').selectAll().execute()),
    JSON.stringify(seen),
  ].join('\n');
  expect(everything).not.toContain(value);
  expect(everything).not.toContain(Buffer.from(value).toString('base64'));
}

describe('secrets', () => {
  it('creates (201), replaces (200), lists and removes a secret, recording each change without its value', async () => {
    const created = await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json()).toEqual({
      name: 'GITHUB_TOKEN',
      hosts: githubToken.hosts,
      header: 'Authorization',
      format: 'Bearer {value}',
      bodyContentTypes: [],
      approval: 'none',
      allowPlaintext: false,
      allowUpgrade: false,
      createdAt: at(0),
      updatedAt: at(0),
    });
    clock.advance(5_000);
    const replaced = await call('PUT', '/v1/secrets/GITHUB_TOKEN', {
      json: { value: 'another-value', hosts: ['api.github.com'], bodyContentTypes: ['application/json'], approval: 'required' },
    });
    expect(replaced.statusCode, replaced.body).toBe(200);
    expect(replaced.json()).toMatchObject({
      hosts: ['api.github.com'],
      header: null,
      format: null,
      bodyContentTypes: ['application/json'],
      approval: 'required',
      createdAt: at(0),
      updatedAt: at(5),
    });
    await call('PUT', '/v1/secrets/NPM_TOKEN', { json: { value: 'npm_abcdef', hosts: ['registry.npmjs.org'], header: 'Authorization' } });

    const list = await call('GET', '/v1/secrets');
    expect(list.statusCode).toBe(200);
    expect(list.json().secrets.map((x: { name: string; format: string | null }) => [x.name, x.format])).toEqual([
      ['GITHUB_TOKEN', null],
      ['NPM_TOKEN', '{value}'],
    ]);

    expect((await call('DELETE', '/v1/secrets/NPM_TOKEN')).statusCode).toBe(204);
    const again = await call('DELETE', '/v1/secrets/NPM_TOKEN');
    expect(again.statusCode).toBe(404);
    expect(again.json().error).toMatchObject({ code: 'secret_not_found', details: { field: 'name' } });
    expect((await call('GET', '/v1/secrets')).json().secrets.map((x: { name: string }) => x.name)).toEqual(['GITHUB_TOKEN']);

    const recorded = (await events.list()).filter((e) => e.type.startsWith('secret.'));
    expect(recorded.map((e) => [e.type, e.sandboxId, e.data])).toEqual([
      ['secret.set', null, { name: 'GITHUB_TOKEN', hosts: githubToken.hosts, header: 'Authorization', approval: 'none' }],
      ['secret.set', null, { name: 'GITHUB_TOKEN', hosts: ['api.github.com'], header: null, approval: 'required' }],
      ['secret.set', null, { name: 'NPM_TOKEN', hosts: ['registry.npmjs.org'], header: 'Authorization', approval: 'none' }],
      ['secret.removed', null, { name: 'NPM_TOKEN' }],
    ]);
    expect((await events.verifyChain()).ok).toBe(true);
    for (const v of [TOKEN, 'another-value', 'npm_abcdef']) await expectNowhere(v);
  });

  it('keeps each tenant to its own secrets', async () => {
    const b = await tenantB();
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    expect((await call('GET', '/v1/secrets', { key: b.key })).json().secrets).toEqual([]);
    const del = await call('DELETE', '/v1/secrets/GITHUB_TOKEN', { key: b.key });
    expect(del.json().error.code).toBe('secret_not_found');
    expect((await call('PUT', '/v1/secrets/GITHUB_TOKEN', { key: b.key, json: { ...githubToken, value: 'tenant-b-value' } })).statusCode).toBe(201);
    const store = new SecretStore({ db: database.db, keys, events, clock });
    const [tenantA] = await database.db.selectFrom('tenants').select('id').where('name', '=', 'default').execute();
    expect((await (await store.resolve(tenantA!.id, 'GITHUB_TOKEN')).value()).reveal()).toBe(TOKEN);
    expect((await (await store.resolve(b.tenantId, 'GITHUB_TOKEN')).value()).reveal()).toBe('tenant-b-value');
  });

  // Only PostgreSQL has two writers to race: two SQLite handles in one process would be two databases.
  it.runIf(process.env.SANDGLASS_TEST_DIALECT === 'postgres')(
    'lets two control planes set the same new secret at once: one creates it, the other replaces it',
    async () => {
      const tenantId = (await database.db.selectFrom('tenants').select('id').executeTakeFirstOrThrow()).id;
      const other = await openDatabase({ url: postgresUrl! });
      try {
        const stores = [database.db, other.db].map((db) => new SecretStore({ db, keys, events: new EventLog(db), clock }));
        const results = await Promise.all(stores.map((store, i) => store.set(tenantId, { ...githubToken, name: 'GITHUB_TOKEN', value: `value-${i}` })));
        expect(results.map((r) => r.created).sort()).toEqual([false, true]);
        expect(await events.list({ types: ['secret.set'] })).toHaveLength(2);
      } finally {
        await other.close();
      }
    },
  );

  it('resolves the configuration, and the value only when value() is called, as a Redacted', async () => {
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: { ...githubToken, bodyContentTypes: ['text/*'], approval: 'required' } });
    const tenantId = (await database.db.selectFrom('tenants').select('id').executeTakeFirstOrThrow()).id;
    const store = new SecretStore({ db: database.db, keys, events, clock });
    const resolved = await store.resolve(tenantId, 'GITHUB_TOKEN');
    expect(resolved).toMatchObject({
      name: 'GITHUB_TOKEN',
      hosts: githubToken.hosts,
      header: 'Authorization',
      format: 'Bearer {value}',
      bodyContentTypes: ['text/*'],
      approval: 'required',
    });
    const value = await resolved.value();
    expect(value.reveal()).toBe(TOKEN);
    expect(String(value)).toBe('«redacted»');
    expect(JSON.stringify({ resolved, value })).not.toContain(TOKEN);

    // Decrypted at the moment of use: a replaced value is what the next use gets; a removed secret is gone.
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: { ...githubToken, value: 'rotated-value' } });
    expect((await resolved.value()).reveal()).toBe('rotated-value');
    await call('DELETE', '/v1/secrets/GITHUB_TOKEN');
    await expect(resolved.value()).rejects.toMatchObject({ code: 'secret_not_found' });
    await expect(store.resolve(tenantId, 'GITHUB_TOKEN')).rejects.toMatchObject({ code: 'secret_not_found' });
  });

  it('binds each sealed value to its tenant and name: a value moved to another row does not decrypt', async () => {
    await call('PUT', '/v1/secrets/A_TOKEN', { json: { value: 'value-of-a', hosts: ['a.example'] } });
    await call('PUT', '/v1/secrets/B_TOKEN', { json: { value: 'value-of-b', hosts: ['b.example'] } });
    const rows = await database.db.selectFrom('secrets').selectAll().orderBy('name').execute();
    await database.db.updateTable('secrets').set({ value_sealed: rows[0]!.value_sealed }).where('name', '=', 'B_TOKEN').execute();
    const store = new SecretStore({ db: database.db, keys, events, clock });
    const err = await (await store.resolve(rows[1]!.tenant_id, 'B_TOKEN')).value().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'internal' });
    expect(String((err as Error).message)).not.toContain('value-of-a');
  });

  it('never logs a value, even at trace level and on refused requests', async () => {
    let log = '';
    const sink = new Writable({ write: (chunk, _enc, done) => ((log += String(chunk)), done()) });
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
      nodeSecret: SECRET,
      clock,
      logger: pino({ level: 'trace' }, sink),
      keys,
    });
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: { ...githubToken, value: `${TOKEN}\n` } });
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: { ...githubToken, extra: TOKEN } });
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { payload: `{"value": "${TOKEN}"`, headers: { 'content-type': 'application/json' } });
    // Node's JSON.parse quotes the text around an unexpected token (here, the value); fastify's message does not.
    const malformed = await call('PUT', '/v1/secrets/GITHUB_TOKEN', { payload: `{"value": ${TOKEN}}`, headers: { 'content-type': 'application/json' } });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error).toMatchObject({ code: 'malformed_json', requestId: expect.stringMatching(/^req_/) });
    expect(malformed.body).not.toContain(TOKEN.slice(0, 8));
    expect(log).not.toContain(TOKEN.slice(0, 8));
    await createSandbox(adminKey, { secrets: ['GITHUB_TOKEN'] });
    expect(log).toContain('GITHUB_TOKEN');
    expect(log).not.toContain(TOKEN);
    await expectNowhere(TOKEN);
  });

  it('answers key_unavailable, storing nothing, when the deployment has no key provider', async () => {
    await cp.close();
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: singleGateway({ id: 'node_test', url: gatewayUrl, internalUrl: gatewayUrl }),
      nodeSecret: SECRET,
      clock,
      logger: createLogger('test', 'silent'),
    });
    const before = await secretState();
    const res = await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    expect(res.statusCode).toBe(503);
    expect(res.json().error.code).toBe('key_unavailable');
    expect(await secretState()).toEqual(before);
  });

  it.each(['github_token', '1TOKEN', 'A-B', 'A.B', 'X'.repeat(65)])('refuses the name %j, changing nothing', async (name) => {
    const before = await secretState();
    const res = await call('PUT', `/v1/secrets/${name}`, { json: githubToken });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field: 'params.name' } });
    expect(await secretState()).toEqual(before);
  });

  it('takes env-style names', async () => {
    for (const name of ['_', 'A', 'GITHUB_TOKEN', 'X1_2', `A${'B'.repeat(63)}`]) {
      expect((await call('PUT', `/v1/secrets/${name}`, { json: githubToken })).statusCode, name).toBe(201);
    }
  });

  it.each([
    ['a wildcard over everything', { hosts: ['*'] }, 'policy_invalid', 'hosts[0]'],
    ['a wildcard over a public suffix', { hosts: ['api.github.com', '*.com'] }, 'policy_invalid', 'hosts[1]'],
    ['a port out of range', { hosts: ['api.github.com:70000'] }, 'policy_invalid', 'hosts[0]'],
    ['a port that is not a number', { hosts: ['api.github.com:https'] }, 'policy_invalid', 'hosts[0]'],
    ['a URL', { hosts: ['https://api.github.com'] }, 'policy_invalid', 'hosts[0]'],
    ['a path', { hosts: ['a.example', 'api.github.com/repos'] }, 'policy_invalid', 'hosts[1]'],
    ['a method', { hosts: ['api.github.com GET'] }, 'policy_invalid', 'hosts[0]'],
    ['no hosts', { hosts: [] }, 'invalid_argument', 'hosts'],
    ['33 hosts', { hosts: Array.from({ length: 33 }, (_, i) => `h${i}.example`) }, 'invalid_argument', 'hosts'],
    ['no value', { value: undefined }, 'invalid_argument', 'value'],
    ['an empty value', { value: '' }, 'invalid_argument', 'value'],
    ['a value of 3 characters', { value: 'abc' }, 'invalid_argument', 'value'],
    ['a value over 64 KiB of UTF-8', { value: 'é'.repeat(32769) }, 'invalid_argument', 'value'],
    ['a value over 64 Ki characters', { value: 'x'.repeat(65537) }, 'invalid_argument', 'value'],
    ['a header value with a line break', { value: 'abcd\r\nX-Evil: 1' }, 'invalid_argument', 'value'],
    ['a header that is no token', { header: 'Bad Header' }, 'invalid_argument', 'header'],
    ['a header the proxy owns', { header: 'Host' }, 'invalid_argument', 'header'],
    ['a format without {value}', { format: 'Bearer token' }, 'invalid_argument', 'format'],
    ['a format without a header', { header: undefined }, 'invalid_argument', 'format'],
    ['a format with a line break', { format: 'Bearer {value}\r\nX: y' }, 'invalid_argument', 'format'],
    ['a body type that is no media type', { bodyContentTypes: ['json'] }, 'invalid_argument', 'bodyContentTypes.0'],
    ['an unknown approval', { approval: 'maybe' }, 'invalid_argument', 'approval'],
    ['an unknown field', { scope: 'all' }, 'invalid_argument', 'scope'],
  ])('refuses %s, changing nothing', async (_what, change, code, field) => {
    const before = await secretState();
    const json = JSON.parse(JSON.stringify({ ...githubToken, ...change }));
    const res = await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error).toMatchObject({ code, details: { field } });
    expect(res.json().error.message).toContain(field);
    expect(await secretState()).toEqual(before);
    const value = (json as { value?: string }).value;
    if (value !== undefined && value.length >= 4) expect(res.body).not.toContain(value);
  });
});

describe('network policy and secrets of a sandbox', () => {
  it('creates with a policy and secrets: passed to the gateway, recorded, and shown on the sandbox', async () => {
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    await call('PUT', '/v1/secrets/PYPI_TOKEN', { json: { value: 'pypi-value', hosts: ['upload.pypi.org'] } });
    seen = [];
    const network = { allow: ['api.github.com', '*.pypi.org', 'example.com:8443', 'api.github.com GET /repos'], deny: ['evil.pypi.org'] };
    const sbx = await createSandbox(adminKey, { network, secrets: ['GITHUB_TOKEN', 'PYPI_TOKEN'] });
    expect(sbx).toMatchObject({ network, secrets: ['GITHUB_TOKEN', 'PYPI_TOKEN'] });
    expect(seen[0]!.body).toEqual({
      id: sbx.id,
      tenantId: sbx.tenantId,
      template: 'base',
      memoryMib: 256,
      vcpus: 1,
      timeoutS: 300,
      snapshotIntervalS: 60,
      network,
      secrets: ['GITHUB_TOKEN', 'PYPI_TOKEN'],
    });
    expect((await events.list({ sandboxId: sbx.id }))[0]!.data).toMatchObject({ network, secrets: ['GITHUB_TOKEN', 'PYPI_TOKEN'] });
    expect((await call('GET', `/v1/sandboxes/${sbx.id}`)).json()).toMatchObject({ network, secrets: ['GITHUB_TOKEN', 'PYPI_TOKEN'] });
    await expectNowhere(TOKEN);
    await expectNowhere('pypi-value');
  });

  it('has no network and no secrets unless asked; allow alone means deny nothing', async () => {
    const none = await createSandbox();
    expect(none).toMatchObject({ network: null, secrets: [] });
    expect(seen[0]!.body).not.toHaveProperty('network');
    expect(seen[0]!.body).not.toHaveProperty('secrets');
    expect((await events.list({ sandboxId: none.id }))[0]!.data).toMatchObject({ network: null, secrets: [] });
    seen = [];
    const allowOnly = await createSandbox(adminKey, { network: { allow: ['api.github.com'] } });
    expect(allowOnly).toMatchObject({ network: { allow: ['api.github.com'], deny: [] } });
    expect(seen[0]!.body).toMatchObject({ network: { allow: ['api.github.com'], deny: [] } });
  });

  it('takes secrets without a network policy: the placeholders exist but nothing is reachable', async () => {
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    const sbx = await createSandbox(adminKey, { secrets: ['GITHUB_TOKEN'] });
    expect(sbx).toMatchObject({ network: null, secrets: ['GITHUB_TOKEN'] });
    expect(seen[0]!.body).toMatchObject({ secrets: ['GITHUB_TOKEN'] });
    expect(seen[0]!.body).not.toHaveProperty('network');
  });

  it.each([
    ['an allow rule for every host', { network: { allow: ['*'] } }, 'policy_invalid', 'network.allow[0]'],
    ['a wildcard over .com', { network: { allow: ['api.github.com', '*.com'] } }, 'policy_invalid', 'network.allow[1]'],
    ['a wildcard over a shared hosting suffix', { network: { allow: ['*.github.io'] } }, 'policy_invalid', 'network.allow[0]'],
    ['a bad port', { network: { allow: ['api.github.com:0'] } }, 'policy_invalid', 'network.allow[0]'],
    ['a port past 65535', { network: { allow: ['a.example', 'b.example', 'api.github.com:65536'] } }, 'policy_invalid', 'network.allow[2]'],
    ['a malformed deny rule', { network: { deny: ['bad host name!'] } }, 'policy_invalid', 'network.deny[0]'],
    ['a rule that is a URL', { network: { allow: ['https://api.github.com/'] } }, 'policy_invalid', 'network.allow[0]'],
    ['rules that are not a list', { network: { allow: 'api.github.com' } }, 'invalid_argument', 'network.allow'],
    ['an empty rule', { network: { allow: [''] } }, 'invalid_argument', 'network.allow.0'],
    ['an unknown policy field', { network: { block: ['x.example'] } }, 'invalid_argument', 'network.block'],
    ['a secret name that is not one', { secrets: ['github-token'] }, 'invalid_argument', 'secrets.0'],
    ['the same secret twice', { secrets: ['GITHUB_TOKEN', 'GITHUB_TOKEN'] }, 'invalid_argument', 'secrets[1]'],
    ['an unknown secret', { secrets: ['GITHUB_TOKEN', 'NOPE'] }, 'secret_not_found', 'secrets[1]'],
  ])('refuses %s, changing nothing', async (_what, json, code, field) => {
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    seen = [];
    const before = await state();
    const res = await call('POST', '/v1/sandboxes', { json });
    expect(res.statusCode, res.body).toBe(code === 'secret_not_found' ? 404 : 400);
    expect(res.json().error).toMatchObject({ code, details: { field } });
    expect(res.json().error.message).toContain(field);
    expect(await state()).toEqual(before);
  });

  it('answers secret_not_found for another tenant’s secret, as for an unknown one', async () => {
    const b = await tenantB();
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    const res = await call('POST', '/v1/sandboxes', { key: b.key, json: { secrets: ['GITHUB_TOKEN'] } });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toMatchObject({ code: 'secret_not_found', details: { field: 'secrets[0]' } });
  });

  it('changes the policy of a running sandbox through the gateway, then the log', async () => {
    const sbx = await createSandbox(adminKey, { network: { allow: ['api.github.com'] } });
    seen = [];
    clock.advance(1_000);
    const network = { allow: ['api.github.com', '*.pypi.org'], deny: ['evil.pypi.org'] };
    const res = await call('PUT', `/v1/sandboxes/${sbx.id}/network`, { json: network });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ network });
    expect(seen).toMatchObject([{ method: 'PUT', url: `/internal/v1/sandboxes/${sbx.id}/network`, body: network }]);
    expect((await events.list({ sandboxId: sbx.id })).at(-1)).toMatchObject({ type: 'sandbox.network_changed', data: network });
    expect((await call('GET', `/v1/sandboxes/${sbx.id}`)).json().network).toEqual(network);

    // Turning the network off is an empty policy; the projection rebuilt from the log agrees.
    expect((await call('PUT', `/v1/sandboxes/${sbx.id}/network`, { json: {} })).json()).toEqual({ network: { allow: [], deny: [] } });
    const live = await database.db.selectFrom('sandboxes').selectAll().orderBy('id').execute();
    await events.rebuildProjections();
    expect(await database.db.selectFrom('sandboxes').selectAll().orderBy('id').execute()).toEqual(live);
  });

  it('refuses a bad policy before calling the gateway, and a sandbox that is not running', async () => {
    const sbx = await createSandbox(adminKey, { network: { allow: ['api.github.com'] } });
    const before = await state();
    const bad = await call('PUT', `/v1/sandboxes/${sbx.id}/network`, { json: { allow: ['api.github.com', '*'] } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error).toMatchObject({ code: 'policy_invalid', details: { field: 'network.allow[1]' } });
    expect(await state()).toEqual(before);

    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    const paused = await call('PUT', `/v1/sandboxes/${sbx.id}/network`, { json: { allow: ['x.example'] } });
    expect(paused.statusCode).toBe(409);
    expect(paused.json().error.code).toBe('sandbox_not_running');
    const b = await tenantB();
    const theirs = await call('PUT', `/v1/sandboxes/${sbx.id}/network`, { key: b.key, json: { allow: ['x.example'] } });
    expect(theirs.json().error.code).toBe('sandbox_not_found');
  });

  it('records a fork with its source’s policy and secrets', async () => {
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    const { sbx, snapshots } = await sandboxWithTimeline(adminKey, { network: { allow: ['api.github.com'] }, secrets: ['GITHUB_TOKEN'] });
    const res = await call('POST', '/v1/forks', { json: { snapshotId: snapshots[0]!.id } });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().sandboxes[0]).toMatchObject({ network: { allow: ['api.github.com'], deny: [] }, secrets: ['GITHUB_TOKEN'] });
    expect(res.json().sandboxes[0].id).not.toBe(sbx.id);
  });

  it('resumes a paused sandbox with the policy and secrets it had', async () => {
    await call('PUT', '/v1/secrets/GITHUB_TOKEN', { json: githubToken });
    const sbx = await createSandbox(adminKey, { network: { allow: ['api.github.com'] }, secrets: ['GITHUB_TOKEN'] });
    await call('PUT', `/v1/sandboxes/${sbx.id}/network`, { json: { allow: ['api.github.com', 'pypi.org'] } });
    await call('POST', `/v1/sandboxes/${sbx.id}/pause`);
    seen = [];
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/resume`)).statusCode).toBe(200);
    expect(seen[0]!.body).toMatchObject({ network: { allow: ['api.github.com', 'pypi.org'], deny: [] }, secrets: ['GITHUB_TOKEN'] });
  });
});

describe('approvals', () => {
  const request = (sandboxId: string, requestId: string) => ({
    requestId,
    sandboxId,
    secret: 'GITHUB_TOKEN',
    host: 'api.github.com',
    port: 443,
    method: 'POST',
    path: '/repos/acme/app/issues',
    requestedAt: at(1),
    expiresAt: at(301),
  });
  const APR = 'apr_aaaaaaaaaaaaaaaaaaaa';
  const APR2 = 'apr_bbbbbbbbbbbbbbbbbbbb';

  it('lists the gateway’s pending requests and passes decisions through', async () => {
    const sbx = await createSandbox();
    pendingApprovals.set(sbx.id, [request(sbx.id, APR), request(sbx.id, APR2)]);
    seen = [];
    const list = await call('GET', `/v1/sandboxes/${sbx.id}/approvals`);
    expect(list.statusCode, list.body).toBe(200);
    expect(list.json()).toEqual({ approvals: [request(sbx.id, APR), request(sbx.id, APR2)] });

    const approve = await call('POST', `/v1/approvals/${APR}`, { json: { sandboxId: sbx.id, decision: 'approve', ttlS: 600 } });
    expect(approve.statusCode, approve.body).toBe(204);
    const deny = await call('POST', `/v1/approvals/${APR2}`, { json: { sandboxId: sbx.id, decision: 'deny' } });
    expect(deny.statusCode, deny.body).toBe(204);
    expect(seen).toMatchObject([
      { method: 'GET', url: `/internal/v1/sandboxes/${sbx.id}/approvals` },
      { method: 'POST', url: `/internal/v1/sandboxes/${sbx.id}/approvals/${APR}`, body: { decision: 'approve', ttlS: 600 } },
      { method: 'POST', url: `/internal/v1/sandboxes/${sbx.id}/approvals/${APR2}`, body: { decision: 'deny' } },
    ]);
    expect(seen[2]!.body).toEqual({ decision: 'deny' });

    const gone = await call('POST', `/v1/approvals/${APR}`, { json: { sandboxId: sbx.id, decision: 'approve' } });
    expect(gone.statusCode).toBe(404);
    expect(gone.json().error.code).toBe('approval_not_found');
  });

  it('answers no approvals for a sandbox that does not run, without asking the gateway', async () => {
    const sbx = await createSandbox();
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    seen = [];
    expect((await call('GET', `/v1/sandboxes/${sbx.id}/approvals`)).json()).toEqual({ approvals: [] });
    const res = await call('POST', `/v1/approvals/${APR}`, { json: { sandboxId: sbx.id, decision: 'approve' } });
    expect(res.statusCode).toBe(404);
    expect(res.json().error.code).toBe('approval_not_found');
    expect(seen).toEqual([]);
  });

  it('keeps tenant B away from A’s approvals', async () => {
    const b = await tenantB();
    const sbx = await createSandbox();
    pendingApprovals.set(sbx.id, [request(sbx.id, APR)]);
    seen = [];
    expect((await call('GET', `/v1/sandboxes/${sbx.id}/approvals`, { key: b.key })).json().error.code).toBe('sandbox_not_found');
    expect((await call('POST', `/v1/approvals/${APR}`, { key: b.key, json: { sandboxId: sbx.id, decision: 'approve' } })).json().error.code).toBe(
      'sandbox_not_found',
    );
    expect(seen).toEqual([]);
    expect(pendingApprovals.get(sbx.id)).toHaveLength(1);
  });

  it.each([
    ['ttlS with deny', APR, { decision: 'deny', ttlS: 60 }, 'ttlS'],
    ['ttlS 0', APR, { decision: 'approve', ttlS: 0 }, 'ttlS'],
    ['ttlS over a day', APR, { decision: 'approve', ttlS: 86401 }, 'ttlS'],
    ['an unknown decision', APR, { decision: 'maybe' }, 'decision'],
    ['no sandboxId', APR, { decision: 'approve', sandboxId: undefined }, 'sandboxId'],
    ['a request id that is not one', 'req_1', { decision: 'approve' }, 'params.requestId'],
  ])('refuses %s, changing nothing', async (_what, requestId, json, field) => {
    const sbx = await createSandbox();
    pendingApprovals.set(sbx.id, [request(sbx.id, APR)]);
    const before = await state();
    const res = await call('POST', `/v1/approvals/${requestId}`, { json: JSON.parse(JSON.stringify({ sandboxId: sbx.id, ...json })) });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect(await state()).toEqual(before);
    expect(pendingApprovals.get(sbx.id)).toHaveLength(1);
  });
});

describe('egress events', () => {
  it('filters a sandbox’s events by type or family, leaving the unfiltered list as it was', async () => {
    const sbx = await createSandbox();
    const record = (type: string, data: Record<string, unknown> = {}) => events.append({ type, tenantId: sbx.tenantId, sandboxId: sbx.id, data }, { clock });
    await record('egress.request', { host: 'api.github.com', allowed: true, secrets: ['GITHUB_TOKEN'] });
    await record('command.started');
    await record('secret.approval_requested', { requestId: 'apr_x', secret: 'GITHUB_TOKEN' });
    await record('egressx.other');
    await record('egress.exchange', { status: 200 });
    const types = async (query: string) => (await call('GET', `/v1/sandboxes/${sbx.id}/events${query}`)).json().events.map((e: { type: string }) => e.type);
    expect(await types('?type=egress,secret')).toEqual(['egress.request', 'secret.approval_requested', 'egress.exchange']);
    expect(await types('?type=egress')).toEqual(['egress.request', 'egress.exchange']);
    expect(await types('?type=sandbox.created,command')).toEqual(['sandbox.created', 'command.started']);
    expect(await types('')).toEqual([
      'sandbox.created',
      'sandbox.started',
      'egress.request',
      'command.started',
      'secret.approval_requested',
      'egressx.other',
      'egress.exchange',
    ]);
    const page = (await call('GET', `/v1/sandboxes/${sbx.id}/events?type=egress,secret&limit=1`)).json().events;
    expect(page.map((e: { type: string }) => e.type)).toEqual(['egress.request']);
    const next = (await call('GET', `/v1/sandboxes/${sbx.id}/events?type=egress,secret&afterSeq=${page[0].seq}`)).json().events;
    expect(next.map((e: { type: string }) => e.type)).toEqual(['secret.approval_requested', 'egress.exchange']);
    for (const bad of ['EGRESS', 'egress,', 'egress.*', 'a%20b']) {
      const res = await call('GET', `/v1/sandboxes/${sbx.id}/events?type=${bad}`);
      expect(res.json().error, bad).toMatchObject({ code: 'invalid_argument', details: { field: 'querystring.type' } });
    }
  });
});
