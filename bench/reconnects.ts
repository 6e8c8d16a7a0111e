// Reconnects to a command's output: the HTTP route served from the gateway's output hub next to the WebSocket route (the old path), 32 clients, same run; and Sandbox.connect. The clients run in worker threads and, as the baseline, in the server's own thread.
import { readFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';
import { checkWriting, httpReconnect, runShare, sharedState, type Job, type Shared, type ShareResult } from './reconnect-clients.js';

export interface ReconnectRow {
  what: string;
  samplesMs: number[];
  perSecond: number;
  note: string;
}

const CLIENTS = 32;

interface Measured {
  samplesMs: number[];
  perSecond: number;
  checkedBytes: number;
  /** The server thread over the measure: ns on a CPU, and ns runnable but waiting for one (schedstat). */
  serverRunNs: number;
  serverWaitNs: number;
  /** The host's CPU jiffies over the measure: idle, in all. */
  hostIdle: number;
  hostTotal: number;
}

/** Where the 32 clients run: `run` has them do `n` operations of a job between them. */
interface Clients {
  label: string;
  run(job: Job, n: number): Promise<Pick<Measured, 'samplesMs' | 'perSecond' | 'checkedBytes'>>;
  close(): Promise<void>;
}

/** Operations per second from the first operation's start in any thread to the last one's end. */
function aggregate(n: number, shares: ShareResult[]): Pick<Measured, 'samplesMs' | 'perSecond' | 'checkedBytes'> {
  const seconds = (Math.max(...shares.map((s) => s.endMs)) - Math.min(...shares.map((s) => s.startMs))) / 1000;
  return {
    samplesMs: shares.flatMap((s) => s.samplesMs),
    perSecond: n / seconds,
    checkedBytes: shares.reduce((sum, s) => sum + s.checkedBytes, 0),
  };
}

/** The clients in the server's own thread, sharing its event loop: how the bench ran before, kept as the baseline. */
function inProcessClients(shared: Shared): Clients {
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  return {
    label: "in the server's thread",
    async run(job, n) {
      Atomics.store(shared.next, 0, 0);
      return aggregate(n, [await runShare(job, n, CLIENTS, agent, shared)]);
    },
    async close() {
      agent.destroy();
    },
  };
}

/** The clients split over `count` worker threads, each with its own agent, SDK and byte checker. */
async function workerClients(count: number, shared: ReturnType<typeof sharedState>): Promise<Clients> {
  // A worker does not inherit the loaders: it registers the workspace's source condition and tsx, then imports its entry.
  const tsx = import.meta.resolve('tsx/esm/api');
  const source = new URL('../bin/workspace-source.mjs', import.meta.url).href;
  const entry = new URL('./reconnect-worker.ts', import.meta.url).href;
  const boot = `import(${JSON.stringify(source)}).then(() => import(${JSON.stringify(tsx)})).then((m) => { m.register(); return import(${JSON.stringify(entry)}); });`;
  const workers = Array.from(
    { length: count },
    (_, k) =>
      new Worker(boot, {
        eval: true,
        workerData: { clients: Math.floor(CLIENTS / count) + (k < CLIENTS % count ? 1 : 0), buffer: shared.buffer },
      }),
  );
  const reply = <T>(w: Worker) =>
    new Promise<T>((resolve, reject) => {
      const onMessage = (m: { result?: T; error?: string; ready?: true }) => {
        w.off('error', onError);
        if (m.error !== undefined) reject(new Error(`reconnect worker: ${m.error}`));
        else resolve((m.result ?? m.ready) as T);
      };
      const onError = (err: Error) => {
        w.off('message', onMessage);
        reject(err);
      };
      w.once('message', onMessage);
      w.once('error', onError);
    });
  await Promise.all(workers.map((w) => reply<true>(w)));
  return {
    label: `in ${count} worker thread${count === 1 ? '' : 's'}`,
    async run(job, n) {
      Atomics.store(shared.next, 0, 0);
      const replies = workers.map((w) => reply<ShareResult>(w));
      for (const w of workers) w.postMessage({ job, n });
      return aggregate(n, await Promise.all(replies));
    },
    async close() {
      await Promise.all(workers.map((w) => w.terminate()));
    },
  };
}

/**
 * BENCH_RECONNECT_CLIENTS: where the clients run — `both` (the default: each measure in the server's thread and then
 * in workers, back to back), `workers` or `process`. BENCH_RECONNECT_WORKERS: how many worker threads (default: the cores but one, 1 to 4).
 */
async function clientModes(shared: ReturnType<typeof sharedState>): Promise<Clients[]> {
  const mode = process.env.BENCH_RECONNECT_CLIENTS ?? 'both';
  if (!['both', 'workers', 'process'].includes(mode)) throw new Error(`BENCH_RECONNECT_CLIENTS must be both, workers or process, not ${mode}`);
  // One worker on a 2-core host: the server's thread and the clients then have a core each, as in production.
  const count = Number(process.env.BENCH_RECONNECT_WORKERS ?? Math.max(1, Math.min(4, availableParallelism() - 1)));
  if (!Number.isInteger(count) || count < 1 || count > CLIENTS) throw new Error(`BENCH_RECONNECT_WORKERS must be an integer in 1..${CLIENTS}`);
  const modes: Clients[] = [];
  if (mode !== 'workers') modes.push(inProcessClients(shared));
  if (mode !== 'process') modes.push(await workerClients(count, shared));
  return modes;
}

const rate = (x: { perSecond: number }) => `${x.perSecond.toFixed(0)}/s`;
const progress = (what: string) => console.error(`[reconnects] ${new Date().toISOString().slice(11, 19)} ${what}`);

/** Jiffies the host's CPUs spent idle (idle + iowait), and in all, since boot: what share the machine had to spare. */
function hostCpu(): { idle: number; total: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  return { idle: f[3]! + f[4]!, total: f.reduce((a, b) => a + b, 0) };
}

/** The server's thread (the process's main thread): ns it ran on a CPU, and ns it was ready to run but waited for one. */
function serverThread(): { runNs: number; waitNs: number } {
  const [run, wait] = readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').trim().split(/\s+/).map(Number);
  return { runNs: run!, waitNs: wait! };
}

/**
 * A measure taken once per client mode, back to back, so that a change in the host's load falls on each alike. Each
 * also records the CPU time of the server's thread (with the clients in workers, the server's own work: its operations
 * per CPU-second are what it would serve on a core of its own), how long it waited for a CPU, and how much of the
 * host's CPU sat idle meanwhile.
 */
async function each(modes: Clients[], job: Job, n: number): Promise<Measured[]> {
  const out: Measured[] = [];
  for (const m of modes) {
    const server = serverThread();
    const host = hostCpu();
    const r = await m.run(job, n);
    const serverAfter = serverThread();
    const hostAfter = hostCpu();
    out.push({
      ...r,
      serverRunNs: serverAfter.runNs - server.runNs,
      serverWaitNs: serverAfter.waitNs - server.waitNs,
      hostIdle: hostAfter.idle - host.idle,
      hostTotal: hostAfter.total - host.total,
    });
  }
  return out;
}

/** The server thread's operations per CPU-second and its wait for a CPU, and the host's idle share, for a row's note. */
const cpuNote = (m: Measured) =>
  `server thread ${(m.samplesMs.length / (m.serverRunNs / 1e9)).toFixed(0)}/CPU-s, waited ${(m.serverWaitNs / 1e6).toFixed(0)} ms for a CPU; host CPU idle ${((100 * m.hostIdle) / m.hostTotal).toFixed(0)}%`;

/** The rows of one measure, one per client mode; a row of the clients in workers says its ratio to the in-process one. */
function modeRows(modes: Clients[], what: string, measured: Measured[], note: (m: Measured, k: number) => string): ReconnectRow[] {
  const inProcess = modes.findIndex((m) => m.label === "in the server's thread");
  return measured.map((m, k) => ({
    what: `${what}; clients ${modes[k]!.label}`,
    samplesMs: m.samplesMs,
    perSecond: m.perSecond,
    note: `${note(m, k)}${inProcess >= 0 && k !== inProcess ? `; ×${(m.perSecond / measured[inProcess]!.perSecond).toFixed(2)} the clients in the server's thread` : ''}; ${cpuNote(m)}`,
  }));
}

export async function reconnectsBench(opts: { config: ConnectionConfig; quick: boolean; connectOnly?: boolean }): Promise<ReconnectRow[]> {
  const sbx = await Sandbox.create({ ...opts.config, timeoutS: 3600 });
  const shared = sharedState();
  const modes = await clientModes(shared);
  const rows: ReconnectRow[] = [];
  try {
    // BENCH_RECONNECTS=connect: the Sandbox.connect rows alone.
    if (!opts.connectOnly) await outputRows(sbx, opts, modes, shared, rows);
    await connectRows(sbx, opts, modes, rows);
    return rows;
  } finally {
    await Promise.all(modes.map((m) => m.close()));
    await sbx.kill().catch(() => undefined);
  }
}

/** Reconnects to a command's output, over the WebSocket and over the HTTP route. */
async function outputRows(
  sbx: Sandbox,
  opts: { config: ConnectionConfig; quick: boolean },
  modes: Clients[],
  shared: Shared,
  rows: ReconnectRow[],
): Promise<void> {
  const res = await fetch(`${opts.config.apiUrl!.replace(/\/+$/, '')}/v1/sandboxes/${sbx.id}/access`, {
    method: 'POST',
    headers: { authorization: `Bearer ${opts.config.apiKey}` },
  });
  if (!res.ok) throw new Error(`access answered ${res.status}`);
  const access = (await res.json()) as { token: string; gatewayUrl: string };
  const base = `${access.gatewayUrl.replace(/\/+$/, '')}/v1/sandboxes/${sbx.id}/commands`;
  const wsBase = base.replace(/^http/, 'ws');
  const token = access.token;
  // The WebSocket rows are the baseline's rate, which this many samples measure; the HTTP rows run longer.
  const n = opts.quick ? 2_000 : 5_000;
  const nWs = opts.quick ? 300 : 500;

  // Finished commands: no output, and 65 KiB replayed from offset 0.
  const silent = await sbx.commands.run('true', { background: true });
  await silent.wait();
  await sbx.files.write('/root/writer.py', writerScript(6554, 0));
  const full = await sbx.commands.run('python3 /root/writer.py', { background: true, retainOutput: false });
  await full.wait();
  for (const [label, id, size] of [
    ['finished command, no output', silent.id, 0],
    ['finished command, 65 KiB output', full.id, 65_540],
  ] as const) {
    progress(`${label}: WebSocket`);
    const ws = await each(modes, { kind: 'ws-finished', url: `${wsBase}/${id}/stream`, token, size }, nWs);
    progress(`${label}: HTTP`);
    const job: Job = { kind: 'http-finished', url: `${base}/${id}/output`, token, size };
    // The first reconnect opens the command's hub (one guest round trip); the rows measure the ones after it.
    await modes[0]!.run(job, 1);
    const http = await each(modes, job, n);
    rows.push(...modeRows(modes, `reconnect, ${label}: WebSocket (baseline)`, ws, rate));
    rows.push(
      ...modeRows(modes, `reconnect, ${label}: HTTP, gateway hub`, http, (m, k) => `${rate(m)}; ×${(m.perSecond / ws[k]!.perSecond).toFixed(1)} the WebSocket`),
    );
  }

  // A command still writing: each reconnect re-attaches from an offset behind the newest the client saw (a client that
  // dropped), and every byte it gets is checked against the writer's sequence.
  await sbx.files.write('/root/writer.py', writerScript(100_000_000, 0.05));
  const writer = await sbx.commands.run('python3 /root/writer.py', { background: true, retainOutput: false, timeoutMs: 0 });
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const url = `${base}/${writer.id}/output`;
    Atomics.store(shared.seen, 0, 0n);
    for (let seen = 0; seen < 300_000; seen = Number(Atomics.load(shared.seen, 0)))
      checkWriting(shared, seen, await httpReconnect(agent, new URL(url), token, seen));
    progress('while writing: WebSocket');
    const ws = await each(modes, { kind: 'ws-writing', url: `${wsBase}/${writer.id}/stream`, token }, nWs);
    const nWriting = opts.quick ? 10_000 : 100_000;
    progress('while writing: HTTP');
    const http = await each(modes, { kind: 'http-writing', url, token }, nWriting);
    const mib = (m: Measured) => `${(m.checkedBytes / 1024 / 1024).toFixed(0)} MiB checked`;
    rows.push(...modeRows(modes, 'reconnect while the command writes: WebSocket (baseline)', ws, (m) => `${rate(m)}; ${mib(m)}`));
    rows.push(
      ...modeRows(
        modes,
        `reconnect while the command writes: HTTP, gateway hub (${nWriting.toLocaleString('en')} reconnects)`,
        http,
        (m, k) => `${rate(m)}; ×${(m.perSecond / ws[k]!.perSecond).toFixed(1)} the WebSocket; ${mib(m)}, 0 lost or repeated`,
      ),
    );
  } finally {
    agent.destroy();
    await writer.kill().catch(() => undefined);
  }
}

/** Sandbox.connect and its baselines. */
async function connectRows(sbx: Sandbox, opts: { config: ConnectionConfig; quick: boolean }, modes: Clients[], rows: ReconnectRow[]): Promise<void> {
  // Sandbox.connect: the control plane's GET /v1/sandboxes/{id} with the API key. Baselines in the same run: its health
  // route (no auth, no database: the machine's ceiling), and the same GET sent by hand over a kept-alive node:http
  // agent (the floor for this request) and over fetch (the SDK's transport before it moved to node:http). The four
  // take turns in rounds, each in every client mode, so that a change in the host's load falls on each alike.
  const apiUrl = opts.config.apiUrl!.replace(/\/+$/, '');
  const sandboxUrl = `${apiUrl}/v1/sandboxes/${sbx.id}`;
  const apiKey = opts.config.apiKey!;
  const variants: Array<[string, Job]> = [
    ['control plane GET /v1/health (baseline)', { kind: 'health', url: `${apiUrl}/v1/health` }],
    ['GET /v1/sandboxes/{id} over node:http, kept alive (baseline)', { kind: 'get', url: sandboxUrl, apiKey, sandboxId: sbx.id }],
    ['GET /v1/sandboxes/{id} over fetch (baseline: the old SDK transport)', { kind: 'fetch', url: sandboxUrl, apiKey, sandboxId: sbx.id }],
    ['Sandbox.connect (API key → sandbox)', { kind: 'connect', apiUrl, apiKey, sandboxId: sbx.id }],
  ];
  progress('Sandbox.connect');
  const nConnect = opts.quick ? 1_000 : 5_000;
  const rounds = 4;
  const measured = variants.map(() => modes.map(() => ({ samplesMs: [] as number[], seconds: 0, serverRunNs: 0, serverWaitNs: 0, hostIdle: 0, hostTotal: 0 })));
  for (const [, job] of variants) await each(modes, job, 200);
  for (let r = 0; r < rounds; r++) {
    for (const [v, [, job]] of variants.entries()) {
      for (const [k, m] of (await each(modes, job, nConnect / rounds)).entries()) {
        const into = measured[v]![k]!;
        into.samplesMs.push(...m.samplesMs);
        into.seconds += m.samplesMs.length / m.perSecond;
        into.serverRunNs += m.serverRunNs;
        into.serverWaitNs += m.serverWaitNs;
        into.hostIdle += m.hostIdle;
        into.hostTotal += m.hostTotal;
      }
    }
  }
  const perSecond = measured.map((byMode) => byMode.map((m) => m.samplesMs.length / m.seconds));
  for (const [v, [what]] of variants.entries()) {
    const asMeasured = measured[v]!.map((m, k) => ({ ...m, perSecond: perSecond[v]![k]!, checkedBytes: 0 }));
    rows.push(
      ...modeRows(modes, what, asMeasured, (m, k) =>
        v === 3
          ? `${rate(m)}; ×${(m.perSecond / perSecond[2]![k]!).toFixed(2)} fetch, ×${(m.perSecond / perSecond[1]![k]!).toFixed(2)} node:http by hand`
          : rate(m),
      ),
    );
  }
}

/** Prints `%09d\n` lines 0..lines-1, pausing `pauseS` every 500 lines (0: none). */
function writerScript(lines: number, pauseS: number): string {
  return [
    'import sys, time',
    'out = sys.stdout.buffer',
    `for i in range(${lines}):`,
    "    out.write(b'%09d\\n' % i)",
    '    if i % 500 == 499:',
    '        out.flush()',
    pauseS > 0 ? `        time.sleep(${pauseS})` : '        pass',
    'out.flush()',
    '',
  ].join('\n');
}
