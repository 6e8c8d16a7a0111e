// The `sandglass` CLI as a user runs it: it finds the local server and key by itself.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { apiUrl, home } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

function sg(args: string[], input?: string | Buffer) {
  const env: NodeJS.ProcessEnv = { ...process.env, SANDGLASS_HOME: home };
  delete env.SANDGLASS_URL;
  delete env.SANDGLASS_API_KEY;
  const r = spawnSync(bin, args, { env, input, timeout: 120_000 });
  return { code: r.status, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8'), raw: r.stdout };
}

describe('sandglass CLI', () => {
  it('create, exec, cp, ls, events, attach, kill', () => {
    const created = sg(['create', '--json', '--timeout-s', '600']);
    expect(created.code, created.stderr).toBe(0);
    const id = JSON.parse(created.stdout).id as string;
    expect(id).toMatch(/^sbx_/);

    const ok = sg(['exec', id, '--cwd', '/tmp', '--env', 'A=1', '--env', 'B=two words', '--', 'bash', '-c', 'echo "$A $B $(pwd)"; echo oops >&2; exit 5']);
    expect(ok.code).toBe(5);
    expect(ok.stdout).toBe('1 two words /tmp\n');
    expect(ok.stderr).toContain('oops');

    const piped = sg(['exec', id, '-i', '--', 'wc', '-c'], 'twelve bytes');
    expect(piped.stdout.trim()).toBe('12');

    const dir = mkdtempSync(join(tmpdir(), 'sg-cli-'));
    const data = randomBytes(3 * 1024 * 1024 + 17);
    writeFileSync(join(dir, 'in.bin'), data);
    expect(sg(['cp', join(dir, 'in.bin'), `${id}:/root/in.bin`]).code).toBe(0);
    expect(sg(['cp', `${id}:/root/in.bin`, join(dir, 'out.bin')]).code).toBe(0);
    expect(readFileSync(join(dir, 'out.bin')).equals(data)).toBe(true);

    const bg = sg(['exec', id, '--background', '--', 'bash', '-c', 'for i in 1 2 3; do echo tick$i; sleep 0.3; done']);
    expect(bg.code).toBe(0);
    const cmdId = bg.stdout.trim();
    expect(cmdId).toMatch(/^cmd_/);
    const attached = sg(['attach', id, cmdId]);
    expect(attached.stdout).toBe('tick1\ntick2\ntick3\n');

    const ls = sg(['ls']);
    expect(ls.stdout).toContain(id);
    const events = sg(['events', id]);
    expect(events.stdout).toContain('sandbox.created');
    expect(events.stdout).toContain('command.exited');

    expect(sg(['kill', id]).code).toBe(0);
    const after = sg(['exec', id, '--', 'true']);
    expect(after.code).toBe(1);
    expect(after.stderr).toMatch(/sandbox_not_running|sandbox_not_found/);
  });

  it('run = create, exec, kill', () => {
    const r = sg(['run', '--', 'python3', '-c', 'import sys; print("py", sys.version_info[0]); sys.exit(3)']);
    expect(r.stdout).toBe('py 3\n');
    expect(r.code).toBe(3);
  });

  it('fails clearly on bad input', () => {
    const r = sg(['exec', 'sbx_aaaaaaaaaaaaaaaaaaaa', '--', 'true']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('sandbox_not_found');
    const bad = sg(['create', '--memory-mib', '5']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('invalid_argument');
  });

  it('up refuses a home another server holds with error: conflict: …, no stack trace', () => {
    // A second `up` on this run's home and port: the home lock, taken before anything else, must turn it away.
    const r = sg(['up', '--port', new URL(apiUrl).port]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: conflict: Another Sandglass server is running on /);
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });
});
