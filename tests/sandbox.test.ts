// Real VMs through the real server and SDK: commands, stdin, signals, timeouts, PTYs, files, reconnecting to output.
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox, SandglassError } from '@sandglass/sdk';
import { checkResponsesAgainstSpec, config } from './helpers.js';

checkResponsesAgainstSpec();

let sbx: Sandbox;

beforeAll(async () => {
  sbx = await Sandbox.create({ ...config(), timeoutS: 1800 });
});

afterAll(async () => {
  await sbx?.kill();
});

describe('commands', () => {
  it('returns stdout, stderr and the exit code', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; exit 0');
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('out\n');
    expect(r.stderr).toBe('err\n');
    const failed = await sbx.commands.run('echo partial; exit 7').catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(CommandExitError);
    expect((failed as CommandExitError).exitCode).toBe(7);
    expect((failed as CommandExitError).stdout).toBe('partial\n');
  });

  it('passes env and cwd, runs as a chosen user', async () => {
    const r = await sbx.commands.run('echo "$GREETING" && pwd && id -un', { envs: { GREETING: 'hello there' }, cwd: '/tmp' });
    expect(r.stdout).toBe('hello there\n/tmp\nroot\n');
    const nobody = await sbx.commands.run('id -un', { user: 'nobody', cwd: '/' });
    expect(nobody.stdout).toBe('nobody\n');
  });

  it('streams output live through callbacks', async () => {
    const seen: string[] = [];
    await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.1; done', { onStdout: (s) => seen.push(s) });
    expect(seen.join('')).toBe('line1\nline2\nline3\n');
  });

  it('feeds stdin and closes it', async () => {
    const h = await sbx.commands.run('tr a-z A-Z', { background: true, stdin: true });
    await h.sendStdin('hello ');
    await h.sendStdin('stdin\n');
    await h.closeStdin();
    const r = await h.wait();
    expect(r.stdout).toBe('HELLO STDIN\n');
  });

  it('kills a running command', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true });
    expect(await h.kill()).toBe(true);
    const r = await h.wait().catch((e: CommandExitError) => e);
    expect((r as CommandExitError).exitCode).not.toBe(0);
    const info = await sbx.commands.getInfo(h.id);
    expect(info.state).toBe('exited');
    expect(info.signal).toBe('SIGKILL');
  });

  it('enforces a command timeout', async () => {
    const err = await sbx.commands.run('sleep 600', { timeoutMs: 1500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandglassError);
    const cmds = await sbx.commands.list();
    expect(cmds.some((c) => c.timedOut && c.argv.includes('sleep 600'))).toBe(true);
  });

  it('reports a program that does not exist', async () => {
    const err = (await sbx.commands.exec(['/no/such/program']).catch((e: unknown) => e)) as SandglassError;
    expect(err).toBeInstanceOf(SandglassError);
    expect(err.code).toBe('command_not_found');
    const viaShell = (await sbx.commands.run('no-such-program-xyz').catch((e: unknown) => e)) as CommandExitError;
    expect(viaShell.exitCode).toBe(127);
  });

  it('reconnects to a background command with no lost or repeated bytes', async () => {
    const script = 'for i in $(seq 1 200); do echo "line-$i"; sleep 0.005; done';
    const h = await sbx.commands.run(script, { background: true });
    await new Promise((r) => setTimeout(r, 1500));
    const firstPart = h.stdout;
    const offset = h.outputOffset;
    await h.disconnect();
    expect(offset).toBe(Buffer.byteLength(firstPart));
    // Disconnected mid-stream: some output seen, not all of it.
    expect(firstPart.length).toBeGreaterThan(0);
    expect(firstPart.endsWith('line-200\n')).toBe(false);
    await new Promise((r) => setTimeout(r, 500));
    const again = await sbx.commands.connect(h.id, { fromOffset: offset });
    const rest = await again.wait();
    const all = firstPart + rest.stdout;
    const expected = Array.from({ length: 200 }, (_, i) => `line-${i + 1}\n`).join('');
    expect(all).toBe(expected);
  });
});

describe('pty', () => {
  it('runs an interactive shell and follows resizes', async () => {
    let out = '';
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += Buffer.from(d).toString('utf8')) });
    await term.sendInput('stty size; echo "tty=$(tty)"\n');
    await waitFor(() => /24 80/.test(out) && /tty=\/dev\/pts\//.test(out));
    await term.resize({ cols: 132, rows: 40 });
    await term.sendInput('stty size\n');
    await waitFor(() => /40 132/.test(out));
    await term.sendInput('exit 3\n');
    const exit = await term.wait();
    expect(exit.exitCode).toBe(3);
  });
});

describe('files', () => {
  it('writes, reads, lists, stats, renames and removes', async () => {
    await sbx.files.makeDir('/work/sub');
    await sbx.files.write('/work/sub/a.txt', 'alpha');
    expect(await sbx.files.read('/work/sub/a.txt')).toBe('alpha');
    const st = await sbx.files.stat('/work/sub/a.txt');
    expect(st.type).toBe('file');
    expect(st.sizeBytes).toBe(5);
    await sbx.files.rename('/work/sub/a.txt', '/work/sub/b.txt');
    expect((await sbx.files.list('/work/sub')).map((e) => e.name)).toEqual(['b.txt']);
    expect(await sbx.files.exists('/work/sub/a.txt')).toBe(false);
    await sbx.files.remove('/work', { recursive: true });
    expect(await sbx.files.exists('/work')).toBe(false);
    const missing = (await sbx.files.read('/nope/x').catch((e: unknown) => e)) as SandglassError;
    expect(missing.code).toBe('file_not_found');
  });

  it('round-trips 100 MiB of binary data with a matching hash', async () => {
    const size = 100 * 1024 * 1024;
    const chunk = randomBytes(1024 * 1024);
    const hash = createHash('sha256');
    const src = Readable.from(
      (function* () {
        for (let i = 0; i < size / chunk.length; i++) {
          const piece = Buffer.from(chunk);
          piece.writeUInt32BE(i, 0);
          hash.update(piece);
          yield piece;
        }
      })(),
    );
    const w = await sbx.files.write('/root/big.bin', src);
    expect(w.sizeBytes).toBe(size);
    const want = hash.digest('hex');
    const inGuest = await sbx.commands.run('sha256sum /root/big.bin | cut -d" " -f1', { timeoutMs: 300_000 });
    expect(inGuest.stdout.trim()).toBe(want);
    const stream = (await sbx.files.read('/root/big.bin', { format: 'stream' })) as ReadableStream<Uint8Array>;
    const back = createHash('sha256');
    let n = 0;
    for await (const piece of stream as unknown as AsyncIterable<Uint8Array>) {
      back.update(piece);
      n += piece.length;
    }
    expect(n).toBe(size);
    expect(back.digest('hex')).toBe(want);
    await sbx.files.remove('/root/big.bin');
  });
});

async function waitFor(cond: () => boolean, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}
