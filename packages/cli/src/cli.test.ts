// The sandglass binary end to end against a scripted control plane + gateway: byte-exact output, exit codes, stdin, errors, time travel.
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';

// Each case spawns the CLI (tsx startup included) once or more; a loaded machine needs more than the default 5 s.
vi.setConfig({ testTimeout: 30_000 });

const BIN = fileURLToPath(new URL('../../../bin/sandglass', import.meta.url));
const SBX = 'sbx_abcdefghijklmnopqrst';
const CMD = 'cmd_x';

let url: string;
let close: () => Promise<void>;
let started: Record<string, unknown>[] = [];
const stdinBodies: string[] = [];
const files = new Map<string, Buffer>();
const deleted: string[] = [];
// What the next command does on its output stream.
let script: (ws: WebSocket) => void = () => undefined;

const json = (res: ServerResponse, status: number, body?: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(body === undefined ? '' : JSON.stringify(body));
};
const body = async (req: IncomingMessage) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
};
const frame = (fd: 1 | 2, offset: number, bytes: Buffer) => {
  const head = Buffer.alloc(9);
  head[0] = fd;
  head.writeBigUInt64BE(BigInt(offset), 1);
  return Buffer.concat([head, bytes]);
};
const command = { id: CMD, pid: 7, argv: [], pty: false, state: 'running', timedOut: false, outputBytes: 0, startedAt: '2025-01-01T00:00:00Z' };
const sandbox = {
  id: SBX,
  tenantId: 't',
  template: 'base',
  state: 'running',
  memoryMib: 256,
  vcpus: 1,
  timeoutS: 300,
  metadata: {},
  createdAt: '2025-01-01T00:00:00Z',
  expiresAt: '2025-01-01T00:05:00Z',
  snapshotIntervalS: 60,
  sourceSnapshotId: null,
  diskMib: null,
  pausedAt: null,
  network: null,
  secrets: [],
};
const SNAP = 'snap_abcdefghijklmnopqrst';
const FORKS = ['sbx_forkaaaaaaaaaaaaaaa', 'sbx_forkbbbbbbbbbbbbbbb'];
const snapshot = (extra: Record<string, unknown> = {}) => ({
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
  ...extra,
});
/** JSON bodies the control plane received, by "METHOD /path". */
const received = new Map<string, unknown[]>();
const receive = async (route: string, req: IncomingMessage) => {
  const text = (await body(req)).toString();
  received.set(route, [...(received.get(route) ?? []), text === '' ? undefined : JSON.parse(text)]);
};
const grant = () => ({ gatewayUrl: url, token: 'sgat_r', expiresAt: new Date(Date.now() + 900_000).toISOString() });

beforeAll(async () => {
  const server = createServer(async (req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    const route = `${req.method} ${u.pathname}`;
    if (route === `GET /v1/sandboxes/${SBX}`) return json(res, 200, sandbox);
    if (route === 'GET /v1/sandboxes') return json(res, 200, { sandboxes: [sandbox] });
    if (route === `POST /v1/sandboxes/${SBX}/access`)
      return json(res, 200, { gatewayUrl: url, token: 'sgat_t', expiresAt: new Date(Date.now() + 900_000).toISOString() });
    if (route === `POST /v1/sandboxes/${SBX}/commands`) {
      started.push(JSON.parse((await body(req)).toString()));
      return json(res, 201, command);
    }
    if (route === 'POST /v1/sandboxes') {
      await receive(route, req);
      return json(res, 201, { ...sandbox, access: { gatewayUrl: url, token: 'sgat_c', expiresAt: new Date(Date.now() + 900_000).toISOString() } });
    }
    if (route === `GET /v1/sandboxes/${SBX}/snapshots`) {
      const second = snapshot({ id: 'snap_secondsecondsecond', parentId: SNAP, reason: 'manual', name: 'v1', pinned: true, sizeAddedBytes: 3 * 1024 * 1024 });
      const cadence = { intervalS: 5, achievedIntervalS: 9.8, windowS: 50, takenInWindow: 5, behind: true };
      return json(res, 200, { snapshots: [snapshot(), second], cadence });
    }
    if (route === `POST /v1/sandboxes/${SBX}/snapshots`) {
      await receive(route, req);
      return json(res, 201, snapshot({ reason: 'manual' }));
    }
    if (route === `POST /v1/sandboxes/${SBX}/pause`)
      return json(res, 200, { sandbox: { ...sandbox, state: 'paused' }, snapshot: snapshot({ reason: 'pause' }) });
    if (route === `POST /v1/sandboxes/${SBX}/resume`) {
      await receive(route, req);
      return json(res, 200, { ...sandbox, access: grant() });
    }
    if (route === 'POST /v1/forks') {
      await receive(route, req);
      const { count } = received.get(route)!.at(-1) as { count: number };
      return json(res, 201, { snapshotId: SNAP, sandboxes: FORKS.slice(0, count).map((id) => ({ ...sandbox, id, sourceSnapshotId: SNAP, access: grant() })) });
    }
    if (FORKS.some((id) => route === `GET /v1/sandboxes/${id}`)) return json(res, 200, { ...sandbox, id: u.pathname.split('/').pop(), sourceSnapshotId: SNAP });
    if (route === `DELETE /v1/snapshots/${SNAP}`) {
      await receive(route, req);
      return json(res, 204);
    }
    if (route === `PATCH /v1/snapshots/${SNAP}`) {
      await receive(route, req);
      const { name } = received.get(route)!.at(-1) as { name: string | null };
      return json(res, 200, snapshot({ reason: 'manual', name, pinned: name !== null }));
    }
    if (route === `PUT /v1/sandboxes/${SBX}/network`) {
      await receive(route, req);
      return json(res, 200, { network: received.get(route)!.at(-1) });
    }
    if (route === 'PUT /v1/secrets/GITHUB_TOKEN') {
      await receive(route, req);
      const b = received.get(route)!.at(-1) as Record<string, unknown>;
      return json(res, 201, {
        name: 'GITHUB_TOKEN',
        hosts: b.hosts,
        header: b.header ?? null,
        format: b.format ?? null,
        bodyContentTypes: [],
        approval: b.approval ?? 'none',
        createdAt: '2025-06-01T12:00:00Z',
        updatedAt: '2025-06-01T12:00:00Z',
      });
    }
    if (route === 'GET /v1/secrets') {
      return json(res, 200, {
        secrets: [
          {
            name: 'GITHUB_TOKEN',
            hosts: ['api.github.com', '*.example.com'],
            header: 'Authorization',
            format: 'Bearer {value}',
            bodyContentTypes: [],
            approval: 'required',
            createdAt: '2025-06-01T12:00:00Z',
            updatedAt: '2025-06-01T12:00:00Z',
          },
        ],
      });
    }
    if (route === 'DELETE /v1/secrets/NOPE') return json(res, 404, { error: { code: 'secret_not_found', message: 'No secret NOPE exists for your tenant.' } });
    if (route === `GET /v1/sandboxes/${SBX}/approvals`) {
      return json(res, 200, {
        approvals: [
          {
            requestId: 'apr_aaaaaaaaaaaaaaaaaaaa',
            sandboxId: SBX,
            secret: 'GITHUB_TOKEN',
            host: 'api.github.com',
            port: 443,
            method: 'POST',
            path: '/repos/x/issues',
            requestedAt: '2025-06-01T12:00:00Z',
            expiresAt: '2025-06-01T12:05:00Z',
          },
        ],
      });
    }
    if (route.startsWith('POST /v1/approvals/')) {
      await receive(route, req);
      return json(res, 204);
    }
    if (route === `GET /v1/sandboxes/${SBX}/events`) {
      received.set(route, [...(received.get(route) ?? []), u.searchParams.get('type')]);
      const event = (seq: number, type: string, at: string, data: Record<string, unknown>) => ({
        seq,
        id: `evt_${seq}`,
        type,
        sandboxId: SBX,
        tenantId: 't',
        at,
        data,
        hash: 'h',
        prevHash: 'p',
      });
      const egress = event(7, 'egress.request', '2025-06-01T12:00:01Z', {
        host: 'api.github.com',
        port: 443,
        method: 'GET',
        path: '/user',
        allowed: true,
        status: 200,
      });
      if (u.searchParams.get('type') !== null) return json(res, 200, { events: [egress] });
      return json(res, 200, {
        events: [
          event(5, 'command.started', '2025-06-01T12:00:00Z', { commandId: 'cmd_1', argv: ['ls', '-l'], cwd: '/tmp', user: 'root' }),
          egress,
          event(9, 'command.exited', '2025-06-01T12:00:02Z', { commandId: 'cmd_1', exitCode: 0, signal: null, timedOut: false }),
          event(11, 'snapshot.taken', '2025-06-01T12:00:03Z', { snapshotId: SNAP, reason: 'manual', sizeAddedBytes: 4096 }),
        ],
      });
    }
    if (route.startsWith('DELETE /v1/snapshots/'))
      return json(res, 404, { error: { code: 'snapshot_not_found', message: 'no such snapshot', requestId: 'req_2' } });
    if (route === `DELETE /v1/sandboxes/${SBX}`) {
      deleted.push(SBX);
      return json(res, 204);
    }
    const path = u.searchParams.get('path') ?? '';
    if (route === `PUT /v1/sandboxes/${SBX}/files`) {
      files.set(path, await body(req));
      return json(res, 200, { path, sizeBytes: files.get(path)!.length });
    }
    if (route === `GET /v1/sandboxes/${SBX}/files/stat`) {
      if (path === '/dir') return json(res, 200, { name: 'dir', path, type: 'dir', sizeBytes: 0, mode: 0o755, mtime: '2025-01-01T00:00:00Z' });
      // What a replaced guest agent would answer, were the gateway to pass it on.
      if (path === '/dir/evil.bin' && files.has(path))
        return json(res, 200, {
          name: '../../escaped.bin',
          path,
          type: 'file',
          sizeBytes: files.get(path)!.length,
          mode: 0o644,
          mtime: '2025-01-01T00:00:00Z',
        });
      const f = files.get(path);
      if (!f) return json(res, 404, { error: { code: 'file_not_found', message: path } });
      return json(res, 200, { name: path.split('/').pop(), path, type: 'file', sizeBytes: f.length, mode: 0o644, mtime: '2025-01-01T00:00:00Z' });
    }
    if (route === `GET /v1/sandboxes/${SBX}/files`) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      return res.end(files.get(path));
    }
    if (route === `POST /v1/sandboxes/${SBX}/commands/${CMD}/stdin`) {
      stdinBodies.push(u.searchParams.get('eof') === 'true' ? '<EOF>' : (await body(req)).toString());
      return json(res, 204);
    }
    json(res, 404, { error: { code: req.method === 'DELETE' ? 'sandbox_not_found' : 'not_found', message: `no ${route}`, requestId: 'req_1' } });
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (ws) => {
    ws.send(JSON.stringify({ type: 'start', startOffset: 0, command }));
    script(ws);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  close = () => {
    for (const c of wss.clients) c.terminate();
    server.closeAllConnections();
    return new Promise((r) => server.close(() => r()));
  };
});
afterAll(() => close());

function cli(args: string[], input?: string): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, {
      env: { ...process.env, SANDGLASS_URL: url, SANDGLASS_API_KEY: 'sg_test', SANDGLASS_HOME: '/nonexistent' },
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    let err = '';
    child.stdout!.on('data', (c: Buffer) => out.push(c));
    child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr: err }));
    if (input !== undefined) child.stdin!.end(input);
  });
}

const exit = (ws: WebSocket, endOffset: number, exitCode: number | null, signal: string | null = null) => {
  ws.send(JSON.stringify({ type: 'exit', exitCode, signal, timedOut: false, endOffset }));
  ws.close();
};

describe('sandglass exec', () => {
  it('streams bytes exactly, forwards argv, env and cwd, and exits with the exit code', async () => {
    started = [];
    const binary = Buffer.from([0xff, 0x00, 0xe2, 0x82]);
    script = (ws) => {
      ws.send(frame(1, 0, binary));
      ws.send(frame(2, 4, Buffer.from('warn\n')));
      exit(ws, 9, 3);
    };
    const r = await cli(['exec', SBX, '--env', 'A=1=2', '--cwd', '/w', '--', 'sh', '-c', 'exit 3']);
    expect(r.stderr).toBe('warn\n');
    expect(r.code).toBe(3);
    expect(r.stdout.equals(binary)).toBe(true);
    expect(started[0]).toMatchObject({ argv: ['sh', '-c', 'exit 3'], envs: { A: '1=2' }, cwd: '/w', stdin: false, timeoutMs: 0 });
  });

  it('forwards piped stdin then EOF, and exits 128+signal for a killed command', async () => {
    started = [];
    script = (ws) => setTimeout(() => exit(ws, 0, null, 'SIGKILL'), 300);
    const r = await cli(['exec', SBX, '--', 'cat'], 'hello');
    expect(r.code).toBe(137);
    expect(started[0]).toMatchObject({ stdin: true });
    expect(stdinBodies).toEqual(['hello', '<EOF>']);
  });
});

describe('sandglass run and cp', () => {
  it('run creates, executes and kills the sandbox even when the command fails', async () => {
    deleted.length = 0;
    script = (ws) => exit(ws, 0, 5);
    const r = await cli(['run', '--memory-mib', '512', '--', 'false']);
    expect(r.code).toBe(5);
    expect(deleted).toEqual([SBX]);
  });

  it('copies a file in (into a directory keeps its name) and back out byte for byte', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sg-cp-'));
    const data = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251));
    await writeFile(join(dir, 'blob.bin'), data);
    expect((await cli(['cp', join(dir, 'blob.bin'), `${SBX}:/dir`])).code).toBe(0);
    expect(files.get('/dir/blob.bin')?.equals(data)).toBe(true);
    const back = await cli(['cp', `${SBX}:/dir/blob.bin`, join(dir, 'copy.bin')]);
    expect(back.code).toBe(0);
    expect((await readFile(join(dir, 'copy.bin'))).equals(data)).toBe(true);
    const toStdout = await cli(['cp', `${SBX}:/dir/blob.bin`, '-']);
    expect(toStdout.stdout.equals(data)).toBe(true);
    await rm(dir, { recursive: true });
  });

  it('copies out into a directory under the name asked for, whatever name the sandbox reports', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sg-cp-'));
    const into = join(dir, 'a', 'b');
    await mkdir(into, { recursive: true });
    files.set('/dir/evil.bin', Buffer.from('payload'));
    const r = await cli(['cp', `${SBX}:/dir/evil.bin`, `${into}/`]);
    expect(r.code).toBe(0);
    expect(await readFile(join(into, 'evil.bin'), 'utf8')).toBe('payload');
    expect(await readdir(dir)).toEqual(['a']);
    await rm(dir, { recursive: true });
  });
});

describe('sandglass errors and tables', () => {
  it('prints error: <code>: <message> and exits 1', async () => {
    const r = await cli(['kill', 'sbx_missingmissingmissi']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: sandbox_not_found: /);
  });

  it('prints a plain table when stdout is not a terminal', async () => {
    const r = await cli(['ls']);
    expect(r.code).toBe(0);
    const text = r.stdout.toString();
    expect(text).toContain(SBX);
    expect(text).not.toContain('\u001b[');
  });
});

describe('sandglass time travel', () => {
  it('prints the timeline as a table, with names, pins, sizes and parents', async () => {
    const r = await cli(['timeline', SBX]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const text = r.stdout.toString();
    for (const header of ['ID', 'TAKEN AT', 'REASON', 'NAME', 'SIZE ADDED', 'PARENT']) expect(text).toContain(header);
    expect(text.split('\n')[0]).toBe('cadence: every 5 s asked, one every 9.8 s over the last 50 s (behind: see `sandglass events`)');
    const rows = text.split('\n').filter((l) => l.includes('snap_'));
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatch(/snap_abcdefghijklmnopqrst.*rolling.*4\.0 KiB/);
    expect(rows[1]).toMatch(/snap_secondsecondsecond.*manual.*v1 \(pinned\).*3\.0 MiB.*snap_abcdefghijklmnopqrst/);
    const asJson = await cli(['timeline', SBX, '--json']);
    expect(JSON.parse(asJson.stdout.toString()).map((x: { id: string }) => x.id)).toEqual([SNAP, 'snap_secondsecondsecond']);
  });

  it('snapshots, pauses, resumes and deletes, printing ids', async () => {
    received.clear();
    const taken = await cli(['snapshot', SBX, '--name', 'v1']);
    expect([taken.code, taken.stdout.toString()]).toEqual([0, `${SNAP}\n`]);
    expect(received.get(`POST /v1/sandboxes/${SBX}/snapshots`)).toEqual([{ name: 'v1' }]);

    const paused = await cli(['pause', SBX]);
    expect([paused.code, paused.stdout.toString()]).toEqual([0, `${SNAP}\n`]);

    const resumed = await cli(['resume', SBX, '--at', '2025-06-01 14:00:30']);
    expect([resumed.code, resumed.stdout.toString()]).toEqual([0, `${SBX}\n`]);
    expect(received.get(`POST /v1/sandboxes/${SBX}/resume`)).toEqual([{ at: new Date(2025, 5, 1, 14, 0, 30).toISOString() }]);

    expect((await cli(['snapshot-rm', SNAP])).code).toBe(0);
    expect(received.get(`DELETE /v1/snapshots/${SNAP}`)).toEqual([undefined]);
    const missing = await cli(['snapshot-rm', 'snap_missingmissingmis']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('error: snapshot_not_found: no such snapshot (request req_2)\n');
  });

  it('names, renames and unnames a snapshot, and refuses a name together with --clear', async () => {
    received.clear();
    const named = await cli(['snapshot-name', SNAP, 'good-state']);
    expect([named.code, named.stdout.toString()]).toEqual([0, `${SNAP} good-state\n`]);
    const cleared = await cli(['snapshot-name', SNAP, '--clear', '--json']);
    expect(cleared.code).toBe(0);
    expect(JSON.parse(cleared.stdout.toString())).toMatchObject({ id: SNAP, name: null, pinned: false });
    expect(received.get(`PATCH /v1/snapshots/${SNAP}`)).toEqual([{ name: 'good-state' }, { name: null }]);
    for (const args of [[SNAP], [SNAP, 'x', '--clear']]) expect((await cli(['snapshot-name', ...args])).code).toBe(2);
    expect(received.get(`PATCH /v1/snapshots/${SNAP}`)).toHaveLength(2);
  });

  it('forks from a sandbox at a time and prints the new ids; --json leaves access out', async () => {
    received.clear();
    const r = await cli(['fork', `${SBX}@2025-06-01T14:00:00+02:00`, '--count', '2', '--timeout', '60']);
    expect(r.stderr).toBe('');
    expect([r.code, r.stdout.toString()]).toEqual([0, FORKS.map((id) => `${id}\n`).join('')]);
    expect(received.get('POST /v1/forks')).toEqual([{ sandboxId: SBX, at: '2025-06-01T12:00:00.000Z', count: 2, timeoutS: 60 }]);

    const asJson = await cli(['fork', SNAP, '--json']);
    const forks = JSON.parse(asJson.stdout.toString());
    expect(forks.map((f: { id: string; sourceSnapshotId: string }) => [f.id, f.sourceSnapshotId])).toEqual([[FORKS[0], SNAP]]);
    expect(asJson.stdout.toString()).not.toContain('sgat_');
    expect(received.get('POST /v1/forks')!.at(-1)).toEqual({ snapshotId: SNAP, count: 1 });
  });

  it('creates with a snapshot interval', async () => {
    received.clear();
    expect((await cli(['create', '--snapshot-interval', '15'])).code).toBe(0);
    expect(received.get('POST /v1/sandboxes')).toEqual([{ template: 'base', snapshotIntervalS: 15 }]);
  });

  it.each([
    ['resume with both --at and --snapshot', ['resume', SBX, '--at', '2025-06-01T12:00:00Z', '--snapshot', SNAP], /cannot be used with/],
    ['resume at a time that is not one', ['resume', SBX, '--at', 'yesterday'], /not a time/],
    ['fork from something that is no source', ['fork', 'tpl_base'], /not a fork source/],
    ['fork with --count 0', ['fork', SNAP, '--count', '0'], /whole number >= 1/],
  ])('refuses to %s as a usage error (exit 2), sending nothing', async (_what, args, message) => {
    received.clear();
    const r = await cli(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(received.size).toBe(0);
  });
});

describe('sandglass egress', () => {
  it('creates with --allow, --deny and --secret; with none of them the sandbox gets no network field', async () => {
    received.clear();
    const r = await cli(['create', '--allow', 'api.github.com', '--allow', '*.pypi.org', '--deny', 'evil.pypi.org', '--secret', 'GITHUB_TOKEN']);
    expect([r.code, r.stderr]).toEqual([0, '']);
    expect(received.get('POST /v1/sandboxes')).toEqual([
      { template: 'base', network: { allow: ['api.github.com', '*.pypi.org'], deny: ['evil.pypi.org'] }, secrets: ['GITHUB_TOKEN'] },
    ]);
    expect((await cli(['create'])).code).toBe(0);
    expect(received.get('POST /v1/sandboxes')!.at(-1)).toEqual({ template: 'base' });
  });

  it('replaces a policy with network, printing it', async () => {
    received.clear();
    const r = await cli(['network', SBX, '--allow', 'api.github.com', '--deny', '*']);
    expect([r.code, r.stderr, r.stdout.toString()]).toEqual([0, '', 'allow\tapi.github.com\ndeny\t*\n']);
    expect(received.get(`PUT /v1/sandboxes/${SBX}/network`)).toEqual([{ allow: ['api.github.com'], deny: ['*'] }]);
    const shown = await cli(['network', SBX]);
    expect([shown.code, shown.stdout.toString()]).toEqual([0, 'no network\n']);
  });

  it('sets a secret from stdin (one trailing newline dropped), never printing the value; refuses an empty one', async () => {
    received.clear();
    const r = await cli(
      [
        'secrets',
        'set',
        'GITHUB_TOKEN',
        '--hosts',
        'api.github.com,*.example.com',
        '--header',
        'Authorization',
        '--format',
        'Bearer {value}',
        '--approval',
        'required',
      ],
      'ghp_value\n',
    );
    expect([r.code, r.stderr, r.stdout.toString()]).toEqual([0, '', '']);
    expect(received.get('PUT /v1/secrets/GITHUB_TOKEN')).toEqual([
      { value: 'ghp_value', hosts: ['api.github.com', '*.example.com'], header: 'Authorization', format: 'Bearer {value}', approval: 'required' },
    ]);
    const empty = await cli(['secrets', 'set', 'GITHUB_TOKEN', '--hosts', 'api.github.com'], '\n');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/empty/);
    expect(received.get('PUT /v1/secrets/GITHUB_TOKEN')).toHaveLength(1);

    const ls = await cli(['secrets', 'ls']);
    expect(ls.code).toBe(0);
    expect(ls.stdout.toString()).toMatch(/GITHUB_TOKEN.*api\.github\.com,\*\.example\.com.*Authorization: Bearer \{value\}.*required/);
    const rm = await cli(['secrets', 'rm', 'NOPE']);
    expect([rm.code, rm.stderr]).toEqual([1, 'error: secret_not_found: no secret NOPE\n']);
  });

  it('lists approvals, approves for a while and denies', async () => {
    received.clear();
    const list = await cli(['approvals', SBX]);
    expect(list.code).toBe(0);
    expect(list.stdout.toString()).toMatch(/apr_aaaaaaaaaaaaaaaaaaaa.*GITHUB_TOKEN.*POST.*api\.github\.com:443\/repos\/x\/issues/);
    expect((await cli(['approve', 'apr_aaaaaaaaaaaaaaaaaaaa', '--sandbox', SBX, '--for', '10m'])).code).toBe(0);
    expect((await cli(['deny', 'apr_bbbbbbbbbbbbbbbbbbbb', '--sandbox', SBX])).code).toBe(0);
    expect(received.get('POST /v1/approvals/apr_aaaaaaaaaaaaaaaaaaaa')).toEqual([{ sandboxId: SBX, decision: 'approve', ttlS: 600 }]);
    expect(received.get('POST /v1/approvals/apr_bbbbbbbbbbbbbbbbbbbb')).toEqual([{ sandboxId: SBX, decision: 'deny' }]);
    const noSandbox = await cli(['approve', 'apr_aaaaaaaaaaaaaaaaaaaa']);
    expect(noSandbox.code).toBe(2);
    expect(noSandbox.stderr).toMatch(/--sandbox/);
  });

  it('shows only egress and secret events with --egress', async () => {
    received.clear();
    const r = await cli(['events', SBX, '--egress']);
    expect(r.code).toBe(0);
    expect(r.stdout.toString()).toContain('egress.request');
    await cli(['events', SBX]);
    expect(received.get(`GET /v1/sandboxes/${SBX}/events`)).toEqual(['egress,secret', null]);
  });

  it('verifies an audit export offline: one-line verdict or JSON, exit 1 on failure; `events <id> --json` still lists', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sg-verify-'));
    try {
      const file = join(dir, 'export.jsonl');
      await writeFile(file, '{"format":"something else"}\n');
      const text = await cli(['events', 'verify', file]);
      expect(text.code).toBe(1);
      expect(text.stdout.toString()).toBe('FAILED line 1 (header): the first line is not a sandglass-audit/1 header\n');
      // --json after the file is verify's flag, not the event listing's.
      const asJson = await cli(['events', 'verify', file, '--json']);
      expect(asJson.code).toBe(1);
      expect(JSON.parse(asJson.stdout.toString())).toEqual({
        ok: false,
        line: 1,
        check: 'header',
        problem: 'the first line is not a sandglass-audit/1 header',
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    const listed = await cli(['events', SBX, '--json']);
    expect(listed.code).toBe(0);
    expect(Array.isArray(JSON.parse(listed.stdout.toString()))).toBe(true);
  });

  it('prints the audit timeline as aligned lines or JSON lines, filtered by kind and time; refuses an unknown kind', async () => {
    const r = await cli(['audit', SBX]);
    expect(r.code).toBe(0);
    const rows = r.stdout.toString().trimEnd().split('\n');
    expect(rows.map((l) => l.replace(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d {2}/, ''))).toEqual([
      'command    ls -l (as root in /tmp): exit 0 after 2.0 s',
      'network    allowed → 200 GET api.github.com:443/user',
      `snapshot   taken ${SNAP} (manual), +4.0 KiB`,
    ]);
    const json = await cli(['audit', SBX, '--json', '--type', 'network,snapshot', '--since', '2025-06-01T12:00:01Z', '--until', '2025-06-01T12:00:02Z']);
    expect(json.code).toBe(0);
    expect(
      json.stdout
        .toString()
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l)),
    ).toEqual([expect.objectContaining({ kind: 'network', at: '2025-06-01T12:00:01Z', eventIds: ['evt_7'] })]);
    const bad = await cli(['audit', SBX, '--type', 'command,bogus']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/'bogus' is not a kind/);
  });
});

describe('sandglass --version', () => {
  it("prints the repository's version and exits 0, asking the server nothing", async () => {
    received.clear();
    const { version } = JSON.parse(await readFile(fileURLToPath(new URL('../../../package.json', import.meta.url)), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const r = await cli([flag]);
      expect([r.code, r.stdout.toString(), r.stderr]).toEqual([0, `${version}\n`, '']);
    }
    expect(received.size).toBe(0);
  });
});
