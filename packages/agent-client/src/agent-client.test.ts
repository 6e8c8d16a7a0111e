// The host client against the real Go agent (`--serve-stdio`): every method over a pipe pair.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { AgentClient, AgentError, type FsEvent, type NetConnection, type NetOpenInfo, type ProcExitEvent, type ProcStartParams } from './index.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const agentDir = path.join(repoRoot, 'agent');

/** The prebuilt agent when it is newer than every source file, else a fresh build in a temp dir. */
function agentBinary(): string {
  const prebuilt = path.join(agentDir, 'build', 'sandglass-agent');
  const sources = fs.readdirSync(agentDir).filter((f) => f.endsWith('.go') || f === 'go.mod');
  const newestSourceMs = Math.max(...sources.map((f) => fs.statSync(path.join(agentDir, f)).mtimeMs));
  if (fs.existsSync(prebuilt) && fs.statSync(prebuilt).mtimeMs > newestSourceMs) return prebuilt;
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sandglass-agent-')), 'sandglass-agent');
  execFileSync(path.join(agentDir, 'build.sh'), [out], { stdio: 'pipe' });
  return out;
}

let binary = '';

function startAgent(): { client: AgentClient; child: ChildProcess } {
  const child = spawn(binary, ['--serve-stdio'], { stdio: ['pipe', 'pipe', 'ignore'] });
  const client = new AgentClient({ readable: child.stdout!, writable: child.stdin! }, { callTimeoutMs: 20_000 });
  return { client, child };
}

function waitExit(client: AgentClient, id: string): Promise<ProcExitEvent> {
  return new Promise((resolve) => {
    const listener = (ev: { event: string }) => {
      if (ev.event === 'proc.exit' && (ev as ProcExitEvent).id === id) {
        client.off('event', listener);
        resolve(ev as ProcExitEvent);
      }
    };
    client.on('event', listener);
  });
}

interface Output {
  stdout: string;
  stderr: string;
  pieces: { fd: number; offset: number; bytes: Buffer }[];
}

/** Attaches from an offset and resolves with everything up to END. */
function collect(client: AgentClient, id: string, fromOffset = 0): Promise<Output & { startOffset: number }> {
  return new Promise((resolve, reject) => {
    const pieces: Output['pieces'] = [];
    let startOffset = -1;
    let ended = false;
    const finish = () => {
      if (startOffset < 0 || !ended) return;
      const text = (fd: number) => Buffer.concat(pieces.filter((p) => p.fd === fd).map((p) => p.bytes)).toString();
      resolve({ stdout: text(1), stderr: text(2), pieces, startOffset });
    };
    client
      .procAttach(
        id,
        fromOffset,
        (fd, offset, bytes) => pieces.push({ fd, offset, bytes: Buffer.from(bytes) }),
        (err) => {
          if (err) reject(err);
          ended = true;
          finish();
        },
      )
      .then((h) => {
        startOffset = h.startOffset;
        finish();
      }, reject);
  });
}

async function run(client: AgentClient, params: ProcStartParams): Promise<Output & { exit: ProcExitEvent }> {
  const exit = waitExit(client, params.id);
  await client.procStart(params);
  const out = await collect(client, params.id);
  return { ...out, exit: await exit };
}

async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AgentError);
  expect((err as AgentError).code).toBe(code);
}

let ids = 0;
const nextId = () => `cmd_test_${++ids}`;

describe('agent client ↔ Go agent over stdio', () => {
  let client: AgentClient;
  let child: ChildProcess;
  let tmp: string;

  beforeAll(async () => {
    binary = agentBinary();
    ({ client, child } = startAgent());
    await client.hello();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sandglass-agent-test-'));
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    child?.kill();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('says hello and answers ping', async () => {
    const h = await client.hello();
    expect(h.version).toBe(1);
    expect(h.agentVersion).toMatch(/\d+\.\d+\.\d+/);
    expect(h.bootId).toMatch(/[0-9a-f-]{36}/);
    expect(h.uptimeMs).toBeGreaterThanOrEqual(0);
    await client.ping();
  });

  it('requires hello first and rejects unknown methods and versions', async () => {
    const fresh = startAgent();
    try {
      await expectCode(fresh.client.ping(), 'bad_request');
      await expectCode(fresh.client.call('hello', { version: 2 }), 'bad_request');
      await fresh.client.hello();
      await expectCode(fresh.client.call('no.such.method'), 'unknown_method');
    } finally {
      await fresh.client.close();
    }
  });

  it('validates sync and leaves the host clock alone outside a guest', async () => {
    expect(await client.sync()).toEqual({ skipped: true });
    await expectCode(client.sync({ entropy: randomBytes(8) }), 'bad_request');
  });

  it('runs a process: stdout, stderr, exit code, env, cwd', async () => {
    const id = nextId();
    const r = await run(client, {
      id,
      argv: ['sh', '-c', 'echo out; echo err >&2; echo "$FOO $HOME"; pwd; exit 3'],
      env: { FOO: 'bar' },
      cwd: tmp,
    });
    expect(r.stdout).toBe(`out\nbar /root\n${tmp}\n`);
    expect(r.stderr).toBe('err\n');
    expect(r.exit).toMatchObject({ id, exitCode: 3, signal: null, outputBytes: r.stdout.length + r.stderr.length });
    const info = (await client.procList()).find((p) => p.id === id);
    expect(info).toMatchObject({ exited: true, exitCode: 3, pty: false, argv: ['sh', '-c', expect.any(String)] });
    await expectCode(client.procStart({ id, argv: ['true'] }), 'bad_request');
    await client.procForget(id);
    expect((await client.procList()).some((p) => p.id === id)).toBe(false);
  });

  it('feeds stdin and closes it on eof', async () => {
    const id = nextId();
    const exit = waitExit(client, id);
    await client.procStart({ id, argv: ['cat'], stdin: true });
    await client.procStdin(id, 'hello ');
    await client.procStdin(id, Buffer.from('world'), { eof: true });
    const out = await collect(client, id);
    expect(out.stdout).toBe('hello world');
    expect((await exit).exitCode).toBe(0);
  });

  it('signals the process group; forget refuses a running process', async () => {
    const id = nextId();
    const exit = waitExit(client, id);
    await client.procStart({ id, argv: ['sh', '-c', 'sleep 30 & sleep 30'] });
    await expectCode(client.procForget(id), 'busy');
    await client.procSignal(id, 'SIGTERM');
    expect(await exit).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
    await expectCode(client.procSignal('cmd_missing', 'SIGTERM'), 'not_found');
  });

  it('reports command_not_found, a missing cwd and an unknown user', async () => {
    await expectCode(client.procStart({ id: nextId(), argv: ['no-such-command-sandglass'] }), 'command_not_found');
    await expectCode(client.procStart({ id: nextId(), argv: ['/nonexistent/bin'] }), 'command_not_found');
    await expectCode(client.procStart({ id: nextId(), argv: ['true'], cwd: '/nonexistent-dir' }), 'not_found');
    await expectCode(client.procStart({ id: nextId(), argv: ['true'], user: 'no-such-user-sg' }), 'bad_request');
  });

  it('runs on a pty and resizes it', async () => {
    const id = nextId();
    const exit = waitExit(client, id);
    await client.procStart({ id, argv: ['sh', '-c', 'stty size; echo "$TERM"; read x; stty size'], pty: { cols: 80, rows: 24 } });
    let text = '';
    let sawFirst!: () => void;
    const first = new Promise<void>((r) => (sawFirst = r));
    let ended!: () => void;
    const done = new Promise<void>((r) => (ended = r));
    await client.procAttach(
      id,
      0,
      (fd, _offset, bytes) => {
        expect(fd).toBe(1);
        text += bytes.toString();
        if (text.includes('xterm-256color')) sawFirst();
      },
      () => ended(),
    );
    await first;
    expect(text).toContain('24 80');
    await client.procResize(id, 100, 40);
    await client.procStdin(id, '\n');
    await done;
    expect(text).toContain('40 100');
    expect((await exit).exitCode).toBe(0);
    await expectCode(client.procResize(id, 0, 10), 'bad_request');
  });

  it('attaches from an offset in the middle and reports bytes lost to the ring', async () => {
    const id = nextId();
    const r = await run(client, { id, argv: ['sh', '-c', 'printf 01234; printf abc >&2; printf 56789'] });
    expect(r.stdout + r.stderr).toBe('0123456789abc');
    expect(r.pieces.map((p) => p.offset)).toEqual(r.pieces.map((_, i, a) => a.slice(0, i).reduce((n, p) => n + p.bytes.length, 0)));
    // stdout and stderr are separate pipes, so their interleaving is the agent's read order: replay must follow it.
    const arrival = r.pieces.map((p) => p.bytes.toString()).join('');
    const mid = await collect(client, id, 3);
    const joined = mid.pieces.map((p) => p.bytes.toString()).join('');
    expect(joined).toBe(arrival.slice(3));
    expect(mid.pieces[0]!.offset).toBe(3);

    const small = nextId();
    await run(client, { id: small, argv: ['head', '-c', '5000', '/dev/zero'], bufferBytes: 1000 });
    const tail = await collect(client, small, 0);
    expect(tail.startOffset).toBe(4000);
    expect(tail.pieces[0]!.offset).toBe(4000);
    expect(tail.pieces.reduce((n, p) => n + p.bytes.length, 0)).toBe(1000);
  });

  it('streams large output through the attach window', async () => {
    const id = nextId();
    const r = await run(client, { id, argv: ['head', '-c', '3000000', '/dev/urandom'] });
    expect(r.exit.outputBytes).toBe(3_000_000);
    expect(r.pieces.reduce((n, p) => n + p.bytes.length, 0)).toBe(3_000_000);
  });

  it('round-trips a 20 MiB random file with matching sha256', async () => {
    const data = randomBytes(20 * 1024 * 1024);
    const file = path.join(tmp, 'big', 'random.bin');
    const t0 = performance.now();
    const { sizeBytes } = await client.writeFile(file, data, { mode: 0o600 });
    const t1 = performance.now();
    expect(sizeBytes).toBe(data.length);
    const stream = await client.readFile(file);
    expect(stream.sizeBytes).toBe(data.length);
    const hash = createHash('sha256');
    for await (const chunk of stream) hash.update(chunk as Buffer);
    const t2 = performance.now();
    expect(hash.digest('hex')).toBe(createHash('sha256').update(data).digest('hex'));
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(path.dirname(file))).toEqual(['random.bin']);
    const mib = data.length / 1024 / 1024;
    console.log(`20 MiB over stdio: write ${(mib / ((t1 - t0) / 1000)).toFixed(0)} MiB/s, read ${(mib / ((t2 - t1) / 1000)).toFixed(0)} MiB/s`);
  });

  it('moves a directory up and down as tar streams, and stops sending once the agent refuses one', async () => {
    const src = path.join(tmp, 'tar-src');
    fs.mkdirSync(path.join(src, 'a', 'b'), { recursive: true });
    fs.writeFileSync(path.join(src, 'a', 'b', 'f.txt'), 'hello');
    fs.writeFileSync(path.join(src, 'top.bin'), randomBytes(300_000));
    fs.symlinkSync('a/b/f.txt', path.join(src, 'link'));
    const tarBytes = execFileSync('tar', ['-cf', '-', '-C', src, '.'], { maxBuffer: 1 << 24 });
    const dst = path.join(tmp, 'tar-dst', 'deep');
    const up = await client.writeTar(dst, tarBytes);
    expect(up).toEqual({ entries: 6, sizeBytes: 300_005 });
    expect(fs.readFileSync(path.join(dst, 'a', 'b', 'f.txt'), 'utf8')).toBe('hello');
    expect(fs.readlinkSync(path.join(dst, 'link'))).toBe('a/b/f.txt');

    const chunks: Buffer[] = [];
    for await (const c of await client.readTar(dst, { windowBytes: 64 * 1024 })) chunks.push(c as Buffer);
    const listed = execFileSync('tar', ['-tvf', '-'], { input: Buffer.concat(chunks) }).toString();
    expect(listed).toMatch(/ a\/b\/f\.txt\n/);
    expect(listed).toMatch(/ link -> a\/b\/f\.txt\n/);
    expect(listed).toMatch(/ 300000 .* top\.bin\n/);

    // A refused entry (`..`) first, then 64 MiB: the agent reports at once and the client sends no more of it.
    const evil = Buffer.from(tarBytes);
    evil.fill(0, 0, 100);
    evil.write('../escape', 0);
    evil.fill(' ', 148, 156);
    let sum = 0;
    for (const b of evil.subarray(0, 512)) sum += b;
    evil.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    let sentBytes = 0;
    const body = (async function* () {
      yield evil.subarray(0, 512);
      for (let i = 0; i < 64; i++) {
        sentBytes += 1024 * 1024;
        yield Buffer.alloc(1024 * 1024);
      }
    })();
    await expect(client.writeTar(path.join(tmp, 'tar-evil'), body)).rejects.toMatchObject({ code: 'bad_request' });
    expect(sentBytes).toBeLessThan(64 * 1024 * 1024);
    expect(fs.existsSync(path.join(tmp, 'escape'))).toBe(false);
  });

  it('reads with a small window, writes from a stream, and appends', async () => {
    const data = randomBytes(1024 * 1024 + 17);
    const file = path.join(tmp, 'small-window.bin');
    fs.writeFileSync(file, data);
    const chunks: Buffer[] = [];
    for await (const c of await client.readFile(file, { windowBytes: 64 * 1024 })) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).equals(data)).toBe(true);

    const target = path.join(tmp, 'streamed.txt');
    await client.writeFile(target, Readable.from(['one ', 'two ']));
    await client.writeFile(target, 'three', { append: true });
    expect(fs.readFileSync(target, 'utf8')).toBe('one two three');
  });

  it('stops a read the consumer abandons', async () => {
    const file = path.join(tmp, 'abandoned.bin');
    fs.writeFileSync(file, randomBytes(8 * 1024 * 1024));
    const stream = await client.readFile(file, { windowBytes: 256 * 1024 });
    for await (const _ of stream) break;
    await client.ping();
  });

  it('stats, lists, makes directories, renames and removes', async () => {
    const dir = path.join(tmp, 'tree', 'a');
    expect(await client.mkdir(dir)).toEqual({ created: true });
    expect(await client.mkdir(dir)).toEqual({ created: false });
    await expectCode(client.mkdir(path.join(tmp, 'x', 'y'), { parents: false }), 'not_found');
    await client.writeFile(path.join(dir, 'f.txt'), 'hello');
    fs.symlinkSync('f.txt', path.join(dir, 'link'));

    const st = await client.stat(path.join(dir, 'f.txt'));
    expect(st).toMatchObject({ name: 'f.txt', path: path.join(dir, 'f.txt'), type: 'file', sizeBytes: 5, mode: 0o644 });
    expect(Math.abs(st.mtimeMs - Date.now())).toBeLessThan(60_000);
    expect(await client.stat(path.join(dir, 'link'))).toMatchObject({ type: 'symlink', symlinkTarget: 'f.txt' });
    expect((await client.stat(dir)).type).toBe('dir');

    const shallow = await client.list(path.join(tmp, 'tree'));
    expect(shallow.map((e) => e.name)).toEqual(['a']);
    const deep = await client.list(path.join(tmp, 'tree'), { depth: 2 });
    expect(deep.map((e) => e.path).sort()).toEqual([dir, path.join(dir, 'f.txt'), path.join(dir, 'link')].sort());
    await expectCode(client.list(path.join(dir, 'f.txt')), 'not_a_directory');

    await client.rename(path.join(dir, 'f.txt'), path.join(dir, 'g.txt'));
    expect(fs.readFileSync(path.join(dir, 'g.txt'), 'utf8')).toBe('hello');
    await expectCode(client.remove(path.join(tmp, 'tree')), 'bad_request');
    await client.remove(path.join(dir, 'g.txt'));
    await client.remove(path.join(tmp, 'tree'), { recursive: true });
    expect(fs.existsSync(path.join(tmp, 'tree'))).toBe(false);
    await expectCode(client.stat('relative/path'), 'bad_request');
  });

  it('answers not_found for missing paths and processes', async () => {
    const missing = path.join(tmp, 'missing');
    await expectCode(client.stat(missing), 'not_found');
    await expectCode(client.readFile(missing), 'not_found');
    await expectCode(client.remove(missing), 'not_found');
    await expectCode(client.rename(missing, path.join(tmp, 'other')), 'not_found');
    await expectCode(client.list(missing), 'not_found');
    await expectCode(client.readFile(tmp), 'is_a_directory');
    await expectCode(
      client.procAttach(
        'cmd_missing',
        0,
        () => undefined,
        () => undefined,
      ),
      'not_found',
    );
    await expectCode(client.procStdin('cmd_missing', 'x'), 'not_found');
  });

  it.skipIf(process.getuid?.() !== 0)('writes and makes directories owned by a guest user, and names owners', async () => {
    const line = fs
      .readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('nobody:'));
    if (!line) return;
    const [, , uid, gid] = line.split(':').map(Number);
    const file = path.join(tmp, 'owned', 'deep', 'f.txt');
    await client.writeFile(file, 'mine', { owner: 'nobody' });
    for (const p of [path.join(tmp, 'owned'), path.join(tmp, 'owned', 'deep'), file]) {
      expect(fs.statSync(p)).toMatchObject({ uid, gid });
    }
    expect(await client.stat(file)).toMatchObject({ uid, gid, owner: 'nobody' });
    expect((await client.list(path.join(tmp, 'owned'))).map((e) => e.owner)).toEqual(['nobody']);
    expect(await client.stat(tmp)).toMatchObject({ uid: 0, owner: 'root', group: 'root' });

    await client.mkdir(path.join(tmp, 'owned', 'd2'), { owner: uid });
    expect(fs.statSync(path.join(tmp, 'owned', 'd2')).uid).toBe(uid);
    await expectCode(client.writeFile(path.join(tmp, 'owned', 'x'), 'x', { owner: 'no-such-user' }), 'bad_request');
    await expectCode(client.mkdir(path.join(tmp, 'owned', 'y'), { owner: 'no-such-user' }), 'bad_request');
    expect(fs.readdirSync(path.join(tmp, 'owned')).sort()).toEqual(['d2', 'deep']);
  });

  it('watches a directory: creates, writes, renames and removes with relative names, until unwatch', async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'watch-'));
    const seen = new EventLog();
    await client.watch('w-flat', dir, {}, (ev) => seen.push(ev));
    await client.writeFile(path.join(dir, 'a.txt'), 'one');
    await seen.waitFor('a.txt', 'write');
    fs.renameSync(path.join(dir, 'a.txt'), path.join(dir, 'b.txt'));
    await seen.waitFor('b.txt', 'create');
    fs.rmSync(path.join(dir, 'b.txt'));
    await seen.waitFor('b.txt', 'remove');
    expect(seen.list()).toEqual(['create a.txt', 'write a.txt', 'rename a.txt', 'create b.txt', 'remove b.txt']);
    await expectCode(
      client.watch('w-flat', dir, {}, () => undefined),
      'bad_request',
    );

    // Both watches read one inotify queue in the agent: once the probe saw the later file, an event of the unwatched
    // watch for the earlier one would have arrived before it.
    const probe = new EventLog();
    await client.watch('w-probe', dir, {}, (ev) => probe.push(ev));
    await client.unwatch('w-flat');
    fs.writeFileSync(path.join(dir, 'after-unwatch'), '');
    fs.writeFileSync(path.join(dir, 'marker'), '');
    await probe.waitFor('marker', 'write');
    expect(seen.list()).toHaveLength(5);
    await client.unwatch('w-probe');
    await expectCode(
      client.watch('w-missing', path.join(dir, 'nope'), {}, () => undefined),
      'not_found',
    );
    await expectCode(
      client.watch('w-file', path.join(dir, 'marker'), {}, () => undefined),
      'not_a_directory',
    );
  });

  it('watches recursively: a file in a newly created subdirectory', async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'watch-'));
    const seen = new EventLog();
    await client.watch('w-rec', dir, { recursive: true }, (ev) => seen.push(ev));
    fs.mkdirSync(path.join(dir, 'sub', 'deeper'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'sub', 'deeper', 'f'), 'x');
    await seen.waitFor('sub/deeper/f', 'create');
    await client.unwatch('w-rec');
  });

  it('ends watches when the transport closes', async () => {
    const fresh = startAgent();
    await fresh.client.hello();
    let onEnd!: (err: AgentError) => void;
    const ended = new Promise<AgentError>((resolve) => {
      onEnd = resolve;
    });
    // Awaited before the kill: the agent answers calls concurrently, so a ping's reply can overtake the watch's, and a
    // watch call still pending at the kill rejects with nothing to catch it.
    await fresh.client.watch('w', tmp, { onEnd }, () => undefined);
    await fresh.client.ping();
    fresh.child.kill('SIGKILL');
    expect((await ended).code).toBe('agent_disconnected');
  });

  it('rejects pending calls with agent_disconnected when the transport closes', async () => {
    const fresh = startAgent();
    await fresh.client.hello();
    const id = nextId();
    const { pid } = await fresh.client.procStart({ id, argv: ['sleep', '30'], stdin: true });
    // sleep never reads, so this write blocks in the agent and the reply never comes.
    const pending = fresh.client.procStdin(id, randomBytes(1024 * 1024));
    const closed = new Promise((r) => fresh.client.once('close', r));
    fresh.child.kill('SIGKILL');
    await expectCode(pending, 'agent_disconnected');
    await closed;
    await expectCode(fresh.client.ping(), 'agent_disconnected');
    // The sleep may already have gone with the agent: only one still running needs stopping.
    try {
      process.kill(pid, 'SIGKILL');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  });
});

/** The events of one watch, in order, with a way to wait for a given one. */
class EventLog {
  private readonly events: FsEvent[] = [];
  private wake?: () => void;

  push(ev: FsEvent): void {
    this.events.push(ev);
    this.wake?.();
  }

  list(): string[] {
    return this.events.map((e) => (e.op === 'overflow' ? 'overflow' : `${e.op} ${e.name}`));
  }

  async waitFor(name: string, op: string): Promise<void> {
    while (!this.events.some((e) => e.op === op && 'name' in e && e.name === name)) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
}

/** Resolves with a port nothing listens on (the kernel's pick, released again). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** A guest program's connection to the agent's relay listener (here the listener is on the host, --serve-stdio). */
function connectGuest(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    s.once('connect', () => {
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}

function readAll(s: NodeJS.ReadableStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    s.once('end', () => resolve(Buffer.concat(chunks)));
    s.once('error', reject);
  });
}

/** What a socket saw at its end: EOF or an error code. */
function outcome(s: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    s.once('end', () => resolve('EOF'));
    s.resume();
  });
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('relayed guest connections (net.listen) and env defaults', () => {
  let client: AgentClient;
  let child: ChildProcess;
  let echo: net.Server;
  let echoPort = 0;
  let port = 0;
  /** What the host does with each relayed connection; tests swap it. */
  let onConn: (conn: NetConnection, info: NetOpenInfo) => void;

  /** The gateway's job in miniature: hand the relayed connection to a real TCP server (here an echo server). */
  const relayToEcho = (conn: NetConnection) => {
    const up = net.connect({ port: echoPort, host: '127.0.0.1', allowHalfOpen: true });
    conn.pipe(up).pipe(conn);
    const kill = () => {
      conn.destroy();
      up.destroy();
    };
    conn.on('error', kill);
    up.on('error', kill);
  };

  const echoThrough = async (data: Buffer): Promise<Buffer> => {
    const s = await connectGuest(port);
    const back = readAll(s);
    s.end(data);
    return back;
  };

  beforeAll(async () => {
    binary ||= agentBinary();
    ({ client, child } = startAgent());
    await client.hello();
    echo = net.createServer({ allowHalfOpen: true }, (s) => {
      s.on('error', () => s.destroy());
      s.pipe(s);
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    echoPort = (echo.address() as net.AddressInfo).port;
    client.on('net.open', (conn, info) => onConn(conn, info));
    port = await freePort();
    expect(await client.netListen(port, { windowBytes: 1024 * 1024 })).toEqual({ port });
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    child?.kill();
    await new Promise((r) => echo?.close(r));
  });

  it('relays bytes both ways, names the peer, and holds host frames while quiesced', async () => {
    const opened = new Promise<[NetConnection, NetOpenInfo]>((r) => (onConn = (c, i) => r([c, i])));
    const s = await connectGuest(port);
    const [conn, info] = await opened;
    expect(info.peer).toBe(`127.0.0.1:${s.localPort}`);
    expect(info.stream >>> 31).toBe(1);
    expect(conn.peer).toBe(info.peer);

    s.write('from guest');
    const [first] = (await new Promise((r) => conn.once('data', (c: Buffer) => r([c])))) as [Buffer];
    expect(first.toString()).toBe('from guest');

    const release = await client.quiesce();
    const got: Buffer[] = [];
    s.on('data', (c: Buffer) => got.push(c));
    conn.write('held back');
    await sleep(200);
    expect(Buffer.concat(got).toString()).toBe('');
    release();
    await vi.waitFor(() => expect(Buffer.concat(got).toString()).toBe('held back'));
    conn.destroy();
    expect(await outcome(s)).toBe('ECONNRESET');

    onConn = relayToEcho;
    expect((await echoThrough(Buffer.from('round trip'))).toString()).toBe('round trip');
  });

  it('moves 20 MiB each way within the windows while readers stall, and the agent keeps answering', async () => {
    const up = randomBytes(20 * 1024 * 1024);
    const down = randomBytes(20 * 1024 * 1024);
    const opened = new Promise<NetConnection>((r) => (onConn = (c) => r(c)));
    const s = await connectGuest(port);
    s.pause();
    const conn = await opened;
    conn.pause();
    let downSent = 0;
    const source = Readable.from(
      (function* () {
        for (let off = 0; off < down.length; off += 1024 * 1024) {
          downSent = off;
          yield down.subarray(off, off + 1024 * 1024);
        }
      })(),
    );
    source.pipe(conn);
    s.end(up);

    await sleep(500);
    // Neither reader has taken anything: the agent stopped at the host's 1 MiB window (plus what the host's 64 KiB
    // readable buffer took before it filled), the host at the agent's credit.
    const t0 = performance.now();
    await client.ping();
    const pingMs = performance.now() - t0;
    expect(pingMs).toBeLessThan(1000);
    expect(conn.readableLength).toBeLessThanOrEqual(1024 * 1024 + 64 * 1024);
    expect(s.writableLength).toBeGreaterThan(0);
    expect(downSent).toBeLessThan(down.length - 1024 * 1024);

    const gotUp = readAll(conn);
    const gotDown = readAll(s);
    // Slow readers: a pause now and then, and pings keep getting answered meanwhile.
    let pings = 0;
    const pinger = (async () => {
      for (let i = 0; i < 5; i++) {
        s.pause();
        conn.pause();
        await client.ping();
        pings++;
        await sleep(50);
        s.resume();
        conn.resume();
        await sleep(20);
      }
    })();
    const [u, d] = await Promise.all([gotUp, gotDown, pinger]);
    expect(pings).toBe(5);
    expect(sha256(u)).toBe(sha256(up));
    expect(sha256(d)).toBe(sha256(down));
    await new Promise((r) => (conn.destroyed ? r(undefined) : conn.once('close', r)));
  });

  it('times out idle connections like a socket', async () => {
    const opened = new Promise<NetConnection>((r) => (onConn = (c) => r(c)));
    const s = await connectGuest(port);
    const conn = await opened;
    const t0 = performance.now();
    const timedOut = new Promise<number>((r) => conn.setTimeout(200, () => r(performance.now() - t0)));
    await sleep(120);
    s.write('activity');
    expect(await timedOut).toBeGreaterThanOrEqual(300);
    conn.setTimeout(0);
    conn.destroy();
    expect(await outcome(s)).toBe('ECONNRESET');
  });

  it('half-closes each way', async () => {
    // The guest ends first: the host sees EOF and can still answer.
    onConn = (conn) => {
      void readAll(conn).then((got) => conn.end(`got:${got.toString()}`));
    };
    const s1 = await connectGuest(port);
    const back1 = readAll(s1);
    s1.end('abc');
    expect((await back1).toString()).toBe('got:abc');

    // The host ends first: the guest sees EOF and can still send.
    const hostGot = new Promise<string>((resolve) => {
      onConn = (conn) => {
        conn.end('bye');
        void readAll(conn).then((b) => resolve(b.toString()));
      };
    });
    const s2 = await connectGuest(port);
    expect((await readAll(s2)).toString()).toBe('bye');
    s2.end('after');
    expect(await hostGot).toBe('after');
  });

  it('relays 20 concurrent connections', async () => {
    onConn = relayToEcho;
    const payloads = Array.from({ length: 20 }, () => randomBytes(100 * 1024 + Math.floor(Math.random() * 1000)));
    const echoed = await Promise.all(payloads.map((p) => echoThrough(p)));
    for (const [i, e] of echoed.entries()) expect(e.equals(payloads[i]!)).toBe(true);
  });

  it('drops relayed connections on hello, and the listener keeps accepting', async () => {
    const opened = new Promise<NetConnection>((r) => (onConn = (c) => r(c)));
    const s = await connectGuest(port);
    const conn = await opened;
    const hostErr = new Promise<Error>((r) => conn.once('error', r));
    const guestSaw = outcome(s);
    await client.hello();
    expect(await hostErr).toMatchObject({ code: 'agent_disconnected' });
    expect(await guestSaw).toBe('ECONNRESET');
    onConn = relayToEcho;
    expect((await echoThrough(Buffer.from('after hello'))).toString()).toBe('after hello');
  });

  it('keeps the listener for the same port and moves it for another', async () => {
    onConn = relayToEcho;
    expect(await client.netListen(port)).toEqual({ port });
    const other = await freePort();
    expect(await client.netListen(other)).toEqual({ port: other });
    await expect(connectGuest(port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    const s = await connectGuest(other);
    const back = readAll(s);
    s.end('moved');
    expect((await back).toString()).toBe('moved');
    expect(await client.netListen(port)).toEqual({ port });
    await expectCode(client.netListen(70_000), 'bad_request');
  });

  it("merges env defaults into every process; a process's own env wins", async () => {
    await client.envDefaults({
      HTTP_PROXY: `http://127.0.0.1:${port}`,
      https_proxy: `http://127.0.0.1:${port}`,
      GITHUB_TOKEN: 'sg_placeholder_abc',
      FOO: 'default',
    });
    const r = await run(client, { id: nextId(), argv: ['env'], env: { FOO: 'own' } });
    const env = r.stdout.split('\n');
    expect(env).toContain(`HTTP_PROXY=http://127.0.0.1:${port}`);
    expect(env).toContain(`https_proxy=http://127.0.0.1:${port}`);
    expect(env).toContain('GITHUB_TOKEN=sg_placeholder_abc');
    expect(env).toContain('FOO=own');

    await client.envDefaults({ FOO: 'replaced' });
    const r2 = await run(client, { id: nextId(), argv: ['env'] });
    expect(r2.stdout.split('\n')).toContain('FOO=replaced');
    expect(r2.stdout).not.toContain('HTTP_PROXY');
    await expectCode(client.envDefaults({ 'A=B': 'x' }), 'bad_request');
    await client.envDefaults({});
  });

  it('refuses a disk.grow of no size; growing the disk itself is tested in a real guest (tests/files-bulk)', async () => {
    await expectCode(client.diskGrow(0), 'bad_request');
  });

  it('refuses connections the host has no handler for', async () => {
    const fresh = startAgent();
    try {
      await fresh.client.hello();
      const { port: p } = await fresh.client.netListen(0);
      // The reset may beat Node's connect callback.
      const saw = await connectGuest(p).then(outcome, (e: NodeJS.ErrnoException) => e.code);
      expect(saw).toBe('ECONNRESET');
    } finally {
      await fresh.client.close();
      fresh.child.kill();
    }
  });

  it('net.close resets relayed connections and stops accepting', async () => {
    const opened = new Promise<NetConnection>((r) => (onConn = (c) => r(c)));
    const s = await connectGuest(port);
    const conn = await opened;
    const hostErr = new Promise<Error>((r) => conn.once('error', r));
    const guestSaw = outcome(s);
    await client.netClose();
    expect(await hostErr).toBeInstanceOf(AgentError);
    expect(await guestSaw).toBe('ECONNRESET');
    await expect(connectGuest(port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await client.netClose();
  });
});

describe('inbound port access (net.dial, net.ports)', () => {
  let client: AgentClient;
  let child: ChildProcess;
  let echo: net.Server;
  let echoPort = 0;

  beforeAll(async () => {
    binary ||= agentBinary();
    ({ client, child } = startAgent());
    await client.hello();
    // The "guest" server: with --serve-stdio the agent's loopback is the host's.
    echo = net.createServer({ allowHalfOpen: true }, (s) => {
      s.on('error', () => s.destroy());
      s.pipe(s);
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    echoPort = (echo.address() as net.AddressInfo).port;
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    child?.kill();
    await new Promise((r) => echo?.close(r));
  });

  it('relays 8 MiB both ways through a small window, with a half-close', async () => {
    const conn = await client.netDial(echoPort, { windowBytes: 64 * 1024 });
    const data = randomBytes(8 * 1024 * 1024);
    const back = readAll(conn);
    conn.end(data);
    const got = await back;
    expect(createHash('sha256').update(got).digest('hex')).toBe(createHash('sha256').update(data).digest('hex'));
  });

  it('answers a stable code at once for a port that is out of range, closed or the relay', async () => {
    await expectCode(client.netDial(0), 'bad_request');
    await expectCode(client.netDial(65_536), 'bad_request');
    const closed = await freePort();
    await expectCode(client.netDial(closed), 'not_found');
    const { port: relayPort } = await client.netListen(0);
    try {
      await expectCode(client.netDial(relayPort), 'permission_denied');
    } finally {
      await client.netClose();
    }
  });

  it('lists the listening sockets', async () => {
    const ports = await client.netPorts();
    expect(ports).toContainEqual({ port: echoPort, address: '127.0.0.1' });
  });
});
