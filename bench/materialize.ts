// Restore from the store (BENCH_ONLY=materialize): the "prepare" of a resume or fork on a node without the RAM image cached.
import { open, mkdtemp, readFile, rm, readdir } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkStore, LocalDiskBackend, type TenantStore } from '@sandglass/chunkstore';
import { LocalKeyring } from '@sandglass/kms';
import { systemClock } from '@sandglass/core';
import {
  baseChunkIds,
  chunkDiskLayers,
  chunkMemory,
  chunkState,
  manifestRefs,
  materializeDisk,
  materializeMemory,
  materializeState,
  writeQcow2Overlay,
  MEMORY_CHUNK_BYTES,
  ZERO,
  type ManifestBody,
} from '@sandglass/snapshots';

const MIB = 1024 * 1024;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

export interface MaterializeRow {
  what: string;
  n: number;
  p50: string;
  p95: string;
  other: string;
}

/** The newest 256 MiB template this home has built: its RAM, device state and disk stand in for a fresh sandbox's. */
async function templateDir(home: string): Promise<string> {
  const artifacts = join(home, 'artifacts');
  const found: Array<{ dir: string; createdAt: string }> = [];
  for (const name of await readdir(artifacts)) {
    const meta = join(artifacts, name, 'template.json');
    if (!name.startsWith('template-') || !existsSync(meta)) continue;
    const t = JSON.parse(readFileSync(meta, 'utf8')) as { config: { memoryMib: number }; createdAt: string };
    if (t.config.memoryMib === 256) found.push({ dir: join(artifacts, name), createdAt: t.createdAt });
  }
  found.sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  if (!found[0]) throw new Error(`no 256 MiB template under ${artifacts}: run the integration suite or a server once to build one`);
  return found[0].dir;
}

/**
 * The pre-pipelining path, kept here as the baseline: one chunk at a time, fetched, verified and written in turn;
 * RAM, then state, then disk.
 */
async function sequentialPrepare(tenant: TenantStore, m: ManifestBody, out: string, backing: string): Promise<void> {
  const fh = await open(join(out, 'mem.img'), 'w', 0o600);
  await fh.truncate(m.memory.sizeBytes);
  for (let i = 0; i < m.memory.chunks.length; i++) {
    const id = m.memory.chunks[i]!;
    if (id === ZERO) continue;
    const data = await tenant.get(id);
    await fh.write(data, 0, data.length, i * m.memory.chunkBytes);
  }
  await fh.close();
  const parts: Buffer[] = [];
  for (const id of m.state.chunks) parts.push(await tenant.get(id));
  await (await import('node:fs/promises')).writeFile(join(out, 'state.bin'), Buffer.concat(parts));
  const sorted = [...m.disk.clusters].sort((a, b) => a[0] - b[0]);
  async function* clusters() {
    for (const [guestOffset, id] of sorted) yield { guestOffset, data: id === ZERO ? ('zero' as const) : await tenant.get(id) };
  }
  await writeQcow2Overlay(join(out, 'disk.qcow2'), { sizeBytes: m.disk.sizeBytes, backingFile: backing, backingFormat: 'qcow2', clusters: clusters() });
}

/**
 * A snapshot of a sandbox made from the home's 256 MiB template, `dirtyMib` of its RAM then overwritten with random
 * bytes (incompressible: the worst case for the store) and chunked into a fresh local-disk store under the tenant's
 * keys; then the restore's prepare, baseline against the pipelined path, `rounds` times each, alternating.
 */
export async function materializeBench(home: string, opts: { rounds?: number; dirtyMib?: number } = {}): Promise<MaterializeRow[]> {
  const rounds = opts.rounds ?? 5;
  const dirtyMib = opts.dirtyMib ?? 32;
  const tpl = await templateDir(home);
  const dir = await mkdtemp(join(tmpdir(), 'sg-bench-materialize-'));
  // The RAM images go to tmpfs, as the gateway's do.
  const shm = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'sg-bench-materialize-'));
  try {
    const store = new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys: new LocalKeyring({ dir: join(dir, 'keys') }), clock: systemClock });
    const tenant = await store.tenant('bench-tenant');
    const memBytes = 256 * MIB;
    // The template's RAM image as the node caches it in tmpfs, and the sandbox's RAM: the same, with pages rewritten.
    const baseImage = join(shm, 'template.img');
    await (await import('node:fs/promises')).copyFile(join(tpl, 'mem.raw'), baseImage);
    const ram = join(dir, 'sandbox-mem.raw');
    await (await import('node:fs/promises')).copyFile(join(tpl, 'mem.raw'), ram);
    const fh = await open(ram, 'r+');
    const chunks = memBytes / MEMORY_CHUNK_BYTES;
    for (let k = 0; k < (dirtyMib * MIB) / MEMORY_CHUNK_BYTES; k++) {
      const at = ((k * 7919) % chunks) * MEMORY_CHUNK_BYTES;
      await fh.write(randomBytes(MEMORY_CHUNK_BYTES), 0, MEMORY_CHUNK_BYTES, at);
    }
    await fh.close();
    const lease = tenant.lease();
    const memory = await chunkMemory(tenant, lease, ram, memBytes, undefined);
    const state = await chunkState(tenant, lease, await readFile(join(tpl, 'state.bin')));
    const disk = await chunkDiskLayers(tenant, lease, [join(tpl, 'disk.qcow2')], new Map());
    const m = {
      version: 1,
      snapshotId: 'snap_bench',
      sandboxId: 'sbx_bench',
      tenantId: 'bench-tenant',
      parentId: null,
      takenAt: new Date().toISOString(),
      reason: 'manual',
      name: null,
      pinned: false,
      vm: { memoryMib: 256, vcpus: 1, template: 'base', templateKey: 'bench' },
      memory: { chunkBytes: MEMORY_CHUNK_BYTES, sizeBytes: memBytes, chunks: memory.chunks },
      disk: { base: 'bench', sizeBytes: disk.sizeBytes, clusterBytes: disk.clusterBytes, clusters: [...disk.clusters.entries()] },
      state: { sizeBytes: 0, chunks: state.chunks },
      agent: { commands: [] },
      stats: { pausedMs: 0, newChunks: 0, storedBytes: 0, memoryChunks: 0, diskClusters: disk.clusters.size },
    } satisfies ManifestBody;
    await tenant.putManifest(m.snapshotId, { refs: manifestRefs(m), body: m });
    lease.release();
    const backing = join(tpl, 'disk.qcow2');

    const times = { seq: [] as number[], noBase: [] as number[], withBase: [] as number[], baseIds: [] as number[] };
    const phases = { memory: [] as number[], state: [] as number[], disk: [] as number[] };
    let stats = { fromStore: 0, fromBase: 0, zero: 0 };
    for (let r = 0; r < rounds; r++) {
      // A fresh store handle per round, as a node that has never read this tenant would have.
      const t = await new ChunkStore({ backend: new LocalDiskBackend(join(dir, 'store')), keys: new LocalKeyring({ dir: join(dir, 'keys') }) }).tenant(
        'bench-tenant',
      );
      const out = await mkdtemp(join(shm, 'r-'));
      let t0 = performance.now();
      await sequentialPrepare(t, m, out, backing);
      times.seq.push(performance.now() - t0);
      await rm(out, { recursive: true, force: true });

      const out2 = await mkdtemp(join(shm, 'r-'));
      t0 = performance.now();
      await Promise.all([
        materializeMemory(t, m, join(out2, 'mem.img')),
        materializeState(t, m, join(out2, 'state.bin')),
        materializeDisk(t, m, join(out2, 'disk.qcow2'), backing),
      ]);
      times.noBase.push(performance.now() - t0);
      await rm(out2, { recursive: true, force: true });

      t0 = performance.now();
      const ids = await baseChunkIds(t, baseImage, memBytes, MEMORY_CHUNK_BYTES);
      times.baseIds.push(performance.now() - t0);
      const out3 = await mkdtemp(join(shm, 'r-'));
      t0 = performance.now();
      const timed = async <T>(into: number[], p: Promise<T>): Promise<T> => {
        const s = performance.now();
        const v = await p;
        into.push(performance.now() - s);
        return v;
      };
      [stats] = await Promise.all([
        timed(phases.memory, materializeMemory(t, m, join(out3, 'mem.img'), { base: { path: baseImage, chunks: ids } })),
        timed(phases.state, materializeState(t, m, join(out3, 'state.bin'))),
        timed(phases.disk, materializeDisk(t, m, join(out3, 'disk.qcow2'), backing)),
      ]);
      times.withBase.push(performance.now() - t0);
      await rm(out3, { recursive: true, force: true });
    }
    const f = (x: number) => `${x.toFixed(0)} ms`;
    const seq = median(times.seq);
    const nonZero = memory.chunks.filter((c) => c !== ZERO).length;
    return [
      {
        what: 'prepare, baseline: chunk by chunk, RAM then state then disk',
        n: rounds,
        p50: f(seq),
        p95: '',
        other: `${nonZero} RAM chunks (${((nonZero * MEMORY_CHUNK_BYTES) / MIB).toFixed(0)} MiB), ${dirtyMib} MiB rewritten, all from the store`,
      },
      {
        what: 'prepare, pipelined, every chunk from the store',
        n: rounds,
        p50: f(median(times.noBase)),
        p95: '',
        other: `${(seq / median(times.noBase)).toFixed(1)}× the baseline`,
      },
      {
        what: "prepare, pipelined, the template's chunks from the node's image",
        n: rounds,
        p50: f(median(times.withBase)),
        p95: '',
        other: `${(seq / median(times.withBase)).toFixed(1)}× the baseline; ${stats.fromStore} chunks from the store, ${stats.fromBase} from the image, ${stats.zero} holes`,
      },
      {
        what: '  of which RAM / state / disk (concurrent)',
        n: rounds,
        p50: `${f(median(phases.memory))} / ${f(median(phases.state))} / ${f(median(phases.disk))}`,
        p95: '',
        other: '',
      },
      {
        what: "  once per tenant and template on a node: the template image's ids",
        n: rounds,
        p50: f(median(times.baseIds)),
        p95: '',
        other: 'kept in memory by the gateway afterwards',
      },
    ];
  } finally {
    await rm(dir, { recursive: true, force: true });
    await rm(shm, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const home = process.env.SANDGLASS_BENCH_HOME ?? join(process.cwd(), '.sandglass-test');
  const rows = await materializeBench(home, { rounds: Number(process.env.BENCH_ROUNDS ?? 5) });
  for (const r of rows) console.log(`${r.what.padEnd(70)} ${String(r.n).padStart(3)} ${r.p50.padStart(24)}  ${r.other}`);
}
