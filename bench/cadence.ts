// Cadence soak (BENCH_ONLY=cadence): ten sandboxes at 5 s and one at 60 s with writers, snapshots asked for vs taken.
import { readFileSync } from 'node:fs';
import { Sandbox } from '@sandglass/sdk';
import { start } from '@sandglass/server';

export interface CadenceRow {
  what: string;
  min: string;
  median: string;
  max: string;
  note: string;
}

/** Rewrites 2 MiB of random data every half second: every capture has fresh pages and clusters to chunk. */
const WRITER = `nohup sh -c 'while true; do head -c 2097152 /dev/urandom > /root/noise.tmp && mv /root/noise.tmp /root/noise; sleep 0.5; done' >/dev/null 2>&1 &`;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const pct = (x: number) => `${(100 * x).toFixed(0)} %`;

export async function cadenceBench(opts: { home: string; port: number; quick: boolean }): Promise<{ rows: CadenceRow[]; fast: number; durationS: number }> {
  const fast = opts.quick ? 3 : 10;
  const durationS = opts.quick ? 60 : 300;
  const running = await start({ home: opts.home, port: opts.port, warmPoolSize: 0 });
  const config = { apiUrl: running.url, apiKey: readFileSync(running.adminKeyFile, 'utf8').trim() };
  const sbxs: Array<{ sbx: Sandbox; intervalS: number }> = [];
  try {
    // Best-effort: the point is to ask for more than the node can keep (once it has measured a capture, it refuses 5 s).
    const create = (snapshotIntervalS: number) => Sandbox.create({ ...config, timeoutS: durationS + 900, snapshotIntervalS, snapshotBestEffort: true });
    for (let i = 0; i < fast; i++) sbxs.push({ sbx: await create(5), intervalS: 5 });
    sbxs.push({ sbx: await create(60), intervalS: 60 });
    for (const { sbx } of sbxs) await sbx.commands.run(WRITER);
    const fromMs = Date.now();
    await new Promise((r) => setTimeout(r, durationS * 1000));
    const untilMs = Date.now();
    const measured = await Promise.all(
      sbxs.map(async ({ sbx, intervalS }) => {
        const { snapshots, cadence } = await sbx.timelineWithCadence();
        const taken = snapshots.filter((s) => s.reason === 'rolling' && Date.parse(s.takenAt) >= fromMs && Date.parse(s.takenAt) < untilMs).length;
        const reports = (await sbx.events({ types: ['snapshot'] })).filter((e) => e.type === 'snapshot.behind' || e.type === 'snapshot.caught_up');
        return { intervalS, taken, asked: (untilMs - fromMs) / 1000 / intervalS, cadence, reports: reports.map((e) => e.type) };
      }),
    );
    const fastOnes = measured.filter((m) => m.intervalS === 5);
    const slow = measured.find((m) => m.intervalS === 60)!;
    const ratios = fastOnes.map((m) => m.taken / m.asked);
    const takenAll = measured.reduce((n, m) => n + m.taken, 0);
    const askedAll = measured.reduce((n, m) => n + m.asked, 0);
    const behind = fastOnes.map((m) => m.reports.filter((t) => t === 'snapshot.behind').length);
    const capacity = running.gateway.snapshots.scheduler.capacityPerMinute();
    const rows: CadenceRow[] = [
      {
        what: `taken / asked, each of ${fast} sandboxes at 5 s`,
        min: pct(Math.min(...ratios)),
        median: pct(median(ratios)),
        max: pct(Math.max(...ratios)),
        note: `${fastOnes.map((m) => m.taken).reduce((a, b) => a + b, 0)} taken of ${Math.round(fastOnes.reduce((n, m) => n + m.asked, 0))} asked`,
      },
      {
        what: 'achieved interval (API cadence), 5 s sandboxes',
        min: `${Math.min(...fastOnes.map((m) => m.cadence.achievedIntervalS ?? Number.NaN))} s`,
        median: `${median(fastOnes.map((m) => m.cadence.achievedIntervalS ?? Number.NaN))} s`,
        max: `${Math.max(...fastOnes.map((m) => m.cadence.achievedIntervalS ?? Number.NaN))} s`,
        note: `over the last ${fastOnes[0]?.cadence.windowS} s; ${fastOnes.filter((m) => m.cadence.behind).length} of ${fast} shown behind`,
      },
      {
        what: 'taken / asked, the sandbox at 60 s',
        min: pct(slow.taken / slow.asked),
        median: pct(slow.taken / slow.asked),
        max: pct(slow.taken / slow.asked),
        note: `${slow.taken} taken of ${slow.asked.toFixed(1)} asked; achieved ${slow.cadence.achievedIntervalS ?? '–'} s`,
      },
      {
        what: 'snapshot.behind events per 5 s sandbox',
        min: String(Math.min(...behind)),
        median: String(median(behind)),
        max: String(Math.max(...behind)),
        note: `node capacity ${capacity ?? '–'} captures/min (2 slots); all ${takenAll} of ${Math.round(askedAll)} asked`,
      },
    ];
    return { rows, fast, durationS };
  } finally {
    await Promise.all(sbxs.map(({ sbx }) => sbx.kill().catch(() => {})));
    await running.stop();
  }
}

/** The rows as a Markdown table: what the console prints and docs/benchmarks.md holds. */
export function cadenceTable(rows: CadenceRow[]): string {
  return `| measure | min | median | max | note |\n|---|---|---|---|---|\n${rows.map((x) => `| ${x.what} | ${x.min} | ${x.median} | ${x.max} | ${x.note} |`).join('\n')}\n`;
}

export function cadenceSection(header: string, r: { rows: CadenceRow[]; fast: number; durationS: number }): string {
  const table = cadenceTable(r.rows);
  return (
    `<!-- cadence phase -->\n## Snapshot cadence under load\n\nMeasured ${new Date().toISOString().slice(0, 10)} on ${header} ` +
    `(\`BENCH_ONLY=cadence npm run bench\`). ${r.fast} sandboxes of 256 MiB asking for a rolling snapshot every 5 s and one every ` +
    `60 s, each with a writer rewriting 2 MiB of random data every half second, on one server with the default 2 capture slots, ` +
    `for ${r.durationS} s: the rolling snapshots each took in that time against the ones asked for, the achieved interval the ` +
    'API shows at the end, and the snapshot.behind events each got. Under load the scheduler serves the capture most overdue ' +
    'for its own interval first, so the 60 s sandbox is as far behind its interval as the 5 s ones are behind theirs. ' +
    "What is taken is bounded by the node's capture capacity (last row: its 2 slots over the mean capture time, which the " +
    'writers and the VMs themselves stretch on shared cores), so the ratio depends on the host’s load; the shares between ' +
    'sandboxes do not.\n\n' +
    `${table}<!-- /cadence phase -->\n`
  );
}
