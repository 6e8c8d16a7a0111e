// Chunk backend on a local filesystem: one file per key, replaced atomically and durably (temp, fsync, rename, fsync dir).
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { basename, dirname, join, resolve } from 'node:path';
import { SandglassError } from '@sandglass/core';
import { checkKey, checkPrefix, type BackendEntry, type ChunkBackend } from './backend.js';

const execFileP = promisify(execFile);
const TEMP_PREFIX = '.tmp-';
/** A temp file this old belongs to a writer that crashed: no put takes an hour between open and rename. */
const STALE_TEMP_MS = 60 * 60 * 1000;
/** Flushes of up to this many staged files fsync each one rather than sync the whole filesystem twice. */
const SYNC_EACH_UP_TO = 16;

export class LocalDiskBackend implements ChunkBackend {
  readonly #root: string;
  /** Staged puts: written under temp names, not yet synced or renamed into place. */
  #staged: Array<{ tmp: string; path: string }> = [];
  /** Temp files this process is writing or has staged: never abandoned, whatever their age. */
  #inFlight = new Set<string>();
  #flushing: Promise<void> = Promise.resolve();

  constructor(root: string) {
    this.#root = resolve(root);
  }

  async stage(key: string, data: Buffer): Promise<void> {
    const { path, dir, tmp } = this.#tempFor(key);
    try {
      await ensureDir(dir);
      await writeFile(tmp, data, { mode: 0o600, flag: 'wx' });
    } catch (err) {
      this.#inFlight.delete(tmp);
      await rm(tmp, { force: true });
      throw storageError(err, this.#root);
    }
    this.#staged.push({ tmp, path });
  }

  /**
   * A large batch: one syncfs makes every staged file durable under its temp name, the renames publish them, a second
   * syncfs makes the renames durable — two filesystem syncs per capture instead of two fsyncs per chunk. A small one
   * (a recording's part, a small capture): each file and then each directory is fsynced, since a syncfs is a process
   * (`sync -f`, ~20 ms of CPU here) and two of them cost more than a few fsyncs. Flushes run one at a time.
   */
  flush(): Promise<void> {
    const run = this.#flushing.then(async () => {
      const batch = this.#staged.splice(0);
      if (batch.length === 0) return;
      try {
        if (batch.length <= SYNC_EACH_UP_TO) {
          await Promise.all(batch.map(({ tmp }) => fsyncPath(tmp)));
          for (const { tmp, path } of batch) await rename(tmp, path);
          await Promise.all([...new Set(batch.map(({ path }) => dirname(path)))].map(fsyncPath));
        } else {
          await syncFs(this.#root);
          for (const { tmp, path } of batch) await rename(tmp, path);
          await syncFs(this.#root);
        }
      } finally {
        for (const { tmp } of batch) this.#inFlight.delete(tmp);
      }
    });
    this.#flushing = run.catch(() => undefined);
    return run;
  }

  async put(key: string, data: Buffer): Promise<void> {
    const { path, dir, tmp } = this.#tempFor(key);
    try {
      await ensureDir(dir);
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.writeFile(data);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, path);
      await fsyncPath(dir);
    } catch (err) {
      await rm(tmp, { force: true });
      throw storageError(err, this.#root);
    } finally {
      this.#inFlight.delete(tmp);
    }
  }

  /**
   * Removes temp files of writes that will never finish: left by a crashed process (a capture killed before its
   * flush) or by one that failed. Files this process is still writing are kept, and so is anything younger than
   * graceMs (another process sharing the store may be writing it).
   */
  async sweepAbandoned(graceMs: number): Promise<{ files: number; bytes: number }> {
    let files = 0;
    let bytes = 0;
    const walk = async (dir: string): Promise<void> => {
      let entries;
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch (err) {
        if (isMissing(err)) return;
        throw err;
      }
      for (const e of entries) {
        const p = join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.name.startsWith(TEMP_PREFIX) && !this.#inFlight.has(p)) {
          const info = await stat(p).catch(() => undefined);
          if (!info || Date.now() - info.mtimeMs < graceMs) continue;
          await unlink(p).catch(() => undefined);
          files++;
          bytes += info.size;
        }
      }
    };
    await walk(this.#root);
    return { files, bytes };
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      return await readFile(this.#path(key));
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw err;
    }
  }

  async has(key: string): Promise<boolean> {
    try {
      return (await stat(this.#path(key))).isFile();
    } catch (err) {
      if (isMissing(err)) return false;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    try {
      await unlink(this.#path(key));
    } catch (err) {
      if (!isMissing(err)) throw err;
    }
  }

  async *list(prefix: string): AsyncIterable<BackendEntry> {
    checkPrefix(prefix);
    const dirKey = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    yield* this.#walk(dirKey, prefix.slice(dirKey.length));
  }

  /** Depth-first, names sorted, so listings are stable; removes stale temp files on the way. */
  async *#walk(dirKey: string, namePrefix: string): AsyncIterable<BackendEntry> {
    const dir = join(this.#root, dirKey);
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (err) {
      if (isMissing(err)) return;
      throw err;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (entry.name.startsWith(TEMP_PREFIX)) {
        await sweepIfStale(join(dir, entry.name));
        continue;
      }
      if (entry.name.startsWith('.') || !entry.name.startsWith(namePrefix)) continue;
      const key = dirKey + entry.name;
      if (entry.isDirectory()) {
        yield* this.#walk(`${key}/`, '');
      } else if (entry.isFile()) {
        // Stat per file rather than trusting the directory listing: the file may have been deleted since.
        const info = await stat(join(dir, entry.name)).catch((err: unknown) => {
          if (isMissing(err)) return undefined;
          throw err;
        });
        if (info) yield { key, sizeBytes: info.size, mtimeMs: info.mtimeMs };
      }
    }
  }

  /** Where `key` lives, and a fresh temp name beside it, registered as in flight (never swept as abandoned). */
  #tempFor(key: string): { path: string; dir: string; tmp: string } {
    const path = this.#path(key);
    const dir = dirname(path);
    const tmp = join(dir, `${TEMP_PREFIX}${basename(path)}-${randomBytes(6).toString('hex')}`);
    this.#inFlight.add(tmp);
    return { path, dir, tmp };
  }

  #path(key: string): string {
    checkKey(key);
    return join(this.#root, key);
  }
}

/** Best effort: a temp file that cannot be removed now is tried again on the next listing, which must not fail for it. */
async function sweepIfStale(path: string): Promise<void> {
  try {
    if (Date.now() - (await stat(path)).mtimeMs > STALE_TEMP_MS) await unlink(path);
  } catch {
    return;
  }
}

/** mkdir -p that also makes the new directory entries durable, so a crash cannot lose a directory of written chunks. */
async function ensureDir(dir: string): Promise<void> {
  const created = await mkdir(dir, { recursive: true, mode: 0o700 });
  if (created === undefined) return;
  for (let p = dir; p !== dirname(created); ) {
    p = dirname(p);
    await fsyncPath(p);
  }
}

/** fsync(2) of a file or directory by name (a read-only descriptor is enough on Linux). */
async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function storageError(err: unknown, root: string): unknown {
  const code = errorCode(err);
  if (code === 'ENOSPC' || code === 'EDQUOT') {
    return new SandglassError('storage_full', `The chunk store at ${root} has no room left (${code}); free space or thin retention.`, { cause: err });
  }
  return err;
}

/** syncfs(2) of the filesystem holding `path` (GNU `sync -f`): Node has no binding for it. */
async function syncFs(path: string): Promise<void> {
  await execFileP('sync', ['-f', path]);
}

function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/** ENOTDIR too: a key whose parent path is a file simply does not exist. */
function isMissing(err: unknown): boolean {
  const code = errorCode(err);
  return code === 'ENOENT' || code === 'ENOTDIR';
}
