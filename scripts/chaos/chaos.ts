// The chaos suite: a real server under a workload of many sandboxes, faults injected at random from a seed, then the
// invariants that must hold whatever failed: no snapshot lost, every sandbox explainable, the log intact, nothing leaked.
import { spawn, type ChildProcess } from 'node:child_process';
import {
  appendFileSync,
  copyFileSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deriveNodeKeys, homeLayout, loadNodeSecret } from '@sandglass/core';
import { openDatabase } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { ChunkStore, LocalDiskBackend } from '@sandglass/chunkstore';
import { LocalKeyring } from '@sandglass/kms';
import { Sandbox, Secrets, type SandboxInfo } from '@sandglass/sdk';
import { makeUpstreamPki, startHttpsUpstream, type Upstream } from '@sandglass/egress/test-support';
import { rawRequest } from '@sandglass/gateway/test-support';

const bin = fileURLToPath(new URL('../../bin/sandglass', import.meta.url));
const UPSTREAM_HOST = 'api.chaos.test';

export interface ChaosOptions {
  minutes: number;
  seed: number;
  /** A fresh home is made under this directory (artifacts are linked from `artifacts`). */
  workDir?: string;
  /** Built guest artifacts to reuse (a home's artifacts/ directory). */
  artifacts: string;
  port: number;
  /** Sandboxes worked on at once. */
  workers?: number;
  /** Recorded snapshots forked and read back at the end (all of them are checked offline in any case). */
  forkChecks?: number;
  /** Seconds between faults: each gap is drawn between these. */
  faultGapS?: [number, number];
  log?: (line: string) => void;
}

export interface FaultRecord {
  seq: number;
  /** Milliseconds since the run started. */
  atMs: number;
  kind: string;
  fired: boolean;
  survived: boolean;
}

export interface InvariantResult {
  name: string;
  ok: boolean;
  detail: string;
}

export interface ChaosResult {
  seed: number;
  minutes: number;
  home: string;
  faults: FaultRecord[];
  ops: Record<string, { ok: number; failed: number }>;
  recordedSnapshots: number;
  dataLost: string[];
  invariants: InvariantResult[];
  ok: boolean;
}

/** The secret value a run binds to its sandboxes: derived from the seed, so a later check of the home can look for it. */
export function chaosSecret(seed: number): string {
  return `chaos_${createHash('sha256').update(String(seed)).digest('hex').slice(0, 24)}_S3cr3t`;
}

/** Mulberry32: a small seeded PRNG, so one seed always draws the same faults at the same points of the schedule. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The faults, each one step where production can fail. `fp:` arms a failpoint of the server process over its
 * internal route; the others the runner does itself. S3 put/get failpoints exist but this runner's store is the local
 * disk, so they are exercised by the S3 backend's tests, not here.
 */
export const FAULT_KINDS = [
  'fp:chunkstore.write=enospc',
  'fp:shm.write=enospc',
  'fp:chunkstore.manifest_commit=error',
  'fp:chunkstore.manifest_commit=kill',
  'fp:capture.after_chunks=kill',
  'fp:events.append=error',
  'fp:db.commit=error',
  'fp:db.commit=kill',
  'fp:agent.frame=drop',
  'fp:exec.qemu=kill-qemu',
  'fp:capture.qemu=kill-qemu',
  'fp:egress.upstream=reset',
  'clock.jump',
  'kill-9',
] as const;

interface Recorded {
  id: string;
  sandboxId: string;
  files: Map<string, string>;
}

class Server {
  child?: ChildProcess;
  ready?: Promise<void>;
  apiUrl: string;
  apiKey = '';
  /** Set while the runner means the server to be down (final shutdown), so an exit is not a crash to restart. */
  stopping = false;
  restarts = 0;
  /** Deaths by SIGKILL the runner did not send itself: a `kill` failpoint fired. */
  selfKills = 0;
  expectKill = false;

  constructor(
    readonly home: string,
    readonly port: number,
    readonly env: Record<string, string>,
    readonly log: (s: string) => void,
  ) {
    this.apiUrl = `http://127.0.0.1:${port}`;
  }

  start(): Promise<void> {
    rmSync(join(this.home, 'server.json'), { force: true });
    const out = createWriteStream(join(this.home, 'server.log'), { flags: 'a' });
    const child = spawn(bin, ['up', '--port', String(this.port)], {
      env: { ...process.env, ...this.env, SANDGLASS_HOME: this.home },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    this.child = child;
    child.once('exit', (code, signal) => {
      if (this.stopping || this.child !== child) return;
      if (signal === 'SIGKILL' && !this.expectKill) this.selfKills++;
      this.expectKill = false;
      this.log(`server exited (${signal ?? code}); restarting`);
      this.restarts++;
      this.ready = this.start();
    });
    this.ready = (async () => {
      const until = Date.now() + 300_000;
      while (!existsSync(join(this.home, 'server.json'))) {
        if (Date.now() > until) throw new Error('the chaos server did not come up in 5 minutes');
        if (child.exitCode !== null || child.signalCode !== null) return; // the exit handler started the next one
        await sleep(200);
      }
      this.apiKey = readFileSync(join(this.home, 'admin-key'), 'utf8').trim();
    })();
    return this.ready;
  }

  /** Resolves once a server is serving (restarted if it had died). */
  async up(): Promise<void> {
    for (let i = 0; i < 600; i++) {
      await this.ready;
      if (this.child && this.child.exitCode === null && this.child.signalCode === null && existsSync(join(this.home, 'server.json'))) {
        try {
          const r = await fetch(`${this.apiUrl}/v1/health`, { signal: AbortSignal.timeout(10_000) });
          if (r.ok) return;
        } catch {
          // Not yet.
        }
      }
      await sleep(500);
    }
    throw new Error('the chaos server did not recover within 5 minutes');
  }

  internal(): { socketPath: string; bearer: string } {
    return {
      socketPath: join(this.home, 'internal', 'gateway.sock'),
      bearer: deriveNodeKeys(loadNodeSecret(join(this.home, 'node-secret'))).internalBearer.toString('hex'),
    };
  }

  async internalCall(method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; body: string }> {
    const { socketPath, bearer } = this.internal();
    return rawRequest({ socketPath }, method, path, {
      headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  kill9(): void {
    this.expectKill = true;
    this.child?.kill('SIGKILL');
  }

  async stop(): Promise<void> {
    this.stopping = true;
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await gone;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function errText(e: unknown): string {
  const err = e as { code?: string; message?: string };
  return `${err.code ?? 'error'}: ${String(err.message ?? e).slice(0, 200)}`;
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosResult> {
  const t0 = Date.now();
  const log = opts.log ?? ((s: string) => console.log(s));
  const rand = prng(opts.seed);
  const workRand = prng(opts.seed ^ 0x5eed);
  const workDir = opts.workDir ?? tmpdir();
  const home = join(workDir, `chaos-${opts.seed}-${Date.now().toString(36)}`);
  mkdirSync(home, { recursive: true, mode: 0o700 });
  symlinkSync(opts.artifacts, join(home, 'artifacts'));
  const faultLog = join(home, 'chaos-faults.jsonl');
  const stamp = () => `[chaos +${((Date.now() - t0) / 1000).toFixed(1)}s]`;
  const say = (s: string) => log(`${stamp()} ${s}`);

  // The egress upstream: HTTPS on loopback, reached by a name the gateway resolves to 127.0.0.1 only.
  const pki = await makeUpstreamPki([UPSTREAM_HOST]);
  const upstreamPort = opts.port + 10;
  const upstream: Upstream = await startHttpsUpstream(pki, upstreamPort);
  writeFileSync(join(home, 'egress-upstream-ca.pem'), pki.caPem);
  const secret = chaosSecret(opts.seed);

  const server = new Server(
    home,
    opts.port,
    {
      SANDGLASS_CHAOS: '1',
      SANDGLASS_WARM_POOL: '0',
      SANDGLASS_LOG_LEVEL: 'warn',
      SANDGLASS_HEALTH_INTERVAL_MS: '2000',
      SANDGLASS_HEALTH_TIMEOUT_MS: '10000',
      SANDGLASS_EGRESS_HOSTS: `${UPSTREAM_HOST}=127.0.0.1`,
      SANDGLASS_EGRESS_PRIVATE_ALLOW: `127.0.0.1:${upstreamPort}`,
      SANDGLASS_EGRESS_CA_FILES: join(home, 'egress-upstream-ca.pem'),
    },
    say,
  );
  await server.start();
  await server.up();
  const cfg = () => ({ apiUrl: server.apiUrl, apiKey: server.apiKey });
  await Secrets.set('CHAOS_TOKEN', secret, { ...cfg(), hosts: [`${UPSTREAM_HOST}:${upstreamPort}`] });

  // Minutes of workload under faults, counted once the server serves (its first start is not part of it).
  const deadline = Date.now() + opts.minutes * 60_000;
  const ops: ChaosResult['ops'] = {};
  const count = (op: string, ok: boolean) => {
    const o = (ops[op] ??= { ok: 0, failed: 0 });
    if (ok) o.ok++;
    else o.failed++;
  };
  const recorded: Recorded[] = [];
  const dataLost: string[] = [];
  const faults: FaultRecord[] = [];
  const sandboxIds = new Set<string>();

  /** Reads every file of `files` in `s`; a different content is data lost. */
  const verifyFiles = async (s: Sandbox, files: Map<string, string>, what: string): Promise<void> => {
    for (const [path, want] of files) {
      let got: string;
      try {
        got = await s.files.read(path);
      } catch (e) {
        // Gone is lost; any other failure (the agent, the server) is a fault in the way of the read, not a verdict.
        if ((e as { code?: string }).code === 'file_not_found') dataLost.push(`${what}: ${path} is gone`);
        throw e;
      }
      if (got !== want) dataLost.push(`${what}: ${path} reads ${JSON.stringify(got.slice(0, 40))}, not ${JSON.stringify(want.slice(0, 40))}`);
    }
  };

  // ---- the workload: each worker runs one sandbox at a time through random operations ----
  const worker = async (w: number): Promise<void> => {
    let n = 0;
    while (Date.now() < deadline) {
      await server.up();
      let sbx: Sandbox;
      try {
        sbx = await Sandbox.create({
          ...cfg(),
          timeoutS: 3600,
          snapshotIntervalS: 5,
          network: { allow: [`${UPSTREAM_HOST}:${upstreamPort}`] },
          secrets: ['CHAOS_TOKEN'],
          metadata: { chaos: String(opts.seed), worker: String(w) },
        });
        count('create', true);
      } catch (e) {
        count('create', false);
        say(`w${w} create failed: ${errText(e)}`);
        await sleep(2000);
        continue;
      }
      sandboxIds.add(sbx.id);
      // What the files must read now; a write that failed makes its file unknown, so it leaves the model.
      const files = new Map<string, string>();
      const opsHere = 6 + Math.floor(workRand() * 10);
      let alive = true;
      for (let i = 0; i < opsHere && alive && Date.now() < deadline; i++) {
        const r = workRand();
        const op = r < 0.25 ? 'exec' : r < 0.5 ? 'write' : r < 0.65 ? 'snapshot' : r < 0.75 ? 'fork' : r < 0.87 ? 'pause-resume' : 'egress';
        try {
          if (op === 'exec') {
            const x = Math.floor(workRand() * 1000);
            const out = await sbx.commands.run(`echo $((${x} * 3))`, { timeoutMs: 120_000 });
            if (out.stdout.trim() !== String(x * 3)) throw new Error(`exec answered ${JSON.stringify(out.stdout)}`);
          } else if (op === 'write') {
            const path = `/root/chaos-${Math.floor(workRand() * 4)}`;
            const content = `w${w}-${n}-${i}-${Math.floor(workRand() * 1e9)}`;
            files.delete(path);
            await sbx.files.write(path, content);
            files.set(path, content);
          } else if (op === 'snapshot') {
            const snap = await sbx.snapshot({ name: `chaos-w${w}-${n}-${i}` });
            recorded.push({ id: snap.id, sandboxId: sbx.id, files: new Map(files) });
          } else if (op === 'fork') {
            const from = recorded[Math.floor(workRand() * recorded.length)];
            if (from) {
              const [fork] = await Sandbox.fork(from.id, { ...cfg(), timeoutS: 600 });
              sandboxIds.add(fork!.id);
              try {
                await verifyFiles(fork!, from.files, `fork of ${from.id}`);
              } finally {
                await fork!.kill().catch(() => {});
              }
            }
          } else if (op === 'pause-resume') {
            await sbx.pause();
            sbx = await Sandbox.resume(sbx.id, cfg());
            await verifyFiles(sbx, files, `resume of ${sbx.id}`);
          } else {
            await sbx.commands.run(`curl -sS --max-time 30 -H "Authorization: Bearer $CHAOS_TOKEN" https://${UPSTREAM_HOST}:${upstreamPort}/echo?n=${i}`, {
              timeoutMs: 120_000,
            });
          }
          count(op, true);
        } catch (e) {
          count(op, false);
          say(`w${w} ${op} on ${sbx.id} failed: ${errText(e)}`);
          // A failed operation may have taken the sandbox or the server with it: find out which before going on.
          await server.up();
          const info = await Sandbox.connect(sbx.id, cfg())
            .then((c) => c.getInfo())
            .catch(() => undefined);
          if (!info || info.state === 'failed' || info.state === 'ended') alive = false;
          else if (info.state === 'paused') {
            try {
              sbx = await Sandbox.resume(sbx.id, cfg());
              count('recover-resume', true);
            } catch (e2) {
              count('recover-resume', false);
              say(`w${w} resume after a fault failed: ${errText(e2)}`);
              alive = false;
            }
          }
          // After a restart the sandbox is back at its last snapshot, which may be a rolling one: its files are unknown.
          files.clear();
        }
      }
      n++;
      // Every other sandbox is left as it is (running, paused, failed) for the end-of-run invariants to explain.
      if (n % 2 === 0) await sbx.kill().catch(() => {});
    }
  };

  // ---- the fault injector: a fault every few seconds, drawn from the seed ----
  const [gapMin, gapMax] = opts.faultGapS ?? [8, 20];
  const injector = async (): Promise<void> => {
    let seq = 0;
    await sleep(15_000);
    while (Date.now() < deadline - 20_000) {
      const kind = FAULT_KINDS[Math.floor(rand() * FAULT_KINDS.length)]!;
      const jumpMs = Math.round((rand() * 2 - 1) * 60_000);
      const gapMs = (gapMin + rand() * (gapMax - gapMin)) * 1000;
      seq++;
      await server.up();
      const rec: FaultRecord = { seq, atMs: Date.now() - t0, kind, fired: false, survived: false };
      const restartsBefore = server.restarts;
      const killsBefore = server.selfKills;
      try {
        if (kind === 'kill-9') {
          server.kill9();
          rec.fired = true;
        } else if (kind === 'clock.jump') {
          const r = await server.internalCall('POST', '/internal/v1/failpoints', { name: 'clock.jump', spec: String(jumpMs) });
          rec.fired = r.status === 204;
        } else {
          const [name, spec] = kind.slice(3).split('=');
          const r = await server.internalCall('POST', '/internal/v1/failpoints', { name, spec });
          if (r.status !== 204) throw new Error(`arming ${kind} answered ${r.status}: ${r.body}`);
        }
      } catch (e) {
        say(`fault ${seq} ${kind}: could not inject (${errText(e)})`);
      }
      const line = { seq: rec.seq, atMs: rec.atMs, kind, ...(kind === 'clock.jump' ? { jumpMs } : {}) };
      appendFileSync(faultLog, `${JSON.stringify(line)}\n`);
      say(`fault ${seq}: ${kind}${kind === 'clock.jump' ? ` ${jumpMs} ms` : ''}`);
      await sleep(gapMs);
      // Did it fire, and is the server serving again afterwards?
      if (!rec.fired && kind.startsWith('fp:')) {
        const name = kind.slice(3).split('=')[0]!;
        if (kind.endsWith('=kill')) rec.fired = server.selfKills > killsBefore;
        else {
          const r = await server
            .internalCall('GET', '/internal/v1/failpoints')
            .then((x) => JSON.parse(x.body) as { armed: string[]; fired: Array<{ name: string; atMs: number }> })
            .catch(() => undefined);
          rec.fired = Boolean(r?.fired.some((f) => f.name === name && f.atMs >= t0 + rec.atMs));
        }
      }
      try {
        await server.up();
        rec.survived = rec.fired;
      } catch {
        rec.survived = false;
      }
      if (server.restarts > restartsBefore) say(`fault ${seq}: the server restarted`);
      faults.push(rec);
    }
  };

  say(`seed ${opts.seed}, ${opts.minutes} min, home ${home}`);
  await Promise.all([injector(), ...Array.from({ length: opts.workers ?? 2 }, (_, w) => worker(w))]);

  // ---- end of run: a clean restart disarms whatever is still armed, then the invariants ----
  say('workload done; restarting the server cleanly for the checks');
  await server.stop();
  server.stopping = false;
  await server.start();
  await server.up();
  const invariants: InvariantResult[] = [];

  // 1. Every sandbox is in a state the API can explain; a paused one resumes.
  {
    const problems: string[] = [];
    let explained = 0;
    // A sandbox still starting after a restart settles within a minute or is a problem.
    let list: SandboxInfo[] = [];
    for (let i = 0; i < 60; i++) {
      list = (await Sandbox.list(cfg()).catch(() => [])) as SandboxInfo[];
      if (!list.some((s) => s.state === 'starting')) break;
      await sleep(1000);
    }
    for (const s of list) {
      if (s.state === 'failed' && !s.failureReason) problems.push(`${s.id} failed without a reason`);
      else if (s.state === 'starting') problems.push(`${s.id} is still starting`);
      else if (s.state === 'paused') {
        try {
          const r = await Sandbox.resume(s.id, cfg());
          await r.commands.run('true', { timeoutMs: 120_000 });
          await r.kill();
        } catch (e) {
          problems.push(`${s.id} is paused but does not resume: ${errText(e)}`);
        }
      } else if (s.state === 'running') {
        try {
          const c = await Sandbox.connect(s.id, cfg());
          await c.commands.run('true', { timeoutMs: 120_000 });
          await c.kill();
        } catch (e) {
          problems.push(`${s.id} is running but does not run a command: ${errText(e)}`);
        }
      }
      explained++;
    }
    invariants.push({
      name: 'every sandbox explainable (resumes, or failed with a reason)',
      ok: problems.length === 0,
      detail: problems.join('; ') || `${explained} sandboxes`,
    });
  }

  // 2. Recorded snapshots read back through the API (a fork of a sample).
  {
    const sample = [...recorded].sort(() => rand() - 0.5).slice(0, opts.forkChecks ?? 4);
    const before = dataLost.length;
    for (const r of sample) {
      try {
        const [fork] = await Sandbox.fork(r.id, { ...cfg(), timeoutS: 600 });
        await verifyFiles(fork!, r.files, `end fork of ${r.id}`);
        await fork!.kill();
      } catch (e) {
        dataLost.push(`snapshot ${r.id} does not fork: ${errText(e)}`);
      }
    }
    invariants.push({ name: 'recorded snapshots fork with their files', ok: dataLost.length === before, detail: `${sample.length} forked` });
  }

  // Everything killed, then GC with no grace: what is left must be referenced.
  for (const s of await Sandbox.list(cfg()).catch(() => [] as SandboxInfo[])) {
    if (s.state === 'running' || s.state === 'paused') await Sandbox.kill(s.id, cfg()).catch(() => {});
  }
  const gc = await server.internalCall('POST', '/internal/v1/maintenance', { gcGraceMs: 0 });
  say(`gc: ${gc.status} ${gc.body.slice(0, 300)}`);
  await server.stop();
  await upstream.close();

  // 3. Offline: the chain, the projections, every snapshot's chunks, secrets, leaks.
  invariants.push(...(await offlineChecks(home, recorded, secret, dataLost)));
  const result: ChaosResult = {
    seed: opts.seed,
    minutes: opts.minutes,
    home,
    faults,
    ops,
    recordedSnapshots: recorded.length,
    dataLost,
    invariants,
    ok: dataLost.length === 0 && invariants.every((i) => i.ok),
  };
  writeFileSync(join(home, 'chaos-result.json'), JSON.stringify(result, null, 2));
  return result;
}

/**
 * The checks that need the server stopped: chain, projections, every live snapshot's chunks, the secret, leaks.
 * `recorded` are the snapshots the API reported taken; any missing from the log is added to `dataLost`.
 */
export async function offlineChecks(home: string, recorded: Array<{ id: string }>, secret: string, dataLost: string[]): Promise<InvariantResult[]> {
  const out: InvariantResult[] = [];
  const layout = homeLayout(home);
  // A copy of the database, so rebuilding the projections does not touch the evidence.
  const copy = join(home, 'chaos-check.db');
  copyFileSync(layout.database, copy);
  for (const sfx of ['-wal', '-shm']) if (existsSync(layout.database + sfx)) copyFileSync(layout.database + sfx, copy + sfx);
  const { db, close } = await openDatabase({ url: `sqlite:${copy}` });
  try {
    const events = new EventLog(db);
    const chain = await events.verifyChain();
    out.push({ name: 'event chain verifies', ok: chain.ok, detail: chain.ok ? `${chain.count} events` : `seq ${chain.seq}: ${chain.problem}` });

    const tables = async () =>
      JSON.stringify({
        sandboxes: await db.selectFrom('sandboxes').selectAll().orderBy('id').execute(),
        snapshots: await db.selectFrom('snapshots').selectAll().orderBy('id').execute(),
      });
    const before = await tables();
    await events.rebuildProjections();
    const after = await tables();
    out.push({ name: 'projections rebuild equal to the tables', ok: before === after, detail: before === after ? 'equal' : firstDifference(before, after) });

    // Every snapshot the log says exists (taken, not deleted) has its manifest and every chunk, authentic.
    const snaps = await db.selectFrom('snapshots').select(['id', 'tenant_id']).execute();
    const live = new Set(snaps.map((s) => s.id));
    for (const r of recorded) if (!live.has(r.id)) dataLost.push(`snapshot ${r.id} was reported taken and is gone from the log`);
    const store = new ChunkStore({ backend: new LocalDiskBackend(layout.store), keys: new LocalKeyring({ dir: layout.keys }) });
    const needle = Buffer.from(secret);
    const checked = new Set<string>();
    const unreadable: string[] = [];
    const secretHits: string[] = [];
    for (const s of snaps) {
      const tenant = await store.tenant(s.tenant_id);
      try {
        const m = await tenant.getManifest(s.id);
        for (const ref of m.refs) {
          if (checked.has(ref)) continue;
          checked.add(ref);
          const data = await tenant.get(ref);
          if (data.includes(needle)) secretHits.push(`snapshot ${s.id} chunk ${ref}`);
        }
      } catch (e) {
        unreadable.push(`${s.id}: ${errText(e)}`);
      }
    }
    for (const u of unreadable) dataLost.push(`snapshot ${u}`);
    out.push({
      name: 'every live snapshot readable (manifest and chunks authentic)',
      ok: unreadable.length === 0,
      detail: unreadable.join('; ') || `${snaps.length} snapshots, ${checked.size} chunks`,
    });

    // The secret: in no snapshot (RAM, disk, device state) and in no file of a guest's (RAM on tmpfs, disk layers).
    const scan = (path: string) => {
      if (!existsSync(path)) return;
      const st = statSync(path);
      if (st.isDirectory()) for (const n of readdirSync(path)) scan(join(path, n));
      else if (st.isFile() && readFileSync(path).includes(needle)) secretHits.push(path);
    };
    scan(layout.run);
    out.push({
      name: 'no secret value where a guest can read it',
      ok: secretHits.length === 0,
      detail: secretHits.join('; ') || `${checked.size} chunks and ${layout.run} scanned`,
    });
  } finally {
    await close();
    for (const sfx of ['', '-wal', '-shm']) rmSync(copy + sfx, { force: true });
  }

  // Leaks after GC and shutdown: QEMU processes of this home, its tmpfs directory, staged chunk files.
  const leaks: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (cmd.includes('qemu') && cmd.includes(home)) leaks.push(`QEMU pid ${pid}`);
  }
  const shm = join('/dev/shm', `sandglass-${createHash('sha256').update(home).digest('hex').slice(0, 12)}`);
  if (existsSync(shm)) for (const n of readdirSync(shm)) if (n !== 'owner.json') leaks.push(`tmpfs ${join(shm, n)}`);
  const staged = (dir: string): void => {
    if (!existsSync(dir)) return;
    for (const n of readdirSync(dir)) {
      const p = join(dir, n);
      if (statSync(p).isDirectory()) staged(p);
      else if (n.startsWith('.tmp-')) leaks.push(`staged chunk ${p}`);
    }
  };
  staged(layout.store);
  // A manifest no snapshot in the log names (a capture that died before recording it) pins its chunks: after GC, none.
  const manifestsDir = join(layout.store, 'manifests');
  const { db: db2, close: close2 } = await openDatabase({ url: `sqlite:${layout.database}` });
  try {
    const live = new Set((await db2.selectFrom('snapshots').select('id').execute()).map((r) => r.id));
    for (const tenant of existsSync(manifestsDir) ? readdirSync(manifestsDir) : []) {
      if (tenant === 'system') continue; // templates
      for (const id of readdirSync(join(manifestsDir, tenant))) if (id.startsWith('snap_') && !live.has(id)) leaks.push(`orphan manifest ${tenant}/${id}`);
    }
  } finally {
    await close2();
  }
  out.push({ name: 'nothing leaked (QEMU, tmpfs, staged chunks, orphan manifests)', ok: leaks.length === 0, detail: leaks.slice(0, 10).join('; ') || 'none' });
  out.push({ name: 'no data lost', ok: dataLost.length === 0, detail: dataLost.slice(0, 10).join('; ') || '0' });
  return out;
}

function firstDifference(a: string, b: string): string {
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return `differs at ${i}: ${a.slice(Math.max(0, i - 80), i + 80)} vs ${b.slice(Math.max(0, i - 80), i + 80)}`;
}

/** The table a run prints: faults by kind (injected, fired, survived), data lost, and each invariant. */
export function formatResult(r: ChaosResult): string {
  const kinds = new Map<string, { injected: number; fired: number; survived: number }>();
  for (const k of FAULT_KINDS) kinds.set(k, { injected: 0, fired: 0, survived: 0 });
  for (const f of r.faults) {
    const k = kinds.get(f.kind)!;
    k.injected++;
    if (f.fired) k.fired++;
    if (f.survived) k.survived++;
  }
  const rows = [...kinds].map(([k, v]) => `| ${k} | ${v.injected} | ${v.fired} | ${v.survived} |`);
  const tot = [...kinds.values()].reduce((a, v) => ({ injected: a.injected + v.injected, fired: a.fired + v.fired, survived: a.survived + v.survived }), {
    injected: 0,
    fired: 0,
    survived: 0,
  });
  const opRows = Object.entries(r.ops).map(([k, v]) => `| ${k} | ${v.ok} | ${v.failed} |`);
  return [
    `seed ${r.seed}, ${r.minutes} min, ${r.recordedSnapshots} snapshots recorded, home ${r.home}`,
    '',
    '| fault | injected | fired | survived |',
    '|---|---|---|---|',
    ...rows,
    `| **total** | ${tot.injected} | ${tot.fired} | ${tot.survived} |`,
    '',
    `data lost: ${r.dataLost.length}`,
    '',
    '| operation | ok | failed (under faults) |',
    '|---|---|---|',
    ...opRows,
    '',
    '| invariant | result | detail |',
    '|---|---|---|',
    ...r.invariants.map((i) => `| ${i.name} | ${i.ok ? 'ok' : 'VIOLATED'} | ${i.detail.replaceAll('|', '/')} |`),
  ].join('\n');
}
