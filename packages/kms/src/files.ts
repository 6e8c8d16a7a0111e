// Crash-safe file operations for key material: a key file is either absent or complete, and is never replaced.
import { randomBytes } from 'node:crypto';
import { link, mkdir, open, readFile, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Writes path only if it does not exist yet; false when another writer got there first. */
export async function writeExclusive(path: string, data: Buffer): Promise<boolean> {
  const dir = dirname(path);
  const tmp = join(dir, `.tmp-${basename(path)}-${randomBytes(6).toString('hex')}`);
  try {
    const fh = await open(tmp, 'wx', 0o600);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    // link, unlike rename, refuses to replace: two processes creating the same key cannot overwrite each other's.
    try {
      await link(tmp, path);
    } catch (err) {
      if (errorCode(err) === 'EEXIST') return false;
      throw err;
    }
  } finally {
    await rm(tmp, { force: true });
  }
  await fsyncDir(dir);
  return true;
}

/** mkdir -p that also makes the new directory entries durable, so a crash cannot lose a directory holding keys. */
export async function ensureDir(dir: string): Promise<void> {
  const created = await mkdir(dir, { recursive: true, mode: 0o700 });
  if (created === undefined) return;
  for (let p = dir; p !== dirname(created); ) {
    p = dirname(p);
    await fsyncDir(p);
  }
}

export async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export async function readIfExists(path: string): Promise<Buffer | undefined> {
  try {
    return await readFile(path);
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return undefined;
    throw err;
  }
}

export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return false;
    throw err;
  }
}

export function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}
