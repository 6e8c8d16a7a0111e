// `npm run bench`: cold boot vs create-from-template, exec round trip, file throughput, concurrent creates, host memory per sandbox;
// snapshots, egress, the jailer; a cluster (creates/s on one gateway vs three, failover time, PostgreSQL vs SQLite latency).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { cpus, tmpdir } from 'node:os';
import { Readable } from 'node:stream';
import Table from 'cli-table3';
import { homeLayout } from '@sandglass/core';
import { configureJail, qemuVersion, type AccelChoice } from '@sandglass/vmm';
import { ensureGuestImage, defaultKernelArgs } from '@sandglass/images';
import { Sandbox } from '@sandglass/sdk';
import { nodeAccel, start } from '@sandglass/server';
import { BASE_TEMPLATE, bootAgentTimeoutMs, bootGuest, connectAgent, vmConfig } from '@sandglass/gateway';
import { egressBench } from './egress.js';
import { e2bBench } from './e2b.js';
import { keysBench } from './keys.js';
import { inputCosts, replaySpeed } from './replay.js';
import { cadenceBench, cadenceSection, cadenceTable } from './cadence.js';
import { densityBench, densitySection } from './density.js';
import { reconnectsBench } from './reconnects.js';
import { filesBench } from './files.js';
import { consoleBench } from './console.js';
import { fleetBench, fleetOptions, type FleetResult } from './fleet.js';
import { customTemplatesBench } from './custom-templates.js';
import { ttiBench } from './tti.js';
import { materializeBench } from './materialize.js';
import { portsBench } from './ports.js';
import { pauseDiskBench } from './pause-disk.js';
import { clientsBench } from './clients.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const home = process.env.SANDGLASS_BENCH_HOME ?? join(root, '.sandglass-test');
const port = Number(process.env.SANDGLASS_BENCH_PORT ?? 17170);
const quick = process.env.BENCH_QUICK === '1';

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const ms = (x: number) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;
const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

interface Row {
  what: string;
  n: number;
  p50: string;
  p95: string;
  other: string;
}
const rows: Row[] = [];
function addLatency(what: string, xs: number[], other = ''): void {
  rows.push({ what, n: xs.length, p50: ms(pct(xs, 50)), p95: ms(pct(xs, 95)), other });
}

async function coldBoots(n: number): Promise<number[]> {
  const layout = homeLayout(home);
  const image = await ensureGuestImage({ home });
  // The accelerator the server will prove too (same probe, same cached verdict).
  accel = await nodeAccel(layout, image, defaultKernelArgs().join(' '));
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const dir = join(layout.run, `bench-cold-${i}`);
    rmSync(dir, { recursive: true, force: true });
    const t0 = performance.now();
    const config = vmConfig(BASE_TEMPLATE.memoryMib, BASE_TEMPLATE.vcpus, accel.accel, accel.cpu);
    const vm = await bootGuest(image, defaultKernelArgs().join(' '), { id: `bench-cold-${i}`, dir, config });
    const agent = await connectAgent(vm, { timeoutMs: bootAgentTimeoutMs(config) });
    out.push(performance.now() - t0);
    await agent.close();
    await vm.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}

let coldP50 = Number.NaN;
let accel: AccelChoice | undefined;

async function waitForWarm(gatewayUrl: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const h = (await (await fetch(`${gatewayUrl}/v1/health`)).json()) as { warm?: number };
    if ((h.warm ?? 0) >= 2) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the warm pool did not fill within 60 s');
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

/** The accelerator, QEMU and host the figures were measured on. */
function hostLine(accelText = accel ? `${accel.accel} (-cpu ${accel.cpu})` : 'unknown'): string {
  return `accel ${accelText}, ${qemuVersion()}, ${process.platform} ${cpus().length} cores`;
}

function printRows(): string {
  const table = new Table({ head: ['measure', 'n', 'p50', 'p95', 'note'], style: { head: [], border: [] } });
  for (const r of rows) table.push([r.what, r.n, r.p50, r.p95, r.other]);
  const header = hostLine();
  console.log(header);
  console.log(table.toString());
  return header;
}

interface TakenData {
  pausedMs: number;
  sizeAddedBytes: number;
  snapshotId: string;
}

/** The snapshot.taken events of a sandbox, oldest first. */
async function taken(s: Sandbox): Promise<TakenData[]> {
  return (await s.events()).filter((e) => e.type === 'snapshot.taken').map((e) => e.data as unknown as TakenData);
}

/**
 * Phase 3, time travel: the guest's pause per live snapshot, bytes stored per snapshot (idle, and writing 10 MiB/min),
 * resume and fork latency next to create-from-template measured in the same run, and 16 concurrent forks.
 */
async function snapshotPhase(): Promise<void> {
  const running = await start({ home, port, warmPoolSize: 0 });
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  const cleanup: Sandbox[] = [];
  try {
    const sizes = [256, 1024];
    // Bytes per snapshot over real minutes: idle and writing sandboxes of both sizes side by side, one snapshot a minute.
    const gapMs = quick ? 15_000 : 60_000;
    const rounds = quick ? 2 : 4;
    const subjects: Array<{ label: string; memoryMib: number; sbx: Sandbox }> = [];
    for (const memoryMib of sizes) {
      for (const busy of [false, true]) {
        const sbx = await Sandbox.create({ ...config, memoryMib, timeoutS: 3600, snapshotIntervalS: 86400 });
        cleanup.push(sbx);
        if (busy) {
          // 10 MiB of fresh random data per minute into files (the disk) through the page cache (memory).
          await sbx.commands.run(
            "nohup bash -c 'i=0; while true; do head -c 10485760 /dev/urandom > /root/w$((i % 3)); i=$((i+1)); sleep 60; done' >/dev/null 2>&1 &",
          );
        }
        subjects.push({ label: `${memoryMib} MiB guest, ${busy ? 'writing 10 MiB/min' : 'idle'}`, memoryMib, sbx });
      }
    }
    for (const s of subjects) await s.sbx.snapshot();
    for (let r = 0; r < rounds; r++) {
      await new Promise((res) => setTimeout(res, gapMs));
      for (const s of subjects) await s.sbx.snapshot();
    }
    for (const s of subjects) {
      const t = (await taken(s.sbx)).slice(1);
      const bytes = t.map((x) => x.sizeAddedBytes);
      const ramBytes = s.memoryMib * 1024 * 1024;
      rows.push({
        what: `bytes stored per snapshot, ${s.label} (every ${gapMs / 1000} s)`,
        n: bytes.length,
        p50: mb(pct(bytes, 50)),
        p95: mb(pct(bytes, 95)),
        other: `${((pct(bytes, 50) / ramBytes) * 100).toFixed(2)}% of guest RAM (p50)`,
      });
    }
    // A sandbox's first snapshot: its pages that the tenant's store does not hold yet (the template's are shared by id).
    const firsts = subjects.filter((s) => !s.label.includes('writing')).map(async (s) => (await taken(s.sbx))[0]!.sizeAddedBytes);
    const firstBytes = await Promise.all(firsts);
    rows.push({
      what: "bytes stored by a sandbox's first snapshot (256 MiB / 1 GiB, idle)",
      n: firstBytes.length,
      p50: mb(firstBytes[0]!),
      p95: mb(firstBytes[1] ?? 0),
      other: 'after earlier sandboxes of the tenant: only pages new to its store',
    });
    for (const s of subjects) if (s.label.includes('writing')) await s.sbx.kill();

    // Pause per live snapshot: idle sandboxes, snapshots back to back.
    for (const s of subjects.filter((x) => !x.label.includes('writing'))) {
      for (let i = 0; i < (quick ? 4 : 10); i++) await s.sbx.snapshot();
      const paused = (await taken(s.sbx)).slice(1).map((x) => x.pausedMs);
      addLatency(`guest pause per live snapshot, ${s.memoryMib} MiB guest`, paused, 'stop → freeze disk → device state → RAM copy → cont');
    }
    for (const s of subjects) await s.sbx.kill().catch(() => {});

    // Create from the template (baseline) vs fork and resume, each to a first exec result.
    const creates: number[] = [];
    for (let i = 0; i < (quick ? 3 : 8); i++) {
      const [t, s] = await timed(async () => {
        const s = await Sandbox.create(config);
        await s.commands.run('true');
        return s;
      });
      creates.push(t);
      await s.kill();
    }
    addLatency('create from template → first exec (baseline)', creates);
    const src = await Sandbox.create({ ...config, timeoutS: 3600, snapshotIntervalS: 86400 });
    cleanup.push(src);
    await src.commands.run('python3 -c "print(1)"');
    const snap = await src.snapshot();
    const forks: number[] = [];
    for (let i = 0; i < (quick ? 3 : 8); i++) {
      const [t, f] = await timed(async () => {
        const [f] = await Sandbox.fork(snap.id, config);
        await f!.commands.run('true');
        return f!;
      });
      forks.push(t);
      await f.kill();
    }
    addLatency('fork a snapshot → first exec', forks, `${(pct(forks, 50) / pct(creates, 50)).toFixed(2)}× create from template (p50)`);
    const resumes: number[] = [];
    for (let i = 0; i < (quick ? 3 : 6); i++) {
      await src.pause();
      const [t] = await timed(async () => {
        const r = await Sandbox.resume(src.id, config);
        await r.commands.run('true');
      });
      resumes.push(t);
    }
    addLatency('resume a paused sandbox → first exec', resumes, `${(pct(resumes, 50) / pct(creates, 50)).toFixed(2)}× create from template (p50)`);

    // 16 forks of one snapshot at once.
    const per: number[] = [];
    const t0 = performance.now();
    const made = await timed(async () => Sandbox.fork(snap.id, { ...config, count: 16 }));
    const total = performance.now() - t0;
    await Promise.all(
      made[1].map(async (f) => {
        const [t] = await timed(() => f.commands.run('true'));
        per.push(t);
      }),
    );
    rows.push({
      what: '16 concurrent forks of one snapshot (one request)',
      n: made[1].length,
      p50: ms(total),
      p95: ms(total + pct(per, 95)),
      other: `${made[1].length}/16 running; p50 = all forked, p95 = plus the slowest first exec`,
    });
    await Promise.all(made[1].map((f) => f.kill().catch(() => {})));
  } finally {
    await Promise.all(cleanup.map((s) => s.kill().catch(() => {})));
    await running.stop();
  }
}

/** Phase 4: what egress interception (CONNECT, TLS termination, policy, secret substitution) adds per request. */
async function egressPhase(): Promise<void> {
  const [direct, proxied] = await egressBench();
  for (const r of [direct!, proxied!]) {
    rows.push({ what: `HTTPS request, ${r.label}`, n: r.n, p50: ms(r.p50Ms), p95: ms(r.p95Ms), other: `${r.rps.toFixed(0)} req/s` });
  }
  rows.push({ what: 'added by the egress proxy per request (p50)', n: proxied!.n, p50: ms(proxied!.p50Ms - direct!.p50Ms), p95: '', other: 'target < 2 ms' });
}

/**
 * BENCH_ONLY=snapshots|sizes|egress|jail runs just that phase (its rows print, docs/benchmarks.md is left alone);
 * BENCH_ONLY=cluster, BENCH_ONLY=e2b, BENCH_ONLY=replay and BENCH_ONLY=files also replace their own sections of docs/benchmarks.md;
 * BENCH_ONLY=fleet (bench/fleet.ts) replaces its section too: simulated gateways on the node API, no VMs;
 * BENCH_ONLY=cadence (bench/cadence.ts) soaks ten 5 s sandboxes and one 60 s one and replaces its own section;
 * BENCH_ONLY=tti (bench/tti.ts, BENCH_TTI_N, BENCH_TTI_BURST) and BENCH_ONLY=materialize (bench/materialize.ts) replace theirs too;
 * BENCH_ONLY=console (bench/console.ts) prints the API's latency with 2,000 console stream attempts held, next to idle.
 * BENCH_ONLY=custom-templates (bench/custom-templates.ts) builds a custom template cold and cached and creates from it against base.
 * BENCH_ONLY=density (bench/density.ts, BENCH_DENSITY_N idle sandboxes, the copy-on-write probe of bench/density-cow.ts) replaces its section.
 * BENCH_ONLY=ports (bench/ports.ts, BENCH_PORTS_N, BENCH_PORTS_BIG_MIB) times guest ports against the guest's own request and replaces its section.
 * BENCH_ONLY=clients (bench/clients.ts) times the CLI's start, the servers' load, the Python SDK and the MCP server against their baselines.
 * BENCH_ONLY=pause-disk (bench/pause-disk.ts) prints a disk-only pause and its cold-boot resume against a memory pause (bytes, latency).
 */
const only = process.env.BENCH_ONLY;

/**
 * What the jailer adds to a create: restores alternate between the jail (as every VM runs) and QEMU started directly
 * (SANDGLASS_JAIL=off), in one server, so both see the same host load. Needs root (without it there is no jail).
 */
async function jailPhase(): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const running = await start({ home, port, warmPoolSize: 0 });
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  const times = { on: [] as number[], off: [] as number[] };
  try {
    // Untimed: a node's first restore also copies the template's RAM image into tmpfs, and would land in one mode only.
    await (await Sandbox.create(config)).kill();
    for (let i = 0; i < (quick ? 4 : 12); i++) {
      for (const mode of ['on', 'off'] as const) {
        process.env.SANDGLASS_JAIL = mode;
        configureJail({ recordDir: join(home, 'vms') });
        const t0 = performance.now();
        const s = await Sandbox.create(config);
        times[mode].push(performance.now() - t0);
        await s.kill();
      }
    }
  } finally {
    delete process.env.SANDGLASS_JAIL;
    configureJail({ recordDir: join(home, 'vms') });
    await running.stop();
  }
  addLatency('create (restore + agent sync), jailed', times.on);
  addLatency('create (restore + agent sync), SANDGLASS_JAIL=off', times.off);
  rows.push({
    what: 'added by the jailer per create (p50)',
    n: times.on.length,
    p50: ms(pct(times.on, 50) - pct(times.off, 50)),
    p95: '',
    other: 'target ≤ 5 ms',
  });
}

/**
 * Sizes (BENCH_ONLY=sizes): create → first exec result for each memory size and a 2-vCPU one against 256 MiB, same
 * server and run (warm pool off, so every create restores). The first create of a size waits for its template build
 * through the progress path (Sandbox.create's onProgress): timed apart, as the one-off cost of a size.
 */
async function sizesPhase(): Promise<void> {
  const running = await start({ home, port, warmPoolSize: 0 });
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  const shapes = [
    { label: '256 MiB, 1 vCPU', memoryMib: 256, vcpus: 1 },
    { label: '512 MiB, 1 vCPU', memoryMib: 512, vcpus: 1 },
    { label: '1024 MiB, 1 vCPU', memoryMib: 1024, vcpus: 1 },
    { label: '256 MiB, 2 vCPU', memoryMib: 256, vcpus: 2 },
  ];
  const firstExec = async (shape: { memoryMib: number; vcpus: number }, progress?: string[]): Promise<number> => {
    const t0 = performance.now();
    const s = await Sandbox.create({ ...config, memoryMib: shape.memoryMib, vcpus: shape.vcpus, onProgress: (p) => progress?.push(p.phase ?? '') });
    await s.commands.run('true');
    const t = performance.now() - t0;
    await s.kill();
    return t;
  };
  const n = quick ? 3 : 8;
  const times = new Map<string, number[]>();
  try {
    for (const shape of shapes) {
      const progress: string[] = [];
      const first = await firstExec(shape, progress);
      rows.push({ what: `first create of ${shape.label} → first exec`, n: 1, p50: ms(first), p95: '', other: `${progress.length} progress answers waited on` });
    }
    // Interleaved, so every size sees the same host load.
    for (let i = 0; i < n; i++) for (const shape of shapes) times.set(shape.label, [...(times.get(shape.label) ?? []), await firstExec(shape)]);
  } finally {
    await running.stop();
  }
  const base = pct(times.get(shapes[0]!.label)!, 50);
  for (const shape of shapes) {
    const xs = times.get(shape.label)!;
    addLatency(`create ${shape.label} → first exec`, xs, `${(pct(xs, 50) / base).toFixed(2)}× 256 MiB (p50)`);
  }
}

/** Host load, as the rows of the cluster phase are only comparable within one run on this shared machine. */
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** n calls of fn, at most `concurrency` at once; the results in call order. */
async function inParallel<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<PromiseSettledResult<T>[]> {
  const out: PromiseSettledResult<T>[] = [];
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i).then(
        (value) => ({ status: 'fulfilled' as const, value }),
        (reason: unknown) => ({ status: 'rejected' as const, reason }),
      );
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return out;
}

/** Each request's latency, `concurrency` in flight over kept-alive connections; any answer but 2xx stops the run. */
async function hammer(url: string, apiKey: string, method: 'GET' | 'POST', n: number, concurrency: number): Promise<number[]> {
  const lat: number[] = [];
  const results = await inParallel(n, concurrency, async () => {
    const t0 = performance.now();
    const res = await fetch(url, { method, headers: { authorization: `Bearer ${apiKey}` } });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`${method} ${url} answered ${res.status}`);
    lat.push(performance.now() - t0);
  });
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return lat;
}

interface ClusterTable {
  title: string;
  rows: Row[];
}

/**
 * Phase 6, scale-out (BENCH_ONLY=cluster): a cluster from tests/cluster-harness.ts (PostgreSQL, an s3rver process, two
 * control-plane replicas behind haproxy, gateways in process groups of their own), all on this one machine. Creates
 * per second with one gateway and then, adding two, with three; the time from a gateway's kill -9 to its sandboxes
 * running elsewhere next to the restore time of the same run; control-plane request latency on PostgreSQL (through
 * haproxy and directly) against `sandglass up` (SQLite) started as its own process.
 */
async function clusterPhase(): Promise<{ tables: ClusterTable[]; text: string; accel: string }> {
  const { Cluster, waitFor } = await import('../tests/cluster-harness.js');
  const creates = quick ? 6 : 12;
  const concurrency = quick ? 3 : 4;
  const perNode = quick ? 1 : 2;
  const requests = quick ? 100 : 500;
  const deadAfterS = 6;
  const heartbeatIntervalS = 1;
  const loadBefore = loadavg();
  const dir = mkdtempSync(join(tmpdir(), 'sg-bench-cluster-'));
  const cluster = new Cluster({ dir, artifactsFrom: home, basePort: port + 20, controlPlanes: 2, gateways: 1, deadAfterS, heartbeatIntervalS });
  const tables: ClusterTable[] = [];
  let accelText = 'unknown';
  let up: ChildProcess | undefined;
  const t0Phase = performance.now();
  try {
    await cluster.start();
    const config = { apiUrl: cluster.apiUrl, apiKey: cluster.adminKey };
    const placedOn = async (ids: string[]) => {
      const all = await Sandbox.list({ ...config, state: 'running' });
      return new Map(ids.map((id) => [id, all.find((x) => x.id === id)?.gatewayId ?? '?']));
    };

    // 1. The same batch of creates against one gateway, then (two more started, restoring the template from the store) three.
    const throughput: Row[] = [];
    const rate: Record<number, number> = {};
    const p50: Record<number, number> = {};
    for (const gateways of [1, 3]) {
      if (gateways === 3) await Promise.all([cluster.startGateway('n2'), cluster.startGateway('n3')]);
      // One create per gateway first, not timed: a node's first restore also copies the template's RAM into tmpfs.
      // Kept until all are made, so placement spreads them over every gateway.
      const warmups: Sandbox[] = [];
      for (let i = 0; i < gateways; i++) warmups.push(await Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 86400 }));
      await Promise.all(warmups.map((s) => s.kill()));
      const lat: number[] = [];
      const t0 = performance.now();
      const made = await inParallel(creates, concurrency, async () => {
        const [t, s] = await timed(() => Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 86400 }));
        lat.push(t);
        return s;
      });
      const wallMs = performance.now() - t0;
      const ok = made.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      // Distinct reasons, without the sandbox ids that make each message unique.
      const reasons = made.flatMap((r) => (r.status === 'rejected' ? [(r.reason as Error).message.replace(/sbx_[a-z0-9]+/g, 'sbx_…').slice(0, 200)] : []));
      const errors = [...new Set(reasons)];
      for (const e of errors) console.error(`[cluster] a create against ${gateways} gateway(s) failed: ${e}`);
      // Where a create's time goes: the gateway's own restore (its sandbox.started event) against the whole request.
      const startedData = await Promise.all(
        ok.map(async (s) => (await s.events({ types: ['sandbox.started'] }))[0]?.data as { accel?: string; restoreMs?: number } | undefined),
      );
      accelText = String(startedData[0]?.accel ?? accelText);
      const restoreMs = startedData.flatMap((d) => (d?.restoreMs === undefined ? [] : [d.restoreMs]));
      const spread = new Map<string, number>();
      for (const node of (await placedOn(ok.map((s) => s.id))).values()) spread.set(node, (spread.get(node) ?? 0) + 1);
      rate[gateways] = ok.length / (wallMs / 1000);
      p50[gateways] = pct(lat, 50);
      addLatencyTo(throughput, `${creates} creates, ${concurrency} at a time, ${gateways} gateway${gateways > 1 ? 's' : ''}`, lat, [
        `${rate[gateways]!.toFixed(2)} creates/s`,
        restoreMs.length ? `gateway restore ${ms(pct(restoreMs, 50))} p50` : '',
        `${ok.length}/${creates} ok in ${(wallMs / 1000).toFixed(1)} s${errors.length ? ` (failed: ${errors.join(' / ')})` : ''}`,
        `placed ${[...spread]
          .sort()
          .map(([n, c]) => `${n}:${c}`)
          .join(' ')}`,
      ]);
      await Promise.all(ok.map((s) => s.kill().catch(() => {})));
    }
    throughput.push({
      what: 'three gateways against one',
      n: creates,
      p50: `${(p50[3]! / p50[1]!).toFixed(2)}× latency`,
      p95: '',
      other: `${(rate[3]! / rate[1]!).toFixed(2)}× creates/s`,
    });
    tables.push({ title: 'Creates per second, one gateway vs three', rows: throughput });

    // 2. Failover. Sandboxes on every node; those off the victim give the baselines (a resume on their own node, a fork
    // restored on another) and are killed; the victim's each take one snapshot; then kill -9 of the victim.
    const victim = 'n2';
    const spreadOut: Sandbox[] = [];
    for (let i = 0; i < 3 * perNode; i++) spreadOut.push(await Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 86400 }));
    const resumes: number[] = [];
    const resumeRestore: number[] = [];
    const resumeFailures: string[] = [];
    const timing = (e: { data: unknown } | undefined) => e?.data as { prepareMs?: number; restoreMs?: number } | undefined;
    for (const [id, node] of await placedOn(spreadOut.map((s) => s.id))) {
      if (node === victim) continue;
      const s = spreadOut.find((x) => x.id === id)!;
      await s.pause();
      try {
        resumes.push((await timed(() => Sandbox.resume(id, config)))[0]);
      } catch (err) {
        resumeFailures.push((err as Error).message);
        continue;
      }
      const resumed = timing((await s.events({ types: ['sandbox.resumed'] })).at(-1));
      if (resumed?.restoreMs !== undefined) resumeRestore.push((resumed.prepareMs ?? 0) + resumed.restoreMs);
    }
    // A restore on a node that never held the snapshot (what a move does): a fork placed away from its source's node.
    const crossPrepare: number[] = [];
    const crossRestore: number[] = [];
    for (const [id, node] of await placedOn(spreadOut.map((s) => s.id))) {
      if (node === victim || node === '?') continue;
      const snap = await spreadOut.find((x) => x.id === id)!.snapshot();
      const [fork] = await Sandbox.fork(snap.id, { ...config, timeoutS: 900 });
      const forkNode = (await placedOn([fork!.id])).get(fork!.id);
      const started = timing((await fork!.events({ types: ['sandbox.started'] }))[0]);
      if (forkNode !== node && started?.restoreMs !== undefined) {
        crossPrepare.push(started.prepareMs ?? 0);
        crossRestore.push(started.restoreMs);
      }
      await fork!.kill();
    }
    const onVictim: Sandbox[] = [];
    for (const [id, node] of await placedOn(spreadOut.map((s) => s.id))) {
      const s = spreadOut.find((x) => x.id === id)!;
      if (node === victim) onVictim.push(s);
      else await s.kill();
    }
    for (const s of onVictim) await s.snapshot();
    const killedAt = Date.now();
    await cluster.killGateway(victim);
    // Settled: running on another node, or failed (a lost sandbox is a result to report, not a reason to stop).
    const backAt = new Map<string, number>();
    const lost = new Map<string, string>();
    await waitFor(
      async () => {
        const all = await Sandbox.list(config);
        for (const s of onVictim) {
          const info = all.find((x) => x.id === s.id);
          if (backAt.has(s.id) || lost.has(s.id)) continue;
          if (info?.state === 'running' && info.gatewayId !== victim) backAt.set(s.id, Date.now());
          if (info?.state === 'failed') lost.set(s.id, info.failureReason ?? 'failed');
        }
        return backAt.size + lost.size === onVictim.length;
      },
      180_000,
      `the sandboxes of ${victim} did not all come back or fail`,
    );
    const toMoved: number[] = [];
    const movedToResumed: number[] = [];
    const moveRestore: number[] = [];
    const movePrepare: number[] = [];
    const movedTo: string[] = [];
    const moveQemu: number[] = [];
    const lessRestore: number[] = [];
    for (const s of onVictim) {
      const events = await s.events({ types: ['sandbox.moved', 'sandbox.resumed'] });
      const moved = events.find((e) => e.type === 'sandbox.moved');
      if (moved) {
        toMoved.push(Date.parse(moved.at) - killedAt);
        movedTo.push(String((moved.data as { gatewayId?: string }).gatewayId));
      }
      const resumed = events.filter((e) => e.type === 'sandbox.resumed').at(-1);
      if (!moved || !resumed || !backAt.has(s.id)) continue;
      const data = resumed.data as { prepareMs?: number; restoreMs?: number };
      movedToResumed.push(Date.parse(resumed.at) - Date.parse(moved.at));
      const restore = (data.prepareMs ?? 0) + (data.restoreMs ?? 0);
      moveRestore.push(restore);
      movePrepare.push(data.prepareMs ?? 0);
      moveQemu.push(data.restoreMs ?? 0);
      lessRestore.push(backAt.get(s.id)! - killedAt - restore);
    }
    for (const [id, reason] of lost) console.error(`[cluster] failover lost ${id}: ${reason}`);
    const failover: Row[] = [];
    failover.push({
      what: `kill -9 of a gateway → ${backAt.size} of its ${onVictim.length} sandboxes running elsewhere`,
      n: 1,
      p50: backAt.size ? ms(Math.max(...backAt.values()) - killedAt) : '—',
      p95: '',
      other:
        `--dead-after-s ${deadAfterS}, --heartbeat-interval-s ${heartbeatIntervalS}; seen by polling GET /v1/sandboxes; ` +
        `moved to ${movedTo.sort().join(', ')}` +
        (lost.size ? `; ${lost.size} failed instead: ${[...new Set(lost.values())].join(' / ')}` : ''),
    });
    addLatencyTo(
      failover,
      '  per sandbox: kill → running elsewhere',
      [...backAt.values()].map((t) => t - killedAt),
    );
    addLatencyTo(failover, '  per sandbox: kill → sandbox.moved (declared dead, placed)', toMoved, [`dead after ${deadAfterS * 1000} ms of silence`]);
    addLatencyTo(failover, '  per sandbox: sandbox.moved → sandbox.resumed', movedToResumed, ['the restore on the new node, moves in parallel']);
    addLatencyTo(failover, '  per sandbox: of which the restore (prepare + QEMU restore)', moveRestore, ['from the sandbox.resumed event']);
    addLatencyTo(failover, '    prepare: RAM image, device state and disk from the store', movePrepare);
    addLatencyTo(failover, '    QEMU restore and agent sync', moveQemu);
    addLatencyTo(failover, '  per sandbox: kill → running elsewhere, less its own restore', lessRestore, ['target < 10 000 ms']);
    addLatencyTo(failover, 'baseline: fork placed on another node than its snapshot, prepare', crossPrepare, ['one at a time, same run']);
    addLatencyTo(failover, 'baseline: fork placed on another node than its snapshot, QEMU restore', crossRestore);
    addLatencyTo(failover, 'baseline: resume of a paused sandbox on its own node (RAM image cached)', resumes, [
      resumeRestore.length ? `restore ${ms(pct(resumeRestore, 50))} p50 per its event` : '',
      resumeFailures.length ? `${resumeFailures.length} failed: ${[...new Set(resumeFailures)].join(' / ')}` : '',
    ]);
    tables.push({ title: 'Failover: a gateway killed outright', rows: failover });
    await Promise.all(onVictim.map((s) => s.kill().catch(() => {})));

    // 3. Control-plane requests: one running sandbox in the cluster and one in a separate `sandglass up` (SQLite).
    const upPort = port;
    up = spawn(join(root, 'bin/sandglass'), ['up', '--port', String(upPort)], {
      env: { ...process.env, SANDGLASS_HOME: home, SANDGLASS_WARM_POOL: '0' },
      stdio: ['ignore', openSync(join(dir, 'up.log'), 'a'), openSync(join(dir, 'up.log'), 'a')],
      detached: true,
    });
    const upUrl = `http://127.0.0.1:${upPort}`;
    await waitFor(async () => (await fetch(`${upUrl}/v1/health`).catch(() => undefined))?.ok === true, 300_000, 'sandglass up did not come up').catch(
      (err: unknown) => {
        console.error(`--- up.log ---\n${readFileSync(join(dir, 'up.log'), 'utf8').slice(-4000)}`);
        throw err;
      },
    );
    const upConfig = { apiUrl: upUrl, apiKey: readFileSync(homeLayout(home).adminKeyFile, 'utf8').trim() };
    const targets = [
      { label: 'PostgreSQL, through haproxy', config, sbx: await Sandbox.create({ ...config, timeoutS: 900, snapshotIntervalS: 86400 }) },
      {
        label: 'PostgreSQL, one replica directly',
        config: { ...config, apiUrl: `http://127.0.0.1:${cluster.cpPorts[0]}` },
        sbx: undefined as Sandbox | undefined,
      },
      { label: 'SQLite (sandglass up)', config: upConfig, sbx: await Sandbox.create({ ...upConfig, timeoutS: 900, snapshotIntervalS: 86400 }) },
    ];
    targets[1]!.sbx = targets[0]!.sbx;
    const latency: Row[] = [];
    const requestKinds = [
      { name: 'GET /v1/sandboxes?state=running', method: 'GET' as const, path: () => '/v1/sandboxes?state=running' },
      { name: 'GET /v1/sandboxes/{id}', method: 'GET' as const, path: (id: string) => `/v1/sandboxes/${id}` },
      { name: 'POST /v1/sandboxes/{id}/access', method: 'POST' as const, path: (id: string) => `/v1/sandboxes/${id}/access` },
      { name: 'GET /v1/sandboxes/{id}/events', method: 'GET' as const, path: (id: string) => `/v1/sandboxes/${id}/events` },
    ];
    for (const kind of requestKinds) {
      const lat = targets.map(() => [] as number[]);
      const busyMs = targets.map(() => 0);
      const urls = targets.map((t) => `${t.config.apiUrl}${kind.path(t.sbx!.id)}`);
      for (const [i, t] of targets.entries()) await hammer(urls[i]!, t.config.apiKey, kind.method, 20, 8);
      // In rounds, the three side by side: the load of this shared machine drifts, and each round sees it alike.
      const rounds = 5;
      for (let r = 0; r < rounds; r++) {
        for (const [i, t] of targets.entries()) {
          const t0 = performance.now();
          lat[i]!.push(...(await hammer(urls[i]!, t.config.apiKey, kind.method, requests / rounds, 8)));
          busyMs[i]! += performance.now() - t0;
        }
      }
      const p50s = lat.map((xs) => pct(xs, 50));
      for (const [i, t] of targets.entries()) {
        addLatencyTo(latency, `${kind.name}, ${t.label}`, lat[i]!, [`${(lat[i]!.length / (busyMs[i]! / 1000)).toFixed(0)} req/s`]);
      }
      latency.push({
        what: `  ${kind.name}: PostgreSQL direct against SQLite`,
        n: requests,
        p50: `${(p50s[1]! / p50s[2]!).toFixed(2)}×`,
        p95: '',
        other: 'p50',
      });
    }
    tables.push({ title: 'Control-plane request latency, PostgreSQL against SQLite', rows: latency });
    await Promise.all(targets.map((t) => t.sbx?.kill().catch(() => {})));
  } catch (err) {
    for (const name of ['cp1', 'cp2', 'gateway-n1', 'gateway-n2', 'gateway-n3']) console.error(`--- ${name}.log ---\n${cluster.log(name).slice(-3000)}`);
    throw err;
  } finally {
    if (up && up.exitCode === null) {
      const exited = new Promise((r) => up!.once('exit', r));
      up.kill('SIGTERM');
      const hard = setTimeout(() => process.kill(-up!.pid!, 'SIGKILL'), 30_000);
      await exited;
      clearTimeout(hard);
    }
    await cluster.stop();
    if (!process.env.SANDGLASS_KEEP_CLUSTER) rmSync(dir, { recursive: true, force: true });
  }
  const text =
    `Phase 6 (\`BENCH_ONLY=cluster\`) runs a cluster on this one machine from tests/cluster-harness.ts: PostgreSQL, an ` +
    `s3rver process as the chunk store, two control-plane replicas behind haproxy, gateways in process groups of their ` +
    `own (warm pool off), under \`--dead-after-s ${deadAfterS}\` and \`--heartbeat-interval-s ${heartbeatIntervalS}\`. ` +
    `The same ${creates} creates (${concurrency} at a time, each to the answer of POST /v1/sandboxes, all kept running ` +
    `until the batch ends) run against one gateway and then, two more started, three, after one untimed create per ` +
    `gateway (a node's first restore also copies the template's RAM into tmpfs); every gateway shares the same ${cpus().length} cores, so three do not ` +
    `add CPU here, and the ratio shows what placement and the control plane cost, not what more hosts would give. ` +
    `For failover ${3 * perNode} sandboxes are spread over the three gateways; those off the victim are paused and ` +
    `resumed on their own node (which still caches the snapshot's RAM image), then snapshotted and forked, counting the ` +
    `forks placed on another node (a restore from the store, as a move does): the baselines; they are then killed, the ` +
    `victim's each take one ` +
    `snapshot, and the victim's process group (gateway, jailers, QEMUs) is killed with SIGKILL; "running elsewhere" is ` +
    `the first poll of GET /v1/sandboxes that shows it running on another node, the event times are the log's. The ` +
    `target is under 10 s plus one restore each. Control-plane requests (${requests} of each, 8 at a time, kept-alive, in 5 rounds that ` +
    `alternate the targets) go to the cluster through haproxy and to one replica directly, and to \`sandglass up\` started as its own ` +
    `process, one running sandbox in each; the list is filtered to running sandboxes so both list one. ` +
    `Load average ${loadBefore} before and ${loadavg()} after (other work shares this machine); the phase took ` +
    `${((performance.now() - t0Phase) / 1000).toFixed(0)} s.`;
  return { tables, text, accel: accelText };
}

function addLatencyTo(to: Row[], what: string, xs: number[], notes: string[] = []): void {
  const [p50, p95] = xs.length ? [ms(pct(xs, 50)), ms(pct(xs, 95))] : ['—', '—'];
  to.push({ what, n: xs.length, p50, p95, other: notes.filter(Boolean).join('; ') });
}

function printTable(title: string, rs: Row[]): void {
  const table = new Table({ head: ['measure', 'n', 'p50', 'p95', 'note'], style: { head: [], border: [] } });
  for (const r of rs) table.push([r.what, r.n, r.p50, r.p95, r.other]);
  console.log(`${title}\n${table.toString()}`);
}

const mdRows = (rs: Row[]) =>
  `| measure | n | p50 | p95 | note |\n|---|---|---|---|---|\n${rs.map((r) => `| ${r.what} | ${r.n} | ${r.p50} | ${r.p95} | ${r.other} |`).join('\n')}\n`;

/** The cluster phase's section of docs/benchmarks.md, between markers, so a BENCH_ONLY=cluster run can replace it alone. */
function clusterSection(header: string, result: { tables: ClusterTable[]; text: string }): string {
  return (
    `<!-- cluster phase -->\n## Cluster\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}. ${result.text}\n\n` +
    result.tables.map((t) => `### ${t.title}\n\n${mdRows(t.rows)}`).join('\n') +
    `<!-- /cluster phase -->\n`
  );
}

/** The fleet phase's section of docs/benchmarks.md, between markers, so a BENCH_ONLY=fleet run replaces it alone. */
function fleetSection(header: string, result: FleetResult): string {
  const head = '| fleet | n | per s | p50 | p99 | |\n|---|---|---|---|---|---|\n';
  // A row with no successful request has no percentiles.
  const at = (x: number) => (Number.isNaN(x) ? '–' : ms(x));
  const body = result.rows.map((r) => `| ${r.what} | ${r.n} | ${r.perS.toFixed(0)} | ${at(r.p50Ms)} | ${at(r.p99Ms)} | ${r.note} |\n`).join('');
  return (
    `<!-- fleet phase -->\n## Fleet\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, with ` +
    `\`BENCH_ONLY=fleet npm run bench\` (\`BENCH_FLEET_NODES\`, \`_WORKERS\`, \`_STEP_S\`, \`_START_RATE\`, \`_MAX_STEPS\`). ` +
    `${result.text}\n\n${head}${body}<!-- /fleet phase -->\n`
  );
}

/** Replaces one phase's section of docs/benchmarks.md (between its markers), or appends it. */
function writeSection(phase: string, section: string): void {
  const file = join(root, 'docs/benchmarks.md');
  const doc = readFileSync(file, 'utf8');
  const close = `<!-- /${phase} phase -->\n`;
  const at = doc.indexOf(`<!-- ${phase} phase -->`);
  const end = doc.indexOf(close);
  writeFileSync(file, at < 0 || end < 0 ? `${doc}\n${section}` : doc.slice(0, at) + section + doc.slice(end + close.length));
}

/** Phase 9, keys (BYOK): a keyring tenant and a PKCS#11 tenant on one server (its own, so it also runs alone). */
async function keysPhase(): Promise<Row[]> {
  const running = await start({ home, port, warmPoolSize: 0 });
  try {
    const apiKey = readFileSync(running.adminKeyFile, 'utf8').trim();
    const out: Row[] = [];
    for (const r of await keysBench({ apiUrl: running.url, apiKey, home, quick })) addLatencyTo(out, r.what, r.samplesMs, [r.note]);
    return out;
  } finally {
    await running.stop();
  }
}

function keysSection(header: string, rs: Row[]): string {
  return (
    `<!-- keys phase -->\n## Tenant keys (BYOK)\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}. ` +
    'A tenant on the built-in keyring and one on PKCS#11 (SoftHSM2, AES key wrap) on one server with the warm pool off, ' +
    'alternating create and fork operation by operation (`BENCH_ONLY=keys`). Every boot asks the provider past its cache ' +
    'first: for the PKCS#11 tenant an unwrap inside the token; the rest of the restore is the same.\n\n' +
    `${mdRows(rs)}<!-- /keys phase -->\n`
  );
}

/** Phase 7: the E2B SDK against `@sandglass/sdk` on one sandbox (its own server, so it also runs alone). */
async function e2bPhase(): Promise<Row[]> {
  const running = await start({ home, port, warmPoolSize: 0 });
  try {
    const apiKey = readFileSync(running.adminKeyFile, 'utf8').trim();
    const measured = await e2bBench({ apiUrl: running.url, apiKey, gatewayUrl: running.gatewayUrl, quick });
    const out: Row[] = [];
    for (const r of measured) addLatencyTo(out, r.what, r.samplesMs, [r.note]);
    return out;
  } finally {
    await running.stop();
  }
}

function e2bSection(header: string, rs: Row[]): string {
  return (
    `<!-- e2b phase -->\n## E2B compatibility\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}. ` +
    'One sandbox driven alternately through the unmodified `e2b` SDK (2.51.0, via `/e2b` on both servers) and through ' +
    '`@sandglass/sdk`. The E2B SDK always starts a login shell (`/bin/bash -l -c`), which sources the profile scripts; ' +
    'the middle row runs that same command through `@sandglass/sdk`, so the last ratio is the protocol alone.\n\n' +
    `${mdRows(rs)}<!-- /e2b phase -->\n`
  );
}

/**
 * Phase 8, replay (BENCH_ONLY=replay): exec and file writes on a server recording inputs (the default) and then on one
 * with SANDGLASS_RECORDING_CAP_BYTES=0, in one run; and a recorded session replayed in a fork.
 */
async function replayPhase(): Promise<{ rows: Row[]; speed: Awaited<ReturnType<typeof replaySpeed>> }> {
  const measured: Awaited<ReturnType<typeof inputCosts>> = [];
  let speed: Awaited<ReturnType<typeof replaySpeed>>;
  let running = await start({ home, port, warmPoolSize: 0 });
  try {
    const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
    measured.push(...(await inputCosts(config, 'on', quick)));
    speed = await replaySpeed(config, quick);
  } finally {
    await running.stop();
  }
  process.env.SANDGLASS_RECORDING_CAP_BYTES = '0';
  try {
    running = await start({ home, port, warmPoolSize: 0 });
    try {
      const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
      measured.push(...(await inputCosts(config, 'off', quick)));
    } finally {
      await running.stop();
    }
  } finally {
    delete process.env.SANDGLASS_RECORDING_CAP_BYTES;
  }
  const out: Row[] = [];
  for (const m of measured) addLatencyTo(out, m.what, m.samplesMs, [m.note]);
  for (let i = 0; i < 3; i++) {
    const on = measured[i]!;
    const off = measured[i + 3]!;
    const ratio = pct(on.samplesMs, 50) / pct(off.samplesMs, 50);
    out.push({ what: `${off.what.replace(/, recording off$/, '')}: on / off (p50)`, n: on.samplesMs.length, p50: `×${ratio.toFixed(2)}`, p95: '', other: '' });
  }
  out.push({
    what: `replay of a recorded session (fork included)`,
    n: speed.inputs,
    p50: ms(speed.durationMs),
    p95: '',
    other: `${speed.inputsPerSecond} inputs/s; ${speed.different} different`,
  });
  return { rows: out, speed };
}

function replaySection(header: string, rs: Row[]): string {
  return (
    `<!-- replay phase -->\n## Recording and replay\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}. ` +
    'One sandbox on a server that records inputs (the default) and then one on a server started with ' +
    '`SANDGLASS_RECORDING_CAP_BYTES=0`, in one run (`BENCH_ONLY=replay`); written content is random, so nothing ' +
    'deduplicates. The replay row re-runs a recorded session of file writes, commands and stdin in a fork ' +
    '(`Sandbox.replay`), its restore included.\n\n' +
    `${mdRows(rs)}<!-- /replay phase -->\n`
  );
}

/**
 * Phase 11, files (BENCH_ONLY=files): cp and files.write/read of 64 MiB both ways, and 10,000 files as a tar stream both
 * ways, each next to its host baseline measured in the same run, and the 1 GiB rows (BENCH_FILES_BIG_MIB sets
 * another size; 0 or BENCH_QUICK leaves them out).
 */
async function filesPhase(): Promise<Row[]> {
  const running = await start({ home, port, warmPoolSize: 0 });
  try {
    const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
    const out: Row[] = [];
    const bigMib = Number(process.env.BENCH_FILES_BIG_MIB ?? (quick ? 0 : 1024));
    for (const r of await filesBench(config, { home, quick, bigMib })) addLatencyTo(out, r.what, r.samplesMs, [r.note]);
    return out;
  } finally {
    await running.stop();
  }
}

function filesSection(header: string, rs: Row[]): string {
  return (
    `<!-- files phase -->\n## Files\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, load average ${loadavg()} ` +
    'at the end (other work shares this machine). One sandbox (256 MiB, 1 vCPU) on a server recording inputs (the ' +
    'default), in one run (`BENCH_ONLY=files`). "The guest alone" is the same work done by the guest on its own disk ' +
    '(`dd … conv=fsync`, `cat`, `tar -x`): what the emulated guest can do without any channel. CPU per MiB counts ' +
    "this process (gateway, SDK and bench share it) and the VM's QEMU process over the same transfer. cp is the " +
    "CLI's path: a host file streamed up, or down into a host file. Trade-offs: docs/design/bulk-files.md.\n\n" +
    `${mdRows(rs)}<!-- /files phase -->\n`
  );
}

function portsSection(header: string, rs: Row[], n: number): string {
  return (
    `<!-- ports phase -->\n## Guest ports\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, load average ${loadavg()} ` +
    `at the end (other work shares this machine), in one run (\`BENCH_ONLY=ports\`): one sandbox serving a 21-byte file ` +
    'with the handler of `python3 -m http.server` on guest port 8000 (in a server whose listen backlog of 64 holds the ' +
    `32-connection burst; the module's own 5 overflows under it), ${n} requests each. "Inside the guest" is the same GET ` +
    'made by a guest program (`urllib` to `127.0.0.1`; `curl` is not in the base image), timed in the guest. The port ' +
    "route opens one guest connection per request (the client's connection to the gateway is kept alive): a `net.dial` " +
    'round trip to the agent, then the request. The download is compared with `files.read` of the same file, which the ' +
    'agent splices into its channel (`splice_linux.go`), while the port route copies each 64 KiB through the guest ' +
    "socket, the agent and Node's HTTP client.\n\n" +
    `${mdRows(rs)}<!-- /ports phase -->\n`
  );
}

function customTemplatesSection(header: string, rs: Row[]): string {
  return (
    `<!-- custom-templates phase -->\n## Custom templates\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, load average ` +
    `${loadavg()} at the end, in one run (\`BENCH_ONLY=custom-templates\`). A template of 512 MiB whose first step writes ` +
    'random data to its disk (1 GiB; 128 MiB with BENCH_QUICK=1) is built through the SDK (`Template.build`), then built ' +
    'again with only its last step changed: the rebuild forks the cached first step. "Stored" sums the bytes the snapshots ' +
    "of each version's build added to the chunk store. Creates are interleaved with creates from base: a create from a " +
    "custom template forks its version's snapshot, so its baseline is base at 512 MiB, which restores too; base at " +
    '256 MiB is served by the warm pool, and "the same template, warm pool of 1" is the same version under a second ' +
    'name whose template pool keeps one VM (a create finding it empty, its refill still running, forks directly).\n\n' +
    `${mdRows(rs)}<!-- /custom-templates phase -->\n`
  );
}

function clientsSection(header: string, rs: Row[]): string {
  return (
    `<!-- clients phase -->\n## Clients\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, load average ` +
    `${loadavg()} at the end, in one run (\`BENCH_ONLY=clients npm run bench\`) against one \`sandglass up\`. Each group is ` +
    'interleaved round by round with its own baseline, so load from other work falls on both alike; read the ratios. ' +
    'CLI and server rows are one fresh process each, spawn to exit (the CLI from its bundle, ' +
    '`packages/cli/dist/sandglass.js`; the servers loaded from `packages/server/dist/server.js` or from the sources through ' +
    "tsx with its transform cache warm). The Python SDK's calls are timed inside one long-lived Debian `python3`; MCP's " +
    "through the official SDK's stdio client to `sandglass mcp`, next to the TypeScript SDK's own call on the same sandbox.\n\n" +
    `${mdRows(rs)}<!-- /clients phase -->\n`
  );
}

function ttiSection(header: string, rs: Row[], n: number): string {
  return (
    `<!-- tti phase -->\n## Time to interactive\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, load average ${loadavg()} ` +
    `at the end (other work shares this machine), in one run (\`BENCH_TTI_N=${n} BENCH_ONLY=tti npm run bench\`; ` +
    '`BENCH_TTI_BURST` caps the burst). As the public cross-vendor sandbox benchmark counts it: from the create (or ' +
    'fork) request to the first `python3 -V` that succeeds, through the SDK, 256 MiB guests, the warm pool at its ' +
    "default of 2. The burst is as many as the node's memory admission takes at once, at most n; forks are of one " +
    'running sandbox holding 16 MiB of files and having touched 32 MiB more, from its latest snapshot (taken once, ' +
    "untimed, before the forks); a fork's host memory is its QEMU's PSS " +
    'plus its RAM file pages on tmpfs that QEMU has not mapped. Peer figures are left out: none of their published ' +
    'numbers is available offline here to cite.\n\n' +
    `${mdRows(rs)}<!-- /tti phase -->\n`
  );
}

function materializeSection(header: string, rs: Row[]): string {
  return (
    `<!-- materialize phase -->\n## Restore from the store\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}, load average ` +
    `${loadavg()} at the end (other work shares this machine), in one run (\`BENCH_ONLY=materialize npm run bench\`, ` +
    'bench/materialize.ts): the "prepare" of a resume or fork on a node without the RAM image cached, for a 256 MiB ' +
    "guest made from this home's template with 32 MiB of its RAM rewritten, from a local-disk store (files in the page " +
    'cache). The baseline is the earlier path (one chunk at a time, RAM then state then disk), timed alternately with ' +
    'the pipelined one in the same run.\n\n' +
    `${mdRows(rs)}<!-- /materialize phase -->\n`
  );
}

/** BENCH_RECONNECTS=connect: only the phase's Sandbox.connect rows, printed and not written to docs/benchmarks.md. */
const connectOnly = process.env.BENCH_RECONNECTS === 'connect';

/** Host load at the end of the reconnects phase: its rates are the machine's, which other work shares. */
let reconnectsLoad = '';

/** Phase 10, reconnects (BENCH_ONLY=reconnects): the output route next to the WebSocket and Sandbox.connect, on its own server. */
async function reconnectsPhase(): Promise<Row[]> {
  const running = await start({ home, port, warmPoolSize: 0 });
  try {
    const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
    const out: Row[] = [];
    for (const r of await reconnectsBench({ config, quick, connectOnly })) addLatencyTo(out, r.what, r.samplesMs, [`p99 ${ms(pct(r.samplesMs, 99))}`, r.note]);
    reconnectsLoad = loadavg();
    return out;
  } finally {
    await running.stop();
  }
}

function reconnectsSection(header: string, rs: Row[]): string {
  return (
    `<!-- reconnects phase -->\n## Reconnects\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header}. ` +
    '32 concurrent clients re-attach to one sandbox’s commands, through the WebSocket route (each a ' +
    'handshake and an agent attach: the old path) and through `GET …/commands/{cid}/output` on kept-alive connections ' +
    '(served from the gateway’s output hub), in one run (`BENCH_ONLY=reconnects`). Every answer is checked: the exit, ' +
    'and each byte against the writer’s sequence. Each measure runs twice, back to back: with the clients in the ' +
    'server’s thread (as this bench ran before: server, gateway, clients and checks on one event loop) and with them in ' +
    'worker threads (`BENCH_RECONNECT_CLIENTS`, `BENCH_RECONNECT_WORKERS`), each with its own agent, SDK and checker. ' +
    '“/CPU-s” is operations per second of the server thread’s CPU time (schedstat): with the clients in workers, what ' +
    'the server would serve on a core of its own; “waited” is how long it was ready to run but had no CPU. Host load average (1, 5, 15 min) ' +
    `at the end: ${reconnectsLoad}; the control plane's health route, with no work behind it, is the ceiling of this ` +
    'machine for any request. Design and trade-offs: `docs/design/reconnects.md`.\n\n' +
    `${mdRows(rs)}<!-- /reconnects phase -->\n`
  );
}

async function main(): Promise<void> {
  mkdirSync(home, { recursive: true });
  if (only === 'replay') {
    const { rows: replayRows } = await replayPhase();
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Recording and replay', replayRows);
    if (!quick) writeSection('replay', replaySection(header, replayRows));
    return;
  }
  if (only === 'custom-templates') {
    const running = await start({ home, port });
    let tplRows: Row[];
    try {
      tplRows = await customTemplatesBench({ apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() }, { quick });
    } finally {
      await running.stop();
    }
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Custom templates', tplRows);
    if (!quick) writeSection('custom-templates', customTemplatesSection(header, tplRows));
    return;
  }
  if (only === 'ports') {
    const running = await start({ home, port });
    const portRows: Row[] = [];
    const n = Number(process.env.BENCH_PORTS_N ?? (quick ? 20 : 50));
    const bigMib = Number(process.env.BENCH_PORTS_BIG_MIB ?? (quick ? 16 : 64));
    try {
      const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
      for (const r of await portsBench(config, { n, bigMib })) addLatencyTo(portRows, r.what, r.samplesMs, [r.note]);
    } finally {
      await running.stop();
    }
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Guest ports', portRows);
    if (!quick) writeSection('ports', portsSection(header, portRows, n));
    return;
  }
  if (only === 'clients') {
    const running = await start({ home, port });
    const clientRows: Row[] = [];
    try {
      const rs = await clientsBench({ apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() }, { quick });
      for (const r of rs) {
        const base = rs.find((b) => b.what === r.against);
        const ratio = base ? `${(pct(r.samplesMs, 50) / pct(base.samplesMs, 50)).toFixed(2)}× its baseline (p50)` : '';
        addLatencyTo(clientRows, r.what, r.samplesMs, [ratio]);
      }
    } finally {
      await running.stop();
    }
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Clients', clientRows);
    if (!quick) writeSection('clients', clientsSection(header, clientRows));
    return;
  }
  if (only === 'pause-disk') {
    const running = await start({ home, port });
    const pauseRows: Row[] = [];
    try {
      const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
      for (const r of await pauseDiskBench(config, { rounds: quick ? 2 : 5 })) addLatencyTo(pauseRows, r.what, r.samplesMs, [r.note]);
    } finally {
      await running.stop();
    }
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    console.log(hostLine());
    printTable('Disk-only pause against a memory pause', pauseRows);
    return;
  }
  if (only === 'files') {
    const fileRows = await filesPhase();
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Files', fileRows);
    if (!quick) writeSection('files', filesSection(header, fileRows));
    return;
  }
  if (only === 'reconnects') {
    const reconnectRows = await reconnectsPhase();
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Reconnects', reconnectRows);
    if (!quick && !connectOnly) writeSection('reconnects', reconnectsSection(header, reconnectRows));
    return;
  }
  if (only === 'console') {
    const consoleRows: Row[] = [];
    for (const r of await consoleBench({ home, port, quick })) addLatencyTo(consoleRows, r.what, r.samplesMs, [r.note]);
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    console.log(hostLine());
    printTable('Console streams', consoleRows);
    return;
  }
  if (only === 'cadence') {
    const c = await cadenceBench({ home, port, quick });
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    console.log(`${header}\nSnapshot cadence under load\n${cadenceTable(c.rows)}`);
    if (!quick) writeSection('cadence', cadenceSection(header, c));
    return;
  }
  if (only === 'tti') {
    const n = Number(process.env.BENCH_TTI_N ?? (quick ? 10 : 100));
    const burst = process.env.BENCH_TTI_BURST === undefined ? undefined : Number(process.env.BENCH_TTI_BURST);
    const t = await ttiBench({ home, port, n, burst });
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    const ttiRows: Row[] = [];
    for (const r of t.rows) addLatencyTo(ttiRows, r.what, r.samplesMs, [`p99 ${ms(pct(r.samplesMs, 99))}`, r.note]);
    if (t.emptyOutputs > 0) ttiRows.push({ what: 'python3 -V exited 0 with no output', n: t.emptyOutputs, p50: '', p95: '', other: 'counted as ready' });
    printTable('Time to interactive', ttiRows);
    if (!quick) writeSection('tti', ttiSection(header, ttiRows, n));
    return;
  }
  if (only === 'materialize') {
    const rs = await materializeBench(home, { rounds: quick ? 3 : 7 });
    printTable('Restore from the store: prepare', rs);
    if (!quick) writeSection('materialize', materializeSection(hostLine('none (no VM runs)'), rs));
    return;
  }
  if (only === 'density') {
    const d = await densityBench({ home, port, quick });
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Density and exec', d.rows);
    if (!quick) writeSection('density', densitySection(header, d.rows));
    return;
  }
  if (only === 'fleet') {
    const result = await fleetBench(fleetOptions(process.env, port + 20));
    const header = hostLine('none: no VM boots');
    console.log(header);
    console.log(result.text);
    const t = new Table({ head: ['fleet', 'n', 'per s', 'p50', 'p99', ''] });
    for (const r of result.rows) t.push([r.what, r.n, r.perS.toFixed(0), ms(r.p50Ms), ms(r.p99Ms), r.note]);
    console.log(t.toString());
    if (!quick) writeSection('fleet', fleetSection(header, result));
    return;
  }
  if (only === 'cluster') {
    const result = await clusterPhase();
    const header = hostLine(result.accel);
    console.log(header);
    for (const t of result.tables) printTable(t.title, t.rows);
    if (!quick) writeSection('cluster', clusterSection(header, result));
    return;
  }
  if (only === 'keys') {
    const keyRows = await keysPhase();
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('Tenant keys (BYOK)', keyRows);
    if (!quick) writeSection('keys', keysSection(header, keyRows));
    return;
  }
  if (only === 'e2b') {
    const e2bRows = await e2bPhase();
    // The accelerator the server proved (the cached verdict of the same probe).
    accel ??= await nodeAccel(homeLayout(home), await ensureGuestImage({ home }), defaultKernelArgs().join(' '));
    const header = hostLine();
    printTable('E2B compatibility', e2bRows);
    if (!quick) writeSection('e2b', e2bSection(header, e2bRows));
    return;
  }
  if (only === 'sizes') {
    await sizesPhase();
    printRows();
    return;
  }
  if (only === 'jail') {
    await jailPhase();
    printRows();
    return;
  }
  if (only === 'snapshots' || only === 'egress') {
    await (only === 'snapshots' ? snapshotPhase() : egressPhase());
    printRows();
    return;
  }
  // Phase 1, warm pool off: every create restores the template snapshot into a new QEMU.
  const running = await start({ home, port, warmPoolSize: 0 });
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  try {
    // Baseline: booting the guest from scratch to a ready agent.
    const cold = await coldBoots(quick ? 2 : 5);
    addLatency('cold boot → agent ready (baseline)', cold);

    // Create from the template snapshot → first exec result.
    const creates: number[] = [];
    const restores: number[] = [];
    for (let i = 0; i < (quick ? 4 : 12); i++) {
      const t0 = performance.now();
      const s = await Sandbox.create(config);
      const restored = performance.now() - t0;
      await s.commands.run('true');
      creates.push(performance.now() - t0);
      restores.push(restored);
      await s.kill();
    }
    addLatency('create, pool empty (restore) → first exec result', creates, `${(pct(cold, 50) / pct(creates, 50)).toFixed(1)}× faster than cold boot (p50)`);
    addLatency('  of which create (restore + agent sync)', restores, `${(pct(cold, 50) / pct(restores, 50)).toFixed(1)}× faster than cold boot (p50)`);
    coldP50 = pct(cold, 50);

    const sbx = await Sandbox.create({ ...config, timeoutS: 3600 });
    // Exec round trip vs the HTTP round trip alone.
    const health: number[] = [];
    for (let i = 0; i < 50; i++) health.push((await timed(() => fetch(`${running.gatewayUrl}/v1/health`).then((r) => r.text())))[0]);
    addLatency('HTTP round trip to the gateway (baseline)', health);
    const execs: number[] = [];
    for (let i = 0; i < (quick ? 20 : 50); i++) execs.push((await timed(() => sbx.commands.exec(['true'])))[0]);
    addLatency('exec `true` round trip', execs);

    // File throughput vs writing the same bytes to a host file.
    const sizeBytes = 64 * 1024 * 1024;
    const data = randomBytes(sizeBytes);
    const hostFile = join(home, 'bench-host.bin');
    const [hostMs] = await timed(async () => writeFileSync(hostFile, data));
    rmSync(hostFile, { force: true });
    const writes: number[] = [];
    const reads: number[] = [];
    for (let i = 0; i < 3; i++) {
      writes.push((await timed(() => sbx.files.write('/root/bench.bin', Readable.from([data]))))[0]);
      reads.push((await timed(() => sbx.files.read('/root/bench.bin', { format: 'bytes' })))[0]);
    }
    const mbps = (t: number) => `${(sizeBytes / 1024 / 1024 / (t / 1000)).toFixed(0)} MiB/s`;
    rows.push({ what: 'host file write 64 MiB (baseline)', n: 1, p50: ms(hostMs), p95: ms(hostMs), other: mbps(hostMs) });
    addLatency('file write 64 MiB into the guest', writes, mbps(pct(writes, 50)));
    addLatency('file read 64 MiB from the guest', reads, mbps(pct(reads, 50)));
    await sbx.kill();

    // Concurrent creates.
    for (const n of quick ? [8] : [8, 16]) {
      const per: number[] = [];
      const t0 = performance.now();
      const results = await Promise.allSettled(
        Array.from({ length: n }, async () => {
          const [t, s] = await timed(async () => {
            const s = await Sandbox.create({ ...config, timeoutS: 600 });
            await s.commands.run('true');
            return s;
          });
          per.push(t);
          return s;
        }),
      );
      const total = performance.now() - t0;
      const ok = results.filter((r) => r.status === 'fulfilled') as PromiseFulfilledResult<Sandbox>[];
      addLatency(`${n} concurrent creates (each, to first exec)`, per, `${ok.length}/${n} ok, all in ${(total / 1000).toFixed(2)} s`);
      if (n === (quick ? 8 : 16)) {
        // Host memory per idle sandbox: PSS of each QEMU process after things settle.
        await new Promise((r) => setTimeout(r, 3000));
        const pss: number[] = [];
        for (const r of ok) {
          const started = (await r.value.events()).find((e) => e.type === 'sandbox.started');
          const pid = (started?.data as { pid?: number } | undefined)?.pid;
          const m = pid ? /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8')) : null;
          if (m) pss.push(Number(m[1]) * 1024);
        }
        const sorted = [...pss].sort((a, b) => a - b);
        rows.push({
          what: `host memory per idle 256 MiB sandbox (PSS, ${pss.length} running)`,
          n: pss.length,
          p50: mb(sorted[Math.floor(sorted.length / 2)] ?? 0),
          p95: mb(pct(sorted, 95)),
          other: `guest RAM 256 MiB`,
        });
      }
      await Promise.all(ok.map((r) => r.value.kill().catch(() => {})));
    }
  } finally {
    await running.stop();
  }

  // Phase 2, warm pool on: a create takes a restore that is already running and warmed, then re-seeds it.
  const pooled = await start({ home, port, warmPoolSize: 2 });
  try {
    const cfg = { apiUrl: pooled.url, apiKey: readFileSync(pooled.adminKeyFile, 'utf8').trim() };
    const hits: number[] = [];
    for (let i = 0; i < (quick ? 4 : 10); i++) {
      await waitForWarm(pooled.gatewayUrl);
      const [t, s] = await timed(async () => {
        const s = await Sandbox.create(cfg);
        await s.commands.run('true');
        return s;
      });
      const started = (await s.events()).find((e) => e.type === 'sandbox.started');
      if ((started?.data as { pooled?: boolean } | undefined)?.pooled !== true) throw new Error('expected a pooled create');
      hits.push(t);
      await s.kill();
    }
    addLatency('create, warm pool hit → first exec result', hits, `${(coldP50 / pct(hits, 50)).toFixed(1)}× faster than cold boot (p50)`);
  } finally {
    await pooled.stop();
  }

  await snapshotPhase();
  await sizesPhase();
  await egressPhase();
  await jailPhase();
  const cluster = await clusterPhase();
  const e2bRows = await e2bPhase();

  const header = printRows();
  for (const t of cluster.tables) printTable(t.title, t.rows);
  printTable('E2B compatibility', e2bRows);
  const md =
    `# Benchmarks\n\n<!-- Written by \`npm run bench\` (bench/run.ts); rerun it to refresh. -->\n\n` +
    `Measured ${new Date().toISOString().slice(0, 10)} on ${header}. Absolute times are noisy on these shared machines; ` +
    `compare each row with the baseline measured in the same run.\n\n` +
    `Phase 1 runs with the warm pool off, so every create restores the template snapshot into a new QEMU ` +
    `("pool empty"); phase 2 runs with the default pool of 2 warmed restores and measures a create that takes one ` +
    `("warm pool hit", waiting for the pool to refill between creates). Under TCG a new QEMU starts with an empty ` +
    `translation cache, so the first guest process after a restore costs ~0.3 s; the pool pays that before the create. ` +
    "The first exec result is `commands.run('true')` (`/bin/bash -c true`).\n\n" +
    `Phase 3 (time travel) runs four sandboxes side by side (256 MiB and 1 GiB guests, idle and writing 10 MiB of random data a minute) and snapshots each once a minute: "bytes stored" is what each later snapshot added to the store (new chunks, compressed and encrypted, plus the manifest); a writer's random data lands twice, in the page cache (memory) and on disk. The pause rows are the guest's stop→cont time of every snapshot of the idle sandboxes; fork and resume are measured to a first exec next to a create from the template (pool off). Phase 4 measures one kept-alive HTTPS connection directly and through the egress proxy (CONNECT, TLS interception with the sandbox CA, policy, a header substitution), all in one process. Phase 5 alternates creates (pool off) with every QEMU started through the jailer and started directly (\`SANDGLASS_JAIL=off\`), in one server, so both see the same load: the difference is what the jail (its own uid, cgroup joined before exec, five namespaces, a read-only root with the shared base bound in) adds to a create (after one untimed create, which copies the template's RAM image into tmpfs). A restore's jail is built while its RAM file copies, and QEMU released once the file is whole (docs/design/jailer.md).\n\n` +
    mdRows(rows) +
    `\n${clusterSection(hostLine(cluster.accel), cluster)}\n${e2bSection(header, e2bRows)}`;
  if (!quick) writeFileSync(join(root, 'docs/benchmarks.md'), md);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
