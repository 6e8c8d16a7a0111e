// Issue 9, item 7: API keys against the real server. A tenant admin stays inside its tenant and below the operator; keys are listed without secrets, expire, and are refused from the request after their revocation; every change is an event.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '@sandglass/db';
import { EventLog, type StoredEvent } from '@sandglass/events';
import { ApiKeys, Sandbox } from '@sandglass/sdk';
import { adminKey as operatorKey, api, apiUrl, checkResponsesAgainstSpec, config, home } from '../helpers.js';

checkResponsesAgainstSpec();

const BIN = fileURLToPath(new URL('../../bin/sandglass', import.meta.url));
const run = promisify(execFile);

interface Tenant {
  id: string;
  admin: string;
  adminId: string;
  member: string;
  memberId: string;
}

/** A tenant made by the operator, with its first admin key, and a member key that admin made. */
async function tenant(label: string): Promise<Tenant> {
  const t = await api('POST', '/v1/tenants', { body: { name: `keys-${label}-${Date.now()}` } });
  expect(t.status).toBe(201);
  const admin = await api('POST', `/v1/tenants/${t.body!.id}/api-keys`, { body: { role: 'admin', name: 'first admin' } });
  expect(admin.status, JSON.stringify(admin.body)).toBe(201);
  const member = await api('POST', `/v1/tenants/${t.body!.id}/api-keys`, { key: admin.body!.key, body: { name: 'ci' } });
  expect(member.status, JSON.stringify(member.body)).toBe(201);
  return { id: t.body!.id, admin: admin.body!.key, adminId: admin.body!.id, member: member.body!.key, memberId: member.body!.id };
}

/** Every event of a tenant, and its keys' rows, read from the server's own database (tenant events have no public route). */
async function fromDatabase(tenantId: string) {
  const { db, close } = await openDatabase({ url: `sqlite:${join(home, 'sandglass.db')}` });
  try {
    // The columns every version of the table has: a refused attempt must add, change or revoke nothing.
    const keys = await db.selectFrom('api_keys').select(['id', 'role', 'key_hash']).where('tenant_id', '=', tenantId).orderBy('id').execute();
    const revoked = await db.selectFrom('events').select('id').where('tenant_id', '=', tenantId).where('type', '=', 'api_key.revoked').execute();
    return { keys, revoked, events: await new EventLog(db).list({ tenantId, limit: 10_000 }) };
  } finally {
    await close();
  }
}

async function tenantEvents(tenantId: string): Promise<StoredEvent[]> {
  return (await fromDatabase(tenantId)).events;
}

/** What a refused attempt must leave alone: both tenants' keys and events. */
async function keysAndEvents(...tenants: Tenant[]) {
  return Promise.all(tenants.map((t) => fromDatabase(t.id)));
}

let a: Tenant;
let b: Tenant;
beforeAll(async () => {
  a = await tenant('a');
  b = await tenant('b');
});

describe('a tenant admin stays in its tenant', () => {
  it('cannot mint keys for another tenant, nor operator keys, and nothing changes', async () => {
    const before = await keysAndEvents(a, b);
    for (const [path, body, status, code] of [
      [`/v1/tenants/${b.id}/api-keys`, { role: 'admin' }, 404, 'tenant_not_found'],
      [`/v1/tenants/${b.id}/api-keys`, { role: 'member' }, 404, 'tenant_not_found'],
      ['/v1/api-keys', { tenantId: b.id, role: 'admin' }, 404, 'tenant_not_found'],
      ['/v1/api-keys', { role: 'operator' }, 403, 'permission_denied'],
      [`/v1/tenants/${a.id}/api-keys`, { role: 'operator' }, 403, 'permission_denied'],
      ['/v1/tenants', { name: `keys-c-${Date.now()}` }, 403, 'permission_denied'],
    ] as const) {
      const res = await api('POST', path, { key: a.admin, body });
      expect([path, body, res.status, res.body!.error?.code]).toEqual([path, body, status, code]);
    }
    expect(await keysAndEvents(a, b)).toEqual(before);
  });

  it("cannot list or revoke another tenant's keys, answered as for unknown ids", async () => {
    const before = await keysAndEvents(a, b);
    const list = await api('GET', `/v1/api-keys?tenantId=${b.id}`, { key: a.admin });
    expect([list.status, list.body!.error?.code]).toEqual([404, 'tenant_not_found']);
    for (const id of [b.adminId, b.memberId, 'key_doesnotexist']) {
      const res = await api('DELETE', `/v1/api-keys/${id}`, { key: a.admin });
      expect([id, res.status, res.body!.error?.code]).toEqual([id, 404, 'api_key_not_found']);
    }
    expect(await keysAndEvents(a, b)).toEqual(before);
    expect((await api('GET', '/v1/sandboxes', { key: b.member })).status).toBe(200);
  });

  it('lets a member key manage no keys', async () => {
    const before = await keysAndEvents(a);
    for (const [method, path] of [
      ['POST', '/v1/api-keys'],
      ['GET', '/v1/api-keys'],
      ['DELETE', `/v1/api-keys/${a.adminId}`],
    ] as const) {
      const res = await api(method, path, { key: a.member, ...(method === 'POST' ? { body: {} } : {}) });
      expect([method, res.status, res.body!.error?.code]).toEqual([method, 403, 'permission_denied']);
    }
    expect(await keysAndEvents(a)).toEqual(before);
  });

  it('lists its own keys with metadata only, never a key or its hash', async () => {
    const res = await api('GET', '/v1/api-keys', { key: a.admin });
    expect(res.status).toBe(200);
    expect(res.body!.apiKeys.map((k: { id: string }) => k.id).sort()).toEqual([a.adminId, a.memberId].sort());
    const text = JSON.stringify(res.body);
    expect(text).not.toContain(a.admin);
    expect(text).not.toContain(a.member);
    expect(res.body!.apiKeys.find((k: { id: string }) => k.id === a.memberId)).toMatchObject({
      role: 'member',
      prefix: a.member.slice(0, 10),
      revokedAt: null,
      expiresAt: null,
      createdByKeyId: a.adminId,
    });
  });
});

describe('revocation', () => {
  let sbx: Sandbox | undefined;
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
  });

  it('refuses a revoked key on the very next request, and the access tokens it obtained on the data plane', async () => {
    const t = await tenant('revoke');
    sbx = await Sandbox.create({ ...config(t.admin), timeoutS: 300 });
    const key = (await api('POST', '/v1/api-keys', { key: t.admin, body: { name: 'short-lived' } })).body!;
    const access = (await api('POST', `/v1/sandboxes/${sbx.id}/access`, { key: key.key })).body!;
    expect(access.token).toMatch(/^sgat_/);
    // The data plane, with the token that key obtained: it works until the key is revoked, and not a request after.
    const dataPlane = () =>
      fetch(`${access.gatewayUrl}/v1/sandboxes/${sbx!.id}/commands`, { headers: { authorization: `Bearer ${access.token}` } }).then(async (r) => ({
        status: r.status,
        code: ((await r.json()) as { error?: { code?: string } }).error?.code,
      }));
    expect((await dataPlane()).status).toBe(200);

    const revoked = await api('DELETE', `/v1/api-keys/${key.id}`, { key: t.admin });
    expect(revoked.status).toBe(200);
    expect(revoked.body!.revokedAt).toEqual(expect.any(String));
    for (const [method, path] of [
      ['POST', `/v1/sandboxes/${sbx.id}/access`],
      ['GET', '/v1/sandboxes'],
      ['GET', `/v1/sandboxes/${sbx.id}`],
    ] as const) {
      const res = await api(method, path, { key: key.key });
      expect([path, res.status, res.body!.error?.code]).toEqual([path, 401, 'api_key_revoked']);
    }
    expect(await dataPlane()).toEqual({ status: 401, code: 'api_key_revoked' });
    // Through the SDK too: connecting asks for an access token.
    await expect(Sandbox.connect(sbx.id, config(key.key))).rejects.toMatchObject({ code: 'api_key_revoked', status: 401 });

    const events = await tenantEvents(t.id);
    const recorded = events.filter((e) => e.type === 'api_key.revoked').map((e) => e.data);
    expect(recorded).toEqual([{ keyId: key.id, role: 'member', prefix: key.key.slice(0, 10), revokedByKeyId: t.adminId }]);
    expect(JSON.stringify(events)).not.toContain(key.key);
  });
});

describe('expiry', () => {
  it('refuses a key once its expiry has passed', async () => {
    const t = await tenant('expiry');
    const expiresAtMs = Date.now() + 2000;
    const key = (await api('POST', '/v1/api-keys', { key: t.admin, body: { expiresAt: new Date(expiresAtMs).toISOString() } })).body!;
    expect(key.expiresAt).toBe(new Date(expiresAtMs).toISOString());
    // Waits for the wall clock to pass the expiry; what is checked is the answer after it, not how long anything took.
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAtMs - Date.now()) + 500));
    for (const path of ['/v1/sandboxes', '/v1/sandboxes/sbx_any/access']) {
      const res = await api(path.endsWith('access') ? 'POST' : 'GET', path, { key: key.key });
      expect([path, res.status, res.body!.error?.code]).toEqual([path, 401, 'api_key_expired']);
    }
  });
});

describe('events', () => {
  it('records each key creation with the acting key, never the key', async () => {
    const operatorId = (await api('GET', '/v1/api-keys')).body!.apiKeys.find((k: { role: string }) => k.role === 'operator').id;
    const events = await tenantEvents(a.id);
    expect(events.filter((e) => e.type === 'api_key.created').map((e) => e.data)).toEqual([
      { keyId: a.adminId, role: 'admin', prefix: a.admin.slice(0, 10), name: 'first admin', createdByKeyId: operatorId },
      { keyId: a.memberId, role: 'member', prefix: a.member.slice(0, 10), name: 'ci', createdByKeyId: a.adminId },
    ]);
    expect(JSON.stringify(events)).not.toContain(a.admin);
    expect(JSON.stringify(events)).not.toContain(a.member);
  });
});

describe('the CLI', () => {
  it('creates, lists and revokes keys with `sandglass api-keys`', async () => {
    const env = { ...process.env, SANDGLASS_URL: apiUrl, SANDGLASS_API_KEY: a.admin };
    const created = JSON.parse(
      (await run(BIN, ['api-keys', 'create', '--role', 'member', '--name', 'from-cli', '--expires', '30d', '--json'], { env })).stdout,
    );
    expect(created).toMatchObject({ tenantId: a.id, role: 'member', name: 'from-cli', key: expect.stringMatching(/^sg_/) });
    expect(Date.parse(created.expiresAt) - Date.parse(created.createdAt)).toBe(30 * 86400 * 1000);
    const listed = (await run(BIN, ['api-keys', 'ls'], { env })).stdout;
    expect(listed).toContain(created.id);
    expect(listed).not.toContain(created.key);
    await run(BIN, ['api-keys', 'revoke', created.id], { env });
    expect((await api('GET', '/v1/sandboxes', { key: created.key })).body!.error.code).toBe('api_key_revoked');
    const other = await run(BIN, ['api-keys', 'create', '--tenant', b.id], { env }).catch((e: { code: number; stderr: string }) => e);
    expect(other).toMatchObject({ code: 1, stderr: expect.stringContaining('tenant_not_found') });
  });

  it('lets the operator give a new tenant its first admin key through the SDK', async () => {
    const t = await api('POST', '/v1/tenants', { body: { name: `keys-sdk-${Date.now()}` } });
    const first = await ApiKeys.create({ ...config(operatorKey), tenantId: t.body!.id, role: 'admin' });
    expect((await ApiKeys.list(config(first.key))).map((k) => k.id)).toEqual([first.id]);
    expect((await ApiKeys.revoke(first.id, config(operatorKey))).revokedAt).not.toBeNull();
  });
});
