// Test fixtures: the same ChunkStore tests on every backend (local disk, S3 on an s3rver process), with the few raw hooks they need.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import type { ChunkBackend } from './backend.js';
import { LocalDiskBackend } from './local-disk.js';
import { S3Backend } from './s3.js';
import { startS3Server, type TestS3Server } from './test-s3.js';

export const BACKEND_KINDS = ['local disk', 's3'] as const;
export type BackendKind = (typeof BACKEND_KINDS)[number];

export interface BackendFixture {
  backend: ChunkBackend;
  /** Makes the object at key look ageMs old (its mtime), as if written long ago: GC's grace period reads it. */
  backdate(key: string, ageMs: number): Promise<void>;
  /** Every file on disk that holds this store's objects (for S3, s3rver's files: data, metadata, checksums). */
  files(): Promise<string[]>;
}

let server: Promise<{ server: TestS3Server; dir: string }> | undefined;

/** Call at the top of a test file: one s3rver process per file, started on first use and stopped after the file. */
export function backendFixtures(): (kind: BackendKind, dir: string) => Promise<BackendFixture> {
  afterAll(async () => {
    const started = await server;
    server = undefined;
    if (!started) return;
    await started.server.stop();
    await rm(started.dir, { recursive: true, force: true });
  });
  return async (kind, dir) => {
    if (kind === 'local disk') {
      const root = join(dir, 'store');
      return { backend: new LocalDiskBackend(root), backdate: (key, ageMs) => touch(join(root, key), ageMs), files: () => filesUnder(root) };
    }
    server ??= (async () => {
      const objects = await mkdtemp(join(tmpdir(), 'sg-s3-objects-'));
      return { server: await startS3Server({ dir: objects }), dir: objects };
    })();
    const { server: s3, dir: objects } = await server;
    const prefix = `t-${randomBytes(6).toString('hex')}`;
    const backend = new S3Backend({
      bucket: s3.bucket,
      prefix,
      endpoint: s3.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
    });
    // s3rver keeps each object in a file and reports that file's mtime as LastModified.
    const root = join(objects, s3.bucket, prefix);
    return { backend, backdate: (key, ageMs) => touch(join(root, `${key}._S3rver_object`), ageMs), files: () => filesUnder(root) };
  };
}

async function filesUnder(path: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(path, { withFileTypes: true })) {
    const full = join(path, entry.name);
    if (entry.isDirectory()) out.push(...(await filesUnder(full)));
    else out.push(full);
  }
  return out;
}

async function touch(path: string, ageMs: number): Promise<void> {
  const then = new Date(Date.now() - ageMs);
  await utimes(path, then, then);
}
