// Every bad input gets its stable code, names the field, and changes nothing; tenants never see each other.
import { beforeAll, afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { adminKey, api, apiUrl, checkResponsesAgainstSpec, config, gatewayUrl, sendOversized } from './helpers.js';

checkResponsesAgainstSpec();

let sbx: Sandbox;
let token: string;

beforeAll(async () => {
  sbx = await Sandbox.create({ ...config(), timeoutS: 900 });
  token = (await api('POST', `/v1/sandboxes/${sbx.id}/access`)).body!.token;
});
afterAll(async () => {
  await sbx?.kill();
});

type Event = { seq: number; type: string };

/** The sandbox's events after `afterSeq`, every page of them. */
async function eventsAfter(afterSeq: number): Promise<Event[]> {
  const all: Event[] = [];
  for (;;) {
    const page = (await api('GET', `/v1/sandboxes/${sbx.id}/events?afterSeq=${afterSeq}&limit=1000`)).body!.events as Event[];
    all.push(...page);
    if (page.length < 1000) return all;
    afterSeq = page[page.length - 1]!.seq;
  }
}

/**
 * Where the world stands before a bad request: the tenant's sandboxes, and the seq after which any event of the
 * sandbox is new.
 */
async function marker() {
  const list = await api('GET', '/v1/sandboxes');
  const events = await eventsAfter(0);
  return { sandboxes: list.body!.sandboxes.length, afterSeq: events.at(-1)?.seq ?? 0 };
}

/**
 * What changed since `before` that a request could have caused. The node's snapshot scheduler records snapshot.*
 * events (rolling captures, retention) on its own clock, so they may land in any window; none of these requests
 * touches snapshots, and every other event counts.
 */
async function changedSince(before: Awaited<ReturnType<typeof marker>>) {
  const list = await api('GET', '/v1/sandboxes');
  const events = (await eventsAfter(before.afterSeq)).filter((e) => !e.type.startsWith('snapshot.')).map((e) => e.type);
  return { sandboxes: list.body!.sandboxes.length - before.sandboxes, events };
}

async function gw(method: string, path: string, opts: { body?: unknown; raw?: string; headers?: Record<string, string>; tok?: string | null } = {}) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.tok !== null) headers.authorization = `Bearer ${opts.tok ?? token}`;
  let body: string | undefined = opts.raw;
  if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(`${gatewayUrl}/v1/sandboxes/${sbx.id}${path}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

describe('control plane rejects bad input and changes nothing', () => {
  const cases: Array<[string, () => Promise<{ status: number; body?: any }>, number, string, string?]> = [
    ['unknown template', () => api('POST', '/v1/sandboxes', { body: { template: 'nope' } }), 404, 'template_not_found'],
    ['memory too small', () => api('POST', '/v1/sandboxes', { body: { memoryMib: 16 } }), 400, 'invalid_argument', 'memoryMib'],
    ['memory not a number', () => api('POST', '/v1/sandboxes', { body: { memoryMib: 'lots' } }), 400, 'invalid_argument', 'memoryMib'],
    ['too many vcpus', () => api('POST', '/v1/sandboxes', { body: { vcpus: 64 } }), 400, 'invalid_argument', 'vcpus'],
    ['negative timeout', () => api('POST', '/v1/sandboxes', { body: { timeoutS: -5 } }), 400, 'invalid_argument', 'timeoutS'],
    ['unknown field', () => api('POST', '/v1/sandboxes', { body: { memoryMb: 512 } }), 400, 'invalid_argument', 'memoryMb'],
    [
      'malformed JSON',
      () => api('POST', '/v1/sandboxes', { rawBody: '{"template": ', headers: { 'content-type': 'application/json' } }),
      400,
      'malformed_json',
    ],
    ['oversized body', () => sendOversized(`${apiUrl}/v1/sandboxes`, { authorization: `Bearer ${adminKey}` }, 2 * 1024 * 1024), 413, 'payload_too_large'],
    ['missing API key', () => api('POST', '/v1/sandboxes', { key: null, body: {} }), 401, 'unauthenticated'],
    ['wrong API key', () => api('POST', '/v1/sandboxes', { key: 'sg_wrong', body: {} }), 401, 'unauthenticated'],
    ['unknown sandbox', () => api('DELETE', '/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa'), 404, 'sandbox_not_found'],
    ['unknown sandbox id shape', () => api('GET', '/v1/sandboxes/not-an-id'), 404, 'sandbox_not_found'],
    ['negative timeout on extend', () => api('POST', `/v1/sandboxes/${sbx.id}/timeout`, { body: { timeoutS: -1 } }), 400, 'invalid_argument', 'timeoutS'],
  ];
  for (const [name, call, status, code, field] of cases) {
    it(name, async () => {
      const before = await marker();
      const res = await call();
      expect(res.status).toBe(status);
      expect(res.body!.error.code).toBe(code);
      expect(res.body!.error.message.length).toBeGreaterThan(5);
      expect(res.body!.error.requestId).toMatch(/^req_/);
      if (field) expect(res.body!.error.details.field).toContain(field);
      expect(await changedSince(before)).toEqual({ sandboxes: 0, events: [] });
    });
  }
});

describe('gateway rejects bad input and changes nothing', () => {
  const cases: Array<[string, () => Promise<{ status: number; body?: any }>, number, string, string?]> = [
    ['missing token', () => gw('GET', '/commands', { tok: null }), 401, 'unauthenticated'],
    ['forged token', () => gw('GET', '/commands', { tok: 'sgat_e30.AAAA' }), 401, 'unauthenticated'],
    ['path outside the guest (relative)', () => gw('GET', '/files?path=etc/passwd'), 400, 'path_outside_sandbox', 'path'],
    ['path outside the guest (..)', () => gw('GET', '/files?path=/root/../../etc/shadow'), 400, 'path_outside_sandbox', 'path'],
    ['cwd outside the guest', () => gw('POST', '/commands', { body: { cmd: 'true', cwd: '../' } }), 400, 'path_outside_sandbox', 'cwd'],
    ['both cmd and argv', () => gw('POST', '/commands', { body: { cmd: 'true', argv: ['true'] } }), 400, 'invalid_argument', 'cmd'],
    ['negative command timeout', () => gw('POST', '/commands', { body: { cmd: 'true', timeoutMs: -1 } }), 400, 'invalid_argument', 'timeoutMs'],
    ['program that does not exist', () => gw('POST', '/commands', { body: { argv: ['/usr/bin/definitely-not-here'] } }), 404, 'command_not_found'],
    ['cwd that does not exist', () => gw('POST', '/commands', { body: { argv: ['true'], cwd: '/no/such/dir' } }), 404, 'file_not_found', 'cwd'],
    ['unknown command id', () => gw('GET', '/commands/cmd_aaaaaaaaaaaaaaaaaaaa'), 404, 'command_not_found'],
    ['malformed JSON', () => gw('POST', '/commands', { raw: '{"cmd":', headers: { 'content-type': 'application/json' } }), 400, 'malformed_json'],
    [
      'oversized JSON',
      () => sendOversized(`${gatewayUrl}/v1/sandboxes/${sbx.id}/commands`, { authorization: `Bearer ${token}` }, 2 * 1024 * 1024),
      413,
      'payload_too_large',
    ],
    ['unknown signal', () => gw('POST', '/commands/cmd_aaaaaaaaaaaaaaaaaaaa/signal', { body: { signal: 'SIGBOGUS' } }), 400, 'invalid_argument', 'signal'],
    ['reading a directory', () => gw('GET', '/files?path=/etc'), 409, 'is_a_directory'],
  ];
  for (const [name, call, status, code, field] of cases) {
    it(name, async () => {
      const before = await marker();
      const res = await call();
      expect(res.status).toBe(status);
      expect(res.body.error.code).toBe(code);
      if (field) expect(res.body.error.details.field).toContain(field);
      expect(await changedSince(before)).toEqual({ sandboxes: 0, events: [] });
    });
  }
});

describe('tenant isolation', () => {
  it("another tenant cannot see, use or kill this tenant's sandbox", async () => {
    const tenant = await api('POST', '/v1/tenants', { body: { name: `other-${Date.now()}` } });
    expect(tenant.status).toBe(201);
    const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: {} });
    expect(key.status).toBe(201);
    const other = key.body!.key as string;
    const list = await api('GET', '/v1/sandboxes', { key: other });
    expect(list.body!.sandboxes.map((s: { id: string }) => s.id)).not.toContain(sbx.id);
    for (const [method, path] of [
      ['GET', `/v1/sandboxes/${sbx.id}`],
      ['DELETE', `/v1/sandboxes/${sbx.id}`],
      ['POST', `/v1/sandboxes/${sbx.id}/access`],
      ['GET', `/v1/sandboxes/${sbx.id}/events`],
    ] as const) {
      const res = await api(method, path, { key: other });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body!.error.code).toBe('sandbox_not_found');
    }
    // A member key cannot manage tenants.
    const denied = await api('POST', '/v1/tenants', { key: other, body: { name: 'x' } });
    expect(denied.body!.error.code).toBe('permission_denied');
    // The other tenant's own sandbox is invisible to the first.
    const theirs = await Sandbox.create({ ...config(other), timeoutS: 120 });
    try {
      const mine = await api('GET', '/v1/sandboxes');
      expect(mine.body!.sandboxes.map((s: { id: string }) => s.id)).not.toContain(theirs.id);
      const tokenForMine = await gw('GET', '/commands', { tok: (await api('POST', `/v1/sandboxes/${theirs.id}/access`, { key: other })).body!.token });
      expect(tokenForMine.body.error.code).toBe('permission_denied');
    } finally {
      await theirs.kill();
    }
    expect((await sbx.getInfo()).state).toBe('running');
  });
});
