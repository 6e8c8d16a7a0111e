import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock, systemClock, type Clock } from '@sandglass/core';
import { HostileAgent } from '@sandglass/agent-client/hostile-agent';
import { EventQuota, type GatewayEvent } from './events.js';
import type { Sandbox } from './sandbox.js';
import { sandboxOnDouble } from './sandbox-double.js';

let agent: HostileAgent | undefined;
let sandbox: Sandbox | undefined;

afterEach(async () => {
  await sandbox?.end('killed');
  await agent?.close();
  sandbox = undefined;
  agent = undefined;
});

/** A running Sandbox linked to a hostile agent; the VM is a stand-in that never exits (no QEMU in unit tests). */
async function hostileSandbox(events: GatewayEvent[], clock: Clock = systemClock) {
  agent = await HostileAgent.connect();
  const sink = new EventQuota({ append: (e: GatewayEvent) => void events.push(e) }, { clock, maxPerWindow: 50, windowMs: 60_000 });
  sandbox = await sandboxOnDouble(agent, { id: 'sbx_hostile', events: sink, clock });
  return { agent, sandbox };
}

describe('a sandbox whose agent misbehaves', () => {
  it('records one command.exited however often the agent replays proc.exit, and none for unknown ids', async () => {
    const events: GatewayEvent[] = [];
    const { agent, sandbox } = await hostileSandbox(events);
    agent.onCall = (call) => void agent.reply(call.id, call.method === 'proc.start' ? { pid: 42 } : {});
    const rec = await sandbox.startCommand({ argv: ['true'] });
    const exit = { event: 'proc.exit', id: rec.id, exitCode: 0, signal: null, outputBytes: 3 };
    for (let i = 0; i < 5; i++) await agent.event(exit);
    await agent.event({ ...exit, exitCode: 7 });
    await agent.event({ event: 'proc.exit', id: 'cmd_unknown', exitCode: 1, signal: null, outputBytes: 0 });
    await agent.event({ event: 'proc.exit', id: 42, exitCode: 1 });
    await agent.client.ping();
    const exited = events.filter((e) => e.type === 'command.exited');
    expect(exited).toHaveLength(1);
    expect(exited[0]!.data).toMatchObject({ commandId: rec.id, exitCode: 0 });
    expect(rec.exitCode).toBe(0);
  });

  it('takes only well-formed exit fields from the agent', async () => {
    const events: GatewayEvent[] = [];
    const { agent, sandbox } = await hostileSandbox(events);
    agent.onCall = (call) => void agent.reply(call.id, call.method === 'proc.start' ? { pid: 42 } : {});
    const rec = await sandbox.startCommand({ argv: ['true'] });
    await agent.event({ event: 'proc.exit', id: rec.id, exitCode: 'x'.repeat(100_000), signal: 'y'.repeat(100_000), outputBytes: -5 });
    await agent.client.ping();
    const exited = events.find((e) => e.type === 'command.exited')!;
    expect(exited.data).toMatchObject({ exitCode: null, signal: null, outputBytes: 0 });
    expect(JSON.stringify(exited).length).toBeLessThan(1000);
  });

  it('records a credit overrun once, however many streams the agent overruns', async () => {
    const events: GatewayEvent[] = [];
    const { agent } = await hostileSandbox(events);
    agent.client.on('net.open', (c) => c.on('error', () => {}));
    for (let i = 1; i <= 3; i++) {
      const stream = 0x80000000 + i;
      await agent.event({ event: 'net.open', stream, peer: '127.0.0.1:1', window: 1024, recvWindow: 1024 });
      await agent.data(stream, Buffer.alloc(4096));
    }
    await agent.client.ping();
    expect(events.filter((e) => e.type === 'agent.protocol_violation')).toHaveLength(1);
  });
});

describe('the per-sandbox event quota', () => {
  it('passes events up to the cap, then records one quota.events_dropped and drops the rest until the window ends', () => {
    const clock = new ManualClock();
    const events: GatewayEvent[] = [];
    const quota = new EventQuota({ append: (e: GatewayEvent) => void events.push(e) }, { clock, maxPerWindow: 10, windowMs: 1000 });
    const ev = (sandboxId: string, type = 'egress.request') => ({ type, tenantId: 'ten_a', sandboxId, data: {} });
    for (let i = 0; i < 10_000; i++) quota.append(ev('sbx_a'));
    quota.append(ev('sbx_a', 'sandbox.failed'));
    quota.append(ev('sbx_b'));
    expect(events.filter((e) => e.sandboxId === 'sbx_a' && e.type === 'egress.request')).toHaveLength(10);
    expect(events.filter((e) => e.type === 'quota.events_dropped')).toEqual([
      { type: 'quota.events_dropped', tenantId: 'ten_a', sandboxId: 'sbx_a', data: { maxPerWindow: 10, windowS: 1, firstDroppedType: 'egress.request' } },
    ]);
    expect(events.some((e) => e.type === 'sandbox.failed')).toBe(true);
    expect(events.filter((e) => e.sandboxId === 'sbx_b')).toHaveLength(1);
    clock.advance(1000);
    quota.append(ev('sbx_a'));
    expect(events.filter((e) => e.sandboxId === 'sbx_a' && e.type === 'egress.request')).toHaveLength(11);
  });

  it('holds a sandbox whose guest floods exits to the cap', async () => {
    const events: GatewayEvent[] = [];
    const { agent, sandbox } = await hostileSandbox(events);
    let pid = 100;
    agent.onCall = (call) => void agent.reply(call.id, call.method === 'proc.start' ? { pid: pid++ } : {});
    for (let i = 0; i < 40; i++) {
      const rec = await sandbox.startCommand({ argv: ['true'] });
      await agent.event({ event: 'proc.exit', id: rec.id, exitCode: 0, signal: null, outputBytes: 0 });
    }
    await agent.client.ping();
    // 40 started + 40 exited against a cap of 50: 50 recorded, then one notice.
    expect(events.filter((e) => e.type.startsWith('command.'))).toHaveLength(50);
    expect(events.filter((e) => e.type === 'quota.events_dropped')).toHaveLength(1);
  });
});

describe('file names a replaced agent answers with', () => {
  const entry = (name: string, path: string, type = 'file') => ({
    name,
    path,
    type,
    sizeBytes: 1,
    mode: 0o644,
    mtimeMs: 0,
    uid: 0,
    gid: 0,
    owner: 'root',
    group: 'root',
  });

  /** A sandbox whose agent answers file.stat and file.list as `answer` says and acknowledges watches. */
  async function answering(answer: { stat?: (path: string) => unknown; list?: (path: string) => unknown[] }) {
    const { agent, sandbox } = await hostileSandbox([]);
    agent.onCall = (call) => {
      const path = String(call.params.path);
      if (call.method === 'file.stat') return void agent.reply(call.id, answer.stat?.(path) ?? entry(path === '/' ? '/' : path.split('/').pop()!, path));
      if (call.method === 'file.list') return void agent.reply(call.id, { entries: answer.list?.(path) ?? [] });
      void agent.reply(call.id, {});
    };
    return { agent, sandbox };
  }

  it('passes a stat and a listing that name the files asked about', async () => {
    const { sandbox } = await answering({ list: (p) => [entry('a.txt', `${p}/a.txt`), entry('sub', `${p}/sub`, 'dir'), entry('b', `${p}/sub/b`)] });
    expect(await sandbox.files.stat('/dir/blob.bin')).toMatchObject({ name: 'blob.bin', path: '/dir/blob.bin' });
    expect(await sandbox.files.stat('/')).toMatchObject({ name: '/', path: '/' });
    expect((await sandbox.files.list('/dir', 2)).map((e) => e.path)).toEqual(['/dir/a.txt', '/dir/sub', '/dir/sub/b']);
  });

  it.each(['../../.bashrc', '..', '.', 'a/b', 'x\0y', '', 'other.bin'])('refuses a stat naming %j', async (name) => {
    const { sandbox } = await answering({ stat: (path) => entry(name, path) });
    await expect(sandbox.files.stat('/dir/blob.bin')).rejects.toMatchObject({ code: 'vm_reply_refused', details: { field: 'name' } });
    await expect(sandbox.files.open('/dir/blob.bin')).rejects.toMatchObject({ code: 'vm_reply_refused' });
  });

  it('refuses a stat of another path than the one asked about', async () => {
    const { sandbox } = await answering({ stat: () => entry('blob.bin', '/etc/blob.bin') });
    await expect(sandbox.files.stat('/dir/blob.bin')).rejects.toMatchObject({ code: 'vm_reply_refused', details: { field: 'path' } });
  });

  it.each([
    ['a name with ..', entry('..', '/dir/..')],
    ['a name with a slash', entry('../../.bashrc', '/dir/../../.bashrc')],
    ['a name with NUL', entry('a\0b', '/dir/a\0b')],
    ['a path outside the directory', entry('passwd', '/etc/passwd')],
    ['a path whose last name is not the entry’s', entry('a.txt', '/dir/b.txt')],
    ['a path deeper than asked', entry('b', '/dir/sub/b')],
    ['a path through ..', entry('x', '/dir/../x')],
  ])('refuses a listing with %s', async (_what, bad) => {
    const { sandbox } = await answering({ list: (p) => [entry('ok', `${p}/ok`), bad] });
    await expect(sandbox.files.list('/dir', 1)).rejects.toMatchObject({ code: 'vm_reply_refused' });
  });

  it.each([
    ['../../.bashrc', true],
    ['a/../../b', true],
    ['./x', true],
    ['a//b', true],
    ['sub/x', false],
  ])('ends a watch with vm_reply_refused when an event names %j (recursive: %s)', async (name, recursive) => {
    const { agent, sandbox } = await answering({});
    const seen: Array<{ op: string; name?: string; error?: { code: string } }> = [];
    await sandbox.files.watch('/dir', { recursive }, (ev) => seen.push(ev as (typeof seen)[number]));
    const watchId = (
      JSON.parse((await agent.waitFor((f) => f.payload.toString().includes('"fs.watch"'))).payload.toString()) as { params: { watchId: string } }
    ).params.watchId;
    await agent.event({ event: 'fs.event', watchId, op: 'create', name: recursive ? 'sub/ok' : 'ok' });
    await agent.event({ event: 'fs.event', watchId, op: 'create', name });
    await agent.event({ event: 'fs.event', watchId, op: 'create', name: 'after' });
    await agent.client.ping();
    expect(seen).toEqual([
      { op: 'create', name: recursive ? 'sub/ok' : 'ok' },
      { op: 'end', error: expect.objectContaining({ code: 'vm_reply_refused' }) },
    ]);
    await agent.waitFor((f) => f.payload.toString().includes('"fs.unwatch"'));
  });
});
