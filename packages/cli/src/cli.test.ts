// The sandglass binary end to end against a scripted control plane + gateway: byte-exact output, exit codes, stdin, errors.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
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
const sandbox = { id: SBX, tenantId: 't', template: 'base', state: 'running', memoryMib: 256, vcpus: 1, timeoutS: 300, metadata: {}, createdAt: '2025-01-01T00:00:00Z', expiresAt: '2025-01-01T00:05:00Z' };

beforeAll(async () => {
  const server = createServer(async (req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    const route = `${req.method} ${u.pathname}`;
    if (route === `GET /v1/sandboxes/${SBX}`) return json(res, 200, sandbox);
    if (route === 'GET /v1/sandboxes') return json(res, 200, { sandboxes: [sandbox] });
    if (route === `POST /v1/sandboxes/${SBX}/access`) return json(res, 200, { gatewayUrl: url, token: 'sgat_t', expiresAt: new Date(Date.now() + 900_000).toISOString() });
    if (route === `POST /v1/sandboxes/${SBX}/commands`) {
      started.push(JSON.parse((await body(req)).toString()));
      return json(res, 201, command);
    }
    if (route === 'POST /v1/sandboxes') return json(res, 201, { ...sandbox, access: { gatewayUrl: url, token: 'sgat_c', expiresAt: new Date(Date.now() + 900_000).toISOString() } });
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
    expect(text).not.toMatch(/\u001b\[/);
  });
});
