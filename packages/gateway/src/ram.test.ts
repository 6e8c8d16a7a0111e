// The node's tmpfs RAM files: one template image per key, however many restores ask for it at once.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { processStartTime } from '@sandglass/core';
import { defaultImageCacheBytes, RamFiles, reapOrphanRamDirs } from './ram.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

it('makes one tmpfs copy of a template for restores that ask for it at the same time', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sg-ram-'));
  dirs.push(dir);
  const mem = join(dir, 'mem.raw');
  writeFileSync(mem, Buffer.concat([Buffer.alloc(1 << 20), Buffer.alloc(1 << 20, 7)]));
  const ram = new RamFiles(join(dir, 'home'), dir);
  const paths = await Promise.all(Array.from({ length: 6 }, () => ram.templateImage('0123456789abcdef', mem)));
  expect(new Set(paths).size).toBe(1);
  expect(readFileSync(paths[0]!).equals(readFileSync(mem))).toBe(true);
  expect(readdirSync(ram.root).filter((n) => n.includes('.tmp-'))).toEqual([]);
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sg-ram-'));
  dirs.push(dir);
  return dir;
}

it('removes the RAM directories of dead servers of other homes, and leaves live and unmarked ones', () => {
  const shm = scratch();
  const mine = new RamFiles(join(shm, 'home-a'), shm);
  const live = new RamFiles(join(shm, 'home-b'), shm);
  const dead = new RamFiles(join(shm, 'home-c'), shm);
  writeFileSync(join(dead.root, 'snap-x.img'), Buffer.alloc(4096, 1));
  // A pid that exists with another start time is a different process: its owner is gone.
  writeFileSync(join(dead.root, 'owner.json'), JSON.stringify({ pid: process.pid, startTime: 'earlier', home: 'home-c' }));
  // A dead server whose home's next server holds the lock and is starting: the directory is about to be claimed.
  const restarting = new RamFiles(join(shm, 'home-d'), shm);
  writeFileSync(join(restarting.root, 'owner.json'), JSON.stringify({ pid: process.pid, startTime: 'earlier', home: join(shm, 'home-d') }));
  mkdirSync(join(shm, 'home-d'), { recursive: true });
  writeFileSync(join(shm, 'home-d', 'lock'), JSON.stringify({ pid: process.pid, startTime: processStartTime(process.pid) }));
  const unmarked = join(shm, 'sandglass-0123456789ab');
  mkdirSync(unmarked);
  writeFileSync(join(unmarked, 'vm.mem'), 'x');
  expect(reapOrphanRamDirs(shm, mine.root)).toEqual([dead.root]);
  expect(existsSync(dead.root)).toBe(false);
  expect(existsSync(live.root)).toBe(true);
  expect(existsSync(mine.root)).toBe(true);
  expect(existsSync(unmarked)).toBe(true);
  expect(existsSync(restarting.root)).toBe(true);
});

it('counts only the caches, drops a predecessor leftovers on start and gives everything back on release', async () => {
  const shm = scratch();
  const ram = new RamFiles(join(shm, 'home'), shm);
  writeFileSync(join(ram.root, 'snap-a.img'), Buffer.alloc(64 * 1024, 1));
  writeFileSync(join(ram.root, 'template-0123456789abcdef.img'), Buffer.alloc(32 * 1024, 1));
  writeFileSync(join(ram.root, 'vm1.mem'), Buffer.alloc(128 * 1024, 1));
  expect(ram.cacheBytes()).toBe(96 * 1024);
  ram.removeStale();
  expect(readdirSync(ram.root)).toEqual(['owner.json']);
  ram.release();
  expect(existsSync(ram.root)).toBe(false);
});

it('sizes the cache ceiling from the host: a sixteenth, between 256 MiB and 2 GiB', () => {
  expect(defaultImageCacheBytes(2 * 1024 ** 3)).toBe(256 * 1024 ** 2);
  expect(defaultImageCacheBytes(24 * 1024 ** 3)).toBe(1.5 * 1024 ** 3);
  expect(defaultImageCacheBytes(256 * 1024 ** 3)).toBe(2 * 1024 ** 3);
});
