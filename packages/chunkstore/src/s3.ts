// Chunk backend on an S3-compatible object store: one object per key under a prefix; staged puts held back until flush.
import { randomBytes } from 'node:crypto';
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { failpoint, invalidArgument, SandglassError } from '@sandglass/core';
import { checkKey, checkPrefix, isKey, type BackendEntry, type ChunkBackend } from './backend.js';

export interface S3BackendOptions {
  bucket: string;
  /** Keys live under `<prefix>/` ("" for the bucket's root): stores sharing a bucket need different prefixes. */
  prefix?: string;
  /** An S3-compatible store's URL (MinIO, Ceph, s3rver); AWS's regional endpoint when absent. */
  endpoint?: string;
  region: string;
  /** `<endpoint>/<bucket>/<key>` rather than `<bucket>.<endpoint>/<key>`: what most on-prem stores want. */
  forcePathStyle?: boolean;
  /** The SDK's default chain (environment, profile, instance role) when absent. */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /** Staged bytes kept in memory (by this backend, for all captures in flight) before they spill to the staging area; default 256 MiB. */
  stageMemoryBytes?: number;
  /** Requests in flight at once for a flush, a spill or a sweep; default 16. */
  concurrency?: number;
}

/** Never a key's first segment (no segment starts with "."), so list and get cannot reach staged objects. */
const STAGING_DIR = '.staging/';
/** A 4096-chunk capture of incompressible 64 KiB pages fits; spilling costs three requests a chunk instead of one (bench/s3.ts). */
const DEFAULT_STAGE_MEMORY_BYTES = 256 * 1024 * 1024;
const DEFAULT_CONCURRENCY = 16;
/** DeleteObjects takes at most this many keys. */
const DELETE_BATCH = 1000;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
/** S3 error codes that mean the store has no room (MinIO, Ceph's quota, HTTP 507). */
const FULL_CODES = new Set(['XMinioStorageFull', 'QuotaExceeded', 'StorageFull', 'InsufficientStorage']);

/** A staged put: in memory (`data`) until a spill writes it under `stagingKey`. */
interface Staged {
  key: string;
  data?: Buffer;
  stagingKey?: string;
}

/**
 * Staging: a capture stages thousands of small chunks one at a time and flushes once, so `stage` keeps them in
 * memory (no request, no latency per chunk) and `flush` PUTs each straight to its key: one request per chunk. Past
 * `stageMemoryBytes` the buffered puts are spilled, concurrently, to `<prefix>/.staging/<writer>/<n>`, and the flush
 * copies those into place and deletes them; a crashed writer's spills are what sweepAbandoned removes. Nothing staged
 * is visible before the flush: memory is private, and no key can name the staging area.
 */
export class S3Backend implements ChunkBackend {
  readonly #client: S3Client;
  readonly #bucket: string;
  /** "" or "<prefix>/": prepended to every key. */
  readonly #root: string;
  readonly #writerRoot: string;
  readonly #where: string;
  readonly #stageMemoryBytes: number;
  readonly #concurrency: number;
  #buffered: Staged[] = [];
  #bufferedBytes = 0;
  #spilled: Staged[] = [];
  #spilling: Promise<void> = Promise.resolve();
  #flushing: Promise<void> = Promise.resolve();
  /** Staging objects this writer has spilled and not yet published or given up: never abandoned, whatever their age. */
  #inFlight = new Set<string>();
  #nextSpill = 0;

  constructor(opts: S3BackendOptions) {
    if (!isBucketName(opts.bucket)) {
      throw invalidArgument('bucket', 'must be an S3 bucket name: 3-63 lowercase letters, digits, "." or "-"');
    }
    const prefix = opts.prefix ?? '';
    if (prefix !== '') checkKeyAs('prefix', prefix);
    if (typeof opts.region !== 'string' || opts.region === '') throw invalidArgument('region', 'must be an S3 region, such as us-east-1');
    this.#stageMemoryBytes = opts.stageMemoryBytes ?? DEFAULT_STAGE_MEMORY_BYTES;
    this.#concurrency = opts.concurrency ?? DEFAULT_CONCURRENCY;
    if (!Number.isInteger(this.#concurrency) || this.#concurrency < 1) throw invalidArgument('concurrency', 'must be a positive integer');
    this.#bucket = opts.bucket;
    this.#root = prefix === '' ? '' : `${prefix}/`;
    this.#writerRoot = `${this.#root}${STAGING_DIR}${randomBytes(8).toString('hex')}/`;
    this.#where = `s3://${opts.bucket}/${prefix}${opts.endpoint ? ` at ${opts.endpoint}` : ''}`;
    this.#client = new S3Client({
      region: opts.region,
      endpoint: opts.endpoint,
      forcePathStyle: opts.forcePathStyle ?? false,
      credentials: opts.credentials,
      // Three tries with backoff (the SDK's standard mode); an unreachable store fails in seconds, not minutes.
      maxAttempts: 3,
      requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000, throwOnRequestTimeout: true },
      // Checksums only where S3 requires them: S3-compatible stores (s3rver, older MinIO and Ceph) reject the SDK's
      // default trailing CRC32. Each chunk is authenticated by AES-GCM on read anyway.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    });
  }

  async put(key: string, data: Buffer): Promise<void> {
    checkKey(key);
    failpoint('s3.put');
    await this.#send('put', key, () => this.#client.send(new PutObjectCommand({ Bucket: this.#bucket, Key: this.#root + key, Body: data })));
  }

  async stage(key: string, data: Buffer): Promise<void> {
    checkKey(key);
    const entry: Staged = { key, data };
    this.#buffered.push(entry);
    this.#bufferedBytes += data.length;
    if (this.#bufferedBytes <= this.#stageMemoryBytes) return;
    const spill = this.#spilling.then(() => this.#spill());
    this.#spilling = spill.catch(() => undefined);
    try {
      await spill;
    } catch (err) {
      // This call staged nothing; the earlier puts that failed to spill stay in memory for the next try or flush.
      const at = this.#buffered.indexOf(entry);
      if (at >= 0) {
        this.#buffered.splice(at, 1);
        this.#bufferedBytes -= data.length;
      }
      throw err;
    }
  }

  /** Writes every buffered put under a staging name, concurrently; a failed one goes back into memory. */
  async #spill(): Promise<void> {
    const batch = this.#buffered.splice(0);
    this.#bufferedBytes = 0;
    const failed: Staged[] = [];
    let error: unknown;
    await eachLimited(batch, this.#concurrency, async (entry) => {
      const stagingKey = `${this.#writerRoot}${this.#nextSpill++}`;
      this.#inFlight.add(stagingKey);
      try {
        await this.#send('stage', entry.key, () => this.#client.send(new PutObjectCommand({ Bucket: this.#bucket, Key: stagingKey, Body: entry.data })));
      } catch (err) {
        this.#inFlight.delete(stagingKey);
        failed.push(entry);
        error ??= err;
        return;
      }
      entry.stagingKey = stagingKey;
      entry.data = undefined;
      this.#spilled.push(entry);
    });
    if (failed.length === 0) return;
    this.#buffered.unshift(...failed);
    for (const entry of failed) this.#bufferedBytes += entry.data?.length ?? 0;
    throw error;
  }

  /**
   * Publishes every staged put: buffered ones by PUT, spilled ones by a server-side copy, at most `concurrency` at a
   * time; each is durable when S3 acknowledges it. Flushes run one at a time. On failure the batch is dropped (its
   * spilled objects left to sweepAbandoned), as on local disk: the manifest's check of its refs then refuses to commit.
   */
  flush(): Promise<void> {
    const run = this.#flushing.then(async () => {
      // Spills in progress hold puts that are in neither list; wait until none is running.
      for (let settled = this.#spilling; ; settled = this.#spilling) {
        await settled;
        if (settled === this.#spilling) break;
      }
      const buffered = this.#buffered.splice(0);
      this.#bufferedBytes = 0;
      const spilled = this.#spilled.splice(0);
      const stagingKeys = spilled.map((e) => e.stagingKey as string);
      try {
        await eachLimited(buffered, this.#concurrency, (e) =>
          this.#send('flush', e.key, () => this.#client.send(new PutObjectCommand({ Bucket: this.#bucket, Key: this.#root + e.key, Body: e.data }))),
        );
        await eachLimited(spilled, this.#concurrency, (e) =>
          this.#send('flush', e.key, () =>
            this.#client.send(new CopyObjectCommand({ Bucket: this.#bucket, Key: this.#root + e.key, CopySource: `${this.#bucket}/${e.stagingKey}` })),
          ),
        );
      } finally {
        for (const k of stagingKeys) this.#inFlight.delete(k);
      }
      // Best effort: what stays behind is past its grace period at the next sweep.
      await this.#deleteMany(stagingKeys).catch(() => undefined);
    });
    this.#flushing = run.catch(() => undefined);
    return run;
  }

  /**
   * Deletes staging objects older than graceMs that this process is not still using: a crashed writer's spills (or a
   * failed flush's). Another process's staging area is left alone while younger than graceMs: it may be mid-capture.
   */
  async sweepAbandoned(graceMs: number): Promise<{ files: number; bytes: number }> {
    const nowMs = Date.now();
    const stale: string[] = [];
    let bytes = 0;
    for await (const object of this.#listRaw(`${this.#root}${STAGING_DIR}`)) {
      if (this.#inFlight.has(object.key) || nowMs - object.mtimeMs < graceMs) continue;
      stale.push(object.key);
      bytes += object.sizeBytes;
    }
    await this.#deleteMany(stale);
    return { files: stale.length, bytes };
  }

  async get(key: string): Promise<Buffer | undefined> {
    checkKey(key);
    failpoint('s3.get');
    try {
      const out = await this.#client.send(new GetObjectCommand({ Bucket: this.#bucket, Key: this.#root + key }));
      const bytes = await out.Body?.transformToByteArray();
      return bytes ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) : Buffer.alloc(0);
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw this.#error('get', key, err);
    }
  }

  async has(key: string): Promise<boolean> {
    checkKey(key);
    try {
      await this.#client.send(new HeadObjectCommand({ Bucket: this.#bucket, Key: this.#root + key }));
      return true;
    } catch (err) {
      if (isMissing(err)) return false;
      throw this.#error('has', key, err);
    }
  }

  /** S3 answers a delete of a missing key with success. */
  async delete(key: string): Promise<void> {
    checkKey(key);
    await this.#send('delete', key, () => this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: this.#root + key })));
  }

  async *list(prefix: string): AsyncIterable<BackendEntry> {
    checkPrefix(prefix);
    for await (const object of this.#listRaw(this.#root + prefix)) {
      const key = object.key.slice(this.#root.length);
      // Staged objects, and anything else in the bucket that this code could not have written.
      if (isKey(key)) yield { ...object, key };
    }
  }

  /** Every object under a raw bucket prefix, a page (up to 1000) per request, in key order. */
  async *#listRaw(rawPrefix: string): AsyncIterable<BackendEntry> {
    let token: string | undefined;
    do {
      const page = await this.#send('list', rawPrefix, () =>
        this.#client.send(new ListObjectsV2Command({ Bucket: this.#bucket, Prefix: rawPrefix, ContinuationToken: token })),
      );
      for (const object of page.Contents ?? []) {
        if (object.Key === undefined) continue;
        yield { key: object.Key, sizeBytes: object.Size ?? 0, mtimeMs: object.LastModified?.getTime() ?? 0 };
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  /** Raw bucket keys, in batches of DeleteObjects; a key that failed to go is an error. */
  async #deleteMany(rawKeys: string[]): Promise<void> {
    const batches: string[][] = [];
    for (let at = 0; at < rawKeys.length; at += DELETE_BATCH) batches.push(rawKeys.slice(at, at + DELETE_BATCH));
    await eachLimited(batches, this.#concurrency, async (batch) => {
      const out = await this.#send('delete', batch[0] ?? '', () =>
        this.#client.send(new DeleteObjectsCommand({ Bucket: this.#bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } })),
      );
      const first = out.Errors?.[0];
      if (first) {
        throw new SandglassError('storage_unavailable', `${this.#where} refused to delete ${first.Key}: ${first.Code} ${first.Message ?? ''}`.trim(), {
          details: { operation: 'delete', key: first.Key, s3Code: first.Code },
        });
      }
    });
  }

  async #send<T>(operation: string, key: string, request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (err) {
      throw this.#error(operation, key, err);
    }
  }

  /** storage_full when the store says so; storage_unavailable (the S3 code and status in details) for anything else. */
  #error(operation: string, key: string, err: unknown): SandglassError {
    if (err instanceof SandglassError) return err;
    const e = err as { name?: string; Code?: string; message?: string; code?: string; $metadata?: { httpStatusCode?: number } };
    const s3Code = e.Code ?? e.name ?? e.code ?? 'Error';
    const status = e.$metadata?.httpStatusCode;
    const details = { operation, key, s3Code, ...(status === undefined ? {} : { status }) };
    if (FULL_CODES.has(s3Code) || status === 507) {
      return new SandglassError('storage_full', `The chunk store ${this.#where} has no room left (${s3Code}); free space or thin retention.`, {
        details,
        cause: err,
      });
    }
    return new SandglassError(
      'storage_unavailable',
      `The chunk store ${this.#where} failed ${operation} of ${key}: ${s3Code}${e.message ? ` (${e.message})` : ''}.`,
      {
        details,
        cause: err,
      },
    );
  }
}

export function isBucketName(name: string): boolean {
  return typeof name === 'string' && BUCKET.test(name);
}

/** Runs fn over items with at most `limit` in flight; stops starting new ones after the first failure, which it throws. */
async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < items.length) {
      const item = items[next++] as T;
      try {
        await fn(item);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.err;
}

function checkKeyAs(field: string, value: string): void {
  if (!isKey(value)) throw invalidArgument(field, 'must be "/"-separated segments of letters, digits, ".", "_" or "-", none starting with "."');
}

function isMissing(err: unknown): boolean {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e.name === 'NoSuchKey' || e.name === 'NotFound' || (e.$metadata?.httpStatusCode === 404 && e.name !== 'NoSuchBucket');
}
