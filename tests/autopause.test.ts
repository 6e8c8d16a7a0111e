// Pause on timeout and resume on request, through real VMs: the timeout pauses instead of killing, a request with the
// sandbox's credential to a guest port or its E2B daemon resumes it (once, however many ask), and without the opt-in,
// with a revoked key, without a credential or once killed it answers why and resumes nothing.
import http from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox } from '@sandglass/sdk';
import { offLoopback } from './e2b-env.js';
import { adminKey, api, checkResponsesAgainstSpec, config, gatewayUrl } from './helpers.js';

checkResponsesAgainstSpec();
process.env.E2B_API_KEY = adminKey;

const HTTP_PORT = 8000;
const gw = new URL(gatewayUrl);
const toKill: string[] = [];

afterAll(async () => {
  for (const id of toKill) await api('DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  expect(offLoopback, offLoopback.join('\n')).toEqual([]);
});

interface Answer {
  status: number;
  body: string;
}

function send(path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: gw.hostname, port: gw.port, path, headers, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const code = (a: Answer) => (JSON.parse(a.body) as { error?: { code?: string } }).error?.code;
const state = async (id: string) => (await api('GET', `/v1/sandboxes/${id}`)).body!.state as string;
const eventsOf = async (id: string) => (await api('GET', `/v1/sandboxes/${id}/events?limit=1000`)).body!.events as Array<{ type: string; data: any }>;
const tokenOf = async (id: string, key = adminKey) => (await api('POST', `/v1/sandboxes/${id}/access`, { key })).body!.token as string;

async function until(what: string, fn: () => Promise<boolean>, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** A sandbox serving /tmp/www on HTTP_PORT (a process in its memory: a request after a resume proves memory came back). */
async function serving(opts: { onTimeout?: 'kill' | 'pause'; autoResume?: boolean; timeoutS?: number }): Promise<Sandbox> {
  const s = await Sandbox.create({ ...config(), timeoutS: opts.timeoutS ?? 600, snapshotIntervalS: 3600, ...opts });
  toKill.push(s.id);
  await s.files.write('/tmp/www/hi.txt', `hello from ${s.id}`);
  await s.commands.run(`cd /tmp/www && exec python3 -m http.server ${HTTP_PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
  await until('the guest server', async () => (await s.ports.list()).some((p) => p.port === HTTP_PORT));
  return s;
}

describe('a paused sandbox without autoResume', () => {
  it('answers sandbox_paused by path, host name and E2B envd, tells a caller without a credential nothing, and stays paused', async () => {
    const s = await serving({});
    const token = await tokenOf(s.id);
    expect((await api('GET', `/v1/sandboxes/${s.id}`)).body).toMatchObject({ onTimeout: 'kill', autoResume: false });
    await s.pause();
    const byPath = await send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`, { 'x-sandglass-access-token': token });
    expect([byPath.status, code(byPath)]).toEqual([409, 'sandbox_paused']);
    expect(JSON.parse(byPath.body).error.message).toMatch(/resume/);
    const byHost = await send('/hi.txt', { host: `${HTTP_PORT}-${s.id}.sandglass.localhost:${gw.port}`, 'x-sandglass-access-token': token });
    expect([byHost.status, code(byHost)]).toEqual([409, 'sandbox_paused']);
    const envd = await send('/e2b/health', { 'x-access-token': token, 'e2b-sandbox-id': s.id });
    expect(envd.status).toBe(502);
    expect(envd.body).toMatch(/paused/);
    const anonymous = await send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`);
    expect([anonymous.status, code(anonymous)]).toEqual([401, 'unauthenticated']);
    expect(await state(s.id)).toBe('paused');
    expect((await eventsOf(s.id)).filter((e) => e.type === 'sandbox.resumed')).toEqual([]);
  });
});

describe('onTimeout: pause with autoResume', () => {
  it('pauses at its timeout, and concurrent requests with its token resume it exactly once and are answered', async () => {
    const s = await serving({ onTimeout: 'pause', autoResume: true, timeoutS: 40 });
    const token = await tokenOf(s.id);
    expect((await api('GET', `/v1/sandboxes/${s.id}`)).body).toMatchObject({ onTimeout: 'pause', autoResume: true });
    await until('the timeout to pause it', async () => (await state(s.id)) === 'paused');
    const ended = await eventsOf(s.id);
    expect(ended.find((e) => e.type === 'sandbox.paused')?.data).toMatchObject({ reason: 'timeout' });
    expect(ended.some((e) => e.type === 'sandbox.killed')).toBe(false);

    const answers = await Promise.all(
      Array.from({ length: 8 }, () => send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`, { 'x-sandglass-access-token': token })),
    );
    expect(answers.map((a) => [a.status, a.body])).toEqual(Array.from({ length: 8 }, () => [200, `hello from ${s.id}`]));
    expect(await state(s.id)).toBe('running');
    const resumed = (await eventsOf(s.id)).filter((e) => e.type === 'sandbox.resumed');
    expect(resumed).toHaveLength(1);
    expect(resumed[0]!.data).toMatchObject({ trigger: 'request' });
  });

  it('is not resumed by a token of a revoked key, nor once killed; a valid token still resumes it', async () => {
    const s = await serving({ autoResume: true });
    const made = await api('POST', '/v1/api-keys', { body: { name: `autopause-${s.id}` } });
    const memberToken = await tokenOf(s.id, made.body!.key as string);
    const adminToken = await tokenOf(s.id);
    await s.pause();
    expect((await api('DELETE', `/v1/api-keys/${made.body!.id as string}`)).status).toBe(200);
    const revoked = await send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`, { 'x-sandglass-access-token': memberToken });
    expect([revoked.status, code(revoked)]).toEqual([401, 'api_key_revoked']);
    expect(await state(s.id)).toBe('paused');

    const woken = await send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`, { 'x-sandglass-access-token': adminToken });
    expect([woken.status, woken.body]).toEqual([200, `hello from ${s.id}`]);
    await s.pause();
    await s.kill();
    const killed = await send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`, { 'x-sandglass-access-token': adminToken });
    expect([killed.status, code(killed)]).toEqual([404, 'sandbox_not_found']);
    expect(await state(s.id)).toBe('ended');
    expect((await eventsOf(s.id)).filter((e) => e.type === 'sandbox.resumed')).toHaveLength(1);
  });
});

describe('onTimeout: pause with onTimeoutKeepMemory: false', () => {
  it('pauses at its timeout keeping the disk alone, and a request with its token cold-boots it (autoResume)', async () => {
    const s = await Sandbox.create({
      ...config(),
      timeoutS: 40,
      snapshotIntervalS: 3600,
      onTimeout: 'pause',
      onTimeoutKeepMemory: false,
      autoResume: true,
    });
    toKill.push(s.id);
    expect((await api('GET', `/v1/sandboxes/${s.id}`)).body).toMatchObject({ onTimeout: 'pause', onTimeoutKeepMemory: false, autoResume: true });
    const token = await tokenOf(s.id);
    await s.files.write('/root/kept.txt', 'on the disk');
    await s.commands.run('echo gone > /dev/shm/gone.txt');
    await until('the timeout to pause it', async () => (await state(s.id)) === 'paused');
    const paused = await eventsOf(s.id);
    expect(paused.find((e) => e.type === 'sandbox.paused')?.data).toMatchObject({ reason: 'timeout', memory: false });
    expect(paused.some((e) => e.type === 'sandbox.killed')).toBe(false);
    const timeline = (await api('GET', `/v1/sandboxes/${s.id}/snapshots`)).body!.snapshots as Array<{ reason: string; memory: boolean }>;
    expect(timeline.at(-1)).toMatchObject({ reason: 'pause', memory: false });

    // The wake is a cold boot: the request waits for the guest to boot over its disk, then is answered.
    const envd = await send('/e2b/health', { 'x-access-token': token, 'e2b-sandbox-id': s.id });
    expect(envd.status).toBe(204);
    expect(await state(s.id)).toBe('running');
    const resumed = (await eventsOf(s.id)).filter((e) => e.type === 'sandbox.resumed');
    expect(resumed).toHaveLength(1);
    expect(resumed[0]!.data).toMatchObject({ trigger: 'request', coldBoot: true });
    const booted = await Sandbox.connect(s.id, config());
    expect(await booted.files.read('/root/kept.txt')).toBe('on the disk');
    expect((await booted.commands.run('test -e /dev/shm/gone.txt; echo $?')).stdout).toBe('1\n');
  });
});

describe('resumes at once', () => {
  it('two resumes of one paused sandbox: one resumes it, the other is sandbox_running, and it runs intact', async () => {
    const s = await serving({});
    await s.pause();
    const both = await Promise.allSettled([Sandbox.resume(s.id, config()), Sandbox.resume(s.id, config())]);
    expect(both.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const refused = both.find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined;
    expect((refused?.reason as { code?: string } | undefined)?.code).toBe('sandbox_running');
    expect(await state(s.id)).toBe('running');
    const token = await tokenOf(s.id);
    const a = await send(`/v1/sandboxes/${s.id}/ports/${HTTP_PORT}/hi.txt`, { 'x-sandglass-access-token': token });
    expect([a.status, a.body]).toEqual([200, `hello from ${s.id}`]);
  });
});

describe('the unmodified e2b SDK', () => {
  it("maps lifecycle onTimeout 'pause' and autoResume, and a command on the paused sandbox's handle resumes it", async () => {
    const e = await E2bSandbox.create('base', { timeoutMs: 600_000, lifecycle: { onTimeout: 'pause', autoResume: true } });
    toKill.push(e.sandboxId);
    expect((await e.getInfo()).lifecycle).toEqual({ onTimeout: 'pause', autoResume: true });
    await e.commands.run('echo remembered > /dev/shm/mem.txt');
    expect(await e.pause()).toBe(true);
    expect((await e.commands.run('cat /dev/shm/mem.txt')).stdout).toBe('remembered\n');
    expect((await e.getInfo()).state).toBe('running');
  });

  it('leaves a sandbox created without autoResume paused', async () => {
    const e = await E2bSandbox.create('base', { timeoutMs: 600_000 });
    toKill.push(e.sandboxId);
    expect((await e.getInfo()).lifecycle).toEqual({ onTimeout: 'kill', autoResume: false });
    expect(await e.pause()).toBe(true);
    // The gateway's 502 says "paused" (first test); the SDK reads any 502 there as its own "not running anymore".
    await expect(e.commands.run('true')).rejects.toThrow(/not running/);
    expect((await e.getInfo()).state).toBe('paused');
  });
});
