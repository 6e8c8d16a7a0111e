// The unmodified `e2b` SDK (pinned in package.json) against a real `sandglass up` and real VMs, configured only the
// way its users would: E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL. Nothing may leave loopback: every DNS lookup of
// a non-local name and every connection off loopback is refused (before any packet) and fails the file.
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  NotFoundError,
  RateLimitError,
  Sandbox,
  SandboxError,
  Template,
  TimeoutError,
  type FilesystemEvent,
} from 'e2b';
import { Sandbox as SandglassSandbox } from '@sandglass/sdk';
import { startHttpsUpstream } from '@sandglass/egress/test-support';
import { offLoopback } from './e2b-env.js';
import { adminKey, api, config, gatewayUrl } from './helpers.js';

// The way an E2B user switches: environment variables only (the URLs are set by ./e2b-env.js).
process.env.E2B_API_KEY = adminKey;

const RUN = randomBytes(4).toString('hex');
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const text = (chunks: Uint8Array[]) => Buffer.concat(chunks).toString('utf8');

async function until<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

let sbx: Sandbox;
const toKill: string[] = [];

beforeAll(async () => {
  sbx = await Sandbox.create('base', { timeoutMs: 1_800_000, metadata: { suite: 'e2b', run: RUN, role: 'main' }, envs: { FROM_CREATE: 'sandbox-wide' } });
  toKill.push(sbx.sandboxId);
});

afterAll(async () => {
  for (const id of toKill) await Sandbox.kill(id).catch(() => undefined);
  expect(offLoopback, offLoopback.join('\n')).toEqual([]);
});

describe('the loopback guard', () => {
  it('refuses a lookup of E2B cloud before any connection, so a stray call would fail this file', async () => {
    const err = await Sandbox.list({ apiUrl: 'https://api.e2b.app' } as Parameters<typeof Sandbox.list>[0])
      .nextItems()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(offLoopback).toContain('lookup api.e2b.app');
    offLoopback.length = 0;
  });
});

describe('sandbox lifecycle', () => {
  it('creates with the defaults and kills', async () => {
    const plain = await Sandbox.create();
    toKill.push(plain.sandboxId);
    const info = await plain.getInfo();
    // As in E2B: templateID is the template's id, its name comes as the alias.
    expect(info.name).toBe('base');
    expect(info.templateId).toMatch(/^tpl_/);
    expect(info.state).toBe('running');
    expect(info.envdVersion).toMatch(/^\d+\.\d+\.\d+$/);
    // E2B's default timeout is 300 s.
    expect(info.endAt.getTime() - info.startedAt.getTime()).toBeGreaterThan(200_000);
    expect(await plain.isRunning()).toBe(true);
    await plain.kill();
    expect(await plain.isRunning()).toBe(false);
    expect(await Sandbox.kill(plain.sandboxId)).toBe(false);
    await expect(Sandbox.getInfo(plain.sandboxId)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('keeps metadata, passes create-time envs to every command, extends the timeout', async () => {
    const info = await sbx.getInfo();
    expect(info.sandboxId).toBe(sbx.sandboxId);
    expect(info.metadata).toEqual({ suite: 'e2b', run: RUN, role: 'main' });
    expect((await sbx.commands.run('echo "$FROM_CREATE"')).stdout).toBe('sandbox-wide\n');
    await sbx.setTimeout(3_600_000);
    const later = await sbx.getInfo();
    expect(later.endAt.getTime() - Date.now()).toBeGreaterThan(3_000_000);
  });

  it('is one engine: what the SDK does is in Sandglass events', async () => {
    await sbx.commands.run('echo engine');
    const res = await api('GET', `/v1/sandboxes/${sbx.sandboxId}/events?type=command`);
    expect(res.status).toBe(200);
    const argvs = (res.body!.events as Array<{ type: string; data: { argv?: string[] } }>).filter((e) => e.type === 'command.started').map((e) => e.data.argv);
    expect(argvs).toContainEqual(['/bin/bash', '-l', '-c', 'echo engine']);
  });
});

describe('metrics', () => {
  it('getMetrics: the guest’s CPU, memory and disk every 5 s, the same series as Sandglass’s sbx.metrics()', async () => {
    const first = await until('two samples', async () => {
      const m = await sbx.getMetrics();
      return m.length >= 2 ? m : undefined;
    });
    for (const m of first) {
      expect(m.timestamp).toBeInstanceOf(Date);
      expect(m.cpuCount).toBeGreaterThanOrEqual(1);
      expect(m.cpuUsedPct).toBeGreaterThanOrEqual(0);
      expect(m.cpuUsedPct).toBeLessThanOrEqual(100);
      expect(m.memTotal).toBeGreaterThan(64 * 2 ** 20);
      expect(m.memUsed).toBeGreaterThan(0);
      expect(m.memUsed).toBeLessThan(m.memTotal);
      expect(m.diskTotal).toBeGreaterThan(m.diskUsed);
      expect(m.diskUsed).toBeGreaterThan(0);
    }
    expect(first[1]!.timestamp.getTime()).toBeGreaterThan(first[0]!.timestamp.getTime());

    // Over time: 32 MiB written to the root filesystem and a busy loop show in later samples.
    const before = first.at(-1)!;
    await sbx.commands.run('head -c 33554432 /dev/urandom > /home/user/metrics.bin && sync');
    const busy = await sbx.commands.run('while :; do :; done', { background: true });
    const later = await until(
      'a sample with the file on disk and the loop on the CPU',
      async () =>
        (await sbx.getMetrics({ start: new Date(before.timestamp.getTime() + 1000) })).find(
          (m) => m.diskUsed >= before.diskUsed + 24 * 2 ** 20 && m.cpuUsedPct > 50,
        ),
      120_000,
    );
    expect(later.timestamp.getTime()).toBeGreaterThan(before.timestamp.getTime());
    await busy.kill();
    await sbx.commands.run('rm -f /home/user/metrics.bin');

    // start and end keep only what lies between them; Sandglass's own SDK reads the same series.
    const own = await (await SandglassSandbox.connect(sbx.sandboxId, config())).metrics();
    expect(own.length).toBeGreaterThanOrEqual(first.length);
    expect(own.map((m) => m.timestamp)).toContain(before.timestamp.toISOString());
    // The SDK sends whole seconds: a window of ±2 s around one sample (they are 5 s apart) holds that one only.
    const t0 = first[0]!.timestamp.getTime();
    const window = await sbx.getMetrics({ start: new Date(t0 - 2000), end: new Date(t0 + 2000) });
    expect(window.map((m) => m.timestamp.getTime())).toEqual([t0]);
    // E2B's "no such sandbox" for another tenant, as for every other call.
    const tenant = await api('POST', '/v1/tenants', { body: { name: `e2b-metrics-${RUN}` } });
    const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { role: 'admin' } });
    await expect(Sandbox.getMetrics(sbx.sandboxId, { apiKey: key.body!.key as string })).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe('commands', () => {
  it('streams stdout and stderr in order', async () => {
    const seen: string[] = [];
    const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.2; done', {
      onStdout: (d) => void seen.push(...d.split('\n').filter(Boolean)),
      onStderr: (d) => void seen.push(...d.split('\n').filter(Boolean)),
    });
    expect(r.stdout).toBe('out1\nout2\nout3\n');
    expect(r.stderr).toBe('err1\nerr2\nerr3\n');
    for (const i of [1, 2]) {
      expect(seen.indexOf(`out${i}`)).toBeLessThan(seen.indexOf(`out${i + 1}`));
      expect(seen.indexOf(`err${i}`)).toBeLessThan(seen.indexOf(`out${i + 1}`));
    }
  });

  it('reports a failing exit as CommandExitError with its output', async () => {
    const err = await sbx.commands.run('echo partial; echo bad >&2; exit 3').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    const e = err as CommandExitError;
    expect(e.exitCode).toBe(3);
    expect(e.stdout).toBe('partial\n');
    expect(e.stderr).toBe('bad\n');
  });

  it('honours cwd, envs and user (default user is `user`)', async () => {
    const r = await sbx.commands.run('echo "$GREETING"; pwd; whoami', { envs: { GREETING: 'hi there' }, cwd: '/tmp' });
    expect(r.stdout).toBe('hi there\n/tmp\nuser\n');
    expect((await sbx.commands.run('pwd')).stdout).toBe('/home/user\n');
    expect((await sbx.commands.run('whoami; pwd', { user: 'root' })).stdout).toBe('root\n/root\n');
  });

  it('kills a command at its timeoutMs', async () => {
    const err = await sbx.commands.run('sleep 37', { timeoutMs: 3000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    await until('the timed-out command to be gone', async () => !(await sbx.commands.list()).some((p) => p.args.includes('sleep 37')) || undefined);
  });

  it('runs in the background: stdin, closeStdin, wait', async () => {
    const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
    await h.sendStdin('hello ');
    await h.sendStdin(new TextEncoder().encode('stdin\n'));
    await h.closeStdin();
    const r = await h.wait();
    expect(r.stdout).toBe('hello stdin\ndone\n');
    expect(r.exitCode).toBe(0);
  });

  it('lists, kills, and reconnects by pid', async () => {
    const sleeper = await sbx.commands.run('sleep 600', { background: true });
    const listed = await sbx.commands.list();
    const mine = listed.find((p) => p.pid === sleeper.pid);
    expect(mine).toMatchObject({ cmd: '/bin/bash', args: ['-l', '-c', 'sleep 600'] });
    expect(await sbx.commands.kill(sleeper.pid)).toBe(true);
    const killed = await sleeper.wait().catch((e: unknown) => e);
    expect(killed).toBeInstanceOf(CommandExitError);
    expect((await sbx.commands.list()).some((p) => p.pid === sleeper.pid)).toBe(false);
    expect(await sbx.commands.kill(sleeper.pid)).toBe(false);

    const ticker = await sbx.commands.run('for i in $(seq 1 8); do echo tick$i; sleep 0.4; done', { background: true });
    await ticker.disconnect();
    const seen: string[] = [];
    const again = await sbx.commands.connect(ticker.pid, { onStdout: (d) => void seen.push(d) });
    const r = await again.wait();
    expect(r.exitCode).toBe(0);
    expect(seen.join('')).toContain('tick8\n');
    await expect(sbx.commands.connect(999_999)).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe('files', () => {
  it('writes and reads text, bytes and streams, relative to the user home', async () => {
    const info = await sbx.files.write('/tmp/e2b/hello.txt', 'hi there');
    expect(info).toMatchObject({ name: 'hello.txt', path: '/tmp/e2b/hello.txt' });
    expect(await sbx.files.read('/tmp/e2b/hello.txt')).toBe('hi there');

    const rel = await sbx.files.write('notes/rel.txt', 'relative');
    expect(rel.path).toBe('/home/user/notes/rel.txt');
    expect((await sbx.commands.run('cat notes/rel.txt && stat -c %U notes/rel.txt notes')).stdout).toBe('relativeuser\nuser\n');

    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode('streamed '));
        c.enqueue(new TextEncoder().encode('bytes'));
        c.close();
      },
    });
    await sbx.files.write('/tmp/e2b/streamed.txt', stream);
    const readable = await sbx.files.read('/tmp/e2b/streamed.txt', { format: 'stream' });
    const chunks: Uint8Array[] = [];
    for await (const c of readable as unknown as AsyncIterable<Uint8Array>) chunks.push(c);
    expect(text(chunks)).toBe('streamed bytes');
  });

  it('round-trips a 10 MiB binary file', async () => {
    const data = new Uint8Array(randomBytes(10 * 1024 * 1024));
    await sbx.files.write('/tmp/e2b/big.bin', data.buffer);
    expect((await sbx.commands.run('sha256sum /tmp/e2b/big.bin')).stdout.split(' ')[0]).toBe(sha256(data));
    const back = await sbx.files.read('/tmp/e2b/big.bin', { format: 'bytes' });
    expect(back.byteLength).toBe(data.byteLength);
    expect(sha256(back)).toBe(sha256(data));
  });

  it('writes several files at once, lists, stats, makes dirs, renames, removes', async () => {
    const written = await sbx.files.write([
      { path: '/tmp/multi/a.txt', data: 'A' },
      { path: '/tmp/multi/b.txt', data: new TextEncoder().encode('BB').buffer },
    ]);
    expect(written.map((e) => e.path).sort()).toEqual(['/tmp/multi/a.txt', '/tmp/multi/b.txt']);
    const listed = await sbx.files.list('/tmp/multi');
    expect(listed.map((e) => [e.name, e.type]).sort()).toEqual([
      ['a.txt', 'file'],
      ['b.txt', 'file'],
    ]);
    const b = await sbx.files.getInfo('/tmp/multi/b.txt');
    expect(b).toMatchObject({ name: 'b.txt', type: 'file', size: 2, path: '/tmp/multi/b.txt', owner: 'user', group: 'user' });
    expect(b.permissions).toMatch(/^-[rwx-]{9}$/);
    expect(b.modifiedTime).toBeInstanceOf(Date);
    expect(await sbx.files.exists('/tmp/multi/a.txt')).toBe(true);
    expect(await sbx.files.exists('/tmp/multi/nope')).toBe(false);
    expect(await sbx.files.makeDir('/tmp/multi/sub/deeper')).toBe(true);
    expect(await sbx.files.makeDir('/tmp/multi/sub/deeper')).toBe(false);
    expect((await sbx.files.getInfo('/tmp/multi/sub')).type).toBe('dir');
    const moved = await sbx.files.rename('/tmp/multi/a.txt', '/tmp/multi/sub/c.txt');
    expect(moved.path).toBe('/tmp/multi/sub/c.txt');
    expect(await sbx.files.read('/tmp/multi/sub/c.txt')).toBe('A');
    expect((await sbx.files.list('/tmp/multi', { depth: 3 })).map((e) => e.path).sort()).toEqual([
      '/tmp/multi/b.txt',
      '/tmp/multi/sub',
      '/tmp/multi/sub/c.txt',
      '/tmp/multi/sub/deeper',
    ]);
    await sbx.files.remove('/tmp/multi/sub');
    expect(await sbx.files.exists('/tmp/multi/sub/c.txt')).toBe(false);
    await expect(sbx.files.read('/tmp/multi/gone.txt')).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.list('/tmp/nowhere')).rejects.toBeInstanceOf(NotFoundError);
  });

  it('gives a symlink’s target as the absolute path it resolves to, as envd does', async () => {
    await sbx.commands.run('mkdir -p /tmp/links/sub && echo t > /tmp/links/sub/t.txt && cd /tmp/links && ln -sf sub/t.txt rel && ln -sf ../links/sub up');
    expect(await sbx.files.getInfo('/tmp/links/rel')).toMatchObject({ type: 'symlink', symlinkTarget: '/tmp/links/sub/t.txt' });
    const listed = await sbx.files.list('/tmp/links');
    expect(Object.fromEntries(listed.filter((e) => e.symlinkTarget !== undefined).map((e) => [e.name, e.symlinkTarget]))).toEqual({
      rel: '/tmp/links/sub/t.txt',
      up: '/tmp/links/sub',
    });
  });

  it('keeps file metadata as extended attributes (envd 0.6.2): on the write, getInfo and list entries', async () => {
    const meta = { origin: 'upload', 'run-id': RUN };
    const one = await sbx.files.write('meta/a.txt', 'A', { metadata: meta });
    expect(one).toMatchObject({ path: '/home/user/meta/a.txt', metadata: meta });
    // Streamed (octet-stream) and multipart uploads both carry it.
    await sbx.files.write('meta/b.txt', new Blob(['B']).stream(), { metadata: { origin: 'stream' } });
    await sbx.files.write([{ path: 'meta/c.txt', data: 'C' }], { metadata: { origin: 'multipart' } });
    expect((await sbx.files.getInfo('meta/a.txt')).metadata).toEqual(meta);
    const listed = await sbx.files.list('meta');
    expect(Object.fromEntries(listed.map((e) => [e.name, e.metadata]))).toEqual({
      'a.txt': meta,
      'b.txt': { origin: 'stream' },
      'c.txt': { origin: 'multipart' },
    });
    // They are the file's `user.` attributes in the guest, so they go with it: a rename keeps them, a new write of
    // the path without metadata is a new file without any.
    await sbx.files.rename('meta/a.txt', 'meta/moved.txt');
    expect((await sbx.files.getInfo('meta/moved.txt')).metadata).toEqual(meta);
    await sbx.files.write('meta/moved.txt', 'again');
    expect((await sbx.files.getInfo('meta/moved.txt')).metadata).toBeUndefined();
  });

  it('watches with includeEntry (envd 0.6.3): each event carries the entry while it exists', async () => {
    await sbx.files.makeDir('/home/user/watched-entry');
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir('/home/user/watched-entry', (e) => void events.push(e), { includeEntry: true });
    await sbx.files.write('/home/user/watched-entry/e.txt', 'xyz', { metadata: { k: 'v' } });
    // The write renames a finished file into place, so the event that names it sees it whole.
    const arrived = await until('an event of e.txt with its entry', () => events.find((e) => e.name === 'e.txt' && e.entry !== undefined));
    expect(arrived.entry).toMatchObject({ name: 'e.txt', type: 'file', path: '/home/user/watched-entry/e.txt', size: 3, owner: 'user', metadata: { k: 'v' } });
    await sbx.commands.run('rm /home/user/watched-entry/e.txt');
    const removed = await until('the remove event', () => events.find((e) => e.name === 'e.txt' && e.type === ('remove' as never)));
    expect(removed.entry).toBeUndefined();
    await w.stop();
  });

  it('watches a directory', async () => {
    await sbx.files.makeDir('/tmp/watched');
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir('/tmp/watched', (e) => void events.push(e));
    await sbx.files.write('/tmp/watched/new.txt', 'x');
    await sbx.commands.run('echo more >> /tmp/watched/new.txt; rm /tmp/watched/new.txt');
    await until('create, write and remove events', () => {
      const kinds = new Set(events.filter((e) => e.name === 'new.txt').map((e) => e.type));
      return kinds.has('create' as never) && kinds.has('write' as never) && kinds.has('remove' as never) ? true : undefined;
    });
    await w.stop();
  });
});

describe('signed file URLs', () => {
  it('downloadUrl and uploadUrl open one file of one sandbox with the URL alone, until they expire', async () => {
    // Any envd call shows the gateway the token the SDK signs with.
    await sbx.files.write('signed/a.txt', 'signed content');
    const url = await sbx.downloadUrl('signed/a.txt');
    expect(new URL(url).searchParams.get('signature')).toMatch(/^v1_/);
    const got = await fetch(url);
    expect(got.status).toBe(200);
    expect(await got.text()).toBe('signed content');
    const upUrl = await sbx.uploadUrl('signed/up.txt', { useSignatureExpiration: 600 });
    const form = new FormData();
    form.append('file', new Blob(['uploaded']), 'up.txt');
    expect((await fetch(upUrl, { method: 'POST', body: form })).status).toBe(200);
    expect(await sbx.files.read('signed/up.txt')).toBe('uploaded');
    expect((await sbx.files.getInfo('signed/up.txt')).owner).toBe('user');

    // The signature covers the path, the operation, the user and the expiry: any change is refused (401), and so is
    // a URL past its expiry, before the guest is asked anything.
    const status = async (u: string | URL, init?: RequestInit) => (await fetch(u, init)).status;
    const edit = (u: string, param: string, value: string) => {
      const e = new URL(u);
      e.searchParams.set(param, value);
      return e;
    };
    expect(await status(edit(url, 'path', 'signed/up.txt'))).toBe(401);
    expect(await status(edit(url, 'username', 'root'))).toBe(401);
    expect(await status(edit(url, 'signature', `v1_${'A'.repeat(43)}`))).toBe(401);
    expect(await status(edit(upUrl, 'signature_expiration', String(Math.floor(Date.now() / 1000) + 86_400)))).toBe(401);
    expect(await status(url, { method: 'POST', body: form })).toBe(401);
    const expired = await sbx.downloadUrl('signed/a.txt', { useSignatureExpiration: -5 });
    expect(await status(expired)).toBe(401);
    const unsigned = new URL(url);
    unsigned.searchParams.delete('signature');
    expect(await status(unsigned)).toBe(404);

    // Sandbox A's URL never opens sandbox B: it names A through A's token alone, so a path only B has is not found
    // (in A), and a request that also names B is refused.
    const other = await Sandbox.create({ timeoutMs: 600_000 });
    toKill.push(other.sandboxId);
    // Made before this client's first envd request: the control plane told the gateway of the token it handed out.
    const first = await fetch(await other.downloadUrl('/etc/hostname'));
    expect(first.status).toBe(200);
    await other.files.write('signed/only-b.txt', 'b');
    const aForB = await sbx.downloadUrl('signed/only-b.txt');
    expect(await status(aForB)).toBe(404);
    expect(await status(await other.downloadUrl('signed/only-b.txt'))).toBe(200);
    expect(await status(url, { headers: { 'E2b-Sandbox-Id': other.sandboxId } })).toBe(403);
    await other.kill();
    expect(await status(await sbx.downloadUrl('signed/a.txt'))).toBe(200);
  });
});

describe('pty', () => {
  it('runs a shell on a terminal: input, resize, kill', async () => {
    const out: Uint8Array[] = [];
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void out.push(d) });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo $((6*7))\n'));
    await until('42 on the terminal', () => (text(out).includes('42') ? true : undefined));
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'));
    await until('the new size', () => (text(out).includes('30 100') ? true : undefined));
    expect(await sbx.pty.kill(term.pid)).toBe(true);
    await expect(term.wait()).rejects.toBeInstanceOf(CommandExitError);
  });
});

describe('list, pause and connect', () => {
  it('filters by state and metadata, pages, and resumes a paused sandbox with its memory', async () => {
    const other = await Sandbox.create('base', { timeoutMs: 600_000, metadata: { suite: 'e2b', run: RUN, role: 'other' } });
    toKill.push(other.sandboxId);
    await other.commands.run('echo remembered > /dev/shm/mem.txt');
    const sleeper = await other.commands.run('sleep 1000', { background: true });

    const mine = async (query: Parameters<typeof Sandbox.list>[0]) => {
      const p = Sandbox.list(query);
      const ids: string[] = [];
      while (p.hasNext) ids.push(...(await p.nextItems()).map((s) => s.sandboxId));
      return ids.sort();
    };
    expect(await mine({ query: { metadata: { run: RUN } } })).toEqual([sbx.sandboxId, other.sandboxId].sort());
    expect(await mine({ query: { metadata: { run: RUN, role: 'other' } } })).toEqual([other.sandboxId]);
    const paged = Sandbox.list({ query: { metadata: { run: RUN } }, limit: 1 });
    expect(await paged.nextItems()).toHaveLength(1);
    expect(paged.hasNext).toBe(true);
    expect(await paged.nextItems()).toHaveLength(1);

    expect(await other.pause()).toBe(true);
    expect(await Sandbox.pause(other.sandboxId)).toBe(false);
    expect(await other.isRunning()).toBe(false);
    expect((await other.getInfo()).state).toBe('paused');
    expect(await mine({ query: { metadata: { run: RUN }, state: ['paused'] } })).toEqual([other.sandboxId]);
    expect(await mine({ query: { metadata: { run: RUN }, state: ['running'] } })).toEqual([sbx.sandboxId]);

    const resumed = await Sandbox.connect(other.sandboxId);
    expect(resumed.sandboxId).toBe(other.sandboxId);
    expect((await resumed.getInfo()).state).toBe('running');
    expect(await resumed.files.read('/dev/shm/mem.txt')).toBe('remembered\n');
    expect((await resumed.commands.list()).some((p) => p.pid === sleeper.pid)).toBe(true);
    // The handle from before the pause still works: its token lives as long as the sandbox.
    expect(await other.isRunning()).toBe(true);
    expect((await other.commands.run('cat /dev/shm/mem.txt')).stdout).toBe('remembered\n');
    // Connecting to a running sandbox is a no-op that hands back a working handle.
    const same = await Sandbox.connect(other.sandboxId);
    expect((await same.commands.run('echo ok')).stdout).toBe('ok\n');
    await resumed.kill();
  });

  it("pauses at the timeout without memory (onTimeout { action: 'pause', keepMemory: false }); connect boots it over its disk", async () => {
    const e = await Sandbox.create('base', { timeoutMs: 40_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
    toKill.push(e.sandboxId);
    expect((await e.getInfo()).lifecycle).toEqual({ onTimeout: 'pause', autoResume: false });
    expect((await api('GET', `/v1/sandboxes/${e.sandboxId}`)).body).toMatchObject({ onTimeout: 'pause', onTimeoutKeepMemory: false });
    await e.files.write('/home/user/kept.txt', 'on the disk');
    await e.commands.run('echo gone > /dev/shm/gone.txt');
    await until('the timeout to pause it', async () => (await e.getInfo()).state === 'paused', 180_000);
    const events = (await api('GET', `/v1/sandboxes/${e.sandboxId}/events?limit=1000`)).body!.events as Array<{ type: string; data: any }>;
    expect(events.find((ev) => ev.type === 'sandbox.paused')?.data).toMatchObject({ reason: 'timeout', memory: false });
    expect(events.some((ev) => ev.type === 'sandbox.killed')).toBe(false);

    // A cold boot under TCG takes far longer than a memory resume: the connect is given the time.
    const booted = await Sandbox.connect(e.sandboxId, { timeoutMs: 600_000, requestTimeoutMs: 300_000 });
    expect(await booted.files.read('/home/user/kept.txt')).toBe('on the disk');
    expect((await booted.commands.run('test -e /dev/shm/gone.txt; echo $?')).stdout).toBe('1\n');
    const resumed = (await api('GET', `/v1/sandboxes/${e.sandboxId}/events?limit=1000`)).body!.events as Array<{ type: string; data: any }>;
    expect(resumed.filter((ev) => ev.type === 'sandbox.resumed').at(-1)?.data).toMatchObject({ coldBoot: true });
    await booted.kill();
  });

  it("connect with onResume 'reboot' boots a paused sandbox over its disk: files kept, processes gone", async () => {
    const e = await Sandbox.create('base', { timeoutMs: 600_000 });
    toKill.push(e.sandboxId);
    await e.files.write('/home/user/kept.txt', 'on the disk');
    // A memory snapshot's disk holds what the guest had written back when it was taken: sync first, as E2B advises.
    await e.commands.run('sync');
    await e.commands.run('sleep 100000', { background: true });
    expect(await e.pause()).toBe(true);
    const booted = await Sandbox.connect(e.sandboxId, { onResume: 'reboot', timeoutMs: 600_000, requestTimeoutMs: 300_000 });
    expect(await booted.files.read('/home/user/kept.txt')).toBe('on the disk');
    expect((await booted.commands.run('pgrep -x sleep; echo $?')).stdout).toBe('1\n');
    const resumed = (await api('GET', `/v1/sandboxes/${e.sandboxId}/events?limit=1000`)).body!.events as Array<{ type: string; data: any }>;
    expect(resumed.filter((ev) => ev.type === 'sandbox.resumed').at(-1)?.data).toMatchObject({ coldBoot: true });
    await booted.kill();
  });

  it('lists a sandbox started exactly at startedAfter (E2B: "at or after")', async () => {
    const { startedAt } = await sbx.getInfo();
    const listed = await Sandbox.list({ query: { startedAfter: startedAt, metadata: { run: RUN, role: 'main' } } }).nextItems();
    expect(listed.map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);
    const later = await Sandbox.list({ query: { startedAfter: new Date(startedAt.getTime() + 1), metadata: { run: RUN, role: 'main' } } }).nextItems();
    expect(later).toEqual([]);
  });

  it('forks a running sandbox as it is now', async () => {
    await sbx.files.write('/tmp/fork-marker.txt', `forked ${RUN}`);
    const forks = await Sandbox.fork(sbx.sandboxId, { count: 2, timeoutMs: 600_000 });
    expect(forks).toHaveLength(2);
    for (const f of forks) {
      expect(f).toBeInstanceOf(Sandbox);
      const child = f as Sandbox;
      toKill.push(child.sandboxId);
      expect(child.sandboxId).not.toBe(sbx.sandboxId);
      expect(await child.files.read('/tmp/fork-marker.txt')).toBe(`forked ${RUN}`);
      await child.kill();
    }
    expect(await sbx.isRunning()).toBe(true);
  });
});

describe('snapshots', () => {
  it('createSnapshot keeps a named snapshot: listed, a sandbox created from it, deleted', async () => {
    await sbx.files.write('/tmp/snap-marker.txt', `snapped ${RUN}`);
    const snap = await sbx.createSnapshot({ name: `e2b-${RUN}` });
    expect(snap).toEqual({ snapshotId: expect.stringMatching(/^snap_/), names: [`e2b-${RUN}`] });
    // Kept: a named Sandglass snapshot, which retention never thins.
    expect((await api('GET', `/v1/snapshots/${snap.snapshotId}`)).body).toMatchObject({ name: `e2b-${RUN}`, pinned: true, sandboxId: sbx.sandboxId });
    const unnamed = await sbx.createSnapshot();
    expect(unnamed.names).toEqual([unnamed.snapshotId]);
    const mine = async () => (await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()).map((s) => s.snapshotId);
    expect(await mine()).toEqual([unnamed.snapshotId, snap.snapshotId]);

    const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 600_000 });
    toKill.push(child.sandboxId);
    expect(child.sandboxId).not.toBe(sbx.sandboxId);
    expect(await child.files.read('/tmp/snap-marker.txt')).toBe(`snapped ${RUN}`);
    await child.kill();

    // Another tenant sees none of them, cannot start from one, and deletes nothing.
    const tenant = await api('POST', '/v1/tenants', { body: { name: `e2b-snap-${RUN}` } });
    const otherKey = (await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { role: 'admin' } })).body!.key as string;
    expect(await Sandbox.listSnapshots({ apiKey: otherKey }).nextItems()).toEqual([]);
    await expect(Sandbox.create(snap.snapshotId, { apiKey: otherKey })).rejects.toBeInstanceOf(SandboxError);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, { apiKey: otherKey })).toBe(false);

    expect(await Sandbox.deleteSnapshot(unnamed.snapshotId)).toBe(true);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(false);
    expect(await mine()).toEqual([]);
  });
});

describe('templates', () => {
  it('Template.exists: true for a template Sandglass has, false otherwise', async () => {
    expect(await Template.exists('base')).toBe(true);
    expect(await Template.exists(`no-such-template-${RUN}`)).toBe(false);
  });
});

describe('guest ports', () => {
  it('getHost names the gateway’s host-name form of the port: a server started in the guest answers there', async () => {
    await sbx.commands.run(`mkdir -p /tmp/www && echo served ${RUN} > /tmp/www/hello.txt`);
    const server = await sbx.commands.run('cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1', { background: true, timeoutMs: 0 });
    const host = sbx.getHost(8000);
    const gw = new URL(gatewayUrl);
    expect(host).toBe(`8000-${sbx.sandboxId}.sandglass.localhost:${gw.port}`);
    // As a client of the host name would, on loopback: `*.localhost` is loopback, so the request goes to 127.0.0.1
    // with that Host, plain HTTP as `sandglass up` serves it.
    const get = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        request({ host: gw.hostname, port: gw.port, path: '/hello.txt', headers: { host, ...headers } }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString('utf8') }));
        })
          .on('error', reject)
          .end();
      });
    // Private, as every Sandglass port is until made public: the sandbox's token opens it.
    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const served = await until('the guest server', async () => {
      const r = await get({ 'x-sandglass-access-token': token });
      return r.status === 200 ? r : undefined;
    });
    expect(served.body).toBe(`served ${RUN}\n`);
    expect((await get({})).status).toBe(401);
    await server.kill();
  });

  it('trafficAccessToken opens the guest ports (e2b-traffic-access-token), never reaches the guest, and opens nothing else', async () => {
    const s = await Sandbox.create({ timeoutMs: 600_000, network: { allowPublicTraffic: false } });
    toKill.push(s.sandboxId);
    const traffic = s.trafficAccessToken;
    expect(traffic).toMatch(/^sgtt_/);
    // A server that answers with the request headers it received, so the test sees what the guest saw.
    const echo = [
      'import http.server as h',
      'class H(h.BaseHTTPRequestHandler):',
      '  def do_GET(s):',
      '    b = str(s.headers).encode(); s.send_response(200); s.send_header("content-length", str(len(b))); s.end_headers(); s.wfile.write(b)',
      'h.HTTPServer(("127.0.0.1", 8001), H).serve_forever()',
    ].join('\n');
    await s.files.write('/tmp/echo.py', echo);
    const server = await s.commands.run('exec python3 /tmp/echo.py', { background: true, timeoutMs: 0 });
    const gw = new URL(gatewayUrl);
    const get = (host: string, headers: Record<string, string>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        request({ host: gw.hostname, port: gw.port, path: '/', headers: { host, ...headers } }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString('utf8') }));
        })
          .on('error', reject)
          .end();
      });
    const host = s.getHost(8001);
    const seen = await until('the guest echo server', async () => {
      const r = await get(host, { 'e2b-traffic-access-token': traffic! });
      return r.status === 200 ? r : undefined;
    });
    expect(seen.body.toLowerCase()).not.toContain('e2b-traffic-access-token');
    expect(seen.body).not.toContain(traffic!);
    // Another sandbox's port, a tampered token, and no token: refused before any guest is asked.
    expect((await get(`8001-${sbx.sandboxId}.sandglass.localhost:${gw.port}`, { 'e2b-traffic-access-token': traffic! })).status).toBe(403);
    expect((await get(host, { 'e2b-traffic-access-token': `${traffic!.slice(0, -2)}AA` })).status).toBe(401);
    expect((await get(host, {})).status).toBe(401);
    // Not envd's credential, nor the gateway API's: it opens guest ports only.
    const files = await fetch(`${gatewayUrl}/v1/sandboxes/${s.sandboxId}/files?path=/tmp/echo.py`, { headers: { authorization: `Bearer ${traffic}` } });
    expect(files.status).toBe(401);
    const envdFile = (token: string) =>
      new Promise<number>((resolve, reject) => {
        const path = '/files?path=%2Ftmp%2Fecho.py&username=user';
        request(
          { host: gw.hostname, port: gw.port, path, headers: { host: s.getHost(49983), 'x-access-token': token, 'e2b-traffic-access-token': traffic! } },
          (res) => {
            res.resume().on('end', () => resolve(res.statusCode!));
          },
        )
          .on('error', reject)
          .end();
      });
    expect(await envdFile((s as unknown as { envdAccessToken: string }).envdAccessToken)).toBe(200);
    expect(await envdFile(traffic!)).toBe(401);
    await server.kill();
  });
});

describe('egress', () => {
  it('applies to sandboxes made through E2B: denied unless allowed, allowOut becomes the policy', async () => {
    const up = await startHttpsUpstream(inject('egressPki'), inject('egressUpstreamPorts')[7]!);
    try {
      const s = await Sandbox.create({ timeoutMs: 600_000, network: { allowOut: ['api.example.test'] } });
      toKill.push(s.sandboxId);
      const native = await api('GET', `/v1/sandboxes/${s.sandboxId}`);
      expect(native.body!.network.allow).toEqual([expect.stringContaining('api.example.test')]);
      // allowOut names HTTP(S) on the usual ports, as in E2B: the upstream's own port is still refused by the proxy.
      const url = `https://api.example.test:${up.port}/echo`;
      const seen = up.seen.length;
      await expect(s.commands.run(`curl -sS --fail ${url}`)).rejects.toBeInstanceOf(CommandExitError);
      expect(up.seen.length).toBe(seen);
      // The same sandbox under Sandglass's own API: one policy, whichever API set it.
      expect((await api('PUT', `/v1/sandboxes/${s.sandboxId}/network`, { body: { allow: [`api.example.test:${up.port}`] } })).status).toBe(200);
      const r = await s.commands.run(`curl -sS --fail ${url}`);
      expect(JSON.parse(r.stdout).url).toBe('/echo');
      expect(up.seen.length).toBe(seen + 1);
    } finally {
      await up.close();
    }
  });
});

describe('errors', () => {
  it('maps to the SDK classes', async () => {
    await expect(Sandbox.list({ apiKey: 'sg_not_a_key' }).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
    await expect(Sandbox.create({ apiKey: 'sg_not_a_key' })).rejects.toBeInstanceOf(AuthenticationError);
    await expect(Sandbox.connect('sbx_doesnotexist')).rejects.toBeInstanceOf(NotFoundError);
    await expect(Sandbox.getInfo('sbx_doesnotexist')).rejects.toBeInstanceOf(NotFoundError);
    expect(await Sandbox.kill('sbx_doesnotexist')).toBe(false);
    await expect(Sandbox.create('no-such-template')).rejects.toBeInstanceOf(SandboxError);
    // A Connect message over the gateway's bound is resource_exhausted, which the SDK reports as RateLimitError.
    const reader = await sbx.commands.run('cat > /dev/null', { background: true, stdin: true });
    await expect(reader.sendStdin(new Uint8Array(9 * 1024 * 1024))).rejects.toBeInstanceOf(RateLimitError);
    await reader.kill();

    const doomed = await Sandbox.create({ timeoutMs: 600_000 });
    toKill.push(doomed.sandboxId);
    await doomed.kill();
    // The SDK's own reading of a 502 (E2B's edge for a sandbox that is gone): on a stream start, "not running anymore".
    await expect(doomed.commands.run('true')).rejects.toBeInstanceOf(NotFoundError);
    await expect(doomed.files.read('/etc/hostname')).rejects.toBeInstanceOf(TimeoutError);
  });

  it('fails a command whose sandbox is killed the way the SDK reads a killed sandbox', async () => {
    const victim = await Sandbox.create({ timeoutMs: 600_000 });
    toKill.push(victim.sandboxId);
    const running = victim.commands.run('sleep 600').catch((e: unknown) => e);
    await until('the command to run', async () => ((await victim.commands.list()).length > 0 ? true : undefined));
    expect(await Sandbox.kill(victim.sandboxId)).toBe(true);
    // The stream is cut, as E2B's edge cuts it: the SDK probes /health (502) and names the kill, not a timeout.
    const err = await running;
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as Error).message).toMatch(/The sandbox was killed/);
  });

  it('keeps tenants apart and checks the envd token', async () => {
    const tenant = await api('POST', '/v1/tenants', { body: { name: `e2b-other-${RUN}` } });
    expect(tenant.status).toBe(201);
    const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { role: 'admin' } });
    expect(key.status).toBe(201);
    const otherKey = key.body!.key as string;
    await expect(Sandbox.getInfo(sbx.sandboxId, { apiKey: otherKey })).rejects.toBeInstanceOf(NotFoundError);
    await expect(Sandbox.connect(sbx.sandboxId, { apiKey: otherKey })).rejects.toBeInstanceOf(NotFoundError);
    expect(await Sandbox.kill(sbx.sandboxId, { apiKey: otherKey })).toBe(false);
    expect(await sbx.isRunning()).toBe(true);

    // The other tenant's own sandbox: its envd token opens only itself.
    const theirs = await Sandbox.create({ apiKey: otherKey, timeoutMs: 600_000 });
    toKill.push(theirs.sandboxId);
    const health = (id: string, token?: string) =>
      fetch(`${gatewayUrl}/e2b/health`, {
        headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983', ...(token === undefined ? {} : { 'X-Access-Token': token }) },
      });
    const theirToken = (theirs as unknown as { envdAccessToken: string }).envdAccessToken;
    expect((await health(theirs.sandboxId, theirToken)).status).toBe(204);
    expect([401, 403]).toContain((await health(sbx.sandboxId, theirToken)).status);
    expect((await health(sbx.sandboxId)).status).toBe(401);
    expect((await health(sbx.sandboxId, 'sgat_forged.token')).status).toBe(401);
    // Deployments with wildcard DNS route by host name instead of headers: `<port>-<sandbox id>.<domain>`, at the root.
    const byHost = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const u = new URL(gatewayUrl);
        request({ host: u.hostname, port: u.port, path: '/health', headers: { host, 'X-Access-Token': theirToken } }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        })
          .on('error', reject)
          .end();
      });
    expect(await byHost(`49983-${theirs.sandboxId}.sandbox.example.test`)).toBe(204);
    expect(await byHost(`49983-${sbx.sandboxId}.sandbox.example.test`)).toBe(403);
    // Sandglass exposes no guest port but envd's.
    expect(await byHost(`3000-${theirs.sandboxId}.sandbox.example.test`)).toBe(502);
    await Sandbox.kill(theirs.sandboxId, { apiKey: otherKey });
  });
});
