import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { lockHome } from './home-lock.js';
import { parseStatStartTime, processStartTime } from './proc.js';

describe('home lock', () => {
  it('is taken once per process and released by its holder', () => {
    const home = mkdtempSync(join(tmpdir(), 'sg-lock-'));
    const lock = lockHome(home);
    expect(lockHome(home)).toBe(lock);
    expect(JSON.parse(readFileSync(lock.file, 'utf8')).pid).toBe(process.pid);
    lock.release();
    expect(existsSync(lock.file)).toBe(false);
  });

  it('refuses while another live process holds it, naming that process', async () => {
    const home = mkdtempSync(join(tmpdir(), 'sg-lock-'));
    const other = spawn('sleep', ['30']);
    try {
      await new Promise((r) => other.once('spawn', r));
      writeFileSync(join(home, 'lock'), JSON.stringify({ pid: other.pid, startTime: processStartTime(other.pid!) }));
      expect(() => lockHome(home)).toThrow(new RegExp(`pid ${other.pid} \\(sleep 30\\)`));
    } finally {
      other.kill('SIGKILL');
    }
  });

  it('takes over a lock whose owner is gone, or whose pid now names a later process', () => {
    const home = mkdtempSync(join(tmpdir(), 'sg-lock-'));
    writeFileSync(join(home, 'lock'), JSON.stringify({ pid: process.pid, startTime: '1' }));
    const lock = lockHome(home);
    expect(JSON.parse(readFileSync(lock.file, 'utf8')).startTime).toBe(processStartTime(process.pid));
    lock.release();
  });
});

describe('process start time', () => {
  it('counts fields from the last parenthesis of the command name', () => {
    expect(parseStatStartTime('42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200')).toBe('987654');
    expect(parseStatStartTime('garbage')).toBeUndefined();
    expect(processStartTime(0)).toBeUndefined();
  });
});
