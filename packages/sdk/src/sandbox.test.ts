// The SDK against a scripted server: auth headers, access-token refresh, output framing and offsets, stdin, PTY, files, error mapping.
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import {
  CommandExitError,
  CommandTimeoutError,
  ConflictError,
  ConnectionError,
  InvalidArgumentError,
  NotFoundError,
  ProtocolError,
  type SandglassError,
} from './errors.js';
import { Sandbox, parseForkSource } from './sandbox.js';
import { Secrets } from './secrets.js';
import { frame, readBody, sendJson, startTestServer, wireError, type TestServer } from './test-server.js';
import type { Access, ApprovalRequest, SandboxInfo, SecretInfo, SnapshotInfo } from './types.js';

const SBX = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const CMD = 'cmd_bbbbbbbbbbbbbbbbbbbb';
const STREAM = `/v1/sandboxes/${SBX}/commands/${CMD}/stream`;
const OUTPUT = `GET /v1/sandboxes/${SBX}/commands/${CMD}/output`;

/** The output route's body: each frame (a binary stream frame, or a message as `0 | JSON`) behind its u32 length. */
function records(...frames: Array<Buffer | Record<string, unknown>>): Buffer {
  return Buffer.concat(
    frames.map((f) => {
      const frame = Buffer.isBuffer(f) ? f : Buffer.concat([Buffer.from([0]), Buffer.from(JSON.stringify(f))]);
      const len = Buffer.alloc(4);
      len.writeUInt32BE(frame.length);
      return Buffer.concat([len, frame]);
    }),
  );
}

function sendRecords(res: ServerResponse, body: Buffer): void {
  res.writeHead(200, { 'content-type': 'application/octet-stream' });
  res.end(body);
}

let server: TestServer;
let accessIssued: number;

function access(token: string, lifetimeMs = 15 * 60_000): Access {
  return { gatewayUrl: server.url, token, expiresAt: new Date(Date.now() + lifetimeMs).toISOString() };
}

function info(extra: Partial<SandboxInfo> = {}): SandboxInfo {
  const now = new Date().toISOString();
  return {
    id: SBX,
    tenantId: 'ten_x',
    template: 'base',
    state: 'running',
    memoryMib: 256,
    vcpus: 1,
    timeoutS: 300,
    metadata: {},
    createdAt: now,
    expiresAt: now,
    snapshotIntervalS: 60,
    sourceSnapshotId: null,
    diskMib: null,
    pausedAt: null,
    network: null,
    secrets: [],
    onTimeout: 'kill',
    onTimeoutKeepMemory: true,
    autoResume: false,
    ...extra,
  };
}

const command = { id: CMD, pid: 42, argv: ['x'], cwd: '/root', pty: false, state: 'running', timedOut: false, outputBytes: 0, startedAt: '' };

async function create(initialAccess: Access = access('tok0')): Promise<Sandbox> {
  server.on('POST /v1/sandboxes', (_req, res) => sendJson(res, 201, info({ access: initialAccess })));
  return Sandbox.create({ apiUrl: server.url, apiKey: 'sgk_test' });
}

/** Gateway side of POST …/commands followed by a scripted output stream. */
function scriptCommand(script: (ws: WebSocket, url: URL) => void): void {
  server.on(`POST /v1/sandboxes/${SBX}/commands`, (_req, res) => sendJson(res, 201, command));
  server.onWs(STREAM, (ws, url) => script(ws, url));
}

const start = (ws: WebSocket, startOffset = 0) => ws.send(JSON.stringify({ type: 'start', startOffset, command }));
const exit = (ws: WebSocket, endOffset: number, exitCode: number | null = 0, signal: string | null = null, timedOut = false) => {
  ws.send(JSON.stringify({ type: 'exit', exitCode, signal, timedOut, endOffset }));
  ws.close();
};

beforeEach(async () => {
  server = await startTestServer();
  accessIssued = 0;
  server.on(`POST /v1/sandboxes/${SBX}/access`, (_req, res) => sendJson(res, 200, access(`tok${++accessIssued}`)));
});
afterEach(() => server.close());

describe('Sandbox lifecycle', () => {
  it('creates with the API key and uses the access grant of the create response on the gateway', async () => {
    let body: unknown;
    server.on('POST /v1/sandboxes', async (req, res) => {
      body = JSON.parse((await readBody(req)).toString());
      sendJson(res, 201, info({ access: access('tok0') }));
    });
    const sbx = await Sandbox.create({ apiUrl: server.url, apiKey: 'sgk_test', template: 'base', memoryMib: 512, metadata: { a: 'b' } });
    expect(sbx.id).toBe(SBX);
    expect(body).toEqual({ template: 'base', memoryMib: 512, metadata: { a: 'b' } });
    expect(server.requests[0]!.auth).toBe('Bearer sgk_test');

    server.on(`GET /v1/sandboxes/${SBX}/files/stat`, (_req, res) =>
      sendJson(res, 200, { name: 'x', path: '/x', type: 'file', sizeBytes: 1, mode: 420, mtime: '' }),
    );
    await sbx.files.stat('/x');
    expect(server.requests.at(-1)!.auth).toBe('Bearer tok0');
    expect(accessIssued).toBe(0);
  });

  it('maps a non-2xx answer to the typed error, and kill(id) of an unknown sandbox to false', async () => {
    server.on(`GET /v1/sandboxes/${SBX}`, (_req, res) => wireError(res, 404, 'sandbox_not_found', 'no such sandbox'));
    server.on(`DELETE /v1/sandboxes/${SBX}`, (_req, res) => wireError(res, 404, 'sandbox_not_found'));
    const err = await Sandbox.connect(SBX, { apiUrl: server.url, apiKey: 'k' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err).toMatchObject({ code: 'sandbox_not_found', status: 404, requestId: 'req_test', message: 'no such sandbox' });
    expect(await Sandbox.kill(SBX, { apiUrl: server.url, apiKey: 'k' })).toBe(false);
  });

  it('reports a server that is not there as connection_failed', async () => {
    const url = server.url;
    await server.close();
    const err = await Sandbox.list({ apiUrl: url, apiKey: 'k' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectionError);
    expect((err as SandglassError).message).toContain('sandglass up');
    server = await startTestServer();
  });

  /** A sandbox whose gateway is dead (nothing listens there): the control plane now places it on `other`, token tok1. */
  async function movedTo(other: TestServer): Promise<Sandbox> {
    const dead = await startTestServer();
    const deadUrl = dead.url;
    await dead.close();
    const sbx = await create({ gatewayUrl: deadUrl, token: 'tok0', expiresAt: new Date(Date.now() + 600_000).toISOString() });
    server.on(`POST /v1/sandboxes/${SBX}/access`, (_req, res) =>
      sendJson(res, 200, { gatewayUrl: other.url, token: 'tok1', expiresAt: new Date(Date.now() + 600_000).toISOString() }),
    );
    return sbx;
  }

  it('follows a sandbox that moved: a gone gateway or one without the sandbox sends it back to the control plane', async () => {
    const other = await startTestServer();
    try {
      const sbx = await movedTo(other);
      other.on(`GET /v1/sandboxes/${SBX}/files`, (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.end('moved along');
      });
      expect((await sbx.files.read('/f')).toString()).toBe('moved along');
      expect(other.requests.at(-1)?.auth).toBe('Bearer tok1');
      // A gateway that answers it has no such sandbox (it restarted): asked again, the control plane names the same one,
      // so the error stands instead of looping.
      other.on(`GET /v1/sandboxes/${SBX}/files`, (_req, res) => wireError(res, 404, 'sandbox_not_found'));
      await expect(sbx.files.read('/f')).rejects.toMatchObject({ code: 'sandbox_not_found' });
    } finally {
      await other.close();
    }
  });

  it('sends a POST again on the node a sandbox moved to when the old one refused the connection', async () => {
    const other = await startTestServer();
    try {
      const sbx = await movedTo(other);
      other.on(`POST /v1/sandboxes/${SBX}/files/rename`, (_req, res) => sendJson(res, 204, undefined));
      await sbx.files.rename('/a', '/b');
      expect(other.requests.at(-1)).toMatchObject({ method: 'POST', path: `/v1/sandboxes/${SBX}/files/rename`, auth: 'Bearer tok1' });
    } finally {
      await other.close();
    }
  });

  it('sends list filters, timeout and events to the control plane', async () => {
    server.on('GET /v1/sandboxes', (_req, res) => sendJson(res, 200, { sandboxes: [info()] }));
    server.on(`POST /v1/sandboxes/${SBX}/timeout`, async (req, res) =>
      sendJson(res, 200, info({ timeoutS: JSON.parse((await readBody(req)).toString()).timeoutS })),
    );
    server.on(`GET /v1/sandboxes/${SBX}/events`, (_req, res, url) => {
      // Two pages: a full one of 1000, then the rest.
      const after = Number(url.searchParams.get('afterSeq') ?? 0);
      const n = after === 0 ? 1000 : 2;
      sendJson(res, 200, { events: Array.from({ length: n }, (_, i) => ({ seq: after + i + 1, type: 'sandbox.created' })) });
    });
    const list = await Sandbox.list({ apiUrl: server.url, apiKey: 'k', state: 'running' });
    expect(list.map((s) => s.id)).toEqual([SBX]);
    expect(server.requests.at(-1)!.query.get('state')).toBe('running');
    const sbx = await create();
    expect((await sbx.setTimeout(900)).timeoutS).toBe(900);
    const events = await sbx.events();
    expect(events.map((e) => e.seq)).toEqual(Array.from({ length: 1002 }, (_, i) => i + 1));
  });
});

const SNAP = 'snap_cccccccccccccccccccc';

function snapshotInfo(extra: Partial<SnapshotInfo> = {}): SnapshotInfo {
  return {
    id: SNAP,
    sandboxId: SBX,
    parentId: null,
    takenAt: '2025-06-01T12:00:00.000Z',
    reason: 'rolling',
    name: null,
    pinned: false,
    sizeAddedBytes: 4096,
    memoryMib: 256,
    vcpus: 1,
    template: 'base',
    memory: true,
    ...extra,
  };
}

/** Routes a JSON endpoint and keeps the bodies it received. */
function capture(route: string, status: number, answer: (body: Record<string, unknown>) => unknown): Record<string, unknown>[] {
  const bodies: Record<string, unknown>[] = [];
  server.on(route, async (req, res) => {
    const text = (await readBody(req)).toString();
    const body = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
    bodies.push(body);
    sendJson(res, status, answer(body));
  });
  return bodies;
}

describe('time travel', () => {
  const cfg = () => ({ apiUrl: server.url, apiKey: 'sgk_test' });

  it('creates with a snapshot interval and changes it', async () => {
    const created = capture('POST /v1/sandboxes', 201, () => info({ snapshotIntervalS: 15, access: access('tok0') }));
    const sbx = await Sandbox.create({ ...cfg(), snapshotIntervalS: 15 });
    expect(created).toEqual([{ snapshotIntervalS: 15 }]);
    const set = capture(`POST /v1/sandboxes/${SBX}/snapshot-interval`, 200, (b) => info({ snapshotIntervalS: b.snapshotIntervalS as number }));
    expect((await sbx.setSnapshotInterval(600)).snapshotIntervalS).toBe(600);
    expect(set).toEqual([{ snapshotIntervalS: 600 }]);
  });

  it('takes named snapshots, pauses, and lists the timeline', async () => {
    const sbx = await create();
    const taken = capture(`POST /v1/sandboxes/${SBX}/snapshots`, 201, (b) =>
      snapshotInfo({ reason: 'manual', name: (b.name as string) ?? null, pinned: b.name !== undefined }),
    );
    expect(await sbx.snapshot({ name: 'v1' })).toMatchObject({ name: 'v1', pinned: true, reason: 'manual' });
    expect(await sbx.snapshot()).toMatchObject({ name: null, pinned: false });
    expect(taken).toEqual([{ name: 'v1' }, {}]);

    server.on(`POST /v1/sandboxes/${SBX}/pause`, (_req, res) =>
      sendJson(res, 200, { sandbox: info({ state: 'paused' }), snapshot: snapshotInfo({ reason: 'pause' }) }),
    );
    expect(await sbx.pause()).toEqual(snapshotInfo({ reason: 'pause' }));

    const timeline = [snapshotInfo(), snapshotInfo({ id: 'snap_dddddddddddddddddddd', parentId: SNAP, takenAt: '2025-06-01T12:01:00.000Z' })];
    server.on(`GET /v1/sandboxes/${SBX}/snapshots`, (_req, res) => sendJson(res, 200, { snapshots: timeline }));
    expect(await sbx.timeline()).toEqual(timeline);
    expect(server.requests.filter((r) => !r.path.endsWith('/access')).every((r) => r.auth === 'Bearer sgk_test')).toBe(true);
  });

  it('resumes by id with a Date, a string time or a snapshot id, and uses the access grant of the answer', async () => {
    const resumed = capture(`POST /v1/sandboxes/${SBX}/resume`, 200, () => info({ access: access('tok_resumed') }));
    const sbx = await Sandbox.resume(SBX, { ...cfg(), at: new Date(Date.UTC(2025, 5, 1, 12, 0, 30)) });
    await Sandbox.resume(SBX, { ...cfg(), at: '2025-06-01T12:00:00Z' });
    await Sandbox.resume(SBX, { ...cfg(), snapshotId: SNAP });
    await Sandbox.resume(SBX, cfg());
    expect(resumed).toEqual([{ at: '2025-06-01T12:00:30.000Z' }, { at: '2025-06-01T12:00:00.000Z' }, { snapshotId: SNAP }, {}]);
    await expect(Sandbox.resume(SBX, { ...cfg(), at: 'soon' })).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'at' } });
    expect(resumed).toHaveLength(4);

    server.on(`GET /v1/sandboxes/${SBX}/commands`, (_req, res) => sendJson(res, 200, { commands: [] }));
    await sbx.commands.list();
    expect(server.requests.at(-1)!.auth).toBe('Bearer tok_resumed');
    expect(accessIssued).toBe(0);
  });

  it('reports a resume before the oldest snapshot as InvalidArgumentError with the details', async () => {
    server.on(`POST /v1/sandboxes/${SBX}/resume`, (_req, res) =>
      sendJson(res, 400, {
        error: { code: 'snapshot_out_of_range', message: 'too early', requestId: 'req_1', details: { field: 'at', oldest: '2025-06-01T12:00:10.000Z' } },
      }),
    );
    const err = await Sandbox.resume(SBX, { ...cfg(), at: '2025-01-01T00:00:00Z' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ code: 'snapshot_out_of_range', details: { field: 'at', oldest: '2025-06-01T12:00:10.000Z' } });
  });

  it('forks from a snapshot, a sandbox, a sandbox at a time, or a handle; each fork has its own access', async () => {
    const forks = ['sbx_eeeeeeeeeeeeeeeeeeee', 'sbx_ffffffffffffffffffff'];
    const bodies = capture('POST /v1/forks', 201, (b) => ({
      snapshotId: SNAP,
      sandboxes: forks.slice(0, (b.count as number | undefined) ?? 1).map((id, i) => info({ id, sourceSnapshotId: SNAP, access: access(`tok_fork${i}`) })),
    }));
    const two = await Sandbox.fork(SNAP, { ...cfg(), count: 2, timeoutS: 60, metadata: { run: '1' } });
    expect(two.map((s) => s.id)).toEqual(forks);
    await Sandbox.fork(SBX, cfg());
    await Sandbox.fork(`${SBX}@2025-06-01T12:00:30Z`, cfg());
    const handle = await create();
    await Sandbox.fork(handle, { count: 2 });
    expect(bodies).toEqual([
      { snapshotId: SNAP, count: 2, timeoutS: 60, metadata: { run: '1' } },
      { sandboxId: SBX },
      { sandboxId: SBX, at: '2025-06-01T12:00:30.000Z' },
      { sandboxId: SBX, count: 2 },
    ]);

    for (const id of forks) server.on(`GET /v1/sandboxes/${id}/commands`, (_req, res) => sendJson(res, 200, { commands: [] }));
    await two[1]!.commands.list();
    expect(server.requests.at(-1)).toMatchObject({ path: `/v1/sandboxes/${forks[1]}/commands`, auth: 'Bearer tok_fork1' });
  });

  it('parses fork sources, refusing anything else before any request', async () => {
    expect(parseForkSource(SNAP)).toEqual({ snapshotId: SNAP });
    expect(parseForkSource(SBX)).toEqual({ sandboxId: SBX });
    expect(parseForkSource(`${SBX}@2025-06-01T14:00:00+02:00`)).toEqual({ sandboxId: SBX, at: '2025-06-01T12:00:00.000Z' });
    for (const bad of ['', 'tpl_x', `${SBX}@`, `${SBX}@yesterday`, `snap_x@2025-06-01T12:00:00Z`, ` ${SBX}`]) {
      expect(() => parseForkSource(bad), bad).toThrow(InvalidArgumentError);
    }
    const before = server.requests.length;
    await expect(Sandbox.fork('nope', cfg())).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'from' } });
    expect(server.requests.length).toBe(before);
  });

  it('deletes a snapshot by id, and maps snapshot_not_found', async () => {
    server.on(`DELETE /v1/snapshots/${SNAP}`, (_req, res) => sendJson(res, 204, undefined));
    await Sandbox.deleteSnapshot(SNAP, cfg());
    expect(server.requests.at(-1)).toMatchObject({ method: 'DELETE', path: `/v1/snapshots/${SNAP}`, auth: 'Bearer sgk_test' });
    server.on('DELETE /v1/snapshots/snap_gone', (_req, res) => wireError(res, 404, 'snapshot_not_found', 'no snapshot snap_gone'));
    const err = await Sandbox.deleteSnapshot('snap_gone', cfg()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err).toMatchObject({ code: 'snapshot_not_found', status: 404 });
  });
});

describe('egress: network, secrets, approvals', () => {
  const cfg = () => ({ apiUrl: server.url, apiKey: 'sgk_test' });
  const secretInfo = (b: Record<string, unknown>, name = 'GITHUB_TOKEN'): SecretInfo => ({
    name,
    hosts: b.hosts as string[],
    header: (b.header as string) ?? null,
    format: (b.format as string) ?? (b.header ? '{value}' : null),
    bodyContentTypes: (b.bodyContentTypes as string[]) ?? [],
    approval: (b.approval as 'none' | 'required') ?? 'none',
    allowPlaintext: (b.allowPlaintext as boolean) ?? false,
    allowUpgrade: (b.allowUpgrade as boolean) ?? false,
    createdAt: '2025-06-01T12:00:00.000Z',
    updatedAt: '2025-06-01T12:00:00.000Z',
  });
  const approval = (requestId: string): ApprovalRequest => ({
    requestId,
    sandboxId: SBX,
    secret: 'GITHUB_TOKEN',
    host: 'api.github.com',
    port: 443,
    method: 'POST',
    path: '/repos/acme/app/issues',
    requestedAt: '2025-06-01T12:00:00.000Z',
    expiresAt: '2025-06-01T12:05:00.000Z',
  });

  it('creates with a network policy and secrets, and replaces the policy', async () => {
    const network = { allow: ['api.github.com', '*.pypi.org'], deny: ['evil.pypi.org'] };
    const created = capture('POST /v1/sandboxes', 201, (b) => info({ network: b.network as never, secrets: b.secrets as string[], access: access('tok0') }));
    const sbx = await Sandbox.create({ ...cfg(), network, secrets: ['GITHUB_TOKEN'] });
    expect(created).toEqual([{ network, secrets: ['GITHUB_TOKEN'] }]);

    const set = capture(`PUT /v1/sandboxes/${SBX}/network`, 200, (b) => ({ network: { allow: b.allow ?? [], deny: b.deny ?? [] } }));
    expect(await sbx.setNetwork({ allow: ['api.github.com'] })).toEqual({ allow: ['api.github.com'], deny: [] });
    expect(set).toEqual([{ allow: ['api.github.com'] }]);
  });

  it('sets, lists and removes secrets; the value goes only into the PUT body', async () => {
    const put = capture('PUT /v1/secrets/GITHUB_TOKEN', 201, (b) => secretInfo(b));
    const stored = await Secrets.set('GITHUB_TOKEN', 'ghp_value', {
      ...cfg(),
      hosts: ['api.github.com'],
      header: 'Authorization',
      format: 'Bearer {value}',
      approval: 'required',
    });
    expect(put).toEqual([{ value: 'ghp_value', hosts: ['api.github.com'], header: 'Authorization', format: 'Bearer {value}', approval: 'required' }]);
    expect(stored).toMatchObject({ name: 'GITHUB_TOKEN', format: 'Bearer {value}', approval: 'required' });
    expect(JSON.stringify(stored)).not.toContain('ghp_value');

    server.on('GET /v1/secrets', (_req, res) => sendJson(res, 200, { secrets: [stored] }));
    expect(await Secrets.list(cfg())).toEqual([stored]);

    server.on('DELETE /v1/secrets/GITHUB_TOKEN', (_req, res) => sendJson(res, 204, undefined));
    server.on('DELETE /v1/secrets/NOPE', (_req, res) => wireError(res, 404, 'secret_not_found', 'No secret NOPE exists for your tenant.'));
    expect(await Secrets.remove('GITHUB_TOKEN', cfg())).toBe(true);
    expect(await Secrets.remove('NOPE', cfg())).toBe(false);
    expect(server.requests.every((r) => r.auth === 'Bearer sgk_test')).toBe(true);

    server.on('PUT /v1/secrets/BAD', (_req, res) =>
      sendJson(res, 400, { error: { code: 'policy_invalid', message: "hosts[0]: '*' is too broad", requestId: 'req_1', details: { field: 'hosts[0]' } } }),
    );
    const err = await Secrets.set('BAD', 'value', { ...cfg(), hosts: ['*'] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ code: 'policy_invalid', details: { field: 'hosts[0]' } });
  });

  it('lists approvals and decides them, statically or on the handle', async () => {
    const sbx = await create();
    server.on(`GET /v1/sandboxes/${SBX}/approvals`, (_req, res) => sendJson(res, 200, { approvals: [approval('apr_a')] }));
    expect(await sbx.approvals()).toEqual([approval('apr_a')]);
    const a = capture('POST /v1/approvals/apr_a', 204, () => undefined);
    const b = capture('POST /v1/approvals/apr_b', 204, () => undefined);
    await Sandbox.approve('apr_a', { ...cfg(), sandboxId: SBX, ttlS: 600 });
    await Sandbox.deny('apr_b', { ...cfg(), sandboxId: SBX });
    await sbx.approve('apr_a');
    await sbx.deny('apr_b');
    expect(a).toEqual([
      { sandboxId: SBX, decision: 'approve', ttlS: 600 },
      { sandboxId: SBX, decision: 'approve' },
    ]);
    expect(b).toEqual([
      { sandboxId: SBX, decision: 'deny' },
      { sandboxId: SBX, decision: 'deny' },
    ]);
    server.on('POST /v1/approvals/apr_gone', (_req, res) => wireError(res, 404, 'approval_not_found'));
    await expect(sbx.approve('apr_gone')).rejects.toMatchObject({ code: 'approval_not_found', status: 404 });
  });

  it('calls back once per new pending request until stopped, reporting errors without stopping', async () => {
    const sbx = await create();
    const queue: ApprovalRequest[][] = [[approval('apr_a')], [approval('apr_a'), approval('apr_b')], [], [approval('apr_c')]];
    let polls = 0;
    server.on(`GET /v1/sandboxes/${SBX}/approvals`, (_req, res) => {
      polls++;
      if (polls === 3) return wireError(res, 502, 'gateway_unavailable');
      sendJson(res, 200, { approvals: queue.shift() ?? [] });
    });
    const called: string[] = [];
    const errors: unknown[] = [];
    const stop = sbx.onApprovalRequest(
      (r) => {
        called.push(r.requestId);
        if (r.requestId === 'apr_b') throw new Error('callback failed');
      },
      { intervalMs: 10, onError: (e) => errors.push(e) },
    );
    await expect.poll(() => called, { timeout: 5_000 }).toEqual(['apr_a', 'apr_b', 'apr_c']);
    stop();
    // A poll already in flight may still land; none starts after it.
    await new Promise((r) => setTimeout(r, 50));
    const after = polls;
    await new Promise((r) => setTimeout(r, 50));
    expect(polls).toBe(after);
    expect(called).toEqual(['apr_a', 'apr_b', 'apr_c']);
    expect(errors.map((e) => (e as { code?: string; message: string }).code ?? (e as Error).message)).toEqual(['callback failed', 'gateway_unavailable']);
  });

  it('filters events by type families', async () => {
    const sbx = await create();
    server.on(`GET /v1/sandboxes/${SBX}/events`, (_req, res) => sendJson(res, 200, { events: [{ seq: 1, type: 'egress.request' }] }));
    expect((await sbx.events({ types: ['egress', 'secret'] })).map((e) => e.type)).toEqual(['egress.request']);
    expect(server.requests.at(-1)!.query.get('type')).toBe('egress,secret');
    await sbx.events();
    expect(server.requests.at(-1)!.query.has('type')).toBe(false);
  });
});

describe('access tokens', () => {
  it('refreshes a token close to expiry once, however many calls wait for it', async () => {
    const sbx = await create(access('tok0', 100));
    server.on(`GET /v1/sandboxes/${SBX}/commands`, (_req, res) => sendJson(res, 200, { commands: [] }));
    await new Promise((r) => setTimeout(r, 60));
    await Promise.all([sbx.commands.list(), sbx.commands.list(), sbx.commands.list()]);
    expect(accessIssued).toBe(1);
    const gatewayAuth = server.requests.filter((r) => r.path.endsWith('/commands')).map((r) => r.auth);
    expect(gatewayAuth).toEqual(['Bearer tok1', 'Bearer tok1', 'Bearer tok1']);
  });

  it('gets a new token and retries once when the gateway says unauthenticated', async () => {
    const sbx = await create();
    server.on(`GET /v1/sandboxes/${SBX}/commands`, (req, res) =>
      req.headers.authorization === 'Bearer tok0' ? wireError(res, 401, 'unauthenticated', 'expired') : sendJson(res, 200, { commands: [command] }),
    );
    expect(await sbx.commands.list()).toHaveLength(1);
    expect(accessIssued).toBe(1);
  });
});

describe('commands', () => {
  it('runs a command, decoding UTF-8 split across frames and keeping stdout and stderr apart', async () => {
    const euro = Buffer.from('€'); // 3 bytes, split over two frames
    let startBody: unknown;
    server.on(`POST /v1/sandboxes/${SBX}/commands`, async (req, res) => {
      startBody = JSON.parse((await readBody(req)).toString());
      sendJson(res, 201, command);
    });
    server.onWs(STREAM, (ws, url) => {
      expect(url.searchParams.get('fromOffset')).toBe('0');
      start(ws);
      ws.send(frame(1, 0, Buffer.concat([Buffer.from('a'), euro.subarray(0, 1)])));
      ws.send(frame(2, 2, 'err'));
      ws.send(frame(1, 5, Buffer.concat([euro.subarray(1), Buffer.from('b\n')])));
      exit(ws, 9);
    });
    const sbx = await create();
    const chunks: string[] = [];
    const bytes: number[] = [];
    const result = await sbx.commands.run('echo hi', {
      cwd: '/tmp',
      envs: { A: '1' },
      onStdout: (s) => chunks.push(s),
      onStdoutBytes: (b) => bytes.push(b.length),
    });
    expect(result).toEqual({ exitCode: 0, stdout: 'a€b\n', stderr: 'err', timedOut: false });
    expect(chunks.join('')).toBe('a€b\n');
    expect(chunks.every((c) => !c.includes('\ufffd'))).toBe(true);
    expect(bytes).toEqual([2, 4]);
    expect(startBody).toEqual({ cmd: 'echo hi', cwd: '/tmp', envs: { A: '1' }, stdin: false, timeoutMs: 60_000 });
    expect(server.requests.find((r) => r.path === STREAM)!.auth).toBe('Bearer tok0');
  });

  it('rejects with CommandExitError carrying the result on a non-zero exit, 128+signal when killed', async () => {
    let n = 0;
    scriptCommand((ws) => {
      start(ws);
      ws.send(frame(2, 0, 'boom'));
      if (n++ === 0) exit(ws, 4, 3);
      else exit(ws, 4, null, 'SIGKILL');
    });
    const sbx = await create();
    const err = await sbx.commands.exec(['false'], {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect((err as CommandExitError).result).toMatchObject({ exitCode: 3, stderr: 'boom', error: 'command exited with code 3' });
    const killed = (await sbx.commands.run('sleep 9').catch((e: unknown) => e)) as CommandExitError;
    expect(killed.result).toMatchObject({ exitCode: 137, signal: 'SIGKILL' });
  });

  it('rejects with CommandTimeoutError when the gateway timed the command out', async () => {
    scriptCommand((ws) => {
      start(ws);
      exit(ws, 0, null, 'SIGKILL', true);
    });
    const sbx = await create();
    const err = await sbx.commands.run('sleep 9', { timeoutMs: 50 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandTimeoutError);
    expect((err as CommandTimeoutError).result.timedOut).toBe(true);
  });

  it('reconnects from its offset after a dropped socket, over one HTTP request, and drops replayed bytes', async () => {
    const offsets: (string | null)[] = [];
    scriptCommand((ws, url) => {
      offsets.push(url.searchParams.get('fromOffset'));
      start(ws);
      ws.send(frame(1, 0, 'hello '));
      ws.send(frame(1, 6, 'wor'), () => ws.terminate());
    });
    server.on(OUTPUT, (_req, res, url) => {
      offsets.push(`http ${url.searchParams.get('fromOffset')}`);
      // The gateway may replay from an earlier frame boundary: the SDK must skip what it already has.
      sendRecords(
        res,
        records({ type: 'start', startOffset: 6, command }, frame(1, 6, 'world'), { type: 'exit', exitCode: 0, signal: null, timedOut: false, endOffset: 11 }),
      );
    });
    const sbx = await create();
    const h = await sbx.commands.run('x', { background: true });
    const result = await h.wait();
    expect(result.stdout).toBe('hello world');
    expect(offsets).toEqual(['0', 'http 9']);
    expect(h.outputOffset).toBe(11);
  });

  it('re-attaches on the node a sandbox moved to: a gateway without it sends the stream back to the control plane', async () => {
    const other = await startTestServer();
    try {
      const sbx = await create();
      // The old gateway (after a restart) does not have the sandbox any more; the control plane names `other`.
      server.on(OUTPUT, (_req, res) => wireError(res, 404, 'sandbox_not_found', 'not here'));
      server.on(`POST /v1/sandboxes/${SBX}/access`, (_req, res) =>
        sendJson(res, 200, { gatewayUrl: other.url, token: 'tok-moved', expiresAt: new Date(Date.now() + 600_000).toISOString() }),
      );
      other.on(OUTPUT, (_req, res, url) => {
        expect(url.searchParams.get('fromOffset')).toBe('4');
        sendRecords(
          res,
          records({ type: 'start', startOffset: 4, command }, frame(1, 4, 'moved'), { type: 'exit', exitCode: 0, signal: null, timedOut: false, endOffset: 9 }),
        );
      });
      const h = await sbx.commands.connect(CMD, { fromOffset: 4 });
      expect((await h.wait()).stdout).toBe('moved');
      expect(other.requests.at(-1)?.auth).toBe('Bearer tok-moved');
    } finally {
      await other.close();
    }
  });

  it('connect resumes at fromOffset without repeating bytes, over one HTTP request followed to the exit', async () => {
    server.on(OUTPUT, (_req, res, url) => {
      expect(url.searchParams.get('fromOffset')).toBe('3');
      expect(url.searchParams.get('follow')).toBe('true');
      sendRecords(
        res,
        records({ type: 'start', startOffset: 3, command }, frame(1, 0, 'abcdef'), { type: 'exit', exitCode: 0, signal: null, timedOut: false, endOffset: 6 }),
      );
    });
    const sbx = await create();
    const h = await sbx.commands.connect(CMD, { fromOffset: 3 });
    expect(h.pid).toBe(42);
    expect((await h.wait()).stdout).toBe('def');
  });

  it('connect asks again from its offset when a body ends before the exit, with records split across reads', async () => {
    let calls = 0;
    server.on(OUTPUT, (_req, res, url) => {
      calls++;
      if (calls === 1) {
        expect(url.searchParams.get('fromOffset')).toBe('0');
        const body = records({ type: 'start', startOffset: 0, command }, frame(1, 0, 'hello '));
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.write(body.subarray(0, 7));
        setTimeout(() => res.end(body.subarray(7)), 10);
        return;
      }
      expect(url.searchParams.get('fromOffset')).toBe('6');
      sendRecords(
        res,
        records({ type: 'start', startOffset: 6, command }, frame(1, 6, 'world'), { type: 'exit', exitCode: 0, signal: null, timedOut: false, endOffset: 11 }),
      );
    });
    const sbx = await create();
    const h = await sbx.commands.connect(CMD, { fromOffset: 0 });
    expect((await h.wait()).stdout).toBe('hello world');
    expect(calls).toBe(2);
  });

  it('readOutput returns the bytes after an offset and the exit, in one request', async () => {
    server.on(OUTPUT, (_req, res, url) => {
      expect(url.searchParams.get('follow')).toBeNull();
      sendRecords(
        res,
        records({ type: 'start', startOffset: 2, command }, frame(1, 2, 'cd'), frame(2, 4, 'e'), {
          type: 'exit',
          exitCode: 1,
          signal: null,
          timedOut: false,
          endOffset: 5,
        }),
      );
    });
    const sbx = await create();
    const read = await sbx.commands.readOutput(CMD, { fromOffset: 2 });
    expect(read).toMatchObject({ startOffset: 2, outputOffset: 5, droppedBytes: 0, exit: { exitCode: 1, endOffset: 5 } });
    expect(read.pieces.map((p) => [p.fd, p.offset, Buffer.from(p.bytes).toString()])).toEqual([
      [1, 2, 'cd'],
      [2, 4, 'e'],
    ]);
  });

  it('counts bytes the bounded buffer dropped before the stream started', async () => {
    scriptCommand((ws) => {
      start(ws, 100);
      ws.send(frame(1, 100, 'tail'));
      exit(ws, 104);
    });
    const sbx = await create();
    const result = await sbx.commands.run('yes | head -c 104');
    expect(result).toMatchObject({ stdout: 'tail', droppedBytes: 100 });
  });

  it('fails loudly when output bytes are missing mid-stream', async () => {
    scriptCommand((ws) => {
      start(ws);
      ws.send(frame(1, 0, 'ab'));
      ws.send(frame(1, 5, 'cd'));
    });
    const sbx = await create();
    const err = await sbx.commands.run('x').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as Error).message).toMatch(/jumped from 2 to 5/);
  });

  it('fails with the typed error the gateway reports on the stream before closing it', async () => {
    scriptCommand((ws) => {
      start(ws);
      ws.send(JSON.stringify({ type: 'error', error: { code: 'sandbox_not_running', message: 'the sandbox ended', requestId: 'req_s' } }));
      ws.close(1011, 'sandbox_not_running');
    });
    // Asked again (the error is retryable), the output route says the same.
    server.on(OUTPUT, (_req, res) =>
      sendRecords(res, records({ type: 'error', error: { code: 'sandbox_not_running', message: 'the sandbox ended', requestId: 'req_s' } })),
    );
    const sbx = await create();
    const err = await sbx.commands.run('x').catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'sandbox_not_running', message: 'the sandbox ended', requestId: 'req_s' });
  });

  it('surfaces a wire error (sandbox_not_running) from connect', async () => {
    server.on(OUTPUT, (_req, res) => wireError(res, 409, 'sandbox_not_running', 'the sandbox ended'));
    const sbx = await create();
    const err = await sbx.commands.connect(CMD, { fromOffset: 0 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect(err).toMatchObject({ code: 'sandbox_not_running', status: 409 });
  });

  it('sends stdin in call order, then EOF; kill of an exited command is false', async () => {
    const got: string[] = [];
    server.on(`POST /v1/sandboxes/${SBX}/commands/${CMD}/stdin`, async (req, res, url) => {
      const body = (await readBody(req)).toString();
      // Later writes answer sooner: order must come from the client, not the server's timing.
      await new Promise((r) => setTimeout(r, body === 'one' ? 30 : 0));
      got.push(url.searchParams.get('eof') === 'true' ? `EOF${body}` : body);
      sendJson(res, 204, undefined);
    });
    server.on(`POST /v1/sandboxes/${SBX}/commands/${CMD}/signal`, (_req, res) => wireError(res, 409, 'command_exited'));
    let ws!: WebSocket;
    scriptCommand((w) => {
      ws = w;
      start(w);
    });
    const sbx = await create();
    const h = await sbx.commands.run('cat', { background: true, stdin: true });
    await Promise.all([h.sendStdin('one'), h.sendStdin(new TextEncoder().encode('two')), h.closeStdin()]);
    expect(got).toEqual(['one', 'two', 'EOF']);
    exit(ws, 0);
    await h.wait();
    expect(await h.kill()).toBe(false);
  });

  it('disconnect leaves the command running and rejects wait with a hint to reattach', async () => {
    scriptCommand((ws) => {
      start(ws);
      ws.send(frame(1, 0, 'abc'));
    });
    const sbx = await create();
    const h = await sbx.commands.run('sleep 9', { background: true });
    await new Promise((r) => setTimeout(r, 30));
    await h.disconnect();
    const err = await h.wait().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'disconnected' });
    expect((err as Error).message).toContain('fromOffset: 3');
  });
});

describe('pty', () => {
  it('starts a login bash on a PTY, sends keystrokes over the socket and resizes', async () => {
    let startBody: Record<string, unknown> = {};
    const input: string[] = [];
    server.on(`POST /v1/sandboxes/${SBX}/commands`, async (req, res) => {
      startBody = JSON.parse((await readBody(req)).toString());
      sendJson(res, 201, command);
    });
    server.on(`POST /v1/sandboxes/${SBX}/commands/${CMD}/resize`, async (req, res) => {
      input.push(`resize ${(await readBody(req)).toString()}`);
      sendJson(res, 204, undefined);
    });
    server.onWs(STREAM, (ws) => {
      start(ws);
      ws.send(frame(1, 0, '$ '));
      ws.on('message', (data) => {
        input.push(data.toString());
        if (data.toString() === 'exit\r') {
          ws.send(frame(1, 2, 'bye'));
          exit(ws, 5, 0);
        }
      });
    });
    const sbx = await create();
    const out: string[] = [];
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => out.push(Buffer.from(d).toString()) });
    expect(startBody).toMatchObject({ argv: ['/bin/bash', '-l'], stdin: true, pty: { cols: 80, rows: 24 }, envs: { TERM: 'xterm-256color' } });
    await term.resize({ cols: 100, rows: 30 });
    term.sendInput('exit\r');
    expect(await term.wait()).toEqual({ exitCode: 0 });
    expect(out.join('')).toBe('$ bye');
    expect(input).toEqual(['resize {"cols":100,"rows":30}', 'exit\r']);
  });
});

describe('files', () => {
  it('streams a 100 MiB upload from a Readable without a content-length', async () => {
    const sizeBytes = 100 * 1024 * 1024;
    const chunk = Buffer.alloc(1024 * 1024, 7);
    let received = 0;
    let headers: Record<string, unknown> = {};
    const serverHash = createHash('sha256');
    server.on(`PUT /v1/sandboxes/${SBX}/files`, async (req, res, url) => {
      headers = req.headers;
      for await (const c of req) {
        received += (c as Buffer).length;
        serverHash.update(c as Buffer);
      }
      sendJson(res, 200, { path: url.searchParams.get('path'), sizeBytes: received });
    });
    const clientHash = createHash('sha256');
    async function* gen() {
      for (let i = 0; i < sizeBytes / chunk.length; i++) {
        clientHash.update(chunk);
        yield chunk;
      }
    }
    const sbx = await create();
    const result = await sbx.files.write('/big', Readable.from(gen()), { mode: 0o644 });
    expect(result).toEqual({ path: '/big', sizeBytes });
    expect(serverHash.digest('hex')).toBe(clientHash.digest('hex'));
    expect(headers['content-length']).toBeUndefined();
    expect(server.requests.at(-1)!.query.get('mode')).toBe('420');
  }, 60_000);

  it('reads as text, bytes and stream; exists maps file_not_found to false', async () => {
    server.on(`GET /v1/sandboxes/${SBX}/files`, (_req, res, url) => {
      if (url.searchParams.get('path') !== '/f') return wireError(res, 404, 'file_not_found');
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(Buffer.from([0xe2, 0x82, 0xac, 0x00]));
    });
    server.on(`GET /v1/sandboxes/${SBX}/files/stat`, (_req, res) => wireError(res, 404, 'file_not_found'));
    const sbx = await create();
    expect(await sbx.files.read('/f')).toBe('€\0');
    expect(Array.from(await sbx.files.read('/f', { format: 'bytes' }))).toEqual([0xe2, 0x82, 0xac, 0x00]);
    const stream = await sbx.files.read('/f', { format: 'stream' });
    let n = 0;
    for await (const c of stream as unknown as AsyncIterable<Uint8Array>) n += c.length;
    expect(n).toBe(4);
    await expect(sbx.files.read('/missing')).rejects.toMatchObject({ code: 'file_not_found', status: 404 });
    expect(await sbx.files.exists('/missing')).toBe(false);
  });

  it('names a stat by the path asked for, not by the name the sandbox reports', async () => {
    server.on(`GET /v1/sandboxes/${SBX}/files/stat`, (_req, res, url) =>
      sendJson(res, 200, { name: '../../.bashrc', path: url.searchParams.get('path'), type: 'file', sizeBytes: 1, mode: 0o644, mtime: '2025-01-01T00:00:00Z' }),
    );
    const sbx = await create();
    expect(await sbx.files.stat('/dir/report.txt')).toMatchObject({ name: 'report.txt', sizeBytes: 1 });
    expect((await sbx.files.stat('/dir/sub/')).name).toBe('sub');
    expect((await sbx.files.stat('/')).name).toBe('/');
  });

  it('sends list depth, remove recursive, mkdir and rename', async () => {
    server.on(`GET /v1/sandboxes/${SBX}/files/list`, (_req, res) => sendJson(res, 200, { entries: [] }));
    server.on(`DELETE /v1/sandboxes/${SBX}/files`, (_req, res) => sendJson(res, 204, undefined));
    server.on(`POST /v1/sandboxes/${SBX}/files/mkdir`, (_req, res) => sendJson(res, 200, { created: true }));
    server.on(`POST /v1/sandboxes/${SBX}/files/rename`, async (req, res) =>
      sendJson(res, (await readBody(req)).toString() === '{"from":"/a","to":"/b"}' ? 204 : 400, undefined),
    );
    const sbx = await create();
    expect(await sbx.files.list('/d', { depth: 2 })).toEqual([]);
    expect(server.requests.at(-1)!.query.get('depth')).toBe('2');
    await sbx.files.remove('/d', { recursive: true });
    expect(server.requests.at(-1)!.query.get('recursive')).toBe('true');
    expect(await sbx.files.makeDir('/d')).toBe(true);
    await sbx.files.rename('/a', '/b');
  });
});
