// Density (BENCH_ONLY=density): host memory per idle sandbox, how many fit before placement refuses, exec vs ping.
import { readFileSync, statSync } from 'node:fs';
import { Sandbox } from '@sandglass/sdk';
import { start, type Running } from '@sandglass/server';
import { agentTrue, cowProbe, privateBytes, smapsOf, type CowProbe } from './density-cow.js';

export interface DensityRow {
  what: string;
  n: number;
  p50: string;
  p95: string;
  other: string;
}

const MIB = 1024 * 1024;
const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(0.95 * xs.length) - 1)] ?? Number.NaN;
const ms = (x: number) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;

/** Where one QEMU's proportional set size goes, in bytes, by kind of mapping (from /proc/pid/smaps). */
export interface PssBreakdown {
  guestRam: number;
  tcgCode: number;
  heapAndAnon: number;
  sharedCode: number;
  total: number;
}

export function pssBreakdown(pid: number): PssBreakdown {
  const b: PssBreakdown = { guestRam: 0, tcgCode: 0, heapAndAnon: 0, sharedCode: 0, total: 0 };
  let kind: keyof PssBreakdown = 'heapAndAnon';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const h = /^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (h) {
      const [, perms, path] = h as unknown as [string, string, string];
      // The guest RAM file; TCG's code buffer (the one anonymous executable mapping); QEMU and its libraries.
      if (path.endsWith('.mem')) kind = 'guestRam';
      else if (path === '' && perms.includes('x')) kind = 'tcgCode';
      else if (path.startsWith('/')) kind = 'sharedCode';
      else kind = 'heapAndAnon';
      continue;
    }
    const m = /^Pss:\s+(\d+) kB/.exec(line);
    if (m) {
      b[kind] += Number(m[1]) * 1024;
      b.total += Number(m[1]) * 1024;
    }
  }
  return b;
}

interface Measured {
  label: string;
  pss: PssBreakdown[];
  /** Per VM: its PSS plus the pages of its RAM file on tmpfs that QEMU has not mapped (host memory all the same). */
  held: number[];
  /** Per VM: its QEMU's resident set (shared pages counted whole). */
  rss: number[];
  /** Per VM: pages its QEMU alone maps (what its PSS tends to as the number of QEMUs grows). */
  privateBytes: number[];
  /** Tmpfs the node's caches held meanwhile (the template's RAM image, snapshot images), shared by every VM. */
  cacheBytes: number;
  pingMs: number[];
  runMs: number[];
  agentTrueMs: number[];
}

async function waitForSnapshot(s: Sandbox, timeoutMs: number): Promise<void> {
  const t0 = performance.now();
  while (performance.now() - t0 < timeoutMs) {
    if ((await s.timeline()).length > 0) return;
    await new Promise((r) => setTimeout(r, 2000));
  }
  throw new Error(`sandbox ${s.id} took no rolling snapshot within ${timeoutMs} ms`);
}

/** `n` idle sandboxes with rolling snapshots on (each has taken one), then memory per VM and exec vs ping on one. */
async function measure(label: string, running: Running, n: number, samples: number): Promise<Measured> {
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  const sbxs: Sandbox[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const s = await Sandbox.create({ ...config, timeoutS: 1800, snapshotIntervalS: 30 });
      sbxs.push(s);
      await s.commands.run('true');
    }
    for (const s of sbxs) await waitForSnapshot(s, 180_000);
    await new Promise((r) => setTimeout(r, 3000));
    const out: Measured = {
      label,
      pss: [],
      held: [],
      rss: [],
      privateBytes: [],
      cacheBytes: running.gateway.ram.cacheBytes(),
      pingMs: [],
      runMs: [],
      agentTrueMs: [],
    };
    for (const s of sbxs) {
      const vm = running.gateway.sandboxes.get(s.id)?.vm;
      if (!vm) throw new Error(`sandbox ${s.id} has no VM`);
      const b = pssBreakdown(vm.pid);
      out.pss.push(b);
      out.held.push(vmHeldBytes(vm.pid, vm.memPath, b));
      const rollup = readFileSync(`/proc/${vm.pid}/smaps_rollup`, 'utf8');
      out.rss.push(Number(/^Rss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? 0) * 1024);
      out.privateBytes.push(privateBytes(rollup));
    }
    // Exec vs the agent's bare ping, interleaved on one sandbox so both see the same host load; the others go and
    // its own rolling snapshots wait, so neither idle guests nor captures compete with it for the two cores.
    const s = sbxs[0]!;
    await Promise.all(sbxs.slice(1).map((o) => o.kill().catch(() => {})));
    await s.setSnapshotInterval(3600);
    const agent = running.gateway.get(s.id).requireRunning();
    for (let i = 0; i < 3; i++) await s.commands.run('true');
    for (let i = 0; i < samples; i++) {
      let t = performance.now();
      await agent.ping();
      out.pingMs.push(performance.now() - t);
      t = performance.now();
      await s.commands.run('true');
      out.runMs.push(performance.now() - t);
      out.agentTrueMs.push((await agentTrue(agent)).ms);
    }
    return out;
  } finally {
    await Promise.all(sbxs.map((s) => s.kill().catch(() => {})));
  }
}

/**
 * Host memory one VM holds: its QEMU's PSS plus the pages of its RAM file on tmpfs that QEMU has not mapped (mapped
 * ones are in the PSS already, one mapper: their whole size).
 */
export function vmHeldBytes(pid: number, memPath: string, pss = pssBreakdown(pid)): number {
  const mappedRam = Number(/^Rss:\s+(\d+) kB/m.exec(smapsOf(pid, memPath))?.[1] ?? 0) * 1024;
  return pss.total + Math.max(0, statSync(memPath).blocks * 512 - mappedRam);
}

/** Creates sandboxes until the gateway refuses one; returns how many it admitted and the refusal's code. */
async function fillUntilRefused(running: Running, limit: number): Promise<{ admitted: number; code: string }> {
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  const sbxs: Sandbox[] = [];
  try {
    for (let i = 0; i <= limit; i++) {
      try {
        sbxs.push(await Sandbox.create({ ...config, timeoutS: 600 }));
      } catch (err) {
        return { admitted: sbxs.length, code: String((err as { code?: string }).code ?? (err as Error).message) };
      }
    }
    return { admitted: sbxs.length, code: 'none' };
  } finally {
    await Promise.all(sbxs.map((s) => s.kill().catch(() => {})));
  }
}

async function withServer<T>(home: string, port: number, env: Record<string, string | undefined>, fn: (r: Running) => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  for (const [k, v] of Object.entries(env)) v === undefined ? delete process.env[k] : (process.env[k] = v);
  try {
    const running = await start({ home, port, warmPoolSize: 0 });
    try {
      return await fn(running);
    } finally {
      await running.stop();
    }
  } finally {
    for (const [k, v] of Object.entries(saved)) v === undefined ? delete process.env[k] : (process.env[k] = v);
  }
}

export interface DensityResult {
  rows: DensityRow[];
  probe: CowProbe;
  capacityMib: number;
  admitted: number;
}

/**
 * Baseline first: QEMU with transparent huge pages as before (SANDGLASS_QEMU_THP=on), then as now, each with `n`
 * idle sandboxes in one server (BENCH_DENSITY_N), and in the second server the copy-on-write probe (bench/density-cow.ts)
 * with as many VMs. Then placement: the node's guest-memory budget, and a server with a small budget
 * (SANDGLASS_GUEST_MEMORY_BUDGET_MIB) filled until it refuses, to show the refusal is where the budget says.
 */
export async function densityBench(opts: { home: string; port: number; quick: boolean }): Promise<DensityResult> {
  const n = Number(process.env.BENCH_DENSITY_N ?? (opts.quick ? 3 : 8));
  const samples = opts.quick ? 10 : 30;
  const before = await withServer(opts.home, opts.port, { SANDGLASS_QEMU_THP: 'on' }, (r) => measure('before (SANDGLASS_QEMU_THP=on)', r, n, samples));
  let capacityMib = 0;
  let probe: CowProbe | undefined;
  const after = await withServer(opts.home, opts.port, { SANDGLASS_QEMU_THP: undefined }, async (r) => {
    capacityMib = r.gateway.memory().capacityMib;
    const m = await measure('now', r, n, samples);
    probe = await cowProbe(r, opts.home, n);
    return m;
  });
  if (!probe) throw new Error('the copy-on-write probe did not run');
  const smallBudget = 4 * 256;
  const filled = await withServer(opts.home, opts.port, { SANDGLASS_GUEST_MEMORY_BUDGET_MIB: String(smallBudget) }, (r) => fillUntilRefused(r, 8));

  const rows: DensityRow[] = [];
  for (const m of [before, after]) {
    const totals = m.pss.map((b) => b.total);
    const part = (k: keyof PssBreakdown) => mib(median(m.pss.map((b) => b[k])));
    rows.push({
      what: `PSS per idle 256 MiB sandbox, ${m.label}`,
      n: totals.length,
      p50: mib(median(totals)),
      p95: mib(p95(totals)),
      other: `guest RAM ${part('guestRam')}, TCG code ${part('tcgCode')}, heap+anon ${part('heapAndAnon')}, QEMU+libs ${part('sharedCode')}`,
    });
    rows.push({
      what: `  PSS + unmapped RAM-file pages on tmpfs, ${m.label}`,
      n: m.held.length,
      p50: mib(median(m.held)),
      p95: mib(p95(m.held)),
      other: `what the host really holds per sandbox; RSS ${mib(median(m.rss))}, QEMU's private pages ${mib(median(m.privateBytes))}`,
    });
    rows.push({
      what: `  the same + the node's tmpfs caches / n, ${m.label}`,
      n: m.held.length,
      p50: mib(median(m.held) + m.cacheBytes / m.held.length),
      p95: mib(p95(m.held) + m.cacheBytes / m.held.length),
      other: `caches ${mib(m.cacheBytes)} (the template's RAM image, snapshot images)`,
    });
  }
  rows.push(...probeRows(probe));
  for (const m of [before, after]) {
    const ratio = median(m.runMs) / median(m.pingMs);
    rows.push({ what: `agent ping round trip (baseline), ${m.label}`, n: m.pingMs.length, p50: ms(median(m.pingMs)), p95: ms(p95(m.pingMs)), other: '' });
    rows.push({
      what: `commands.run('true') round trip, ${m.label}`,
      n: m.runMs.length,
      p50: ms(median(m.runMs)),
      p95: ms(p95(m.runMs)),
      other: `${ratio.toFixed(1)}× ping (p50); /bin/true via the agent alone ${ms(median(m.agentTrueMs))}`,
    });
  }
  const fits = Math.floor(capacityMib / 256);
  rows.push({
    what: 'idle 256 MiB sandboxes this host admits',
    n: 1,
    p50: String(fits),
    p95: '',
    other: `budget ${capacityMib} MiB of guest memory (75 % of host memory less the image cache)`,
  });
  rows.push({
    what: `creates until placement refuses, budget ${smallBudget} MiB`,
    n: 1,
    p50: String(filled.admitted),
    p95: '',
    other: `then ${filled.code}; expected ${smallBudget / 256}`,
  });
  return { rows, probe, capacityMib, admitted: filled.admitted };
}

/** The probe's rows: the same measures for VMs sharing the template image, and its capture checked after a restore. */
function probeRows(p: CowProbe): DensityRow[] {
  const pss = p.vms.map((v) => v.pss);
  // Pages of the image no probe VM maps are in no PSS; the VMs share them. The largest one VM maps stands for the
  // union of mapped pages (a lower bound), so this overstates each VM's share a little.
  const unmapped = Math.max(0, p.imageBytes - Math.max(...p.vms.map((v) => v.mappedImageBytes)));
  const held = pss.map((x) => x + unmapped / pss.length);
  const c = p.capture;
  return [
    {
      what: 'PSS per idle 256 MiB VM, template RAM image mapped privately (probe, QEMU without the jail)',
      n: pss.length,
      p50: mib(median(pss)),
      p95: mib(p95(pss)),
      other: `RSS ${mib(median(p.vms.map((v) => v.rss)))}, QEMU's private pages ${mib(median(p.vms.map((v) => v.privateBytes)))}; its own (copy-on-write) pages ${mib(median(p.vms.map((v) => v.cowBytes)))}, template pages mapped ${mib(median(p.vms.map((v) => v.mappedImageBytes)))}`,
    },
    {
      what: '  PSS + the unmapped rest of the shared template image / n, probe',
      n: held.length,
      p50: mib(median(held)),
      p95: mib(p95(held)),
      other: `image ${mib(p.imageBytes)} on tmpfs, shared by all; no RAM file per VM`,
    },
    {
      what: 'capture of a probe VM: guest stopped for device state + its own pages',
      n: 1,
      p50: ms(c.pausedMs),
      p95: '',
      other: `device state ${(c.stateBytes / 1024).toFixed(0)} KiB, own pages ${mib(c.cowBytes)}; restored into an ordinary VM: 8 MiB tmpfs file ${c.intact ? 'intact' : 'DIFFERS'}, /bin/true exit ${c.trueExit}`,
    },
  ];
}

/** The density phase's section of docs/benchmarks.md, between markers, so a BENCH_ONLY=density run replaces it alone. */
export function densitySection(header: string, rows: DensityRow[]): string {
  const table = `| measure | n | p50 | p95 | note |\n|---|---|---|---|---|\n${rows.map((r) => `| ${r.what} | ${r.n} | ${r.p50} | ${r.p95} | ${r.other} |`).join('\n')}\n`;
  return (
    `<!-- density phase -->\n## Density and exec\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header} (\`BENCH_ONLY=density\`). ` +
    'Idle 256 MiB sandboxes with rolling snapshots on (each has taken one), first with QEMU given transparent huge ' +
    'pages as before (`SANDGLASS_QEMU_THP=on`), then as now, in one run. PSS is split by mapping (docs/design/density.md); the ' +
    "second row of each adds the pages of the VM's RAM file on tmpfs that QEMU has not mapped, the third the node's " +
    'tmpfs caches divided among the sandboxes. The probe rows restore as many VMs in the second server with the ' +
    "template's RAM image mapped privately (copy-on-write, QEMU outside the jail: bench/density-cow.ts), then capture " +
    "one as docs/design/density.md proposes and check the restored guest. Ping is the agent's " +
    'own round trip on the same sandbox, interleaved with the exec. The last row fills a server started with ' +
    '`SANDGLASS_GUEST_MEMORY_BUDGET_MIB` until it refuses.\n\n' +
    `${table}<!-- /density phase -->\n`
  );
}
