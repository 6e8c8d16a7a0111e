// Where sealed chunks and manifests are kept: opaque blobs by key, implemented by local disk (and S3).
import { invalidArgument } from '@sandglass/core';

/**
 * Keys are "/"-separated segments ("chunks/<tenant>/<aa>/<id>", "manifests/<tenant>/<snapshotId>"). No segment starts
 * with ".", so keys never climb out of their root and never collide with a backend's temporary names.
 */
export interface ChunkBackend {
  /** Atomic and durable once it resolves; a full store throws SandglassError('storage_full') and leaves nothing behind. */
  put(key: string, data: Buffer): Promise<void>;
  /**
   * Stages a put: the data is written but neither durable nor visible (get/has/list do not see it) until `flush`.
   * Lets a capture write many chunks and pay for durability once instead of once per chunk.
   */
  stage(key: string, data: Buffer): Promise<void>;
  /** Makes every staged put durable, then visible, and durable again as visible; a crash before leaves none of them. */
  flush(): Promise<void>;
  /** Deletes writes that never completed (a crashed writer's staged data) older than graceMs; GC calls it. */
  sweepAbandoned(graceMs: number): Promise<{ files: number; bytes: number }>;
  get(key: string): Promise<Buffer | undefined>;
  has(key: string): Promise<boolean>;
  /** A missing key is fine. */
  delete(key: string): Promise<void>;
  /** Every key starting with prefix (a plain string prefix, not only whole segments), with its size and modification time. */
  list(prefix: string): AsyncIterable<BackendEntry>;
}

export interface BackendEntry {
  key: string;
  sizeBytes: number;
  mtimeMs: number;
}

const SEGMENT = '[A-Za-z0-9_-][A-Za-z0-9_.-]*';
const KEY = new RegExp(`^${SEGMENT}(/${SEGMENT})*$`);
const PREFIX = new RegExp(`^(${SEGMENT}/)*(${SEGMENT})?$`);

export function isKey(key: string): boolean {
  return typeof key === 'string' && KEY.test(key);
}

export function checkKey(key: string): void {
  if (!isKey(key)) throw invalidArgument('key', 'must be "/"-separated segments of letters, digits, ".", "_" or "-", none starting with "."');
}

export function checkPrefix(prefix: string): void {
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) throw invalidArgument('prefix', 'must be the start of a valid key');
}
