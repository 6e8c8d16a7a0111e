import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock, type Clock } from '@sandglass/core';
import { HostileAgent, type HostileCall } from '@sandglass/agent-client/hostile-agent';
import { encodeJsonFrame, FrameType } from '@sandglass/agent-client';
import type { GatewayEvent } from './events.js';
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

/** A running Sandbox on an agent double; `answer` decides each call's reply (default: `{}`). */
async function runningSandbox(opts: { clock?: Clock; timeoutS?: number; answer?: (call: HostileCall, agent: HostileAgent) => void } = {}) {
  const events: GatewayEvent[] = [];
  agent = await HostileAgent.connect();
  const a = agent;
  const calls: HostileCall[] = [];
  a.onCall = (call) => {
    calls.push(call);
    if (opts.answer) opts.answer(call, a);
    else void a.reply(call.id, {});
  };
  sandbox = await sandboxOnDouble(a, {
    id: 'sbx_service',
    events: { append: (e: GatewayEvent) => void events.push(e) },
    clock: opts.clock,
    timeoutS: opts.timeoutS,
  });
  // Whatever start() called (sync) is not what a test is about.
  calls.length = 0;
  return { sandbox, agent: a, events, calls };
}

const fail = (a: HostileAgent, id: number, code: string) => void a.send(encodeJsonFrame(FrameType.reply, id, { error: { code, message: `${code} (double)` } }));

describe('file changes are recorded by the sandbox service', () => {
  it('records each change the agent confirmed, with what changed', async () => {
    const { sandbox, events } = await runningSandbox({
      answer: (call, a) => {
        if (call.method === 'file.mkdir') return void a.reply(call.id, { created: call.params.path === '/new' });
        if (call.method !== 'file.write') return void a.reply(call.id, {});
        const stream = call.params.streamId as number;
        void a.reply(call.id, {});
        void a
          .waitFor((f) => f.channel === stream && f.type === FrameType.end)
          .then(() => a.event({ event: 'file.written', streamId: stream, path: call.params.path, sizeBytes: 3 }));
      },
    });
    expect(await sandbox.files.write('/root/a', Readable.from([Buffer.from('abc')]))).toEqual({ sizeBytes: 3 });
    await sandbox.files.remove('/root/a', { recursive: true });
    expect(await sandbox.files.mkdir('/new')).toEqual({ created: true });
    expect(await sandbox.files.mkdir('/existing')).toEqual({ created: false });
    await sandbox.files.rename('/new', '/renamed');
    expect(events.filter((e) => e.type.startsWith('file.'))).toEqual([
      { type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_service', data: { path: '/root/a', sizeBytes: 3 } },
      { type: 'file.removed', tenantId: 'ten_a', sandboxId: 'sbx_service', data: { path: '/root/a' } },
      { type: 'file.dir_created', tenantId: 'ten_a', sandboxId: 'sbx_service', data: { path: '/new' } },
      { type: 'file.renamed', tenantId: 'ten_a', sandboxId: 'sbx_service', data: { from: '/new', to: '/renamed' } },
    ]);
  });

  it('records nothing for a change the agent refused, nor for reads', async () => {
    const { sandbox, events } = await runningSandbox({
      answer: (call, a) => {
        if (call.method === 'file.stat') return void a.reply(call.id, { type: 'dir', name: 'x', path: '/x', sizeBytes: 0, mode: 0, mtimeMs: 0 });
        if (call.method.startsWith('file.')) return fail(a, call.id, 'not_found');
        void a.reply(call.id, {});
      },
    });
    await expect(sandbox.files.remove('/nope')).rejects.toMatchObject({ code: 'file_not_found' });
    await expect(sandbox.files.rename('/nope', '/else')).rejects.toMatchObject({ code: 'file_not_found' });
    await expect(sandbox.files.mkdir('/nope/x')).rejects.toMatchObject({ code: 'file_not_found' });
    await expect(sandbox.files.open('/x')).rejects.toMatchObject({ code: 'is_a_directory' });
    await sandbox.files.stat('/x');
    expect(events.filter((e) => e.type.startsWith('file.'))).toEqual([]);
  });

  it('refuses to remove the guest root without asking the agent', async () => {
    const { sandbox, events, calls } = await runningSandbox();
    await expect(sandbox.files.remove('/', { recursive: true })).rejects.toMatchObject({ code: 'path_outside_sandbox' });
    expect(calls).toEqual([]);
    expect(events.filter((e) => e.type.startsWith('file.'))).toEqual([]);
  });

  it('refuses every file operation once the sandbox ended', async () => {
    const { sandbox, calls } = await runningSandbox();
    await sandbox.end('killed');
    for (const op of [() => sandbox.files.stat('/x'), () => sandbox.files.mkdir('/x'), () => sandbox.files.rename('/x', '/y')]) {
      await expect(op()).rejects.toMatchObject({ code: 'sandbox_not_running' });
    }
    expect(calls.filter((c) => c.method.startsWith('file.'))).toEqual([]);
  });
});

describe('timers come from the injected clock', () => {
  it('ends the sandbox at its deadline as the clock reaches it, and a new expiry moves the deadline', async () => {
    const clock = new ManualClock(Date.parse('2030-01-01T00:00:00Z'));
    const { sandbox, events } = await runningSandbox({ clock, timeoutS: 10 });
    sandbox.setExpiry(clock.nowMs() + 20_000);
    clock.advance(19_999);
    expect(sandbox.state).toBe('running');
    clock.advance(1);
    await sandbox.end('killed');
    expect(sandbox.state).toBe('ended');
    expect(events.filter((e) => e.type === 'sandbox.killed').map((e) => e.data)).toEqual([{ reason: 'timeout' }]);
    // Released: no deadline, health check or command timer is left on the clock.
    expect(clock.pendingTimers).toBe(0);
  });

  it("kills a command when its timeout passes on the sandbox's clock", async () => {
    const clock = new ManualClock(0);
    const { sandbox, calls } = await runningSandbox({
      clock,
      answer: (call, a) => void a.reply(call.id, call.method === 'proc.start' ? { pid: 7 } : {}),
    });
    const rec = await sandbox.startCommand({ argv: ['sleep', '100'], timeoutMs: 5_000 });
    clock.advance(4_999);
    expect(calls.some((c) => c.method === 'proc.signal')).toBe(false);
    clock.advance(1);
    expect(rec.timedOut).toBe(true);
    await agent!.client.ping();
    expect(calls.filter((c) => c.method === 'proc.signal').map((c) => c.params)).toEqual([{ id: rec.id, signal: 'SIGKILL' }]);
  });
});

describe('the sandbox owns its network spec', () => {
  it('records a policy change as a new spec: one read before keeps what it read, secrets and placeholders stay', async () => {
    const { sandbox } = await runningSandbox();
    sandbox.assignNetwork({ policy: { allow: ['a.example.test'] }, secrets: ['TOKEN'], placeholders: { TOKEN: 'sgp_1' } });
    const before = sandbox.network;
    sandbox.policyChanged({ allow: ['b.example.test'] });
    expect(before).toEqual({ policy: { allow: ['a.example.test'] }, secrets: ['TOKEN'], placeholders: { TOKEN: 'sgp_1' } });
    expect(sandbox.network).toEqual({ policy: { allow: ['b.example.test'] }, secrets: ['TOKEN'], placeholders: { TOKEN: 'sgp_1' } });
  });
});
