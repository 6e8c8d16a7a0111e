// Custom templates (BENCH_ONLY=custom-templates): a 512 MiB template with a large disk delta built cold and again with
// only its last step changed, the bytes each version stored, and create → first exec from it against creates from base
// and from the same version with a warm pool of its own.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, Template, type ConnectionConfig } from '@sandglass/sdk';

export interface BenchRow {
  what: string;
  n: number;
  p50: string;
  p95: string;
  other: string;
}

const MIB = 1024 * 1024;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const ms = (x: number) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;
const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;

/** What a version's build put in the store: the added bytes of every snapshot its build sandbox took. */
async function storedBytes(config: ConnectionConfig, snapshotId: string): Promise<number> {
  const auth = { authorization: `Bearer ${config.apiKey}` };
  const snap = (await (await fetch(`${config.apiUrl}/v1/snapshots/${snapshotId}`, { headers: auth })).json()) as { sandboxId: string };
  const list = (await (await fetch(`${config.apiUrl}/v1/sandboxes/${snap.sandboxId}/snapshots`, { headers: auth })).json()) as {
    snapshots: Array<{ sizeAddedBytes: number }>;
  };
  return list.snapshots.reduce((sum, s) => sum + s.sizeAddedBytes, 0);
}

export async function customTemplatesBench(config: ConnectionConfig, opts: { quick: boolean }): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const deltaMib = opts.quick ? 128 : 1024;
  const n = opts.quick ? 3 : 8;
  const name = `bench-${Date.now().toString(36)}`;
  const context = mkdtempSync(join(tmpdir(), 'sg-bench-tpl-'));
  const spec = (last: string) =>
    [
      'from: base',
      'memoryMib: 512',
      `diskMib: ${deltaMib + 2048}`,
      'steps:',
      // The run's name in the first step: no earlier run's cached steps are reused, so the first build is cold.
      `  - run: head -c ${deltaMib}M /dev/urandom > /opt/blob && echo ${name} > /opt/bench-run && sync`,
      `  - run: echo ${last} > /etc/bench-version`,
      '',
    ].join('\n');
  try {
    const file = join(context, 'sandglass.template.yaml');
    writeFileSync(file, spec('one'));
    const cold = await Template.build({ ...config, name, file, context });
    writeFileSync(file, spec('two'));
    const warm = await Template.build({ ...config, name, file, context });
    const reused = warm.steps.filter((s) => s.cached).length;
    rows.push({ what: `build, cold (512 MiB, ${deltaMib} MiB of disk written)`, n: 1, p50: ms(cold.durationMs), p95: '', other: `${cold.steps.length} steps` });
    rows.push({
      what: 'build again, last step changed',
      n: 1,
      p50: ms(warm.durationMs),
      p95: '',
      other: `${reused} of ${warm.steps.length} steps from the cache; ${(cold.durationMs / warm.durationMs).toFixed(1)}× faster`,
    });
    rows.push({
      what: 'stored by version 1',
      n: 1,
      p50: mib(await storedBytes(config, cold.version.snapshotId)),
      p95: '',
      other: 'every snapshot of its build',
    });
    rows.push({
      what: 'stored by version 2',
      n: 1,
      p50: mib(await storedBytes(config, warm.version.snapshotId)),
      p95: '',
      other: 'its build forked the cached step',
    });

    /** Where each create's time went: the node's restore (prepare: RAM, device state, disk; start: QEMU to agent), the rest of the API call, the first exec. */
    const phases = new Map<string, { prepare: number[]; start: number[]; api: number[]; exec: number[]; pooled: number }>();
    const firstExec = async (create: () => Promise<Sandbox>, label?: string): Promise<number> => {
      const t0 = performance.now();
      const s = await create();
      const t1 = performance.now();
      await s.commands.run('true');
      const t = performance.now() - t0;
      if (label !== undefined) {
        const [started] = await s.events({ types: ['sandbox.started'] });
        const d = started?.data as { prepareMs?: number; restoreMs?: number; pooled?: boolean } | undefined;
        const p = phases.get(label) ?? { prepare: [], start: [], api: [], exec: [], pooled: 0 };
        if (d?.pooled === true) p.pooled++;
        p.prepare.push(d?.prepareMs ?? 0);
        p.start.push(d?.restoreMs ?? 0);
        p.api.push(t1 - t0 - (d?.prepareMs ?? 0) - (d?.restoreMs ?? 0));
        p.exec.push(t - (t1 - t0));
        phases.set(label, p);
      }
      await s.kill();
      return t;
    };
    // Version 1's snapshot (the same size and disk delta) under a second name whose pool holds one VM: the pool's
    // figure against the plain fork's, same run. Not version 2's: a pool serves every fork of its snapshot for the
    // tenant, so creates from `name` would take its VMs.
    const pooledName = `${name}-pooled`;
    await Template.fromSnapshot(pooledName, cold.version.snapshotId, config);
    await Template.setWarmPool(pooledName, 1, config);
    const shapes: Array<{ label: string; create: () => Promise<Sandbox> }> = [
      { label: `custom template (512 MiB, ${deltaMib} MiB disk delta)`, create: () => Sandbox.create({ ...config, template: name }) },
      { label: 'the same template, warm pool of 1', create: () => Sandbox.create({ ...config, template: pooledName }) },
      { label: 'base, 256 MiB (warm pool)', create: () => Sandbox.create({ ...config }) },
      { label: 'base, 512 MiB (restore, no pool)', create: () => Sandbox.create({ ...config, memoryMib: 512 }) },
    ];
    // The first create of each restores an image no create has cached yet: timed apart.
    for (const shape of shapes)
      rows.push({ what: `first create → first exec: ${shape.label}`, n: 1, p50: ms(await firstExec(shape.create)), p95: '', other: '' });
    const times = new Map<string, number[]>();
    // Interleaved, so every kind sees the same host load.
    for (let i = 0; i < n; i++)
      for (const shape of shapes) times.set(shape.label, [...(times.get(shape.label) ?? []), await firstExec(shape.create, shape.label)]);
    const base = pct(times.get(shapes[3]!.label)!, 50);
    for (const shape of shapes) {
      const xs = times.get(shape.label)!;
      rows.push({
        what: `create → first exec: ${shape.label}`,
        n: xs.length,
        p50: ms(pct(xs, 50)),
        p95: ms(pct(xs, 95)),
        other: `${(pct(xs, 50) / base).toFixed(2)}× base 512 MiB`,
      });
      const p = phases.get(shape.label)!;
      rows.push({
        what: `  of which (p50): ${shape.label}`,
        n: xs.length,
        p50: '',
        p95: '',
        other:
          `node prepare ${ms(pct(p.prepare, 50))}, start ${ms(pct(p.start, 50))}, rest of the create ${ms(pct(p.api, 50))}, first exec ${ms(pct(p.exec, 50))}` +
          (p.pooled > 0 ? `; ${p.pooled} of ${xs.length} from the pool` : ''),
      });
    }
    await Template.delete(pooledName, config);
    await Template.delete(name, config);
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
  return rows;
}
