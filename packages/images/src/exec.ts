// Runs the external tools an image build needs (apt-get, dpkg-deb, debootstrap, mkfs.ext4 …) and turns failures into errors that show the tool's own words.
import { spawn } from 'node:child_process';
import { SandglassError } from '@sandglass/core';

export interface ExecOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Called with each line the tool prints (stdout and stderr), for progress. */
  onLine?: (line: string) => void;
}

export interface ExecResult {
  stdout: string;
  /** stdout as bytes, for tools that write binary data. */
  stdoutBytes: Buffer;
  stderr: string;
}

const TAIL_BYTES = 2000;

/** Runs `cmd args…` to completion; rejects with the exit status and the tail of stderr (or stdout) when it fails. */
export function exec(cmd: string, args: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const partial = { stdout: '', stderr: '' };
    const collect = (which: 'stdout' | 'stderr', into: Buffer[]) => (chunk: Buffer) => {
      into.push(chunk);
      if (!opts.onLine) return;
      const text = partial[which] + chunk.toString('utf8');
      const lines = text.split(/\r?\n/);
      partial[which] = lines.pop() ?? '';
      for (const line of lines) if (line.trim() !== '') opts.onLine(line);
    };
    child.stdout.on('data', collect('stdout', out));
    child.stderr.on('data', collect('stderr', err));
    child.on('error', (e: NodeJS.ErrnoException) => {
      const hint = e.code === 'ENOENT' ? ` (${cmd} is not installed: run \`node scripts/setup.mjs\` as root)` : '';
      reject(new SandglassError('internal', `cannot run ${cmd}: ${e.message}${hint}`, { cause: e }));
    });
    child.on('close', (code, signal) => {
      const stdoutBytes = Buffer.concat(out);
      const stdout = stdoutBytes.toString('utf8');
      const stderr = Buffer.concat(err).toString('utf8');
      if (opts.onLine) for (const rest of [partial.stdout, partial.stderr]) if (rest.trim() !== '') opts.onLine(rest);
      if (code === 0) return resolve({ stdout, stdoutBytes, stderr });
      const tail = (stderr.trim() || stdout.trim()).slice(-TAIL_BYTES);
      const how = signal ? `was killed by ${signal}` : `exited with status ${code}`;
      reject(new SandglassError('internal', `${cmd} ${args.join(' ')} ${how}: ${tail}`));
    });
  });
}
