// The local-disk backend: the shared contract, plus its files on disk (no temp left behind, stale temps swept, full disk).
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { describeBackendContract } from './backend.contract.js';
import { LocalDiskBackend } from './index.js';

describeBackendContract('LocalDiskBackend', async () => {
  const root = await mkdtemp(join(tmpdir(), 'sg-disk-'));
  return { backend: new LocalDiskBackend(root), cleanup: () => rm(root, { recursive: true, force: true }) };
});

describe('LocalDiskBackend on disk', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'sg-disk-'));
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  it('stores each key as one file at its path and leaves no temp files', async () => {
    const backend = new LocalDiskBackend(root);
    await Promise.all(Array.from({ length: 20 }, (_, i) => backend.put('chunks/ten_a/ab/same', Buffer.from(`v${i}`))));
    expect(await readdir(join(root, 'chunks/ten_a/ab'))).toEqual(['same']);
  });

  it('sweeps temp files older than an hour when listing, and keeps fresh ones', async () => {
    const backend = new LocalDiskBackend(root);
    await backend.put('chunks/ten_a/ab/c', Buffer.from('x'));
    const dir = join(root, 'chunks/ten_a/ab');
    await writeFile(join(dir, '.tmp-c-old'), 'x');
    await writeFile(join(dir, '.tmp-c-new'), 'x');
    const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
    await utimes(join(dir, '.tmp-c-old'), twoHoursAgo, twoHoursAgo);
    const keys: string[] = [];
    for await (const entry of backend.list('chunks/')) keys.push(entry.key);
    expect(keys).toEqual(['chunks/ten_a/ab/c']);
    expect((await readdir(dir)).sort()).toEqual(['.tmp-c-new', 'c']);
  });

  describe('on a full filesystem', () => {
    let mounted = false;
    beforeEach(() => {
      if (process.getuid?.() !== 0) return;
      try {
        execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', root], { stdio: 'ignore' });
        mounted = true;
      } catch {
        mounted = false;
      }
    });
    afterEach(() => {
      if (mounted) execFileSync('umount', [root]);
      mounted = false;
    });

    it('maps ENOSPC to storage_full and removes the temp file', async (ctx) => {
      if (!mounted) ctx.skip();
      const backend = new LocalDiskBackend(root);
      await backend.put('chunks/ten_a/ab/small', Buffer.from('fits'));
      await expect(backend.put('chunks/ten_a/ab/big', randomBytes(2 * 1024 * 1024))).rejects.toMatchObject({ code: 'storage_full', retryable: true });
      expect(await readdir(join(root, 'chunks/ten_a/ab'))).toEqual(['small']);
      expect(await backend.get('chunks/ten_a/ab/small')).toEqual(Buffer.from('fits'));
    });
  });
});
