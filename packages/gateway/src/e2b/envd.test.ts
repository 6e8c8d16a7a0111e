// envd on the gateway's data-plane server, driven by the unmodified e2b SDK: a running Sandbox whose agent is the
// real Go agent (`--serve-stdio`, on this host), a tiny REST double answering the SDK's connect call.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, FileType, NotFoundError, Sandbox as E2bSandbox, TimeoutError } from 'e2b';
import { deriveNodeKeys, signAccessToken, systemClock } from '@sandglass/core';
import { AgentClient } from '@sandglass/agent-client';
import type { HostileAgent } from '@sandglass/agent-client/hostile-agent';
import { RevokedKeys } from '../auth.js';
import type { Gateway } from '../gateway.js';
import type { Sandbox } from '../sandbox.js';
import { sandboxOnDouble } from '../sandbox-double.js';
import { createDataPlaneServer } from '../server.js';
import { rawRequest } from '../test-support.js';
import { ENVD_VERSION } from './envd.js';

const SECRET = Buffer.alloc(32, 9);
const SBX = 'sbx_envdtestaaaaaaaaaaaa';
const OTHER = 'sbx_envdotheraaaaaaaaaaa';
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');

/** The prebuilt agent when it is newer than every source file, else a fresh build (the prebuilt one if that fails). */
function agentBinary(): string {
  const agentDir = path.join(repoRoot, 'agent');
  const prebuilt = path.join(agentDir, 'build', 'sandglass-agent');
  const sources = fs.readdirSync(agentDir).filter((f) => f.endsWith('.go') || f === 'go.mod');
  const newestSourceMs = Math.max(...sources.map((f) => fs.statSync(path.join(agentDir, f)).mtimeMs));
  if (fs.existsSync(prebuilt) && fs.statSync(prebuilt).mtimeMs > newestSourceMs) return prebuilt;
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sandglass-agent-')), 'sandglass-agent');
  try {
    execFileSync(path.join(agentDir, 'build.sh'), [out], { stdio: 'pipe' });
    return out;
  } catch (err) {
    if (fs.existsSync(prebuilt)) return prebuilt;
    throw err;
  }
}

const keys = deriveNodeKeys(SECRET);
const tokenFor = (sbx: string, kid?: string) => signAccessToken({ sbx, ten: 'ten_a', exp: Date.now() + 600_000, ...(kid ? { kid } : {}) }, keys.accessToken);

let child: ChildProcess;
let sandbox: Sandbox;
let app: FastifyInstance;
let rest: Server;
let gwPort = 0;
let restPort = 0;
let dir = '';
const events: Array<{ type: string; data: Record<string, unknown> }> = [];
const sandboxes = new Map<string, Sandbox>();
const revoked = new RevokedKeys();

beforeAll(async () => {
  child = spawn(agentBinary(), ['--serve-stdio'], { stdio: ['pipe', 'pipe', 'ignore'] });
  const client = new AgentClient({ readable: child.stdout!, writable: child.stdin! }, { callTimeoutMs: 20_000 });
  await client.hello();
  sandbox = await sandboxOnDouble({ client } as unknown as HostileAgent, {
    id: SBX,
    events: { append: async (e: { type: string; data: Record<string, unknown> }) => void events.push(e) },
  });
  sandboxes.set(SBX, sandbox);
  const gw = { opts: { nodeSecret: SECRET, clock: systemClock }, revokedKeys: revoked, sandboxes } as unknown as Gateway;
  app = await createDataPlaneServer(gw);
  await app.listen({ port: 0, host: '127.0.0.1' });
  gwPort = (app.server.address() as AddressInfo).port;
  // The control plane's part of Sandbox.connect: the envd token and version.
  rest = createServer((req, res) => {
    const id = /^\/v2\/sandboxes\/([^/]+)\/connect$/.exec(req.url ?? '')?.[1];
    req.resume();
    res.setHeader('content-type', 'application/json');
    if (!id) return res.writeHead(404).end(JSON.stringify({ code: 404, message: 'no' }));
    res.writeHead(201).end(JSON.stringify({ sandboxID: id, templateID: 'base', clientID: 'x', envdVersion: ENVD_VERSION, envdAccessToken: tokenFor(id) }));
  });
  await new Promise<void>((r) => rest.listen(0, '127.0.0.1', r));
  restPort = (rest.address() as AddressInfo).port;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-test-'));
}, 120_000);

afterAll(async () => {
  // The SDK's and the test's kept-alive connections would hold close() open.
  app?.server.closeAllConnections();
  await app?.close();
  rest?.close();
  await sandbox?.end('killed');
  child?.kill('SIGKILL');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const sdkOpts = () => ({ apiKey: 'e2b_test', apiUrl: `http://127.0.0.1:${restPort}`, sandboxUrl: `http://127.0.0.1:${gwPort}/e2b` });
const connect = (id = SBX) => E2bSandbox.connect(id, sdkOpts());

/**
 * The agent runs on this host here, and the SDK always starts a login shell: root's dotfiles on a developer or CI
 * host may do anything (pyenv's init blocks on these machines). `nobody` has no home, so only /etc/profile runs.
 */
const HOST_SHELL = { user: 'nobody', cwd: '/tmp' } as const;

describe('process.Process through the SDK', () => {
  it('runs a command: stdout and stderr, exit code, CommandExitError, and the gateway records it', async () => {
    const sbx = await connect();
    const ok = await sbx.commands.run('echo hi; echo oops >&2', HOST_SHELL);
    expect(ok).toMatchObject({ exitCode: 0, stdout: 'hi\n', stderr: 'oops\n' });
    const failed = await sbx.commands.run('printf out; exit 3', HOST_SHELL).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(CommandExitError);
    expect(failed).toMatchObject({ exitCode: 3, stdout: 'out', error: 'exit status 3' });
    const started = events.filter((e) => e.type === 'command.started').map((e) => e.data.argv);
    expect(started).toContainEqual(['/bin/bash', '-l', '-c', 'echo hi; echo oops >&2']);
  });

  it('envs and a cwd relative to the home of the user', async () => {
    const sbx = await connect();
    const r = await sbx.commands.run('echo "$GREETING" "$PWD"', { ...HOST_SHELL, envs: { GREETING: 'hello' }, cwd: '/tmp' });
    expect(r.stdout).toBe('hello /tmp\n');
    // Relative: against the user's home (/home/<name>; /root for root).
    const rel = await sbx.commands.run('pwd', { user: 'nobody', cwd: 'no-such-dir-envd' }).catch((e: unknown) => e);
    expect(String((rel as Error).message)).toContain('/home/nobody/no-such-dir-envd');
  });

  it('the timeout is the deadline: the stream ends with deadline_exceeded and the command is killed', async () => {
    const sbx = await connect();
    const err = await sbx.commands.run('sleep 30', { user: 'root', timeoutMs: 500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    const rec = [...sandbox.commands.values()].find((c) => c.argv[3] === 'sleep 30')!;
    await sandbox.exitStatus(rec.id);
    expect(rec).toMatchObject({ state: 'exited', timedOut: true, signal: 'SIGKILL' });
  });

  it('background commands: list, connect from now, stdin, closeStdin, kill; a disconnect only detaches', async () => {
    const sbx = await connect();
    const cat = await sbx.commands.run('cat', { ...HOST_SHELL, background: true, stdin: true });
    await cat.disconnect();
    const listed = await sbx.commands.list();
    expect(listed).toContainEqual(expect.objectContaining({ pid: cat.pid, cmd: '/bin/bash', args: ['-l', '-c', 'cat'] }));
    // A second client follows it from now, feeds it and ends its input.
    let seen = '';
    const again = await sbx.commands.connect(cat.pid, { onStdout: (d) => void (seen += d) });
    await sbx.commands.sendStdin(cat.pid, 'abc');
    await sbx.commands.closeStdin(cat.pid);
    const result = await again.wait();
    expect(result).toMatchObject({ exitCode: 0, stdout: 'abc' });
    expect(seen).toBe('abc');
    // Exited: no longer listed, not killable, and a connect answers start and end at once.
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(cat.pid);
    expect(await sbx.commands.kill(cat.pid)).toBe(false);
    expect(await (await sbx.commands.connect(cat.pid)).wait()).toMatchObject({ exitCode: 0 });

    const sleeper = await sbx.commands.run('sleep 30', { ...HOST_SHELL, background: true });
    expect(await sbx.commands.kill(sleeper.pid)).toBe(true);
    const killed = await sleeper.wait().catch((e: unknown) => e);
    expect(killed).toMatchObject({ exitCode: -1, error: 'signal: killed' });
    await expect(sbx.commands.connect(999_999)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('a PTY: output as pty bytes, input and resize', async () => {
    const sbx = await connect();
    let out = '';
    const term = await sbx.pty.create({ cols: 80, rows: 24, ...HOST_SHELL, onData: (d) => void (out += Buffer.from(d).toString()) });
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit\n'));
    await term.wait().catch(() => {});
    expect(out).toContain('30 100');
  });
});

describe('filesystem.Filesystem and /files through the SDK', () => {
  it('writes and reads files (multipart, several at once, octet-stream, gzip), and records the writes', async () => {
    const sbx = await connect();
    const a = path.join(dir, 'sub', 'a.txt');
    const info = await sbx.files.write(a, 'alpha', { user: 'root' });
    expect(info).toMatchObject({ name: 'a.txt', path: a, type: 'file' });
    expect(await sbx.files.read(a, { user: 'root' })).toBe('alpha');
    expect(fs.readFileSync(a, 'utf8')).toBe('alpha');
    const many = await sbx.files.write(
      [
        { path: path.join(dir, 'm1'), data: 'one' },
        { path: path.join(dir, 'm2'), data: new Uint8Array([0, 1, 2]).buffer },
      ],
      { user: 'root' },
    );
    expect(many.map((f) => f.name)).toEqual(['m1', 'm2']);
    expect(fs.readFileSync(path.join(dir, 'm2'))).toEqual(Buffer.from([0, 1, 2]));
    await sbx.files.write(path.join(dir, 'o'), 'octets', { user: 'root', useOctetStream: true });
    await sbx.files.write(path.join(dir, 'g'), 'zipped'.repeat(1000), { user: 'root', gzip: true });
    expect(fs.readFileSync(path.join(dir, 'o'), 'utf8')).toBe('octets');
    expect(fs.readFileSync(path.join(dir, 'g'), 'utf8')).toBe('zipped'.repeat(1000));
    expect(await sbx.files.read(path.join(dir, 'g'), { user: 'root', format: 'bytes' })).toHaveLength(6000);
    expect(events.filter((e) => e.type === 'file.written').map((e) => e.data.path)).toEqual(
      expect.arrayContaining([a, path.join(dir, 'm1'), path.join(dir, 'g')]),
    );
    // Empty files read as empty.
    await sbx.files.write(path.join(dir, 'empty'), '', { user: 'root' });
    expect(await sbx.files.read(path.join(dir, 'empty'), { user: 'root' })).toBe('');
  });

  it('stat, list, makeDir, rename, remove, exists; missing paths are NotFound', async () => {
    const sbx = await connect();
    const d = path.join(dir, 'tree');
    expect(await sbx.files.makeDir(d, { user: 'root' })).toBe(true);
    expect(await sbx.files.makeDir(d, { user: 'root' })).toBe(false);
    await sbx.files.write(path.join(d, 'x', 'f.txt'), '12345', { user: 'root' });
    fs.chmodSync(path.join(d, 'x', 'f.txt'), 0o640);
    const st = await sbx.files.getInfo(path.join(d, 'x', 'f.txt'), { user: 'root' });
    expect(st).toMatchObject({ name: 'f.txt', type: FileType.FILE, size: 5, mode: 0o640, permissions: '-rw-r-----' });
    expect(st.modifiedTime?.getTime()).toBe(Math.floor(fs.statSync(path.join(d, 'x', 'f.txt')).mtimeMs));
    const dirInfo = await sbx.files.getInfo(d, { user: 'root' });
    expect(dirInfo).toMatchObject({ type: FileType.DIR, permissions: expect.stringMatching(/^drwx/) });
    expect((await sbx.files.list(d, { user: 'root' })).map((e) => e.name)).toEqual(['x']);
    expect((await sbx.files.list(d, { user: 'root', depth: 2 })).map((e) => e.path).sort()).toEqual([path.join(d, 'x'), path.join(d, 'x', 'f.txt')]);
    const moved = await sbx.files.rename(path.join(d, 'x', 'f.txt'), path.join(d, 'g.txt'), { user: 'root' });
    expect(moved).toMatchObject({ name: 'g.txt', path: path.join(d, 'g.txt') });
    expect(await sbx.files.exists(path.join(d, 'x', 'f.txt'), { user: 'root' })).toBe(false);
    await sbx.files.remove(d, { user: 'root' });
    expect(fs.existsSync(d)).toBe(false);
    await sbx.files.remove(d, { user: 'root' });
    await expect(sbx.files.read(path.join(dir, 'missing'), { user: 'root' })).rejects.toBeInstanceOf(NotFoundError);
    await expect(sbx.files.getInfo(path.join(dir, 'missing'), { user: 'root' })).rejects.toBeInstanceOf(NotFoundError);
    const types = events.map((e) => e.type);
    expect(types).toEqual(expect.arrayContaining(['file.dir_created', 'file.renamed', 'file.removed']));
  });

  it("relative paths resolve against the user's home; '..' is refused", async () => {
    const sbx = await connect();
    const err = await sbx.files.getInfo('no-such-file-envd', { user: 'root' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(String((err as Error).message)).toContain('/root/no-such-file-envd');
    await expect(sbx.files.getInfo(`${dir}/../etc`, { user: 'root' })).rejects.toThrow(/'\.\.'/);
  });
});

describe('owners and watches', () => {
  it("files and the directories a write or MakeDir creates belong to the request's user", async () => {
    const sbx = await connect();
    const nobody = Number(execFileSync('id', ['-u', 'nobody']).toString().trim());
    const target = path.join(dir, 'owned', 'deep', 'f.txt');
    await sbx.files.write(target, 'mine', { user: 'nobody' });
    expect(fs.statSync(target).uid).toBe(nobody);
    expect(fs.statSync(path.join(dir, 'owned')).uid).toBe(nobody);
    expect(await sbx.files.getInfo(target, { user: 'nobody' })).toMatchObject({ owner: 'nobody' });
    expect(await sbx.files.makeDir(path.join(dir, 'owned-dir', 'x'), { user: 'nobody' })).toBe(true);
    expect(fs.statSync(path.join(dir, 'owned-dir')).uid).toBe(nobody);
    // root's writes stay root's.
    await sbx.files.write(path.join(dir, 'rootfile'), 'r', { user: 'root' });
    expect(fs.statSync(path.join(dir, 'rootfile')).uid).toBe(0);
  });

  it('WatchDir: start first, then events named relative to the directory', async () => {
    const sbx = await connect();
    const watched = path.join(dir, 'watched');
    fs.mkdirSync(path.join(watched, 'sub'), { recursive: true });
    const seen: Array<{ name: string; type: string }> = [];
    const handle = await sbx.files.watchDir(watched, (ev) => void seen.push({ name: ev.name, type: ev.type }), { user: 'root', recursive: true });
    await sbx.files.write(path.join(watched, 'sub', 'new.txt'), 'x', { user: 'root' });
    for (let i = 0; i < 200 && !seen.some((e) => e.name === 'sub/new.txt'); i++) await new Promise((r) => setTimeout(r, 20));
    await handle.stop();
    expect(seen.map((e) => e.name)).toContain('sub/new.txt');
    await expect(sbx.files.watchDir(path.join(dir, 'rootfile'), () => {}, { user: 'root' })).rejects.toThrow(/not a directory/);
  });

  it('polled watchers: CreateWatcher, GetWatcherEvents, RemoveWatcher; unknown ids are not_found', async () => {
    const call = async (method: string, body: unknown) => {
      const r = await rawRequest({ port: gwPort }, 'POST', `/e2b/filesystem.Filesystem/${method}`, {
        headers: {
          'e2b-sandbox-id': SBX,
          'x-access-token': tokenFor(SBX),
          'content-type': 'application/json',
          authorization: `Basic ${Buffer.from('root:').toString('base64')}`,
        },
        body: JSON.stringify(body),
      });
      return { status: r.status, body: JSON.parse(r.body) };
    };
    const watched = path.join(dir, 'polled');
    fs.mkdirSync(watched);
    const created = await call('CreateWatcher', { path: watched });
    expect(created.status).toBe(200);
    const watcherId = created.body.watcherId as string;
    fs.writeFileSync(path.join(watched, 'p.txt'), 'p');
    let events: Array<{ name: string; type: string }> = [];
    for (let i = 0; i < 200 && events.length === 0; i++) {
      events = (await call('GetWatcherEvents', { watcherId })).body.events;
      if (events.length === 0) await new Promise((r) => setTimeout(r, 20));
    }
    expect(events).toContainEqual({ name: 'p.txt', type: 'EVENT_TYPE_CREATE' });
    expect((await call('RemoveWatcher', { watcherId })).status).toBe(200);
    expect(await call('GetWatcherEvents', { watcherId })).toMatchObject({ status: 404, body: { code: 'not_found' } });
    expect(await call('RemoveWatcher', { watcher_id: watcherId })).toMatchObject({ status: 404 });
  });
});

describe('routing and auth', () => {
  const envd = (p: string, headers: Record<string, string>, opts: { method?: string; body?: string } = {}) =>
    rawRequest({ port: gwPort }, opts.method ?? 'GET', p, { headers, body: opts.body });
  const h = (over: Record<string, string> = {}) => ({ 'e2b-sandbox-id': SBX, 'e2b-sandbox-port': '49983', 'x-access-token': tokenFor(SBX), ...over });

  it('/health: 204 for a running sandbox with its token', async () => {
    expect((await envd('/e2b/health', h())).status).toBe(204);
  });

  it('the token is checked before anything is said about the sandbox', async () => {
    for (const id of [SBX, OTHER]) {
      const noToken = await envd('/e2b/health', { 'e2b-sandbox-id': id, 'e2b-sandbox-port': '49983' });
      expect(noToken).toMatchObject({ status: 401 });
      expect(JSON.parse(noToken.body)).toMatchObject({ code: 401 });
      const forged = await envd('/e2b/health', { 'e2b-sandbox-id': id, 'x-access-token': `${tokenFor(id)}x` });
      expect(forged.status).toBe(401);
    }
    const otherToken = await envd('/e2b/health', h({ 'x-access-token': tokenFor(OTHER) }));
    expect(otherToken.status).toBe(403);
    // A unary RPC answers in Connect's terms.
    const rpc = await envd('/e2b/process.Process/List', h({ 'x-access-token': tokenFor(OTHER), 'content-type': 'application/json' }), {
      method: 'POST',
      body: '{}',
    });
    expect(rpc.status).toBe(403);
    expect(JSON.parse(rpc.body)).toMatchObject({ code: 'permission_denied' });
    await expect((await connect(OTHER)).isRunning()).resolves.toBe(false);
  });

  it('without E2b-Sandbox-Id or a host, the sandbox the verified token names (the /files and /health of SDKs before 2.36)', async () => {
    expect((await envd('/e2b/health', { 'x-access-token': tokenFor(SBX) })).status).toBe(204);
    expect((await envd('/e2b/health', { 'x-access-token': `${tokenFor(SBX)}x` })).status).toBe(401);
    expect((await envd('/e2b/health', { 'x-access-token': tokenFor(OTHER) })).status).toBe(502);
    expect((await envd('/e2b/health', {})).status).toBe(400);
  });

  it('tokens of a revoked key are refused', async () => {
    revoked.add(['key_revokedone'], Date.now() + 600_000);
    const r = await envd('/e2b/health', h({ 'x-access-token': tokenFor(SBX, 'key_revokedone') }));
    expect(r.status).toBe(401);
  });

  it('an unknown or stopped sandbox is 502 on every route; the SDK says not running / timeout', async () => {
    const r = await envd('/e2b/files?path=/etc/hostname', h({ 'e2b-sandbox-id': OTHER, 'x-access-token': tokenFor(OTHER) }));
    expect(r.status).toBe(502);
    expect(JSON.parse(r.body)).toMatchObject({ code: 502 });
    const sbx = await connect(OTHER);
    expect(await sbx.isRunning()).toBe(false);
    await expect(sbx.commands.run('true')).rejects.toBeInstanceOf(Error);
    await expect(sbx.files.read('/etc/hostname')).rejects.toBeInstanceOf(TimeoutError);
  });

  it('only envd is served: another port is 502 saying Sandglass exposes no guest ports', async () => {
    const r = await envd('/e2b/health', { 'e2b-sandbox-id': SBX, 'e2b-sandbox-port': '8080' });
    expect(r.status).toBe(502);
    expect(JSON.parse(r.body).message).toMatch(/exposes no guest ports/);
    for (const p of ['/', '/api/x?y=1', '/health']) {
      const byHost = await envd(p, { host: `3000-${SBX}.sandglass.test` });
      expect(byHost.status).toBe(502);
    }
    expect((await envd('/nope', { host: `49983-${SBX}.sandglass.test` })).status).toBe(401);
    expect((await envd('/nope', { host: `49983-${SBX}.sandglass.test`, 'x-access-token': tokenFor(SBX) })).status).toBe(404);
    expect((await envd('/nope', { host: '127.0.0.1' })).status).toBe(404);
  });

  it('the host form routes at the root; other hosts get the usual 404 there', async () => {
    const tok = { 'x-access-token': tokenFor(SBX) };
    expect((await envd('/health', { host: `49983-${SBX}.sandglass.test:443`, ...tok })).status).toBe(204);
    expect((await envd('/health', { host: '127.0.0.1', ...tok, 'e2b-sandbox-id': SBX })).status).toBe(404);
    expect((await envd('/health', { host: `49983-${SBX}.sandglass.test`, ...tok, 'e2b-sandbox-id': OTHER })).status).toBe(400);
    // Sandglass's own routes are untouched by the root form.
    expect((await envd('/v1/health', { host: '127.0.0.1' })).status).toBe(200);
  });

  it('bad users are refused with 401; StreamInput says it is not served', async () => {
    const bad = await envd('/e2b/files?path=/x&username=../../etc', h());
    expect(bad.status).toBe(401);
    const r = await envd('/e2b/process.Process/StreamInput', h({ 'content-type': 'application/connect+json' }), { method: 'POST', body: '' });
    expect(r.status).toBe(200);
    expect(r.body).toContain('unimplemented');
  });

  it('uploads: gzip octet-stream by hand, a too-big unary message, an unknown content type', async () => {
    const target = path.join(dir, 'raw-gz');
    const body = gzipSync(Buffer.from('raw gz'));
    const up = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = (require('node:http') as typeof import('node:http')).request(
        {
          host: '127.0.0.1',
          port: gwPort,
          method: 'POST',
          path: `/e2b/files?path=${encodeURIComponent(target)}&username=root`,
          headers: { ...h(), 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
        },
        (res) => {
          let s = '';
          res.on('data', (c) => (s += c));
          res.on('end', () => resolve({ status: res.statusCode!, body: s }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    expect(up.status).toBe(200);
    expect(JSON.parse(up.body)).toEqual([{ name: 'raw-gz', type: 'file', path: target }]);
    expect(fs.readFileSync(target, 'utf8')).toBe('raw gz');
    const odd = await envd(`/e2b/files?path=${target}`, h({ 'content-type': 'text/plain' }), { method: 'POST', body: 'x' });
    expect(odd.status).toBe(400);
    const huge = await envd('/e2b/process.Process/List', h({ 'content-type': 'application/json' }), {
      method: 'POST',
      body: `"${'x'.repeat(9 * 1024 * 1024)}"`,
    });
    expect(huge.status).toBe(429);
    expect(JSON.parse(huge.body)).toMatchObject({ code: 'resource_exhausted' });
  });
});

/** A server-streaming call by hand: the request envelope, and every envelope of the answer. */
async function rawStream(method: string, message: unknown, headers: Record<string, string>) {
  const { EnvelopeReader, messageEnvelope } = await import('./connect.js');
  const { request } = await import('node:http');
  return new Promise<{ status: number; frames: Array<{ flags: number; json: Record<string, unknown> }> }>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: gwPort,
        method: 'POST',
        path: `/e2b/${method}`,
        headers: { 'e2b-sandbox-id': SBX, 'x-access-token': tokenFor(SBX), 'content-type': 'application/connect+json', ...headers },
      },
      (res) => {
        const reader = new EnvelopeReader(1024 * 1024);
        const frames: Array<{ flags: number; json: Record<string, unknown> }> = [];
        res.on('data', (c: Buffer) => frames.push(...reader.push(c).map((e) => ({ flags: e.flags, json: JSON.parse(e.payload.toString()) }))));
        res.on('end', () => resolve({ status: res.statusCode!, frames }));
      },
    );
    req.on('error', reject);
    req.end(messageEnvelope(message));
  });
}

describe('streams by hand', () => {
  it('keepalives on an idle stream, then end and the end-of-stream frame', async () => {
    const r = await rawStream(
      'process.Process/Start',
      { process: { cmd: '/bin/sh', args: ['-c', 'sleep 2.5; echo done'] } },
      { 'keepalive-ping-interval': '1', authorization: `Basic ${Buffer.from('root:').toString('base64')}` },
    );
    expect(r.status).toBe(200);
    const kinds = r.frames.map((f) => (f.flags === 2 ? 'eos' : Object.keys((f.json.event as object) ?? {})[0]));
    expect(kinds[0]).toBe('start');
    expect(kinds).toContain('keepalive');
    expect(kinds.slice(-3)).toEqual(['data', 'end', 'eos']);
    expect(r.frames.at(-1)!.json).toEqual({});
  });

  it('errors of a stream travel in its end-of-stream frame with HTTP 200', async () => {
    const r = await rawStream('process.Process/Connect', { process: { pid: 4_000_000 } }, {});
    expect(r.status).toBe(200);
    expect(r.frames).toEqual([{ flags: 2, json: { error: { code: 'not_found', message: expect.stringContaining('4000000') } } }]);
    const bad = await rawStream('process.Process/Start', { process: {} }, {});
    expect(bad.frames.at(-1)!.json).toMatchObject({ error: { code: 'invalid_argument' } });
  });
});

// Last: stops the sandbox the other tests share.
describe('a sandbox that stops', () => {
  it('cuts its watches and command streams, and then answers 502 everywhere', async () => {
    const sbx = await connect();
    const watched = path.join(dir, 'until-stop');
    fs.mkdirSync(watched);
    let exited: unknown = 'not yet';
    const exitedP = new Promise<void>((resolve) => {
      void sbx.files
        .watchDir(watched, () => {}, {
          user: 'root',
          onExit: (err) => {
            exited = err;
            resolve();
          },
        })
        .catch(resolve);
    });
    const sleeper = await sbx.commands.run('sleep 60', { user: 'root', background: true });
    const waited = sleeper.wait().catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    await sandbox.end('killed');
    sandboxes.delete(SBX);
    await exitedP;
    expect(exited).toBeInstanceOf(Error);
    // The command's stream is cut, not ended in-band: the SDK probes /health, gets 502 and says the sandbox was killed.
    const err = await waited;
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as Error).message).toMatch(/sandbox was killed/);
    expect(await sbx.isRunning()).toBe(false);
    await expect(sbx.files.read(path.join(dir, 'o'))).rejects.toBeInstanceOf(TimeoutError);
  });
});
