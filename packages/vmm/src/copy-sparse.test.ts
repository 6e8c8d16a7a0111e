// copySparse's long-lived helper: holes kept, and a helper that dies fails its copies and is replaced, never crashing us.
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { copySparse } from './qemu.js';

const dir = mkdtempSync(join(tmpdir(), 'copy-sparse-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A 64 MiB file with data only at its start and at 32 MiB. */
function sparseFile(name: string): string {
  const path = join(dir, name);
  const fd = openSync(path, 'w');
  writeSync(fd, Buffer.from('start'), 0, 5, 0);
  writeSync(fd, Buffer.from('middle'), 0, 6, 32 * 1024 * 1024);
  writeSync(fd, Buffer.alloc(1), 0, 1, 64 * 1024 * 1024 - 1);
  closeSync(fd);
  return path;
}

/** The pid of this process's copy helper (there is one once a copy has run). */
function helperPid(): number {
  const pids = execFileSync('pgrep', ['-P', String(process.pid), '-f', 'sparse-copy.py'], { encoding: 'utf8' })
    .trim()
    .split('\n');
  expect(pids).toHaveLength(1);
  return Number(pids[0]);
}

function gone(pid: number): boolean {
  try {
    // A zombie still answers signal 0 until reaped: read its state instead.
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z');
  } catch {
    return true;
  }
}

async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
  expect(ok()).toBe(true);
}

describe('copySparse', () => {
  it('copies the data and keeps the holes', async () => {
    const src = sparseFile('a');
    await copySparse(src, join(dir, 'a.copy'));
    expect(readFileSync(join(dir, 'a.copy')).equals(readFileSync(src))).toBe(true);
    // 64 MiB long, a few KiB allocated.
    expect(statSync(join(dir, 'a.copy')).blocks * 512).toBeLessThan(1024 * 1024);
  });

  it('runs its helper in a process group of its own, out of reach of a Ctrl-C at the terminal', async () => {
    await copySparse(sparseFile('b'), join(dir, 'b.copy'));
    const pgid = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[2]);
    expect(pgid(helperPid())).not.toBe(pgid(process.pid));
  });

  it('fails the copy in flight when its helper dies, and the next copy gets a new helper', async () => {
    const src = sparseFile('c');
    await copySparse(src, join(dir, 'c.copy'));
    const first = helperPid();
    // Stopped, the helper holds the next request unanswered; killed, it must fail that copy as an error.
    process.kill(first, 'SIGSTOP');
    const inFlight = copySparse(src, join(dir, 'c.lost'));
    process.kill(first, 'SIGKILL');
    await expect(inFlight).rejects.toMatchObject({ code: 'internal', message: expect.stringMatching(/copy helper/) });
    await until(() => gone(first));
    // Writing to the dead helper's stdin would be EPIPE: the copy goes to a new one instead.
    await copySparse(src, join(dir, 'c.again'));
    expect(readFileSync(join(dir, 'c.again')).equals(readFileSync(src))).toBe(true);
    expect(helperPid()).not.toBe(first);
  });
});
