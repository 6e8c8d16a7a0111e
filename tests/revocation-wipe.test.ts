// Issue 23 item 6: once a tenant's key is revoked, no file the node owns (home, tmpfs, scratch, open or mapped) holds its plaintext.
import { createHash, randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { adminKey, api, apiUrl, checkResponsesAgainstSpec, home } from './helpers.js';
import { OwnServer } from './own-server.js';

checkResponsesAgainstSpec();

const run = Date.now().toString(36);
/** A server's tmpfs directory of RAM files and snapshot images (gateway ram.ts). */
const shmOf = (serverHome: string) => join('/dev/shm', `sandglass-${createHash('sha256').update(serverHome).digest('hex').slice(0, 12)}`);
/** The jailer's host-side scratch (the shared QEMU root, uid claims): the only other directory the node writes. */
const jailerRun = '/run/sandglass';
const made: Sandbox[] = [];

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
});

interface Hit {
  path: string;
  needle: string;
}

/**
 * Collects files once each (by device and inode, so a file seen under two names, an open descriptor or a mapping is
 * read once), then asks GNU grep which of them hold each needle: grep skips the holes of sparse files (RAM files, disk
 * images) by SEEK_DATA, which reading them whole could not.
 */
class Scan {
  readonly seen = new Set<string>();
  readonly #paths: string[] = [];
  bytes = 0;
  readonly #needles: Record<string, string>;

  constructor(needles: Record<string, string>) {
    this.#needles = needles;
  }

  get files(): number {
    return this.#paths.length;
  }

  /** One file, through `path` (a name, or /proc/<pid>/fd/<n> and map_files/<range> for open and mapped files). */
  file(path: string): void {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch {
      return;
    }
    if (!st.isFile()) return;
    const id = `${st.dev}:${st.ino}`;
    if (this.seen.has(id)) return;
    this.seen.add(id);
    this.#paths.push(path);
    this.bytes += st.size;
  }

  /** The needles each file holds (a file gone since it was listed holds nothing). */
  hits(): Hit[] {
    const hits: Hit[] = [];
    for (const [needle, value] of Object.entries(this.#needles)) {
      for (let at = 0; at < this.#paths.length; at += 500) {
        const r = spawnSync('grep', ['-l', '-F', '-s', '-e', value, '--', ...this.#paths.slice(at, at + 500)], {
          encoding: 'utf8',
          maxBuffer: 64 * 1024 * 1024,
        });
        // 0: some file matched, 1: none did, 2: some file could not be read (gone meanwhile); anything else is no answer.
        if (r.status === null || r.status > 2) throw new Error(`grep failed: ${r.status ?? r.signal} ${r.stderr}`);
        for (const path of r.stdout.split('\n')) if (path) hits.push({ path, needle });
      }
    }
    return hits;
  }

  /** Every regular file under `dir`, not following symlinks. */
  tree(dir: string): void {
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of entries) {
      const p = join(dir, name);
      let st: ReturnType<typeof lstatSync>;
      try {
        st = lstatSync(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) this.tree(p);
      else if (st.isFile()) this.file(p);
    }
  }

  /** The files the server and every process below it hold open or mapped, deleted ones included. */
  processes(rootPid: number): number[] {
    const pids = processTree(rootPid);
    for (const pid of pids) {
      for (const sub of ['fd', 'map_files']) {
        let names: string[] = [];
        try {
          names = readdirSync(`/proc/${pid}/${sub}`);
        } catch {
          continue;
        }
        for (const n of names) this.file(`/proc/${pid}/${sub}/${n}`);
      }
    }
    return pids;
  }
}

/** `root` and its descendants, by the parent pid each /proc/<pid>/stat names. */
function processTree(root: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // Gone meanwhile.
    }
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i++) for (const [pid, ppid] of parent) if (ppid === tree[i]) tree.push(pid);
  return tree;
}

/** Processes on the host whose command line names one of these VMs (QEMU runs as `-name sandglass-<vmId>`). */
function vmProcesses(vmIds: string[]): string[] {
  const out: string[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (vmIds.some((id) => cmdline.includes(`sandglass-${id}`))) out.push(`${name}: ${cmdline.replaceAll('\0', ' ').slice(0, 120)}`);
  }
  return out;
}

interface Found {
  hits: Hit[];
  files: number;
  bytes: number;
}

/** Where the tenant's plaintext is while it runs: the run directories and the tmpfs directory. */
function scanRunning(needles: Record<string, string>): Found {
  const scan = new Scan(needles);
  scan.tree(join(home, 'run'));
  scan.tree(shmOf(home));
  return { hits: scan.hits(), files: scan.files, bytes: scan.bytes };
}

/** Everything of this node a search covers: the home (the chunk store too), tmpfs, the jailer's scratch, open and mapped files. */
function scanNode(needles: Record<string, string>, serverHome = home): Found & { storeFiles: number } {
  const scan = new Scan(needles);
  const serverPid = (JSON.parse(readFileSync(join(serverHome, 'server.json'), 'utf8')) as { pid: number }).pid;
  scan.tree(join(serverHome, 'store'));
  const storeFiles = scan.files;
  scan.tree(serverHome);
  scan.tree(shmOf(serverHome));
  if (existsSync(jailerRun)) scan.tree(jailerRun);
  scan.processes(serverPid);
  return { hits: scan.hits(), files: scan.files, bytes: scan.bytes, storeFiles };
}

const where = (hits: Hit[]) => hits.map((h) => `${h.needle} in ${describePath(h.path)}`);

/** A /proc path with what it points at, so a failure names the file itself. */
function describePath(p: string): string {
  if (!p.startsWith('/proc/')) return p;
  try {
    return `${p} -> ${readlinkSync(p)}`;
  } catch {
    return p;
  }
}

/** Three forms of one random marker: a file's bytes, upper-cased, and rotated (rot13, digits by 5). */
function markers(): { file: string; memory: string; output: string } {
  const marker = `sgmark${randomBytes(20).toString('hex')}`;
  const rotated = marker.replace(/[a-z0-9]/g, (c) =>
    /\d/.test(c) ? String((Number(c) + 5) % 10) : String.fromCharCode(((c.charCodeAt(0) - 97 + 13) % 26) + 97),
  );
  return { file: marker, memory: marker.toUpperCase(), output: rotated };
}

/** A tenant with an admin key, made with the operator key of the server at `url`. */
async function tenant(url: string, operatorKey: string): Promise<{ id: string; key: string }> {
  const call = async (path: string, body: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${operatorKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status, path).toBe(201);
    return (await res.json()) as Record<string, string>;
  };
  const t = await call('/v1/tenants', { name: `wipe-${run}-${randomBytes(3).toString('hex')}` });
  return { id: t.id!, key: (await call(`/v1/tenants/${t.id}/api-keys`, { role: 'admin' })).key! };
}

describe('a revoked tenant', () => {
  it('leaves no byte of its guests, files or output readable in any file of the node', { timeout: 900_000 }, async () => {
    const { id: tenantId, key } = await tenant(apiUrl, adminKey);
    const cfg = { apiUrl, apiKey: key, timeoutS: 1800, snapshotIntervalS: 3600 };

    // None in any argv (command lines are the audit log's, in the database): the file holds the marker, only a guest
    // process's memory the upper-cased form, only a command's output the rotated one.
    const needles = markers();
    const marker = needles.file;
    const a = await Sandbox.create(cfg);
    made.push(a);
    await a.files.write('/root/marker.txt', marker);
    // The disk's copy reaches the qcow2 overlay; the shell keeps the upper-cased copy in its heap while it waits.
    await a.commands.run('sync');
    const holder = await a.commands.run('m=$(tr a-z A-Z < /root/marker.txt); while sleep 3600; do :; done; echo "$m"', {
      background: true,
      timeoutMs: 0,
    });
    expect(holder.id).toBeTruthy();
    const snap = await a.snapshot();
    // A fork restores from the node's image cache and writes its own overlay; its output goes through the hub.
    const [fork] = await Sandbox.fork(snap.id, cfg);
    made.push(fork!);
    expect((await fork!.commands.run('tr a-z0-9 n-za-m5-90-4 < /root/marker.txt')).stdout).toBe(needles.output);
    // A pause and a resume: the pause's RAM image, and a restore's scratch (device state, overlay) in the run directory.
    await a.pause();
    const resumed = await Sandbox.resume(a.id, cfg);
    made.push(resumed);
    expect((await resumed.commands.run('cat /root/marker.txt')).stdout).toBe(marker);

    // The search sees each form where it must be while the tenant runs: it can find what it is looking for.
    const before = scanRunning(needles);
    const seenIn = (needle: string, test: (p: string) => boolean) => before.hits.some((h) => h.needle === needle && test(describePath(h.path)));
    expect(
      seenIn('file', (p) => p.startsWith(join(home, 'run'))),
      where(before.hits).join('\n'),
    ).toBe(true);
    expect(
      seenIn('memory', (p) => /\/snap-[^/]+\.img$/.test(p)),
      where(before.hits).join('\n'),
    ).toBe(true);
    expect(
      seenIn('memory', (p) => p.endsWith('.mem')),
      where(before.hits).join('\n'),
    ).toBe(true);
    expect(
      seenIn('output', (p) => p.endsWith('.mem')),
      where(before.hits).join('\n'),
    ).toBe(true);

    const res = await api('POST', `/v1/tenants/${tenantId}/keys/revoke`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    // Stopped by this call or, a moment before it, by the node's poll of the provider (which sees the tombstone first).
    for (const id of [a.id, fork!.id]) expect((await api('GET', `/v1/sandboxes/${id}`, { key })).body?.state, id).toBe('failed');

    // No VM of the tenant is left, and no file holds any form of the marker: not the home (database, server log, run
    // directories), not tmpfs, not the jailer's scratch, not a file deleted but still open or mapped by the server or
    // a process below it. The chunk store is read too: it holds the tenant's data, sealed, never in the clear.
    expect(vmProcesses([a.id, fork!.id])).toEqual([]);
    const t0 = performance.now();
    const after = scanNode(needles);
    console.log(
      `[revocation-wipe] searched ${after.files} files, ${(after.bytes / 1e9).toFixed(2)} GB apparent size (${after.storeFiles} in the chunk store) in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    expect(after.storeFiles).toBeGreaterThan(0);
    expect(where(after.hits)).toEqual([]);
  });
});

describe('a revocation while a restore of the tenant is being prepared', () => {
  const server = new OwnServer('revocation-wipe');
  afterAll(() => server.dispose());

  it('waits for the restore to write its files, wipes them, and the restore never boots', { timeout: 900_000 }, async () => {
    let own = await server.up();
    const t = await tenant(own.apiUrl, own.apiKey);
    const needles = markers();
    const a = await Sandbox.create({ apiUrl: own.apiUrl, apiKey: t.key, timeoutS: 1800, snapshotIntervalS: 3600 });
    await a.files.write('/root/marker.txt', needles.file);
    await a.commands.run('m=$(tr a-z A-Z < /root/marker.txt); while sleep 3600; do :; done', { background: true, timeoutMs: 0 });
    const snap = await a.snapshot();
    await a.kill();
    // A restart empties the node's RAM image cache: the fork writes the image from the store, which takes a while.
    await server.down();
    own = await server.up();
    const shm = shmOf(server.home);
    const forking = Sandbox.fork(snap.id, { apiUrl: own.apiUrl, apiKey: t.key, timeoutS: 1800 }).then(
      (forks) => forks,
      (err: Error) => err,
    );
    let settled = false;
    void forking.then(() => {
      settled = true;
    });
    const writingImage = () => readdirSync(shm).some((n) => n.startsWith(`snap-${snap.id}.img.tmp-`));
    while (!writingImage()) {
      // Without the restore caught in the act there is nothing to prove: say so rather than pass.
      if (settled) throw new Error(`the fork finished before its RAM image was seen being written: ${String(await forking)}`);
      await new Promise((r) => setTimeout(r, 2));
    }
    const res = await fetch(`${own.apiUrl}/v1/tenants/${t.id}/keys/revoke`, { method: 'POST', headers: { authorization: `Bearer ${own.apiKey}` } });
    expect(res.status).toBe(200);
    const forked = await forking;
    expect(forked, 'the fork was revoked while its restore was prepared').toBeInstanceOf(Error);

    const after = scanNode(needles, server.home);
    expect(after.storeFiles).toBeGreaterThan(0);
    expect(where(after.hits)).toEqual([]);
    expect(readdirSync(shm).filter((n) => n.startsWith('snap-'))).toEqual([]);
  });
});
