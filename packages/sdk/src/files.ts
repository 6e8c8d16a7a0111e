// Files in a sandbox: streamed reads and writes (never buffered whole), listing, stat, remove, mkdir, rename.
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import type { DataPlane } from './client.js';
import { NotFoundError } from './errors.js';
import { readJson, type StreamBody } from './http.js';
import type { GatewayReply } from './replies.js';
import type { FileInfo } from './types.js';

export type { FileInfo };

export type ReadFormat = 'text' | 'bytes' | 'stream';
export type WriteData = string | Uint8Array | Readable | ReadableStream<Uint8Array>;

export interface WriteResult {
  path: string;
  sizeBytes: number;
}

export interface TarWriteResult {
  path: string;
  /** Archive entries extracted. */
  entries: number;
  /** Bytes of file content written. */
  sizeBytes: number;
  /** Bytes of the tar stream sent. */
  archiveBytes: number;
}

/** `sandbox.files`. */
export class Files {
  /** @internal */
  constructor(private readonly dataPlane: DataPlane) {}

  read(path: string, opts?: { format?: 'text' }): Promise<string>;
  read(path: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
  read(path: string, opts: { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  read(path: string, opts?: { format?: ReadFormat }): Promise<string | Uint8Array | ReadableStream<Uint8Array>>;
  async read(path: string, opts: { format?: ReadFormat } = {}): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const format = opts.format ?? 'text';
    const res = await this.dataPlane.request('GET', '/files', { query: { path }, stream: format === 'stream' });
    switch (format) {
      case 'text':
        return res.text();
      case 'bytes':
        return new Uint8Array(await res.bytes());
      case 'stream':
        return res.webStream();
    }
  }

  /** Writes a file; strings and bytes go in one body, streams and Readables are sent as they are read. */
  async write(path: string, data: WriteData, opts: { mode?: number } = {}): Promise<WriteResult> {
    const body: Uint8Array | StreamBody =
      typeof data === 'string' ? Buffer.from(data, 'utf8') : data instanceof Readable ? (data as AsyncIterable<Uint8Array>) : data;
    // An upload's body may take long to send: no header timeout, the server answers only after the last byte.
    const res = await this.dataPlane.request('PUT', '/files', { query: { path, mode: opts.mode }, body, timeoutMs: 0 });
    return readJson<WriteResult>(res);
  }

  /**
   * Uploads a directory as a tar stream (e.g. `tar -c -C src .`), extracted into `dir` (created with its parents) as
   * it arrives. Nothing lands outside `dir`: absolute names, `..` and paths through symlinks are refused, and a symlink
   * where a file goes is replaced, never written through. Entries belong to root, with the archive's modes and mtimes.
   */
  async writeTar(dir: string, tar: Uint8Array | Readable | ReadableStream<Uint8Array>): Promise<TarWriteResult> {
    const body: Uint8Array | StreamBody = tar instanceof Readable ? (tar as AsyncIterable<Uint8Array>) : tar;
    const res = await this.dataPlane.request('PUT', '/files/tar', { query: { path: dir }, body, timeoutMs: 0, contentType: 'application/x-tar' });
    return readJson<TarWriteResult>(res);
  }

  /** Downloads a directory as a tar stream (symlinks kept as symlinks); `bytes` buffers it whole. */
  readTar(dir: string, opts?: { format?: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  readTar(dir: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
  async readTar(dir: string, opts: { format?: 'stream' | 'bytes' } = {}): Promise<ReadableStream<Uint8Array> | Uint8Array> {
    const res = await this.dataPlane.request('GET', '/files/tar', { query: { path: dir }, timeoutMs: 0, stream: opts.format !== 'bytes' });
    if (opts.format === 'bytes') return new Uint8Array(await res.bytes());
    return res.webStream();
  }

  /** Entries under `path`; depth > 1 descends into subdirectories. */
  async list(path: string, opts: { depth?: number } = {}): Promise<FileInfo[]> {
    return (await this.dataPlane.json<GatewayReply<'listFiles'>>('GET', '/files/list', { query: { path, depth: opts.depth } })).entries;
  }

  /**
   * A file's type, size and mode. Its `name` is the last component of `path` as asked ('/' for the root), never the
   * sandbox's word for it: a caller may join it to a directory of its own.
   */
  async stat(path: string): Promise<FileInfo> {
    const info = await this.dataPlane.json<GatewayReply<'statFile'>>('GET', '/files/stat', { query: { path } });
    return { ...info, name: posix.basename(posix.normalize(path)) || '/' };
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && err.code === 'file_not_found') return false;
      throw err;
    }
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.dataPlane.request('DELETE', '/files', { query: { path, recursive: opts.recursive } });
  }

  /** Creates a directory and its parents; false when it already existed. */
  async makeDir(path: string): Promise<boolean> {
    return (await this.dataPlane.json<GatewayReply<'makeDir'>>('POST', '/files/mkdir', { json: { path } })).created;
  }

  async rename(from: string, to: string): Promise<void> {
    await this.dataPlane.request('POST', '/files/rename', { json: { from, to } });
  }
}
