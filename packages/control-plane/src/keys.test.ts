// API keys over the real HTTP edge and a real SQLite database: roles, tenant isolation, listing, expiry, revocation, events.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { createLogger, derefSchema, loadOpenApi, ManualClock } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { bootstrapLocal, CONTROL_PLANE_SPEC, createControlPlane, generateApiKey, hashApiKey, issueApiKey, singleGateway, type ControlPlane } from './index.js';

// No route these tests call reaches a gateway; the address is one nothing listens on.
const NO_GATEWAY = { id: 'node_none', url: 'http://127.0.0.1:9', internalUrl: 'http://127.0.0.1:9' };

let database: Database;
let events: EventLog;
let clock: ManualClock;
let cp: ControlPlane;
let home: string;
let operatorKey: string;
let violations: string[];

const spec = loadOpenApi(CONTROL_PLANE_SPEC);
const ajv = addFormats.default(new Ajv2020({ strict: false, allErrors: true }));

function checkAgainstSpec(method: string, url: string, status: number, body: string): void {
  const pathname = url.split('?')[0]!;
  const template = Object.keys(spec.paths).find((t) => new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(pathname));
  const where = `${method} ${pathname} → ${status}`;
  if (!template) return void violations.push(`${where}: path not in spec`);
  const op = spec.paths[template]![method.toLowerCase()] as
    | { responses: Record<string, { $ref?: string; content?: Record<string, { schema: unknown }> }> }
    | undefined;
  const declared = op?.responses[String(status)];
  if (!declared) return void violations.push(`${where}: not in spec`);
  const resolved = declared.$ref
    ? (spec as unknown as { components: { responses: Record<string, typeof declared> } }).components.responses[declared.$ref.split('/').pop()!]!
    : declared;
  const schema = resolved.content?.['application/json']?.schema;
  if (!schema) return void (body === '' || violations.push(`${where}: a body where the spec declares none`));
  if (!ajv.validate(derefSchema(spec, schema) as object, JSON.parse(body))) violations.push(`${where}: ${ajv.errorsText(ajv.errors)} in ${body.slice(0, 300)}`);
}

async function call(method: 'GET' | 'POST' | 'DELETE', url: string, key: string, json?: unknown) {
  const res = await cp.app.inject({ method, url, headers: { authorization: `Bearer ${key}` }, ...(json === undefined ? {} : { payload: json as object }) });
  checkAgainstSpec(method, url, res.statusCode, res.body);
  return { status: res.statusCode, body: res.body === '' ? undefined : (res.json() as Record<string, any>) };
}

/** A tenant made by the operator, with its first admin key and a member key made by that admin. */
async function tenant(name: string) {
  const t = await call('POST', '/v1/tenants', operatorKey, { name });
  expect(t.status).toBe(201);
  const admin = await call('POST', `/v1/tenants/${t.body!.id}/api-keys`, operatorKey, { name: 'first admin', role: 'admin' });
  expect(admin.status, JSON.stringify(admin.body)).toBe(201);
  const member = await call('POST', '/v1/api-keys', admin.body!.key, { name: 'ci' });
  expect(member.status, JSON.stringify(member.body)).toBe(201);
  return {
    id: t.body!.id as string,
    admin: admin.body!.key as string,
    adminId: admin.body!.id as string,
    member: member.body!.key as string,
    memberId: member.body!.id as string,
  };
}

/** Everything a refused request must leave alone (the caller's own last use aside: it did authenticate). */
async function state() {
  const keys = await database.db.selectFrom('api_keys').selectAll().orderBy('id').execute();
  return { keys: keys.map(({ last_used_at: _, ...k }) => k), events: await events.list() };
}

const byId = <K extends { id: string }>(keys: K[]): K[] => [...keys].sort((x, y) => x.id.localeCompare(y.id));

beforeEach(async () => {
  violations = [];
  clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
  database = await openDatabase({ url: 'sqlite::memory:' });
  events = new EventLog(database.db);
  home = mkdtempSync(join(tmpdir(), 'sg-keys-'));
  operatorKey = await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock });
  const gateway = NO_GATEWAY;
  cp = createControlPlane({
    db: database.db,
    events,
    gateways: singleGateway(gateway),
    nodeSecret: Buffer.alloc(32, 7),
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

describe('roles', () => {
  it('makes the local key the operator of tenant default, which creates tenants and their first admin key', async () => {
    const own = await call('GET', '/v1/api-keys', operatorKey);
    expect(own.status).toBe(200);
    expect(own.body!.apiKeys).toEqual([
      expect.objectContaining({ role: 'operator', name: 'local operator', prefix: operatorKey.slice(0, 10), createdByKeyId: null }),
    ]);
    const a = await tenant('a');
    const listed = await call('GET', `/v1/api-keys?tenantId=${a.id}`, operatorKey);
    expect(byId(listed.body!.apiKeys as { id: string; role: string }[]).map((k) => [k.id, k.role])).toEqual(
      byId([
        { id: a.adminId, role: 'admin' },
        { id: a.memberId, role: 'member' },
      ]).map((k) => [k.id, k.role]),
    );
    // The operator still acts in its own tenant for sandboxes.
    expect((await call('GET', '/v1/sandboxes', operatorKey)).status).toBe(200);
  });

  it('keeps tenant creation to the operator', async () => {
    const a = await tenant('a');
    const before = await state();
    for (const key of [a.admin, a.member]) {
      const res = await call('POST', '/v1/tenants', key, { name: 'c' });
      expect([res.status, res.body!.error.code]).toEqual([403, 'permission_denied']);
    }
    expect(await state()).toEqual(before);
  });

  it('lets a member key manage no keys at all', async () => {
    const a = await tenant('a');
    const before = await state();
    for (const [method, url, json] of [
      ['POST', '/v1/api-keys', {}],
      ['POST', `/v1/tenants/${a.id}/api-keys`, {}],
      ['GET', '/v1/api-keys', undefined],
      ['DELETE', `/v1/api-keys/${a.adminId}`, undefined],
      ['DELETE', `/v1/api-keys/${a.memberId}`, undefined],
    ] as const) {
      const res = await call(method, url, a.member, json);
      expect([method, url, res.status, res.body!.error.code]).toEqual([method, url, 403, 'permission_denied']);
    }
    expect(await state()).toEqual(before);
  });
});

describe('tenant isolation', () => {
  it('keeps a tenant admin to its own tenant: another tenant answers as an unknown one, and nothing changes', async () => {
    const a = await tenant('a');
    const b = await tenant('b');
    const before = await state();
    const attempts = [
      ['POST', `/v1/tenants/${b.id}/api-keys`, { role: 'admin' }, 404, 'tenant_not_found'],
      ['POST', '/v1/api-keys', { tenantId: b.id, role: 'member' }, 404, 'tenant_not_found'],
      ['GET', `/v1/api-keys?tenantId=${b.id}`, undefined, 404, 'tenant_not_found'],
      ['DELETE', `/v1/api-keys/${b.adminId}`, undefined, 404, 'api_key_not_found'],
      ['DELETE', `/v1/api-keys/${b.memberId}`, undefined, 404, 'api_key_not_found'],
    ] as const;
    for (const [method, url, json, status, code] of attempts) {
      const res = await call(method, url, a.admin, json);
      expect([method, url, res.status, res.body!.error.code]).toEqual([method, url, status, code]);
    }
    // Exactly as for ids that do not exist.
    expect((await call('POST', '/v1/tenants/ten_nope/api-keys', a.admin, {})).body!.error.code).toBe('tenant_not_found');
    expect((await call('DELETE', '/v1/api-keys/key_nope', a.admin)).body!.error.code).toBe('api_key_not_found');
    expect(await state()).toEqual(before);
    // B's keys still work.
    expect((await call('GET', '/v1/sandboxes', b.member)).status).toBe(200);
  });

  it('never lets a tenant admin mint or revoke an operator key', async () => {
    const a = await tenant('a');
    const before = await state();
    for (const [url, json] of [
      ['/v1/api-keys', { role: 'operator' }],
      [`/v1/tenants/${a.id}/api-keys`, { role: 'operator' }],
    ] as const) {
      const res = await call('POST', url, a.admin, json);
      expect([url, res.status, res.body!.error.code]).toEqual([url, 403, 'permission_denied']);
    }
    const operatorId = (await call('GET', '/v1/api-keys', operatorKey)).body!.apiKeys[0].id as string;
    expect((await call('DELETE', `/v1/api-keys/${operatorId}`, a.admin)).body!.error.code).toBe('api_key_not_found');
    expect(await state()).toEqual(before);
  });

  it('keeps even a default-tenant admin from revoking the operator key', async () => {
    const defaultAdmin = await call('POST', '/v1/api-keys', operatorKey, { role: 'admin' });
    const operatorId = (await call('GET', '/v1/api-keys', operatorKey)).body!.apiKeys.find((k: { role: string }) => k.role === 'operator').id as string;
    const before = await state();
    const res = await call('DELETE', `/v1/api-keys/${operatorId}`, defaultAdmin.body!.key);
    expect([res.status, res.body!.error.code]).toEqual([403, 'permission_denied']);
    expect(await state()).toEqual(before);
  });

  it('keeps operator keys in the operator’s own tenant', async () => {
    const a = await tenant('a');
    const before = await state();
    const res = await call('POST', '/v1/api-keys', operatorKey, { tenantId: a.id, role: 'operator' });
    expect([res.status, res.body!.error.code, res.body!.error.details.field]).toEqual([400, 'invalid_argument', 'role']);
    expect(await state()).toEqual(before);
    const second = await call('POST', '/v1/api-keys', operatorKey, { role: 'operator', name: 'rotation' });
    expect(second.status).toBe(201);
    expect((await call('POST', '/v1/tenants', second.body!.key, { name: 'c' })).status).toBe(201);
  });
});

describe('listing', () => {
  it('shows metadata only: never a key or its hash', async () => {
    const a = await tenant('a');
    const res = await call('GET', '/v1/api-keys', a.admin);
    const text = JSON.stringify(res.body);
    for (const key of [a.admin, a.member]) {
      expect(text).not.toContain(key);
      expect(text).not.toContain(hashApiKey(key));
    }
    expect(res.body!.apiKeys.find((k: { id: string }) => k.id === a.memberId)).toEqual({
      id: a.memberId,
      tenantId: a.id,
      name: 'ci',
      role: 'member',
      prefix: a.member.slice(0, 10),
      createdAt: '2025-06-01T12:00:00.000Z',
      createdByKeyId: a.adminId,
      expiresAt: null,
      lastUsedAt: null,
      revokedAt: null,
    });
  });

  it('records when a key was last used, to the minute', async () => {
    const a = await tenant('a');
    clock.advance(5 * 60_000);
    await call('GET', '/v1/sandboxes', a.member);
    const lastUsed = async () => (await call('GET', '/v1/api-keys', a.admin)).body!.apiKeys.find((k: { id: string }) => k.id === a.memberId).lastUsedAt;
    expect(await lastUsed()).toBe('2025-06-01T12:05:00.000Z');
    clock.advance(30_000);
    await call('GET', '/v1/sandboxes', a.member);
    expect(await lastUsed()).toBe('2025-06-01T12:05:00.000Z');
    clock.advance(30_000);
    await call('GET', '/v1/sandboxes', a.member);
    expect(await lastUsed()).toBe('2025-06-01T12:06:00.000Z');
  });
});

describe('revocation', () => {
  it('refuses a revoked key from the very next request, access tokens included, and records who revoked it', async () => {
    const a = await tenant('a');
    expect((await call('GET', '/v1/sandboxes', a.member)).status).toBe(200);
    const revoked = await call('DELETE', `/v1/api-keys/${a.memberId}`, a.admin);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ id: a.memberId, revokedAt: '2025-06-01T12:00:00.000Z' });
    for (const [method, url] of [
      ['GET', '/v1/sandboxes'],
      ['POST', '/v1/sandboxes/sbx_any/access'],
      ['POST', '/v1/sandboxes'],
    ] as const) {
      const res = await call(method, url, a.member, method === 'POST' ? {} : undefined);
      expect([url, res.status, res.body!.error.code]).toEqual([url, 401, 'api_key_revoked']);
    }
    const recorded = (await events.list({ tenantId: a.id, types: ['api_key.revoked'] })).map((e) => e.data);
    expect(recorded).toEqual([{ keyId: a.memberId, role: 'member', prefix: a.member.slice(0, 10), revokedByKeyId: a.adminId }]);
    expect(JSON.stringify(await events.list())).not.toContain(a.member);
  });

  it('changes nothing when a revoked key is revoked again', async () => {
    const a = await tenant('a');
    await call('DELETE', `/v1/api-keys/${a.memberId}`, a.admin);
    const before = await state();
    clock.advance(1000);
    const again = await call('DELETE', `/v1/api-keys/${a.memberId}`, a.admin);
    expect(again.body).toMatchObject({ revokedAt: '2025-06-01T12:00:00.000Z' });
    expect(await state()).toEqual(before);
  });

  it('lets the operator revoke any tenant’s key, and a key revoke itself', async () => {
    const a = await tenant('a');
    expect((await call('DELETE', `/v1/api-keys/${a.adminId}`, operatorKey)).status).toBe(200);
    expect((await call('GET', '/v1/sandboxes', a.admin)).body!.error.code).toBe('api_key_revoked');
    const b = await tenant('b');
    expect((await call('DELETE', `/v1/api-keys/${b.adminId}`, b.admin)).status).toBe(200);
    expect((await call('GET', '/v1/api-keys', b.admin)).body!.error.code).toBe('api_key_revoked');
    const [event] = await events.list({ tenantId: a.id, types: ['api_key.revoked'] });
    expect(event!.data.revokedByKeyId).toBe((await call('GET', '/v1/api-keys', operatorKey)).body!.apiKeys[0].id);
  });
});

describe('expiry', () => {
  it('is exactly expiresInS after the creation time it reports, even while the clock moves', async () => {
    const a = await tenant('a');
    const still = clock.nowMs.bind(clock);
    let reads = 0;
    // Every read of the clock a millisecond later, as on a real one between two calls.
    clock.nowMs = () => still() + reads++;
    try {
      const key = (await call('POST', '/v1/api-keys', a.admin, { expiresInS: 60 })).body!;
      expect(Date.parse(key.expiresAt) - Date.parse(key.createdAt)).toBe(60_000);
    } finally {
      clock.nowMs = still;
    }
  });

  it('refuses a key from its expiry on (expiresInS or expiresAt)', async () => {
    const a = await tenant('a');
    const inS = await call('POST', '/v1/api-keys', a.admin, { expiresInS: 3600 });
    const at = await call('POST', '/v1/api-keys', a.admin, { expiresAt: '2025-06-01T12:30:00Z' });
    expect(inS.body!.expiresAt).toBe('2025-06-01T13:00:00.000Z');
    expect(at.body!.expiresAt).toBe('2025-06-01T12:30:00.000Z');
    const [created] = (await events.list({ tenantId: a.id, types: ['api_key.created'] })).filter((e) => e.data.keyId === inS.body!.id);
    expect(created!.data).toMatchObject({ expiresAt: '2025-06-01T13:00:00.000Z', createdByKeyId: a.adminId });
    clock.advance(30 * 60_000 - 1);
    expect((await call('GET', '/v1/sandboxes', at.body!.key)).status).toBe(200);
    clock.advance(1);
    expect((await call('GET', '/v1/sandboxes', at.body!.key)).body!.error.code).toBe('api_key_expired');
    expect((await call('GET', '/v1/sandboxes', inS.body!.key)).status).toBe(200);
    clock.advance(30 * 60_000);
    const res = await call('POST', '/v1/sandboxes/sbx_any/access', inS.body!.key);
    expect([res.status, res.body!.error.code]).toEqual([401, 'api_key_expired']);
  });

  it.each([
    ['both forms', { expiresInS: 3600, expiresAt: '2025-06-02T00:00:00Z' }, 'expiresAt'],
    ['a time in the past', { expiresAt: '2025-06-01T11:59:59Z' }, 'expiresAt'],
    ['now', { expiresAt: '2025-06-01T12:00:00Z' }, 'expiresAt'],
    ['not a time', { expiresAt: 'tomorrow' }, 'expiresAt'],
    ['zero seconds', { expiresInS: 0 }, 'expiresInS'],
    ['a fraction', { expiresInS: 90.5 }, 'expiresInS'],
    ['an unknown role', { role: 'owner' }, 'role'],
    ['an unknown format', { format: 'aws' }, 'format'],
  ])('refuses %s, changing nothing', async (_what, json, field) => {
    const before = await state();
    const res = await call('POST', '/v1/api-keys', operatorKey, json);
    expect([res.status, res.body!.error.code, res.body!.error.details.field]).toEqual([400, 'invalid_argument', field]);
    expect(await state()).toEqual(before);
  });
});

describe('E2B-format keys', () => {
  it('are e2b_ + hex, as E2B SDK releases 2.36 to 2.45 insist, with the same role, expiry, revocation and hashing', async () => {
    const a = await tenant('a');
    const made = await call('POST', '/v1/api-keys', a.admin, { format: 'e2b', expiresInS: 3600 });
    expect(made.status).toBe(201);
    const key = made.body!.key as string;
    // The SDK's own check (e2b@2.45.0, API_KEY_PATTERN), with the width of a Sandglass key: 256 random bits.
    expect(key).toMatch(/^e2b_[0-9a-f]+$/);
    expect(key).toHaveLength(4 + 64);
    expect(made.body).toMatchObject({ role: 'member', prefix: key.slice(0, 10), expiresAt: '2025-06-01T13:00:00.000Z' });
    const [row] = await database.db.selectFrom('api_keys').select('key_hash').where('id', '=', made.body!.id).execute();
    expect(row!.key_hash).toBe(hashApiKey(key));

    expect((await call('GET', '/v1/sandboxes', key)).status).toBe(200);
    const e2b = await cp.app.inject({ method: 'GET', url: '/e2b/v2/sandboxes', headers: { 'x-api-key': key } });
    expect(e2b.statusCode).toBe(200);
    // A member key, whatever its spelling: it manages no keys.
    expect((await call('GET', '/v1/api-keys', key)).body!.error.code).toBe('permission_denied');
    // One character off, or upper-case hex: not a key, answered as an unknown one.
    for (const near of [key.slice(0, -1), `${key}0`, key.toUpperCase().replace('E2B_', 'e2b_'), `sg_${key.slice(4)}`]) {
      expect((await call('GET', '/v1/sandboxes', near)).body!.error.code).toBe('unauthenticated');
    }

    clock.advance(3600_000);
    expect((await call('GET', '/v1/sandboxes', key)).body!.error.code).toBe('api_key_expired');
    const other = (await call('POST', '/v1/api-keys', a.admin, { format: 'e2b', role: 'admin' })).body!;
    expect((await call('GET', '/v1/api-keys', other.key)).status).toBe(200);
    expect((await call('DELETE', `/v1/api-keys/${other.id}`, a.admin)).status).toBe(200);
    const refused = await cp.app.inject({ method: 'GET', url: '/e2b/v2/sandboxes', headers: { 'x-api-key': other.key } });
    expect([refused.statusCode, refused.json().error_code]).toEqual([401, 'api_key_revoked']);
  });
});

describe('events', () => {
  it('records every key creation with its actor, never the key', async () => {
    const a = await tenant('a');
    const created = (await events.list({ tenantId: a.id, types: ['api_key.created'] })).map((e) => e.data);
    const operatorId = (await call('GET', '/v1/api-keys', operatorKey)).body!.apiKeys[0].id;
    expect(created).toEqual([
      { keyId: a.adminId, role: 'admin', prefix: a.admin.slice(0, 10), name: 'first admin', createdByKeyId: operatorId },
      { keyId: a.memberId, role: 'member', prefix: a.member.slice(0, 10), name: 'ci', createdByKeyId: a.adminId },
    ]);
    const all = JSON.stringify(await events.list());
    for (const key of [operatorKey, a.admin, a.member]) {
      expect(all).not.toContain(key);
      expect(all).not.toContain(hashApiKey(key));
    }
    expect((await events.verifyChain()).ok).toBe(true);
  });
});

describe('the local operator key', () => {
  it('promotes an earlier version’s admin key in the key file to operator, once, and records it', async () => {
    const fresh = await openDatabase({ url: 'sqlite::memory:' });
    try {
      const freshEvents = new EventLog(fresh.db);
      const keyFile = join(home, 'old-admin-key');
      const old = generateApiKey();
      writeFileSync(keyFile, `${old}\n`, { mode: 0o600 });
      await bootstrapLocal({ db: fresh.db, events: freshEvents, keyFile, clock });
      const tenantId = (await fresh.db.selectFrom('tenants').select('id').executeTakeFirstOrThrow()).id;
      // As the earlier version left it: the file's key registered as admin.
      await fresh.db.updateTable('api_keys').set({ role: 'admin' }).execute();
      await bootstrapLocal({ db: fresh.db, events: freshEvents, keyFile, clock });
      await bootstrapLocal({ db: fresh.db, events: freshEvents, keyFile, clock });
      expect(await fresh.db.selectFrom('api_keys').select('role').execute()).toEqual([{ role: 'operator' }]);
      expect((await freshEvents.list({ tenantId, types: ['api_key.role_changed'] })).map((e) => e.data)).toEqual([
        { keyId: expect.stringMatching(/^key_/), from: 'admin', to: 'operator' },
      ]);
    } finally {
      await fresh.close();
    }
  });

  it('leaves a revoked key in the key file revoked after a restart', async () => {
    const ops = (await call('GET', '/v1/api-keys', operatorKey)).body!.apiKeys[0].id;
    const spare = await issueApiKey(database.db, events, (await call('GET', '/v1/api-keys', operatorKey)).body!.apiKeys[0].tenantId, 'operator', { clock });
    expect((await call('DELETE', `/v1/api-keys/${ops}`, spare.key)).status).toBe(200);
    expect(await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock })).toBe(operatorKey);
    expect((await call('GET', '/v1/sandboxes', operatorKey)).body!.error.code).toBe('api_key_revoked');
  });
});
