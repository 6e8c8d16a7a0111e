// SandboxFiles against the real Go agent (`--serve-stdio`): owners on writes and directories, and watches that end.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '@sandglass/agent-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FileWatchEvent, SandboxFiles } from './files.js';

const agentDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../agent');

/** The prebuilt agent when it is newer than every source file, else a fresh build in a temp dir. */
function agentBinary(): string {
  const prebuilt = path.join(agentDir, 'build', 'sandglass-agent');
  const sources = fs.readdirSync(agentDir).filter((f) => f.endsWith('.go') || f === 'go.mod');
  const newestSourceMs = Math.max(...sources.map((f) => fs.statSync(path.join(agentDir, f)).mtimeMs));
  if (fs.existsSync(prebuilt) && fs.statSync(prebuilt).mtimeMs > newestSourceMs) return prebuilt;
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sandglass-agent-')), 'sandglass-agent');
  execFileSync(path.join(agentDir, 'build.sh'), [out], { stdio: 'pipe' });
  return out;
}

describe('SandboxFiles over a real agent', () => {
  let binary = '';
  let tmp = '';
  const children: ChildProcess[] = [];

  async function start(): Promise<{ files: SandboxFiles; child: ChildProcess; records: string[] }> {
    const child = spawn(binary, ['--serve-stdio'], { stdio: ['pipe', 'pipe', 'ignore'] });
    children.push(child);
    const agent = new AgentClient({ readable: child.stdout!, writable: child.stdin! });
    await agent.hello();
    const records: string[] = [];
    const files = new SandboxFiles({
      requireRunning: () => agent,
      record: async (type) => {
        records.push(type);
      },
    });
    return { files, child, records };
  }

  beforeAll(() => {
    binary = agentBinary();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sandglass-files-test-'));
  }, 120_000);

  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it.skipIf(process.getuid?.() !== 0)('writes and makes directories owned by a guest user', async () => {
    const { files } = await start();
    const file = path.join(tmp, 'own', 'f.txt');
    await files.write(file, Readable.from(['data']), { owner: 'nobody' });
    const st = await files.stat(file);
    expect(st.owner).toBe('nobody');
    expect(fs.statSync(path.join(tmp, 'own')).uid).toBe(st.uid);
    await files.mkdir(path.join(tmp, 'own', 'd'), { owner: st.uid });
    expect((await files.list(path.join(tmp, 'own'), 1)).map((e) => [e.name, e.owner])).toEqual(
      expect.arrayContaining([
        ['d', 'nobody'],
        ['f.txt', 'nobody'],
      ]),
    );
    await expect(files.mkdir(path.join(tmp, 'own', 'e'), { owner: 'no-such-user' })).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('delivers changes until close, and ends a watch when the agent goes away', async () => {
    const { files, child } = await start();
    const dir = fs.mkdtempSync(path.join(tmp, 'w-'));
    const events: FileWatchEvent[] = [];
    let wake: () => void = () => undefined;
    const until = async (pred: () => boolean) => {
      while (!pred()) await new Promise<void>((r) => (wake = r));
    };
    const w = await files.watch(dir, { recursive: true }, (ev) => {
      events.push(ev);
      wake();
    });
    fs.mkdirSync(path.join(dir, 'sub'));
    fs.writeFileSync(path.join(dir, 'sub', 'f'), 'x');
    await until(() => events.some((e) => e.op === 'write' && e.name === 'sub/f'));
    await w.close();
    await w.close();

    await expect(files.watch(path.join(dir, 'missing'), {}, () => undefined)).rejects.toMatchObject({ code: 'file_not_found' });
    await expect(files.watch(path.join(dir, 'sub', 'f'), {}, () => undefined)).rejects.toMatchObject({ code: 'not_a_directory' });

    const second: FileWatchEvent[] = [];
    let onEnd: (ev: FileWatchEvent) => void = () => undefined;
    const ended = new Promise<FileWatchEvent>((resolve) => (onEnd = resolve));
    await files.watch(dir, {}, (ev) => {
      second.push(ev);
      if (ev.op === 'end') onEnd(ev);
    });
    child.kill('SIGKILL');
    const end = await ended;
    expect(end).toMatchObject({ op: 'end', error: { code: 'sandbox_not_running' } });
    expect(second.filter((e) => e.op === 'end')).toHaveLength(1);
  });
});
