// `npx tsx bench/s3.ts`: chunk backend throughput, S3 (an s3rver process on loopback) against local disk in the same run (BENCH_QUICK=1: fewer).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Table from 'cli-table3';
import { type ChunkBackend, LocalDiskBackend, S3Backend, type S3BackendOptions } from '@sandglass/chunkstore';
import { startS3Server } from '@sandglass/chunkstore/test-s3';

const quick = process.env.BENCH_QUICK === '1';
const CHUNK_BYTES = 64 * 1024;
const PUTS = quick ? 64 : 256;
const STAGED = quick ? 1024 : 4096;

export interface StoreBenchRow {
  what: string;
  backend: string;
  n: number;
  ms: number;
  /** Chunks per second and MiB per second over the whole operation. */
  perS: number;
  mibPerS: number;
}

function row(what: string, backend: string, n: number, ms: number): StoreBenchRow {
  return { what, backend, n, ms, perS: (n / ms) * 1000, mibPerS: (n * CHUNK_BYTES) / (1024 * 1024) / (ms / 1000) };
}

async function timed(fn: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function measure(name: string, make: (tag: string) => ChunkBackend, chunks: Buffer[]): Promise<StoreBenchRow[]> {
  const rows: StoreBenchRow[] = [];
  const b = make('puts');
  const keys = chunks.slice(0, PUTS).map((_, i) => `chunks/bench/${String(i % 256).padStart(2, '0')}/p${i}`);
  rows.push(
    row(
      'put, one at a time (durable each)',
      name,
      PUTS,
      await timed(async () => {
        for (const [i, key] of keys.entries()) await b.put(key, chunks[i]!);
      }),
    ),
  );
  rows.push(
    row(
      'get, one at a time',
      name,
      PUTS,
      await timed(async () => {
        for (const key of keys) if (!(await b.get(key))) throw new Error(`${key} missing`);
      }),
    ),
  );
  const staged = make('staged');
  let stageMs = 0;
  const flushMs = await timed(async () => {
    stageMs = await timed(async () => {
      for (const [i, data] of chunks.entries()) await staged.stage(`chunks/bench/${String(i % 256).padStart(2, '0')}/s${i}`, data);
    });
    await staged.flush();
  });
  rows.push(row(`stage ${STAGED} (the capture's loop)`, name, STAGED, stageMs));
  rows.push(row(`stage ${STAGED} + flush (visible, durable)`, name, STAGED, flushMs));
  return rows;
}

/** Local disk and S3 (s3rver) side by side; S3's stage + flush again with a smaller memory bound and with every stage spilled. */
export async function storeBench(): Promise<StoreBenchRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sg-bench-store-'));
  const server = await startS3Server({ dir: join(dir, 's3') });
  try {
    const chunks = Array.from({ length: STAGED }, () => randomBytes(CHUNK_BYTES));
    const s3 = (extra: Partial<S3BackendOptions>) => (tag: string) =>
      new S3Backend({
        bucket: server.bucket,
        prefix: `${tag}-${randomBytes(4).toString('hex')}`,
        endpoint: server.endpoint,
        region: 'us-east-1',
        forcePathStyle: true,
        credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
        ...extra,
      });
    return [
      ...(await measure('local disk', (tag) => new LocalDiskBackend(join(dir, 'disk', tag)), chunks)),
      ...(await measure('s3rver (default: staging in memory up to 256 MiB)', s3({}), chunks)),
      ...(await measure('s3rver, spilling past 64 MiB', s3({ stageMemoryBytes: 64 * 1024 * 1024 }), chunks)).slice(2),
      ...(await measure('s3rver, every stage spilled (staging area + copy)', s3({ stageMemoryBytes: 0 }), chunks)).slice(2),
    ];
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const rows = await storeBench();
  const table = new Table({ head: ['operation (64 KiB chunks)', 'backend', 'n', 'ms', 'chunks/s', 'MiB/s'] });
  for (const r of rows) table.push([r.what, r.backend, r.n, r.ms.toFixed(0), r.perS.toFixed(0), r.mibPerS.toFixed(1)]);
  console.log(table.toString());
}
