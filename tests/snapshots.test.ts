// Time travel with real VMs: live snapshots, fork and pause/resume keep memory, processes and files exactly; forks are independent; bad input.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { decompress } from 'zstd-napi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SandglassError, Secrets } from '@sandglass/sdk';
import { api, checkResponsesAgainstSpec, config, home } from './helpers.js';

checkResponsesAgainstSpec();

// A process holding state only in memory: a counter it advances and 64 MiB of random bytes whose hash it reports.
const HOLDER = `
import hashlib, os, time, sys
buf = bytearray(os.urandom(64 * 1024 * 1024))
marker = (sys.argv[1] * 4096).encode() if len(sys.argv) > 1 else b''
open('/root/hash', 'w').write(hashlib.sha256(buf).hexdigest())
i = 0
while True:
    i += 1
    open('/root/counter.tmp', 'w').write(str(i)); os.replace('/root/counter.tmp', '/root/counter')
    if os.path.exists('/root/ask'):
        os.remove('/root/ask')
        open('/root/answer', 'w').write(hashlib.sha256(buf).hexdigest() + ' ' + str(i))
    time.sleep(0.05)
`;

async function startHolder(sbx: Sandbox, marker = ''): Promise<void> {
  await sbx.files.write('/root/holder.py', HOLDER);
  await sbx.commands.run(`nohup python3 /root/holder.py ${marker} >/dev/null 2>&1 &`);
  for (let i = 0; i < 200; i++) {
    const r = await sbx.commands.run('test -s /root/hash && cat /root/counter 2>/dev/null || true');
    if (r.stdout.trim()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error('the holder process did not start');
}

/** Asks the holder (through a file) for its buffer hash and counter: proves the process itself is alive with its memory. */
async function askHolder(sbx: Sandbox): Promise<{ hash: string; counter: number }> {
  await sbx.commands.run('rm -f /root/answer; touch /root/ask');
  for (let i = 0; i < 200; i++) {
    const r = await sbx.commands.run('cat /root/answer 2>/dev/null || true');
    const [hash, counter] = r.stdout.trim().split(' ');
    if (hash && counter) return { hash, counter: Number(counter) };
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the holder did not answer');
}

async function counterNow(sbx: Sandbox): Promise<number> {
  return Number((await sbx.commands.run('cat /root/counter')).stdout.trim());
}

let src: Sandbox;
let hash: string;
const others: Sandbox[] = [];

beforeAll(async () => {
  src = await Sandbox.create({ ...config(), timeoutS: 1800, snapshotIntervalS: 3600 });
  await startHolder(src);
  hash = (await src.commands.run('cat /root/hash')).stdout.trim();
  expect(hash).toMatch(/^[0-9a-f]{64}$/);
});

afterAll(async () => {
  await Promise.all([src, ...others].map((s) => s?.kill().catch(() => {})));
});

async function track<T extends Sandbox | Sandbox[]>(p: Promise<T>): Promise<T> {
  const v = await p;
  others.push(...(Array.isArray(v) ? v : [v]));
  return v;
}

describe('snapshots and forks', () => {
  it('forks from a moment: memory, the running process and the files of that moment, and nothing later', async () => {
    await src.files.write('/root/version', 'v1');
    const before = await counterNow(src);
    const s1 = await src.snapshot({ name: 'v1' });
    await src.files.write('/root/version', 'v2');
    const s2 = await src.snapshot();
    expect(s2.parentId).toBe(s1.id);
    expect(s1.pinned).toBe(true);
    // Incremental: the second snapshot stores a small fraction of what the first did.
    expect(s2.sizeAddedBytes).toBeLessThan(s1.sizeAddedBytes);
    // The second capture merged the first's layer away: the third finds QEMU's chain exactly as the node recorded it.
    const s3 = await src.snapshot();
    expect(s3.parentId).toBe(s2.id);

    const [f1] = await track(Sandbox.fork(s1.id, config()));
    const [f2] = await track(Sandbox.fork(s2.id, config()));
    expect(await f1!.files.read('/root/version')).toBe('v1');
    expect(await f2!.files.read('/root/version')).toBe('v2');
    // The holder process came along, with its 64 MiB buffer intact and its counter continuing from the snapshot.
    const a = await askHolder(f1!);
    expect(a.hash).toBe(hash);
    expect(a.counter).toBeGreaterThanOrEqual(before);
    // The source keeps running untouched.
    expect(await src.files.read('/root/version')).toBe('v2');
    expect((await askHolder(src)).hash).toBe(hash);

    const timeline = await src.timeline();
    expect(timeline.map((s) => s.id)).toEqual(expect.arrayContaining([s1.id, s2.id]));
    expect(timeline.find((s) => s.id === s1.id)).toMatchObject({ reason: 'manual', name: 'v1', pinned: true, sandboxId: src.id });
  });

  it('gives two forks of one snapshot independent files and different randomness', async () => {
    const snap = await src.snapshot();
    const [a, b] = await track(Sandbox.fork(snap.id, { ...config(), count: 2 }));
    await a!.files.write('/root/mine', 'a');
    await b!.files.write('/root/mine', 'b');
    expect(await a!.files.read('/root/mine')).toBe('a');
    expect(await b!.files.read('/root/mine')).toBe('b');
    expect((await src.commands.run('test -e /root/mine && echo yes || echo no')).stdout.trim()).toBe('no');
    const ra = (await a!.commands.run('head -c 16 /dev/urandom | od -An -tx1')).stdout;
    const rb = (await b!.commands.run('head -c 16 /dev/urandom | od -An -tx1')).stdout;
    expect(ra).not.toBe(rb);
    // Python's own PRNG state was in the snapshot; the agent re-seeded the kernel pool, so new interpreters differ.
    const pa = (await a!.commands.run("python3 -c 'import random; print(random.random())'")).stdout;
    const pb = (await b!.commands.run("python3 -c 'import random; print(random.random())'")).stdout;
    expect(pa).not.toBe(pb);
  });

  it('forks a sandbox at a time (sandbox@TIME picks the latest snapshot at or before it)', async () => {
    await src.files.write('/root/at', 'early');
    const early = await src.snapshot();
    await new Promise((r) => setTimeout(r, 1100));
    await src.files.write('/root/at', 'late');
    await src.snapshot();
    const [f] = await track(Sandbox.fork(`${src.id}@${new Date(Date.parse(early.takenAt) + 500).toISOString()}`, config()));
    expect(await f!.files.read('/root/at')).toBe('early');
  });
});

describe("a fork's network", () => {
  it("is recorded as the one its snapshot was taken with, whatever the source's policy became before and after", async () => {
    await Secrets.set('FORK_NET_TOKEN', 'fork-net-value', { ...config(), hosts: ['api.example.test'] });
    const source = await track(
      Sandbox.create({ ...config(), timeoutS: 900, snapshotIntervalS: 3600, network: { allow: ['a.example.test'] }, secrets: ['FORK_NET_TOKEN'] }),
    );
    const snap = await source.snapshot();
    // The source's policy changes between the snapshot and the fork, and again after it: the fork runs with its snapshot's.
    await source.setNetwork({ allow: ['b.example.test'] });
    const [fork] = await track(Sandbox.fork(snap.id, config()));
    await source.setNetwork({ allow: ['c.example.test'], deny: ['d.example.test'] });

    const atFork = { network: { allow: ['a.example.test'], deny: [] }, secrets: ['FORK_NET_TOKEN'] };
    const info = await fork!.getInfo();
    expect({ network: info.network, secrets: info.secrets }).toEqual(atFork);
    const forked = (await fork!.events()).find((e) => e.type === 'sandbox.forked')!;
    expect(forked.data).toMatchObject({ snapshotId: snap.id, sourceSandboxId: source.id, network: { allow: ['a.example.test'] }, secrets: ['FORK_NET_TOKEN'] });
    const now = await source.getInfo();
    expect({ network: now.network, secrets: now.secrets }).toEqual({
      network: { allow: ['c.example.test'], deny: ['d.example.test'] },
      secrets: ['FORK_NET_TOKEN'],
    });
  });
});

describe('pause and resume', () => {
  it('releases the VM and brings it back with its processes, shell variables and command output offsets', async () => {
    const sbx = await track(Sandbox.create({ ...config(), timeoutS: 1800, snapshotIntervalS: 3600 }));
    await startHolder(sbx);
    const h0 = (await sbx.commands.run('cat /root/hash')).stdout.trim();
    // A shell with a variable, fed through stdin, its output read at offsets.
    const shell = await sbx.commands.run('bash', { background: true, stdin: true });
    await shell.sendStdin('X=forty-two; echo ready\n');
    let out = '';
    for (let i = 0; i < 100 && !out.includes('ready'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      out = await sbx.commands.connect(shell.id, { fromOffset: 0 }).then(async (h) => {
        await new Promise((r) => setTimeout(r, 100));
        const s = h.stdout;
        await h.disconnect();
        return s;
      });
    }
    expect(out).toContain('ready');
    const before = await counterNow(sbx);

    const pauseSnap = await sbx.pause();
    expect(pauseSnap.reason).toBe('pause');
    const info = await Sandbox.list({ ...config(), state: 'paused' });
    expect(info.map((s) => s.id)).toContain(sbx.id);
    // No VM runs for it any more.
    expect(() => execFileSync('pgrep', ['-f', `sandglass-${sbx.id}`])).toThrow();
    await expect(sbx.commands.run('true')).rejects.toBeInstanceOf(SandglassError);

    const back = await track(Sandbox.resume(sbx.id, config()));
    expect((await back.getInfo()).state).toBe('running');
    const a = await askHolder(back);
    expect(a.hash).toBe(h0);
    expect(a.counter).toBeGreaterThanOrEqual(before);
    // The same command id still works: its output continues at the same offsets, and the shell kept its variable.
    const h = await back.commands.connect(shell.id, { fromOffset: 0 });
    await h.sendStdin('echo "x=$X"\n');
    for (let i = 0; i < 100 && !h.stdout.includes('x=forty-two'); i++) await new Promise((r) => setTimeout(r, 100));
    expect(h.stdout).toBe('ready\nx=forty-two\n');
    await h.closeStdin();
    await h.wait();
  });

  it('answers pauses that overlap with one snapshot, and refuses one that asks otherwise about memory', async () => {
    const sbx = await track(Sandbox.create({ ...config(), timeoutS: 1800, snapshotIntervalS: 3600 }));
    await sbx.files.write('/root/overlap', 'kept');
    // A client retrying its pause, or the sandbox's timeout meeting a user's pause: the second must not capture a VM
    // the first is ending.
    const [a, b, diskOnly] = await Promise.all([
      api('POST', `/v1/sandboxes/${sbx.id}/pause`, { body: {} }),
      api('POST', `/v1/sandboxes/${sbx.id}/pause`, { body: {} }),
      new Promise((r) => setTimeout(r, 50)).then(() => api('POST', `/v1/sandboxes/${sbx.id}/pause`, { body: { keepMemory: false } })),
    ]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(b.body!.snapshot.id).toBe(a.body!.snapshot.id);
    // The third either met the pause in flight (a conflict naming keepMemory) or came after it (no longer running).
    expect(diskOnly.status).toBe(409);
    if (diskOnly.body!.error.code === 'conflict') expect(diskOnly.body!.error.details.field).toBe('keepMemory');
    else expect(diskOnly.body!.error.code).toBe('sandbox_not_running');
    const paused = (await sbx.events()).filter((e) => e.type === 'sandbox.paused');
    expect(paused.map((e) => e.data.snapshotId)).toEqual([a.body!.snapshot.id]);
    const back = await track(Sandbox.resume(sbx.id, config()));
    expect((await back.files.read('/root/overlap')).toString()).toBe('kept');
  });
});

describe('at rest', () => {
  it('stores nothing readable: a marker in guest memory and in a file is found nowhere in the store, raw or decompressed', async () => {
    const marker = `SGMARK${Date.now().toString(36)}ZQ`;
    const sbx = await track(Sandbox.create({ ...config(), timeoutS: 600, snapshotIntervalS: 3600 }));
    await startHolder(sbx, marker);
    await sbx.files.write('/root/secret.txt', `${marker}\n`.repeat(1000));
    await sbx.commands.run('sync');
    await sbx.snapshot();
    await sbx.snapshot();
    const needle = Buffer.from(marker);
    let files = 0;
    let hits = 0;
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else {
          files++;
          const raw = readFileSync(p);
          if (raw.includes(needle)) hits++;
          try {
            if (decompress(raw).includes(needle)) hits++;
          } catch {
            // Not a zstd frame on its own (sealed bytes): as expected.
          }
        }
      }
    };
    walk(join(home, 'store'));
    expect(files).toBeGreaterThan(10);
    expect(hits).toBe(0);
  });
});

describe('bad input', () => {
  it('refuses unknown snapshots, other tenants, times before history, short intervals and resuming a running sandbox', async () => {
    const unknown = await Sandbox.fork('snap_aaaaaaaaaaaaaaaaaaaa', config()).catch((e: unknown) => e);
    expect((unknown as SandglassError).code).toBe('snapshot_not_found');

    const snap = (await src.timeline())[0]!;
    const tenant = await api('POST', '/v1/tenants', { body: { name: `other-${Date.now()}` } });
    expect(tenant.status).toBe(201);
    const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { name: 'k', role: 'member' } });
    const otherCfg = config(key.body!.key as string);
    const stolen = await Sandbox.fork(snap.id, otherCfg).catch((e: unknown) => e);
    expect((stolen as SandglassError).code).toBe('snapshot_not_found');
    const stolen2 = await api('POST', '/v1/forks', { key: key.body!.key as string, body: { sandboxId: src.id } });
    expect(stolen2.body!.error.code).toBe('sandbox_not_found');

    const tooEarly = await api('POST', '/v1/forks', { body: { sandboxId: src.id, at: '2020-01-01T00:00:00Z' } });
    expect(tooEarly.status).toBe(400);
    expect(tooEarly.body!.error.code).toBe('snapshot_out_of_range');

    const short = await api('POST', '/v1/sandboxes', { body: { template: 'base', snapshotIntervalS: 4 } });
    expect(short.status).toBe(400);
    expect(short.body!.error.details.field).toMatch(/snapshotIntervalS/);

    const running = await api('POST', `/v1/sandboxes/${src.id}/resume`, { body: {} });
    expect(running.status).toBe(409);
    expect(running.body!.error.code).toBe('sandbox_running');

    const many = await api('POST', '/v1/forks', { body: { snapshotId: snap.id, count: 17 } });
    expect(many.status).toBe(400);
  });
});
