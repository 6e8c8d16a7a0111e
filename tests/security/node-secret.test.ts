// A node secret that is not exactly 32 bytes stops `sandglass up` before it serves anything: with an empty or short
// HMAC key the internal API took any bearer and access tokens could be forged.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { home as sharedHome } from '../helpers.js';

const bin = fileURLToPath(new URL('../../bin/sandglass', import.meta.url));
const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 30;
const homes: string[] = [];
afterAll(() => {
  for (const h of homes) rmSync(h, { recursive: true, force: true });
});

/** Runs `sandglass up` until it exits; one that comes up anyway (server.json written) is stopped and reported so. */
function up(home: string): Promise<{ code: number | null; started: boolean; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(bin, ['up', '--port', String(port)], {
      env: { ...process.env, SANDGLASS_HOME: home, SANDGLASS_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let started = false;
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const poll = setInterval(() => {
      if (!existsSync(join(home, 'server.json'))) return;
      started = true;
      child.kill('SIGTERM');
    }, 200);
    child.once('exit', (code) => {
      clearInterval(poll);
      resolve({ code, started, output });
    });
  });
}

describe('sandglass up with a bad node-secret', () => {
  it.each([
    ['empty', ''],
    ['truncated', 'ab'.repeat(16) + '\n'],
    ['not hex', 'zz' + 'ab'.repeat(31) + '\n'],
    ['hex that stops half way', 'ab'.repeat(10) + 'xyz' + 'a'.repeat(41) + '\n'],
    ['too long', 'ab'.repeat(40) + '\n'],
  ])('refuses to start when it is %s, naming the file and leaving it as it was', async (_why, text) => {
    const home = mkdtempSync(join(tmpdir(), 'sg-secret-'));
    homes.push(home);
    const file = join(home, 'node-secret');
    writeFileSync(file, text, { mode: 0o600 });
    // The suite's built artifacts, so that a server which wrongly accepts the secret comes up in seconds and is caught.
    symlinkSync(join(sharedHome, 'artifacts'), join(home, 'artifacts'));
    const { code, started, output } = await up(home);
    expect(started).toBe(false);
    expect(code).not.toBe(0);
    expect(output).toContain(file);
    expect(output).toContain('exactly 32 bytes');
    expect(readFileSync(file, 'utf8')).toBe(text);
  });
});
