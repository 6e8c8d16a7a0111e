// The fleet bench (BENCH_ONLY=fleet in bench/run.ts): N simulated
// gateways on the real node API against two control-plane replicas on PostgreSQL behind haproxy, client load at rising
// rates until p99 passes 50 ms, then 10 % of the nodes lost at once and the time until their sandboxes run elsewhere.
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import pg from 'pg';
import type { FleetCommand, FleetNodeSpec, FleetStats, FleetWorkerData } from './fleet-node.js';

export interface FleetOptions {
  nodes: number;
  workers: number;
  basePort: number;
  /** Seconds each load step lasts. */
  stepS: number;
  /** Creates per second of the first step; every step doubles it (access-token issues run at ten times it). */
  startRate: number;
  maxSteps: number;
  heartbeatIntervalS: number;
  deadAfterS: number;
}

export interface FleetRow {
  what: string;
  n: number;
  perS: number;
  p50Ms: number;
  p99Ms: number;
  note: string;
}

export interface FleetResult {
  rows: FleetRow[];
  text: string;
}

const P99_LIMIT_MS = 50;

export function pct(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** CPU seconds (user + system) of a process and of every process below it (or only those below it), from /proc. */
function treeCpuS(rootPid: number, opts: { withRoot: boolean } = { withRoot: true }): number {
  const parent = new Map<number, number>();
  const ticks = new Map<number, number>();
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parent.set(Number(e), Number(f[1]));
      ticks.set(Number(e), Number(f[11]) + Number(f[12]));
    } catch {
      // The process ended while being read.
    }
  }
  let total = 0;
  for (const [pid, t] of ticks) {
    if (pid === rootPid && !opts.withRoot) continue;
    for (let p: number | undefined = pid; p !== undefined && p > 1; p = parent.get(p)) {
      if (p === rootPid) {
        total += t;
        break;
      }
    }
  }
  return total / 100;
}

/** CPU seconds the whole machine spent busy (not idle or iowait), from /proc/stat. */
function machineBusyS(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const busy = f.reduce((a, b) => a + b, 0) - f[3]! - f[4]!;
  return busy / 100;
}

interface Sample {
  what: string;
  ms: number;
  ok: boolean;
  /** A failure's error code (or `transport`), so a step's failures say what they were. */
  code?: string;
}

export async function fleetBench(opts: FleetOptions): Promise<FleetResult> {
  const { Cluster, waitFor } = await import('../tests/cluster-harness.js');
  const dir = join(tmpdir(), `sandglass-fleet-${process.pid}`);
  const cluster = new Cluster({
    dir,
    artifactsFrom: dir,
    basePort: opts.basePort,
    controlPlanes: 2,
    gateways: 0,
    deadAfterS: opts.deadAfterS,
    heartbeatIntervalS: opts.heartbeatIntervalS,
    frontMaxConn: opts.nodes * 2 + 1000,
  });
  const workers: Worker[] = [];
  try {
    await cluster.start();
    const api = cluster.apiUrl;
    const authorization = `Bearer ${cluster.adminKey}`;
    const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
      const res = await fetch(`${api}${path}`, {
        method,
        headers: body === undefined ? { authorization } : { authorization, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      // haproxy answers its own errors (no replica up, a timeout) as HTML: the status is what is kept of them.
      return { status: res.status, json: res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
    };
    const dbPool = new pg.Pool({ connectionString: cluster.dbUrl, max: 2 });

    // Enrolment the documented way, one token per node id (POST /v1/nodes/enrolments is what `sandglass nodes enroll` calls).
    const t0 = performance.now();
    const specs: FleetNodeSpec[] = [];
    for (let i = 0; i < opts.nodes; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(50, opts.nodes - i) }, async (_, j) => {
          const n = i + j;
          const nodeId = `sim-${n}`;
          const r = await call('POST', '/v1/nodes/enrolments', { nodeId });
          if (r.status !== 201 && r.status !== 200) throw new Error(`enrolment of ${nodeId}: ${r.status} ${JSON.stringify(r.json)}`);
          return { nodeId, token: (r.json as { token: string }).token, host: `127.77.${Math.floor(n / 250)}.${(n % 250) + 1}` };
        }),
      );
      specs.push(...batch);
    }
    const share = Math.ceil(opts.nodes / opts.workers);
    // A worker does not inherit the loaders: it registers the workspace's source condition and tsx, then imports its entry.
    const tsx = import.meta.resolve('tsx/esm/api');
    const source = new URL('../bin/workspace-source.mjs', import.meta.url).href;
    const entry = new URL('./fleet-node.ts', import.meta.url).href;
    const boot = `import(${JSON.stringify(source)}).then(() => import(${JSON.stringify(tsx)})).then((m) => { m.register(); return import(${JSON.stringify(entry)}); });`;
    const lostBy = new Map<Worker, (lost: string[]) => void>();
    const statsBy = new Map<Worker, (s: FleetStats) => void>();
    await Promise.all(
      Array.from({ length: opts.workers }, (_, w) => {
        const data: FleetWorkerData = {
          controlPlaneUrl: api,
          port: opts.basePort + 40,
          nodes: specs.slice(w * share, (w + 1) * share),
          capacityMib: 64 * 1024,
        };
        const worker = new Worker(boot, { eval: true, workerData: data });
        workers.push(worker);
        return new Promise<void>((resolve, reject) => {
          worker.on('error', reject);
          worker.on('message', (m: { ready?: number; stats?: FleetStats; lost?: string[] }) => {
            if (m.ready !== undefined) resolve();
            if (m.stats) statsBy.get(worker)?.(m.stats);
            if (m.lost) lostBy.get(worker)?.(m.lost);
          });
        });
      }),
    );
    const registerS = (performance.now() - t0) / 1000;
    await waitFor(
      async () => Number((await dbPool.query("select count(*) as n from nodes where state = 'alive'")).rows[0].n) === opts.nodes,
      60_000,
      'every simulated node alive',
    );
    const ask = <T>(by: Map<Worker, (v: T) => void>, cmd: FleetCommand, only = workers): Promise<T[]> =>
      Promise.all(
        only.map(
          (w) =>
            new Promise<T>((resolve) => {
              by.set(w, resolve);
              w.postMessage(cmd);
            }),
        ),
      );
    const workerStats = async (): Promise<FleetStats> => {
      const all = await ask(statsBy, { op: 'stats' });
      return {
        heartbeatsMs: all.flatMap((s) => s.heartbeatsMs),
        eventBatchesMs: all.flatMap((s) => s.eventBatchesMs),
        keyFetchesMs: all.flatMap((s) => s.keyFetchesMs),
        failures: all.reduce((a, s) => a + s.failures, 0),
      };
    };

    const pgRoot = Number(readFileSync(join(dir, 'pg', 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    const sandboxes: string[] = [];
    const timed = async (what: string, into: Sample[], fn: () => Promise<{ status: number; json: unknown }>) => {
      const t = performance.now();
      let ok = false;
      let code: string | undefined;
      try {
        const r = await fn();
        ok = r.status >= 200 && r.status < 300;
        if (ok && what === 'create') sandboxes.push((r.json as { id: string }).id);
        if (!ok) code = (r.json as { error?: { code?: string } } | undefined)?.error?.code ?? String(r.status);
      } catch (err) {
        code = `transport (${((err as Error).cause as Error | undefined)?.message ?? (err as Error).message})`;
      }
      into.push({ what, ms: performance.now() - t, ok, ...(code === undefined ? {} : { code }) });
    };
    const pick = () => sandboxes[Math.floor(Math.random() * sandboxes.length)]!;
    // One step: open-loop arrivals at each operation's rate for stepS seconds, every request timed on its own.
    // The bench's children: the replicas, haproxy and the S3 server (PostgreSQL daemonizes; the simulated nodes are threads here).
    const childrenCpuS = () => treeCpuS(process.pid, { withRoot: false });
    const step = async (rate: number): Promise<{ samples: Sample[]; wallS: number; pgS: number; cpS: number; busyS: number; stats: FleetStats }> => {
      await workerStats();
      const samples: Sample[] = [];
      const inFlight: Promise<void>[] = [];
      const mix: [string, number, () => Promise<{ status: number; json: unknown }>][] = [
        ['create', rate, () => call('POST', '/v1/sandboxes', { template: 'base', memoryMib: 256, timeoutS: 3600 })],
        ['access token', rate * 10, () => call('POST', `/v1/sandboxes/${pick()}/access`)],
        ['connect', rate, () => call('GET', `/v1/sandboxes/${pick()}`)],
        ['list', Math.max(1, rate / 10), () => call('GET', '/v1/sandboxes?state=running')],
        ['event read', rate, () => call('GET', `/v1/sandboxes/${pick()}/events`)],
      ];
      const pg0 = treeCpuS(pgRoot);
      const cp0 = childrenCpuS();
      const busy0 = machineBusyS();
      const start = performance.now();
      const due = mix.map(() => 0);
      const tickMs = 10;
      await new Promise<void>((resolve) => {
        const timer = setInterval(() => {
          const elapsedS = (performance.now() - start) / 1000;
          if (elapsedS >= opts.stepS) {
            clearInterval(timer);
            resolve();
            return;
          }
          mix.forEach(([what, perS, fn], i) => {
            if (what !== 'create' && sandboxes.length === 0) return;
            while (due[i]! < elapsedS * perS) {
              due[i]!++;
              inFlight.push(timed(what, samples, fn));
            }
          });
        }, tickMs);
      });
      await Promise.all(inFlight);
      const wallS = (performance.now() - start) / 1000;
      return { samples, wallS, pgS: treeCpuS(pgRoot) - pg0, cpS: childrenCpuS() - cp0, busyS: machineBusyS() - busy0, stats: await workerStats() };
    };

    const rows: FleetRow[] = [];
    const stepLines: string[] = [];
    let rate = opts.startRate;
    let last: Awaited<ReturnType<typeof step>> | undefined;
    let lastRate = rate;
    for (let s = 0; s < opts.maxSteps; s++, rate *= 2) {
      const r = await step(rate);
      const worst = Math.max(
        ...['create', 'access token', 'connect', 'list', 'event read'].map((w) =>
          pct(
            r.samples.filter((x) => x.what === w).map((x) => x.ms),
            99,
          ),
        ),
      );
      const failures = new Map<string, number>();
      for (const x of r.samples) if (!x.ok) failures.set(`${x.what}: ${x.code}`, (failures.get(`${x.what}: ${x.code}`) ?? 0) + 1);
      const failed = [...failures.values()].reduce((a, b) => a + b, 0);
      stepLines.push(
        `${rate} creates/s offered: worst p99 ${worst.toFixed(1)} ms, ${failed} failed of ${r.samples.length}${failed > 0 ? ` (${[...failures].map(([k, n]) => `${n} ${k}`).join(', ')})` : ''}, PostgreSQL ${((100 * r.pgS) / r.busyS).toFixed(0)} % of busy CPU, the replicas and haproxy ${(r.cpS / r.wallS).toFixed(2)} cores`,
      );
      console.log(`[fleet] ${stepLines.at(-1)}`);
      last = r;
      lastRate = rate;
      if (worst > P99_LIMIT_MS || failed > 0) break;
    }
    if (!last) throw new Error('no load step ran');
    const byWhat = (w: string) => last!.samples.filter((x) => x.what === w && x.ok).map((x) => x.ms);
    const add = (what: string, xs: number[], wallS: number, note: string) =>
      rows.push({ what, n: xs.length, perS: xs.length / wallS, p50Ms: pct(xs, 50), p99Ms: pct(xs, 99), note });
    add('placement (create)', byWhat('create'), last.wallS, `offered ${lastRate}/s`);
    add('access-token issue', byWhat('access token'), last.wallS, `offered ${lastRate * 10}/s`);
    add('Sandbox.connect (GET)', byWhat('connect'), last.wallS, '');
    add('list (running)', byWhat('list'), last.wallS, `${sandboxes.length} sandboxes`);
    add('event read', byWhat('event read'), last.wallS, '');
    add('heartbeat', last.stats.heartbeatsMs, last.wallS, `${opts.nodes} nodes every ${opts.heartbeatIntervalS} s`);
    add('event delivery (batch)', last.stats.eventBatchesMs, last.wallS, 'node outbox → /node/v1/events');
    add('sealed data key fetch', last.stats.keyFetchesMs, last.wallS, 'one per start');
    const dbShare = (100 * last.pgS) / last.busyS;

    // The loss of 10 % of the nodes at once: no heartbeat, no answer. Timed until none of their sandboxes is placed there.
    const victims = specs.slice(0, Math.max(1, Math.round(opts.nodes / 10))).map((s) => s.nodeId);
    const lostAt = performance.now();
    const lost = (await ask(lostBy, { op: 'kill', nodeIds: victims })).flat();
    let replaceS = Number.NaN;
    let outcome = '';
    if (lost.length > 0) {
      // Placed elsewhere: running on a node that was not lost, or ended with the reason (a move with no snapshot fails it).
      const unplaced =
        "select count(*) as n from sandboxes where id = any($1) and not ((state = 'running' and not gateway_id = any($2)) or state in ('ended', 'failed'))";
      await waitFor(async () => Number((await dbPool.query(unplaced, [lost, victims])).rows[0].n) === 0, 120_000, 'every lost sandbox placed elsewhere');
      replaceS = (performance.now() - lostAt) / 1000;
      const states = await dbPool.query('select state, count(*) as n from sandboxes where id = any($1) group by state', [lost]);
      outcome = states.rows.map((r: { state: string; n: string }) => `${r.n} ${r.state}`).join(', ');
    }
    await dbPool.end();
    const text =
      `${opts.nodes} simulated gateways (${opts.workers} worker threads, bench/fleet-node.ts: the gateway's own NodeApiClient and ` +
      `Membership, internal API answered at once) heartbeating every ${opts.heartbeatIntervalS} s against two control-plane ` +
      `replicas on PostgreSQL behind haproxy (tests/cluster-harness.ts), enrolled and registered in ${registerS.toFixed(1)} s. ` +
      `Load in ${opts.stepS} s steps, creates doubling from ${opts.startRate}/s with access-token issues at ten times that and ` +
      `connect, list and event reads beside them, until a p99 passed ${P99_LIMIT_MS} ms or a request failed: ${stepLines.join('; ')}. ` +
      `The rows are the last step's. PostgreSQL's processes used ${dbShare.toFixed(0)} % of the machine's busy CPU time in it ` +
      `(${(last.pgS / last.wallS).toFixed(2)} cores), the two replicas with haproxy and the S3 server ${(last.cpS / last.wallS).toFixed(2)} cores. Losing ${victims.length} nodes at once with ${lost.length} sandboxes on them ` +
      `(dead after ${opts.deadAfterS} s): all placed elsewhere ${Number.isNaN(replaceS) ? 'n/a' : `${replaceS.toFixed(1)} s`} after the loss (${outcome}).`;
    return { rows, text };
  } finally {
    for (const w of workers) await w.terminate();
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function fleetOptions(env: NodeJS.ProcessEnv, basePort: number): FleetOptions {
  const nodes = Number(env.BENCH_FLEET_NODES ?? 1000);
  return {
    nodes,
    workers: Number(env.BENCH_FLEET_WORKERS ?? 2),
    basePort,
    stepS: Number(env.BENCH_FLEET_STEP_S ?? 5),
    startRate: Number(env.BENCH_FLEET_START_RATE ?? 25),
    maxSteps: Number(env.BENCH_FLEET_MAX_STEPS ?? 6),
    heartbeatIntervalS: 1,
    deadAfterS: Number(env.BENCH_FLEET_DEAD_AFTER_S ?? 5),
  };
}
