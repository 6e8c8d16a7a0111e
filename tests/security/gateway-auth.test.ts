// Auth is decided on the route the router matched: every spelling of every route of both specs, sent by nobody or by
// another tenant against one tenant's real sandbox, is refused and reaches no handler; the internal API lives only on
// its own socket; `?access_token=` works on the WebSocket route alone.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { deriveNodeKeys, loadNodeSecret } from '@sandglass/core';
import { errorCodeOf, fillPath, pathVariants, rawRequest, specOperations, type RawResponse, type SpecOperation } from '@sandglass/gateway/test-support';
import { api, apiUrl, checkResponsesAgainstSpec, config, gatewayUrl, home } from '../helpers.js';

checkResponsesAgainstSpec();

const root = fileURLToPath(new URL('../../', import.meta.url));
const gatewayOps = specOperations(join(root, 'spec/gateway.yaml'));
const controlOps = specOperations(join(root, 'spec/control-plane.yaml'));
const dataOps = gatewayOps.filter((o) => o.security.includes('accessToken'));
const internalOps = gatewayOps.filter((o) => o.security.includes('nodeSecret'));
const apiOps = controlOps.filter((o) => o.security.length > 0);

const dataPort = { port: Number(new URL(gatewayUrl).port) };
const apiPort = { port: Number(new URL(apiUrl).port) };
const internalSocket = { socketPath: (JSON.parse(readFileSync(join(home, 'server.json'), 'utf8')) as { internalSocket: string }).internalSocket };
const nodeSecret = loadNodeSecret(join(home, 'node-secret'));
const internalBearer = deriveNodeKeys(nodeSecret).internalBearer.toString('hex');

// Tenant A's sandbox, command and snapshot; tenant B, with a sandbox and token of its own.
let a: Sandbox;
let aToken: string;
let aCommandId: string;
let aSnapshotId: string;
let aTenantId: string;
let bKey: string;
let b: Sandbox;
let bToken: string;
let before: Awaited<ReturnType<typeof stateOfA>>;

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

/** Real ids where the route names one of tenant A's things; made-up ones where A has none of that kind. */
function idsFor(path: string): Record<string, string> {
  const id =
    path.startsWith('/v1/snapshots/') || path.startsWith('/internal/v1/snapshots/')
      ? aSnapshotId
      : path.startsWith('/v1/tenants/')
        ? aTenantId
        : path.startsWith('/v1/api-keys/')
          ? 'key_aaaaaaaaaaaaaaaaaaaa'
          : a.id;
  return {
    id,
    port: '3000',
    cid: aCommandId,
    requestId: 'apr_aaaaaaaaaaaaaaaaaaaa',
    name: 'AUTHH_SECRET',
    contentId: 'c'.repeat(64),
    key: 'a'.repeat(64),
    tenantId: aTenantId,
  };
}

/** A body that passes validation, so a request that got past auth would reach the handler and act. */
function bodyFor(op: SpecOperation): string | undefined {
  if (op.method === 'GET' || op.method === 'DELETE') return undefined;
  const bodies: Record<string, unknown> = {
    'POST /v1/sandboxes/{id}/commands': { cmd: 'touch /tmp/pwned' },
    'POST /v1/sandboxes/{id}/files/mkdir': { path: '/tmp/pwned-dir' },
    'POST /v1/sandboxes/{id}/files/rename': { from: '/etc/hostname', to: '/tmp/pwned-renamed' },
    'POST /v1/sandboxes/{id}/commands/{cid}/signal': { signal: 'SIGKILL' },
    'POST /v1/sandboxes/{id}/commands/{cid}/resize': { cols: 10, rows: 10 },
    'POST /v1/sandboxes/{id}/timeout': { timeoutS: 1 },
    'PUT /v1/sandboxes/{id}/network': { allow: ['api.example.test'] },
    'PUT /v1/sandboxes/{id}/snapshot-interval': { snapshotIntervalS: 5 },
    'POST /v1/sandboxes/{id}/snapshots': { name: 'pwned' },
    'POST /v1/approvals/{requestId}': { decision: 'approve' },
    'POST /v1/forks': { snapshotId: aSnapshotId },
    'POST /v1/tenants': { name: 'pwned' },
    'POST /v1/tenants/{id}/api-keys': { role: 'admin' },
    'POST /internal/v1/sandboxes/{id}/timeout': { expiresAt: '2000-01-01T00:00:00.000Z' },
    'PUT /internal/v1/sandboxes/{id}/snapshot-interval': { snapshotIntervalS: 5 },
    'PUT /internal/v1/sandboxes/{id}/network': { allow: ['api.example.test'] },
    'POST /internal/v1/sandboxes/{id}/snapshots': { name: 'pwned' },
    'POST /internal/v1/maintenance': { gcGraceMs: 0 },
  };
  const body = bodies[`${op.method} ${op.path}`];
  return JSON.stringify(body ?? {});
}

/** Query parameters a route requires, so validation is no reason for a refusal. */
const queryFor = (op: SpecOperation) =>
  op.path.endsWith('/files') || op.path.endsWith('/files/stat') || op.path.endsWith('/files/list')
    ? '?path=/tmp/pwned-file'
    : op.path.startsWith('/internal/v1/snapshots/')
      ? `?tenantId=${aTenantId}`
      : '';

const REFUSED = new Set(['unauthenticated', 'permission_denied', 'not_found']);

/**
 * Sends every path in `paths` as `op`; returns the answers that are not a refusal in `allowed` (by default: the auth
 * hook's 401/403 or the router's 404, never a handler's own answer).
 */
async function probe(
  target: Parameters<typeof rawRequest>[0],
  op: SpecOperation,
  paths: string[],
  headers: Record<string, string>,
  allowed = (r: RawResponse) => r.status >= 400 && r.status < 500 && REFUSED.has(errorCodeOf(r.body) ?? ''),
): Promise<string[]> {
  const body = bodyFor(op);
  const bad: string[] = [];
  for (const p of paths) {
    const r = await rawRequest(target, op.method, p + queryFor(op), {
      headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
      body,
    });
    if (!allowed(r)) bad.push(`${op.method} ${p} -> ${r.status} ${r.body.slice(0, 160)}`);
  }
  return bad;
}

const variantsOf = (op: SpecOperation) => pathVariants(fillPath(op.path, idsFor(op.path)));
const asWritten = (op: SpecOperation) => [fillPath(op.path, idsFor(op.path))];

/** What a request that got through could have changed in tenant A's sandbox (not what its schedulers change). */
async function stateOfA() {
  const gw = (path: string) => rawRequest(dataPort, 'GET', `/v1/sandboxes/${a.id}${path}`, { headers: bearer(aToken) });
  const events = (await api('GET', `/v1/sandboxes/${a.id}/events?limit=1000`)).body!.events as Array<{ type: string; data: { why?: string } }>;
  const { state, expiresAt, timeoutS, snapshotIntervalS, network, secrets, pausedAt } = (await api('GET', `/v1/sandboxes/${a.id}`)).body!;
  const snapshots = (await api('GET', `/v1/sandboxes/${a.id}/snapshots`)).body!.snapshots as Array<{ id: string; name: string | null }>;
  return {
    sandbox: { state, expiresAt, timeoutS, snapshotIntervalS, network, secrets, pausedAt },
    commands: (JSON.parse((await gw('/commands')).body) as { commands: Array<{ id: string }> }).commands.map((c) => c.id),
    // Retention deletes old rolling snapshots on its own schedule (why: retention); a request could only delete one.
    actions: events
      .filter(
        (e) => /^(command|file|network|secret|sandbox\.(killed|paused|resumed))/.test(e.type) || (e.type === 'snapshot.deleted' && e.data.why !== 'retention'),
      )
      .map((e) => e.type),
    // Rolling snapshots come and go on their own schedule; ours must stay, and no named one may appear.
    ours: snapshots.some((s) => s.id === aSnapshotId),
    named: snapshots.filter((s) => s.name !== null).map((s) => s.name),
    pwned: await Promise.all(
      ['/tmp/pwned', '/tmp/pwned-dir', '/tmp/pwned-renamed', '/tmp/pwned-file'].map(async (p) => (await gw(`/files/stat?path=${p}`)).status),
    ),
    hostname: (await gw('/files/stat?path=/etc/hostname')).status,
  };
}

beforeAll(async () => {
  a = await Sandbox.create({ ...config(), timeoutS: 1800 });
  aTenantId = (await api('GET', `/v1/sandboxes/${a.id}`)).body!.tenantId;
  aToken = (await api('POST', `/v1/sandboxes/${a.id}/access`)).body!.token;
  await a.commands.run('echo ready');
  aCommandId = (
    JSON.parse((await rawRequest(dataPort, 'GET', `/v1/sandboxes/${a.id}/commands`, { headers: bearer(aToken) })).body) as { commands: Array<{ id: string }> }
  ).commands[0]!.id;
  aSnapshotId = (await a.snapshot()).id;
  const tenant = await api('POST', '/v1/tenants', { body: { name: `authh-b-${Date.now()}` } });
  expect(tenant.status).toBe(201);
  const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { name: 'b', role: 'member' } });
  expect(key.status).toBe(201);
  bKey = key.body!.key;
  b = await Sandbox.create({ ...config(bKey), timeoutS: 1800 });
  bToken = (await api('POST', `/v1/sandboxes/${b.id}/access`, { key: bKey })).body!.token;
  before = await stateOfA();
  expect(before.pwned.every((s) => s === 404)).toBe(true);
}, 900_000);

afterAll(async () => {
  await a?.kill();
  await b?.kill();
});

describe('gateway data plane', () => {
  it('refuses every spelling of every route without a token, or with another tenant’s', async () => {
    expect(dataOps.length).toBeGreaterThan(10);
    const bad: string[] = [];
    for (const op of dataOps) {
      bad.push(...(await probe(dataPort, op, variantsOf(op), {})));
      bad.push(...(await probe(dataPort, op, variantsOf(op), bearer(bToken))));
      for (const h of [bearer('sgat_e30.AAAA'), bearer(nodeSecret.toString('hex')), bearer(internalBearer), bearer(bKey)])
        bad.push(...(await probe(dataPort, op, asWritten(op), h)));
    }
    expect(bad).toEqual([]);
  });

  it('serves no internal route at all, even with the node’s own credentials', async () => {
    const bad: string[] = [];
    const routeMissing = (r: RawResponse) => r.status === 404 && errorCodeOf(r.body) === 'not_found';
    for (const op of internalOps) {
      for (const h of [{}, bearer(nodeSecret.toString('hex')), bearer(internalBearer)])
        bad.push(...(await probe(dataPort, op, variantsOf(op), h, routeMissing)));
    }
    expect(bad).toEqual([]);
  });

  it('takes ?access_token= on the WebSocket route only', async () => {
    const bad: string[] = [];
    for (const op of dataOps.filter((o) => !o.websocket)) {
      const q = queryFor(op);
      const path = `${asWritten(op)[0]}${q ? `${q}&` : '?'}access_token=${aToken}`;
      const r = await rawRequest(dataPort, op.method, path, {
        headers: bodyFor(op) === undefined ? {} : { 'content-type': 'application/json' },
        body: bodyFor(op),
      });
      if (r.status !== 401 || errorCodeOf(r.body) !== 'unauthenticated') bad.push(`${op.method} ${path} -> ${r.status} ${r.body.slice(0, 160)}`);
    }
    expect(bad).toEqual([]);
    // The WebSocket route (a browser cannot set headers there) takes it, and streams the command.
    const ws = new WebSocket(`ws://127.0.0.1:${dataPort.port}/v1/sandboxes/${a.id}/commands/${aCommandId}/stream?access_token=${aToken}`);
    const first = await new Promise<string>((resolve, reject) => {
      ws.once('message', (d: Buffer) => resolve(d.toString('utf8')));
      ws.once('error', reject);
    });
    ws.close();
    expect(JSON.parse(first)).toMatchObject({ type: 'start' });
  });
});

describe('gateway internal API', () => {
  it('listens on a socket only the node’s user may open', async () => {
    expect(statSync(internalSocket.socketPath).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, 'internal')).mode & 0o077).toBe(0);
  });

  it('refuses every spelling of every route without the internal bearer', async () => {
    expect(internalOps.length).toBeGreaterThan(10);
    const bad: string[] = [];
    for (const op of internalOps) {
      bad.push(...(await probe(internalSocket, op, variantsOf(op), {})));
      bad.push(...(await probe(internalSocket, op, variantsOf(op), bearer(nodeSecret.toString('hex')))));
      for (const h of [bearer(aToken), bearer(bKey), bearer(deriveNodeKeys(nodeSecret).accessToken.toString('hex'))])
        bad.push(...(await probe(internalSocket, op, asWritten(op), h)));
    }
    expect(bad).toEqual([]);
  });

  it('serves no data-plane route, even with a valid token', async () => {
    const bad: string[] = [];
    for (const op of dataOps)
      bad.push(...(await probe(internalSocket, op, asWritten(op), bearer(aToken), (r) => r.status === 404 && errorCodeOf(r.body) === 'not_found')));
    expect(bad).toEqual([]);
  });
});

describe('control plane', () => {
  it('refuses every spelling of every route to nobody and to credentials that are not API keys', async () => {
    expect(apiOps.length).toBeGreaterThan(20);
    const bad: string[] = [];
    for (const op of apiOps) {
      bad.push(...(await probe(apiPort, op, variantsOf(op), {})));
      for (const h of [bearer('sg_bogus'), bearer(aToken), bearer(nodeSecret.toString('hex')), bearer(internalBearer), { authorization: 'Bearer' }])
        bad.push(...(await probe(apiPort, op, asWritten(op), h)));
    }
    expect(bad).toEqual([]);
  });

  it('gives another tenant nothing of tenant A’s, however the path is spelt', async () => {
    const bad: string[] = [];
    const mentionsA = (r: RawResponse) => [a.id, aSnapshotId, aCommandId].some((id) => r.body.includes(id));
    for (const op of apiOps) {
      const namesA = /\{(id|requestId)\}/.test(op.path) || op.path === '/v1/forks';
      // A secret's name is the tenant's own namespace: B writing "its" AUTHH_SECRET is B's business.
      if (op.path.startsWith('/v1/secrets/')) continue;
      // Creating sandboxes as B proves nothing about A (and costs a VM); listing does, below.
      if (!namesA && op.method !== 'GET') continue;
      const allowed = namesA ? (r: RawResponse) => r.status >= 400 && r.status < 500 : (r: RawResponse) => r.status < 500 && !mentionsA(r);
      bad.push(...(await probe(apiPort, op, variantsOf(op), bearer(bKey), allowed)));
    }
    expect(bad).toEqual([]);
  });
});

describe('after all that', () => {
  it('tenant A’s sandbox is exactly as it was: no command ran, no file, timeout, policy or snapshot changed', async () => {
    expect(await stateOfA()).toEqual(before);
    expect((await a.commands.run('echo still mine')).stdout).toBe('still mine\n');
  });
});
