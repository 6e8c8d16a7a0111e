// The S3 backend against a real S3-compatible server process (s3rver): the shared contract, staging, sweeping, paging, prefixes, URLs.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, stat, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeBackendContract } from './backend.contract.js';
import { LocalDiskBackend, openChunkBackend, S3Backend, type BackendEntry, type ChunkBackend, type S3BackendOptions } from './index.js';
import { startS3Server, type TestS3Server } from './test-s3.js';

const HOUR_MS = 60 * 60 * 1000;

let dir: string;
let server: TestS3Server;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-s3-'));
  server = await startS3Server({ dir: join(dir, 'objects') });
});
afterAll(async () => {
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

function options(prefix: string, extra: Partial<S3BackendOptions> = {}): S3BackendOptions {
  return {
    bucket: server.bucket,
    prefix,
    endpoint: server.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
    ...extra,
  };
}

const freshPrefix = () => `t-${randomBytes(6).toString('hex')}`;

async function keysOf(b: ChunkBackend, prefix = ''): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of b.list(prefix)) out.push(entry.key);
  return out;
}

/** Every object file s3rver holds under a bucket prefix (its own layout: `<key>._S3rver_object`). */
async function objectFiles(rawPrefix: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (e.isDirectory()) await walk(join(d, e.name));
      else if (e.name.endsWith('._S3rver_object')) out.push(join(d, e.name));
    }
  };
  await walk(join(dir, 'objects', server.bucket, rawPrefix));
  return out;
}

async function backdate(files: string[], ageMs: number): Promise<void> {
  const then = new Date(Date.now() - ageMs);
  for (const f of files) await utimes(f, then, then);
}

describeBackendContract('S3Backend', async () => ({ backend: new S3Backend(options(freshPrefix())), cleanup: async () => undefined }));

describe('S3Backend staging', () => {
  it('keeps staged puts invisible to get, has and list until flush, held in memory', async () => {
    const prefix = freshPrefix();
    const b = new S3Backend(options(prefix));
    await b.stage('chunks/t/aa/one', Buffer.from('one'));
    await b.stage('chunks/t/aa/two', Buffer.from('two'));
    expect(await b.get('chunks/t/aa/one')).toBeUndefined();
    expect(await b.has('chunks/t/aa/two')).toBe(false);
    expect(await keysOf(b)).toEqual([]);
    expect(await objectFiles(prefix)).toEqual([]);
    await b.flush();
    expect(await b.get('chunks/t/aa/one')).toEqual(Buffer.from('one'));
    expect(await keysOf(b)).toEqual(['chunks/t/aa/one', 'chunks/t/aa/two']);
    await b.flush();
  });

  it('spills past its memory bound to the staging area, still invisible, and publishes spills by copy', async () => {
    const prefix = freshPrefix();
    const b = new S3Backend(options(prefix, { stageMemoryBytes: 10 }));
    const chunks = Array.from({ length: 40 }, (_, i) => [`chunks/t/${String(i % 4).padStart(2, '0')}/c${i}`, randomBytes(64)] as const);
    for (const [key, data] of chunks) await b.stage(key, data);
    // Spilled: in the bucket under .staging/, which no key can name.
    expect((await objectFiles(`${prefix}/.staging`)).length).toBe(40);
    expect(await keysOf(b)).toEqual([]);
    expect(await b.has(chunks[0]![0])).toBe(false);
    await b.flush();
    for (const [key, data] of chunks) expect(await b.get(key)).toEqual(data);
    expect((await keysOf(b)).length).toBe(40);
    expect(await objectFiles(`${prefix}/.staging`)).toEqual([]);
  });

  it('sweeps a crashed writer’s spills once past the grace period, never its own in flight', async () => {
    const prefix = freshPrefix();
    const crashed = new S3Backend(options(prefix, { stageMemoryBytes: 0 }));
    for (let i = 0; i < 5; i++) await crashed.stage(`chunks/t/aa/lost${i}`, Buffer.alloc(100, i));
    const survivor = new S3Backend(options(prefix, { stageMemoryBytes: 0 }));
    await survivor.stage('chunks/t/aa/mine', Buffer.from('mine'));
    const staged = await objectFiles(`${prefix}/.staging`);
    expect(staged).toHaveLength(6);

    expect(await survivor.sweepAbandoned(HOUR_MS)).toEqual({ files: 0, bytes: 0 });
    await backdate(staged, 2 * HOUR_MS);
    expect(await survivor.sweepAbandoned(HOUR_MS)).toEqual({ files: 5, bytes: 500 });
    expect(await objectFiles(`${prefix}/.staging`)).toHaveLength(1);
    await survivor.flush();
    expect(await survivor.get('chunks/t/aa/mine')).toEqual(Buffer.from('mine'));
    expect(await keysOf(survivor)).toEqual(['chunks/t/aa/mine']);
  });

  it('a flush that fails drops its batch and leaves its spills to the sweep', async () => {
    const prefix = freshPrefix();
    const b = new S3Backend(options(prefix, { stageMemoryBytes: 0 }));
    await b.stage('chunks/t/aa/x', Buffer.from('x'));
    const unreachable = new S3Backend(options(prefix, { stageMemoryBytes: 0, endpoint: 'http://127.0.0.1:1' }));
    await expect(unreachable.stage('chunks/t/aa/y', Buffer.from('y'))).rejects.toMatchObject({ code: 'storage_unavailable' });
    await unreachable.flush().catch(() => undefined);
    await b.flush();
    expect(await keysOf(b)).toEqual(['chunks/t/aa/x']);
  });
});

describe('S3Backend listing and prefixes', () => {
  it('pages through more than 1000 keys', async () => {
    const b = new S3Backend(options(freshPrefix()));
    const keys = Array.from({ length: 1010 }, (_, i) => `chunks/t/${String(i % 7).padStart(2, '0')}/k${String(i).padStart(5, '0')}`);
    for (const key of keys) await b.stage(key, Buffer.from(key));
    await b.flush();
    const entries: BackendEntry[] = [];
    for await (const entry of b.list('chunks/')) entries.push(entry);
    expect(entries.map((e) => e.key)).toEqual([...keys].sort());
    expect(entries.every((e) => e.sizeBytes === e.key.length)).toBe(true);
    expect(await keysOf(b, 'chunks/t/03/')).toHaveLength(keys.filter((k) => k.startsWith('chunks/t/03/')).length);
  });

  it('isolates two stores in one bucket, even when one prefix starts with the other', async () => {
    const base = freshPrefix();
    const one = new S3Backend(options(base));
    const other = new S3Backend(options(`${base}-b`));
    await one.put('manifests/t/s1', Buffer.from('one'));
    await other.put('manifests/t/s1', Buffer.from('other'));
    await other.put('manifests/t/s2', Buffer.from('other'));
    expect(await keysOf(one)).toEqual(['manifests/t/s1']);
    expect(await one.get('manifests/t/s1')).toEqual(Buffer.from('one'));
    expect(await one.has('manifests/t/s2')).toBe(false);
    await one.delete('manifests/t/s1');
    expect(await other.get('manifests/t/s1')).toEqual(Buffer.from('other'));
    expect(await keysOf(other)).toEqual(['manifests/t/s1', 'manifests/t/s2']);
  });

  it('hides objects under its prefix that no key can name', async () => {
    const prefix = freshPrefix();
    const b = new S3Backend(options(prefix));
    await b.put('chunks/t/aa/c', Buffer.from('c'));
    // Written around the backend, as another tool might.
    const raw = new S3Client({
      region: 'us-east-1',
      endpoint: server.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
    });
    for (const name of ['chunks/t/aa/.hidden', '.staging/w/0', 'chunks/t/aa/c~1']) {
      await raw.send(new PutObjectCommand({ Bucket: server.bucket, Key: `${prefix}/${name}`, Body: 'x' }));
    }
    expect(await keysOf(b)).toEqual(['chunks/t/aa/c']);
    expect(await keysOf(b, 'chunks/')).toEqual(['chunks/t/aa/c']);
  });
});

describe('S3Backend errors', () => {
  it('maps an unreachable store, a missing bucket and an unknown access key to storage_unavailable', async () => {
    const down = new S3Backend(options(freshPrefix(), { endpoint: 'http://127.0.0.1:1' }));
    await expect(down.put('a/b', Buffer.from('x'))).rejects.toMatchObject({ code: 'storage_unavailable', retryable: true, details: { operation: 'put' } });
    await expect(down.get('a/b')).rejects.toMatchObject({ code: 'storage_unavailable' });
    const noBucket = new S3Backend(options(freshPrefix(), { bucket: 'no-such-bucket' }));
    await expect(noBucket.get('a/b')).rejects.toMatchObject({ code: 'storage_unavailable', details: { s3Code: 'NoSuchBucket' } });
    await expect(keysOf(noBucket)).rejects.toMatchObject({ code: 'storage_unavailable', details: { s3Code: 'NoSuchBucket' } });
    const stranger = new S3Backend(options(freshPrefix(), { credentials: { accessKeyId: 'NOBODY', secretAccessKey: 'wrong' } }));
    await expect(stranger.put('a/b', Buffer.from('x'))).rejects.toMatchObject({
      code: 'storage_unavailable',
      details: { s3Code: 'InvalidAccessKeyId' },
    });
  });

  it('refuses bad options, naming the field', () => {
    expect(() => new S3Backend(options('ok', { bucket: 'Bad_Bucket' }))).toThrow(
      expect.objectContaining({ details: expect.objectContaining({ field: 'bucket' }) }),
    );
    expect(() => new S3Backend(options('.staging'))).toThrow(expect.objectContaining({ details: expect.objectContaining({ field: 'prefix' }) }));
    expect(() => new S3Backend(options('a//b'))).toThrow(expect.objectContaining({ details: expect.objectContaining({ field: 'prefix' }) }));
    expect(() => new S3Backend(options('ok', { region: '' }))).toThrow(expect.objectContaining({ details: expect.objectContaining({ field: 'region' }) }));
  });
});

describe('openChunkBackend', () => {
  const env = {};
  it.each([
    ['/var/lib/sandglass/store', LocalDiskBackend],
    ['file:///var/lib/sandglass/store', LocalDiskBackend],
    ['file:/var/lib/sandglass/store', LocalDiskBackend],
    ['s3://bucket-1/some/prefix?endpoint=http://127.0.0.1:9000&region=eu-west-1&pathStyle=true', S3Backend],
    ['s3://bucket-1', S3Backend],
    ['s3://bucket.with.dots/p/', S3Backend],
  ])('opens %s', (url, kind) => {
    expect(openChunkBackend(url, { env })).toBeInstanceOf(kind);
  });

  it.each([
    ['', 'store'],
    ['relative/path', 'store'],
    ['http://bucket/prefix', 'store'],
    ['file://host/path', 'store.path'],
    ['s3://Upper/prefix', 'store.bucket'],
    ['s3://ab/prefix', 'store.bucket'],
    ['s3://bucket:9000/prefix', 'store.bucket'],
    ['s3://key:secret@bucket/prefix', 'store.credentials'],
    ['s3://bucket/a//b', 'store.prefix'],
    ['s3://bucket/.staging', 'store.prefix'],
    ['s3://bucket/a b', 'store.prefix'],
    ['s3://bucket/p?endpoint=ftp://127.0.0.1', 'store.endpoint'],
    ['s3://bucket/p?endpoint=not-a-url', 'store.endpoint'],
    ['s3://bucket/p?endpoint=http://u:p@127.0.0.1:9000', 'store.endpoint'],
    ['s3://bucket/p?region=EU WEST', 'store.region'],
    ['s3://bucket/p?pathStyle=yes', 'store.pathStyle'],
    ['s3://bucket/p?endpiont=http://127.0.0.1:9000', 'store.endpiont'],
  ])('refuses %j, naming %s', (url, field) => {
    expect(() => openChunkBackend(url, { env })).toThrow(expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field }) }));
  });

  it('takes settings the URL lacks from the environment, and names the variable when one is wrong', () => {
    expect(() => openChunkBackend('s3://bucket/p', { env: { SANDGLASS_S3_ENDPOINT: 'ftp://x' } })).toThrow(
      expect.objectContaining({ details: expect.objectContaining({ field: 'SANDGLASS_S3_ENDPOINT' }) }),
    );
    expect(() => openChunkBackend('s3://bucket/p', { env: { SANDGLASS_S3_PATH_STYLE: '1' } })).toThrow(
      expect.objectContaining({ details: expect.objectContaining({ field: 'SANDGLASS_S3_PATH_STYLE' }) }),
    );
    // The URL wins over the environment.
    expect(openChunkBackend('s3://bucket/p?endpoint=http://127.0.0.1:9000', { env: { SANDGLASS_S3_ENDPOINT: 'ftp://x' } })).toBeInstanceOf(S3Backend);
  });

  it('opens the test server from its URL with credentials from the environment, end to end', async () => {
    const prefix = freshPrefix();
    const env = {
      SANDGLASS_S3_ENDPOINT: server.endpoint,
      SANDGLASS_S3_PATH_STYLE: 'true',
      AWS_ACCESS_KEY_ID: server.accessKeyId,
      AWS_SECRET_ACCESS_KEY: server.secretAccessKey,
    };
    const viaEnv = openChunkBackend(`s3://${server.bucket}/${prefix}`, { env });
    await viaEnv.put('manifests/t/s1', Buffer.from('hello'));
    const viaUrl = openChunkBackend(server.url.replace(/\/store\?/, `/${prefix}?`), {
      env: { AWS_ACCESS_KEY_ID: server.accessKeyId, AWS_SECRET_ACCESS_KEY: server.secretAccessKey },
    });
    expect(await viaUrl.get('manifests/t/s1')).toEqual(Buffer.from('hello'));
    // s3rver does not check SigV4 signatures, only that the access key id exists.
    const unknownKey = openChunkBackend(`s3://${server.bucket}/${prefix}`, { env: { ...env, AWS_ACCESS_KEY_ID: 'NOBODY' } });
    await expect(unknownKey.get('manifests/t/s1')).rejects.toMatchObject({ code: 'storage_unavailable', details: { s3Code: 'InvalidAccessKeyId' } });
    expect((await stat(join(dir, 'objects', server.bucket, prefix))).isDirectory()).toBe(true);
  });
});
