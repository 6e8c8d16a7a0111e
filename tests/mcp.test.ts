// `sandglass mcp` as an agent's MCP client meets it: the official SDK's Client spawns it over stdio (and reaches it
// over streamable HTTP), with the credentials in the environment as a desktop agent's config gives them, against the
// suite's real server and VMs.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Progress } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminKey, api, apiUrl, gatewayUrl } from './helpers.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const bin = join(root, 'bin/sandglass');
const env = { SANDGLASS_URL: apiUrl, SANDGLASS_API_KEY: adminKey };

interface Answer {
  isError?: boolean;
  content: { type: string; text?: string }[];
  structuredContent?: Record<string, any>;
}

describe('sandglass mcp over stdio', () => {
  const client = new Client({ name: 'sandglass-test', version: '0' });
  const stderr: string[] = [];
  const call = async (name: string, args: Record<string, unknown>, onprogress?: (p: Progress) => void): Promise<Answer> =>
    (await client.callTool({ name, arguments: args }, undefined, { onprogress, timeout: 240_000 })) as Answer;
  const ok = async (name: string, args: Record<string, unknown>, onprogress?: (p: Progress) => void) => {
    const a = await call(name, args, onprogress);
    expect(a.isError, `${name}: ${a.content[0]?.text}`).toBeFalsy();
    return a.structuredContent!;
  };
  const sandboxes: string[] = [];

  beforeAll(async () => {
    // The README's desktop-agent configuration, with this checkout's path and the test server's URL and key.
    const block = /^```json\n(\{\n {2}"mcpServers"[\s\S]*?)^```$/m.exec(readFileSync(join(root, 'README.md'), 'utf8'))?.[1];
    if (!block) throw new Error('README.md has no ```json block of mcpServers');
    const entry = (JSON.parse(block) as { mcpServers: { sandglass: { command: string; args: string[]; env: Record<string, string> } } }).mcpServers.sandglass;
    expect(Object.keys(entry.env).sort()).toEqual(Object.keys(env).sort());
    const command = entry.command.replace('/path/to/sandglass/', root);
    expect(command).toBe(bin);
    const transport = new StdioClientTransport({ command, args: entry.args, env: { ...env, PATH: process.env.PATH ?? '' }, stderr: 'pipe' });
    transport.stderr?.on('data', (d: Buffer) => stderr.push(d.toString()));
    await client.connect(transport);
  }, 120_000);
  afterAll(async () => {
    for (const id of sandboxes) await call('kill_sandbox', { sandboxId: id }).catch(() => undefined);
    await client.close();
  });

  it('lists its tools, each with a JSON Schema of its input', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      [
        'create_sandbox',
        'fork',
        'kill_command',
        'kill_sandbox',
        'list_files',
        'list_ports',
        'list_sandboxes',
        'pause',
        'port_url',
        'read_command_output',
        'read_file',
        'resume',
        'run_command',
        'sandbox_info',
        'sandbox_metrics',
        'set_port_public',
        'snapshot',
        'timeline',
        'write_file',
        'write_stdin',
      ].sort(),
    );
    const run = tools.find((t) => t.name === 'run_command')!;
    expect(run.inputSchema.type).toBe('object');
    expect(run.inputSchema.required).toEqual(['sandboxId', 'cmd']);
    expect(Object.keys(run.inputSchema.properties ?? {})).toEqual(expect.arrayContaining(['sandboxId', 'cmd', 'cwd', 'envs', 'timeoutMs', 'background']));
  });

  it('creates, runs with output as progress, files, snapshot, fork, port URL, pause, resume, kill', async () => {
    const created = await ok('create_sandbox', { timeoutS: 600 });
    const id = created.id as string;
    sandboxes.push(id);
    expect(id).toMatch(/^sbx_/);
    expect(created.state).toBe('running');
    // The access grant is a credential of the server's: it never reaches the agent.
    expect(created).not.toHaveProperty('access');
    expect((await ok('list_sandboxes', { state: 'running' })).sandboxes.map((s: { id: string }) => s.id)).toContain(id);

    const progress: Progress[] = [];
    const ran = await ok('run_command', { sandboxId: id, cmd: 'echo "one $A"; echo two >&2; echo three; exit 3', envs: { A: 'x' } }, (p) => progress.push(p));
    expect(ran).toMatchObject({ exitCode: 3, stdout: 'one x\nthree\n', stderr: 'two\n', timedOut: false });
    // Every byte of output came as progress before the answer, each notification further on than the last.
    const streamed = (stream: string) =>
      progress
        .filter((p) => (p as Progress & { _meta?: { stream?: string } })._meta?.stream === stream)
        .map((p) => p.message)
        .join('');
    expect(streamed('stdout')).toBe('one x\nthree\n');
    expect(streamed('stderr')).toBe('two\n');
    const marks = progress.map((p) => p.progress);
    expect(marks).toEqual([...marks].sort((a, b) => a - b));
    expect(marks.at(-1)).toBe(Buffer.byteLength('one x\nthree\ntwo\n'));

    const bg = await ok('run_command', {
      sandboxId: id,
      cmd: 'echo started; until [ -e /tmp/mcp-go ]; do sleep 0.05; done; echo done; exit 4',
      background: true,
    });
    expect(bg.commandId).toEqual(expect.any(String));
    const first = await ok('read_command_output', { sandboxId: id, commandId: bg.commandId });
    // It waits for a file that is not there yet: it is still running, and the tool answered without waiting for it.
    expect(first.exit).toBeUndefined();
    await ok('write_file', { sandboxId: id, path: '/tmp/mcp-go', content: 'go\n' });
    let read = first;
    let stdout = first.stdout as string;
    while (!read.exit) {
      read = await ok('read_command_output', { sandboxId: id, commandId: bg.commandId, fromOffset: read.outputOffset });
      stdout += read.stdout;
    }
    expect(stdout).toBe('started\ndone\n');
    expect(read.exit.exitCode).toBe(4);

    await ok('write_file', { sandboxId: id, path: '/tmp/mcp/hello.txt', content: 'hello from mcp\n' });
    const bytes = randomBytes(4096);
    await ok('write_file', { sandboxId: id, path: '/tmp/mcp/blob.bin', content: bytes.toString('base64'), encoding: 'base64', mode: 0o600 });
    expect(await ok('read_file', { sandboxId: id, path: '/tmp/mcp/hello.txt' })).toMatchObject({ content: 'hello from mcp\n', encoding: 'utf8' });
    expect((await ok('read_file', { sandboxId: id, path: '/tmp/mcp/blob.bin', encoding: 'base64' })).content).toBe(bytes.toString('base64'));
    const listed = (await ok('list_files', { sandboxId: id, path: '/tmp/mcp' })).entries as { name: string; sizeBytes: number; mode: number }[];
    expect(listed.map((e) => e.name).sort()).toEqual(['blob.bin', 'hello.txt']);
    expect(listed.find((e) => e.name === 'blob.bin')).toMatchObject({ sizeBytes: 4096 });

    const snap = await ok('snapshot', { sandboxId: id, name: 'mcp-test' });
    expect(snap.id).toMatch(/^snap_/);
    const forks = (await ok('fork', { from: snap.id, timeoutS: 600 })).sandboxes as { id: string }[];
    expect(forks).toHaveLength(1);
    const forkId = forks[0]!.id;
    sandboxes.push(forkId);
    expect(forkId).not.toBe(id);
    expect(await ok('run_command', { sandboxId: forkId, cmd: 'cat /tmp/mcp/hello.txt' })).toMatchObject({ exitCode: 0, stdout: 'hello from mcp\n' });

    const url = await ok('port_url', { sandboxId: id, port: 8000 });
    expect(url.host).toContain(`8000-${id}.`);
    expect(new URL(url.url as string).hostname).toBe(url.host.split(':')[0]);

    expect((await ok('list_ports', { sandboxId: id })).ports).toEqual(expect.any(Array));

    const paused = await ok('pause', { sandboxId: id });
    expect(paused.id).toMatch(/^snap_/);
    expect((await ok('list_sandboxes', { state: 'paused' })).sandboxes.map((s: { id: string }) => s.id)).toContain(id);
    expect(await ok('resume', { sandboxId: id })).toMatchObject({ id, state: 'running' });
    expect(await ok('read_file', { sandboxId: id, path: '/tmp/mcp/hello.txt' })).toMatchObject({ content: 'hello from mcp\n' });

    expect(await ok('kill_sandbox', { sandboxId: forkId })).toEqual({ killed: forkId });
    expect((await ok('list_sandboxes', { state: 'running' })).sandboxes.map((s: { id: string }) => s.id)).not.toContain(forkId);
  });

  it('creates with network, secrets, onTimeout and autoResume; metrics, public ports, stdin, timeline', async () => {
    const secret = `MCP_TOKEN_${randomBytes(4).toString('hex').toUpperCase()}`;
    expect((await api('PUT', `/v1/secrets/${secret}`, { body: { value: 'mcp-s3cret-value', hosts: ['api.example.com'] } })).status).toBeLessThan(300);
    // Its timeout keeps the disk alone: the cheapest pause, and the option reaches the server.
    const pausing = await ok('create_sandbox', { timeoutS: 20, onTimeout: 'pause', autoResume: true, onTimeoutKeepMemory: false, snapshotIntervalS: 3600 });
    sandboxes.push(pausing.id as string);
    expect(pausing).toMatchObject({ onTimeout: 'pause', autoResume: true, onTimeoutKeepMemory: false, snapshotIntervalS: 3600 });
    const created = await ok('create_sandbox', { timeoutS: 600, network: { allow: ['example.com'], deny: ['bad.example.com'] }, secrets: [secret] });
    const id = created.id as string;
    sandboxes.push(id);
    expect(created).toMatchObject({ onTimeout: 'kill', autoResume: false, network: { allow: ['example.com'], deny: ['bad.example.com'] }, secrets: [secret] });
    const info = await ok('sandbox_info', { sandboxId: id });
    expect(info).toMatchObject({ id, state: 'running', secrets: [secret], network: { allow: ['example.com'] } });
    // Neither the access grant nor the secret's value reaches the agent; the guest holds a placeholder only.
    for (const answer of [created, info, pausing]) {
      expect(answer).not.toHaveProperty('access');
      expect(JSON.stringify(answer)).not.toContain('mcp-s3cret-value');
    }
    const placeholder = (await ok('run_command', { sandboxId: id, cmd: `printenv ${secret}` })).stdout as string;
    expect(placeholder.trim()).not.toBe('');
    expect(placeholder).not.toContain('mcp-s3cret-value');

    // The gateway samples every few seconds: wait for the first.
    let metrics: Record<string, any>[] = [];
    while (metrics.length === 0) metrics = (await ok('sandbox_metrics', { sandboxId: id })).metrics;
    expect(metrics[0]).toMatchObject({ cpuCount: expect.any(Number), memTotalBytes: expect.any(Number), diskTotalBytes: expect.any(Number) });
    expect(metrics[0]!.memTotalBytes).toBeGreaterThan(0);
    const later = new Date(Date.now() + 3_600_000).toISOString();
    expect((await ok('sandbox_metrics', { sandboxId: id, start: later })).metrics).toEqual([]);
    expect((await ok('sandbox_metrics', { sandboxId: id, end: metrics[0]!.timestamp })).metrics.map((m: { timestamp: string }) => m.timestamp)).toEqual([
      metrics[0]!.timestamp,
    ]);

    await ok('write_file', { sandboxId: id, path: '/tmp/www/hi.txt', content: `hello from ${id}` });
    await ok('run_command', { sandboxId: id, cmd: 'cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1', background: true, timeoutMs: 0 });
    while (!(await ok('list_ports', { sandboxId: id })).ports.some((p: { port: number }) => p.port === 8000));
    const anonymous = () => fetch(`${gatewayUrl}/v1/sandboxes/${id}/ports/8000/hi.txt`);
    expect((await anonymous()).status).toBe(401);
    expect(await ok('set_port_public', { sandboxId: id, port: 8000, public: true })).toEqual({ port: 8000, public: true });
    const open = await anonymous();
    expect([open.status, await open.text()]).toEqual([200, `hello from ${id}`]);
    expect((await ok('list_ports', { sandboxId: id })).ports.find((p: { port: number }) => p.port === 8000)).toMatchObject({ public: true });
    expect(await ok('set_port_public', { sandboxId: id, port: 8000, public: false })).toEqual({ port: 8000, public: false });
    expect((await anonymous()).status).toBe(401);

    const reader = await ok('run_command', { sandboxId: id, cmd: 'read line; echo "got $line"; wc -c', background: true, stdin: true });
    expect(await ok('write_stdin', { sandboxId: id, commandId: reader.commandId, data: 'first\n' })).toEqual({ writtenBytes: 6, eof: false });
    await ok('write_stdin', { sandboxId: id, commandId: reader.commandId, data: Buffer.from('abc').toString('base64'), encoding: 'base64', eof: true });
    let read = await ok('read_command_output', { sandboxId: id, commandId: reader.commandId });
    let out = read.stdout as string;
    while (!read.exit) {
      read = await ok('read_command_output', { sandboxId: id, commandId: reader.commandId, fromOffset: read.outputOffset });
      out += read.stdout;
    }
    // wc saw the three bytes after the line, then the end of its input.
    expect(out.split(/\s+/).filter(Boolean)).toEqual(['got', 'first', '3']);
    expect(read.exit.exitCode).toBe(0);

    const snap = await ok('snapshot', { sandboxId: id, name: 'mcp-timeline' });
    const timeline = await ok('timeline', { sandboxId: id });
    expect(timeline.snapshots.map((s: { id: string }) => s.id)).toContain(snap.id);
    expect(timeline.cadence).toMatchObject({ intervalS: expect.any(Number) });

    // Its 20 s ran out meanwhile or will: it is paused, not ended, and keeps its answers' shape.
    while ((await ok('sandbox_info', { sandboxId: pausing.id })).state !== 'paused');
    expect(await ok('sandbox_info', { sandboxId: pausing.id })).toMatchObject({ state: 'paused', onTimeout: 'pause', autoResume: true });
    const pausedAt = (await ok('timeline', { sandboxId: pausing.id })).snapshots.find((s: { reason: string }) => s.reason === 'pause');
    expect(pausedAt).toMatchObject({ memory: false });
    await api('DELETE', `/v1/secrets/${secret}`);
  }, 400_000);

  it('refuses bad create arguments naming the field, and creates nothing', async () => {
    const probe = `mcp-bad-${randomBytes(4).toString('hex')}`;
    const cases: [Record<string, unknown>, string][] = [
      [{ onTimeout: 'sleep' }, 'onTimeout'],
      [{ autoResume: 'yes' }, 'autoResume'],
      [{ network: { allow: 'example.com' } }, 'network.allow'],
      [{ network: { allowOut: ['example.com'] } }, 'network.allowOut'],
      [{ secrets: ['not a name'] }, 'secrets.0'],
      [{ snapshotIntervalS: 2 }, 'snapshotIntervalS'],
    ];
    for (const [args, field] of cases) {
      const a = await call('create_sandbox', { ...args, metadata: { probe } });
      expect(a.isError, JSON.stringify(args)).toBe(true);
      expect(a.structuredContent?.error).toMatchObject({ code: 'invalid_argument', details: { field } });
      expect(a.content[0]?.text).toMatch(new RegExp(`^invalid_argument: ${field.replaceAll('.', '\\.')}: `));
    }
    for (const [tool, args, field] of [
      ['sandbox_metrics', { sandboxId: 'sbx_x', end: 'tomorrow' }, 'end'],
      ['set_port_public', { sandboxId: 'sbx_x', port: 8000, public: 'yes' }, 'public'],
      ['write_stdin', { sandboxId: 'sbx_x', commandId: 'c', encoding: 'hex' }, 'encoding'],
    ] as const) {
      expect((await call(tool, args)).structuredContent?.error).toMatchObject({ code: 'invalid_argument', details: { field } });
    }
    const all = (await api('GET', '/v1/sandboxes')).body!.sandboxes as { metadata: Record<string, string> }[];
    expect(all.filter((s) => s.metadata.probe === probe)).toEqual([]);
  });

  it('kills a command whose call the client cancels', async () => {
    const id = (await ok('create_sandbox', { timeoutS: 600 })).id as string;
    sandboxes.push(id);
    const abort = new AbortController();
    // No time limit of its own: only the cancel can end it.
    const cancelled = client
      .callTool({ name: 'run_command', arguments: { sandboxId: id, cmd: 'echo go; exec sleep 3001', timeoutMs: 0 } }, undefined, {
        signal: abort.signal,
        onprogress: (p) => {
          if (p.message === 'go\n') abort.abort();
        },
      })
      .then(
        () => 'answered',
        () => 'cancelled',
      );
    expect(await cancelled).toBe('cancelled');
    // Until the process is gone; were it never killed, the test runs out of its time here.
    while ((await ok('run_command', { sandboxId: id, cmd: 'pgrep -x -f "sleep 3001"' })).exitCode === 0);
  }, 120_000);

  it('answers bad input with invalid_argument naming the field, and an unknown sandbox with sandbox_not_found', async () => {
    const bad = await call('run_command', { sandboxId: 'sbx_x', cmd: 'true', timeoutMs: -1 });
    expect(bad.isError).toBe(true);
    expect(bad.structuredContent?.error).toMatchObject({ code: 'invalid_argument', details: { field: 'timeoutMs' } });
    expect(bad.content[0]?.text).toMatch(/^invalid_argument: timeoutMs: /);
    const extra = await call('write_file', { sandboxId: 'sbx_x', path: '/tmp/a', content: '', contents: 'typo' });
    expect(extra.structuredContent?.error).toMatchObject({ code: 'invalid_argument', details: { field: 'contents' } });
    const missing = await call('read_file', { sandboxId: 'sbx_x' });
    expect(missing.structuredContent?.error).toMatchObject({ code: 'invalid_argument', details: { field: 'path' } });

    const unknown = await call('run_command', { sandboxId: 'sbx_doesnotexist0000', cmd: 'true' });
    expect(unknown.isError).toBe(true);
    expect(unknown.structuredContent?.error.code).toBe('sandbox_not_found');
    expect(unknown.content[0]?.text).toMatch(/^sandbox_not_found: /);
    // Nothing of a defect reached stderr on the way.
    expect(stderr.join('')).not.toContain('sandglass mcp:');
  });
});

describe('sandglass mcp --http', () => {
  let proc: ReturnType<typeof spawn>;
  let url: string;

  beforeAll(async () => {
    proc = spawn(bin, ['mcp', '--http', '--port', '0'], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    url = await new Promise<string>((resolve, reject) => {
      let err = '';
      proc.stderr!.on('data', (d: Buffer) => {
        err += d.toString();
        const m = /streamable HTTP on (\S+)/.exec(err);
        if (m) resolve(m[1]!);
      });
      proc.once('exit', (code) => reject(new Error(`sandglass mcp --http exited ${code}: ${err}`)));
    });
  }, 120_000);
  afterAll(() => {
    proc.kill('SIGTERM');
  });

  it('listens on loopback and lets in only a client holding the API key', async () => {
    expect(new URL(url).hostname).toBe('127.0.0.1');
    const init = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '0' } },
    };
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const post = (extra: Record<string, string>) => fetch(url, { method: 'POST', headers: { ...headers, ...extra }, body: JSON.stringify(init) });
    expect((await post({})).status).toBe(401);
    expect((await post({ authorization: 'Bearer sk_wrong' })).status).toBe(401);
    // A page of another origin, as a DNS-rebinding attack makes one, is refused even with the key.
    expect((await post({ authorization: `Bearer ${adminKey}`, origin: 'http://attacker.example' })).status).toBe(403);
    // So is a request naming another host, as a rebound name's same-origin GET does (it carries no Origin).
    const rebound = await new Promise<number>((resolve, reject) => {
      const u = new URL(url);
      http
        .get(
          { host: u.hostname, port: u.port, path: u.pathname, headers: { host: `attacker.example:${u.port}`, authorization: `Bearer ${adminKey}` } },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        )
        .on('error', reject);
    });
    expect(rebound).toBe(403);

    const client = new Client({ name: 'sandglass-http-test', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${adminKey}` } } }));
    try {
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('run_command');
      const unknown = (await client.callTool({ name: 'kill_sandbox', arguments: { sandboxId: 'sbx_doesnotexist0000' } })) as Answer;
      expect(unknown.structuredContent?.error.code).toBe('sandbox_not_found');
    } finally {
      await client.close();
    }
  });
});
