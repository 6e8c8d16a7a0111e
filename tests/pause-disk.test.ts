// Disk-only pause through real VMs: `pause({ keepMemory: false })` keeps the sandbox's files and discards its memory;
// the resume cold-boots the guest over that disk, so files are there, processes are not, and what the node gives
// every start (environment, network, defaults) is given again.
import { afterAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox } from '@sandglass/sdk';
import { api, checkResponsesAgainstSpec, config } from './helpers.js';

checkResponsesAgainstSpec();

const toKill: string[] = [];
afterAll(async () => {
  for (const id of toKill) await api('DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
});

const eventsOf = async (id: string) => (await api('GET', `/v1/sandboxes/${id}/events?limit=1000`)).body!.events as Array<{ type: string; data: any }>;
/** A cold boot under TCG on a busy host can take a minute: the calls that boot wait longer than the SDK's default. */
const booting = () => ({ ...config(), requestTimeoutMs: 300_000 });
const state = async (id: string) => (await api('GET', `/v1/sandboxes/${id}`)).body!.state as string;

async function sh(s: Sandbox, cmd: string): Promise<{ exitCode: number; stdout: string }> {
  try {
    const r = await s.commands.run(cmd, { timeoutMs: 60_000 });
    return { exitCode: r.exitCode, stdout: r.stdout.trim() };
  } catch (err) {
    if (!(err instanceof CommandExitError)) throw err;
    return { exitCode: err.exitCode, stdout: err.result.stdout.trim() };
  }
}

describe('pause with keepMemory: false', () => {
  it('keeps files, drops processes, and boots again with its environment and network', async () => {
    const s = await Sandbox.create({
      ...config(),
      timeoutS: 900,
      snapshotIntervalS: 3600,
      envs: { KEPT_VAR: 'still-here' },
      network: { allow: ['example.com'] },
    });
    toKill.push(s.id);
    // On the root disk (not /tmp, a tmpfs in the guest), written by a command and by the files API.
    await sh(s, 'mkdir -p /root/work && echo from-a-command > /root/work/a.txt');
    await s.files.write('/root/work/b.txt', 'from the files API');
    const bg = await s.commands.run('sleep 100000', { background: true, timeoutMs: 0 });
    const pid = (await sh(s, 'pgrep -x sleep')).stdout;
    expect(pid).toMatch(/^\d+$/);
    const before = await s.commands.list();
    expect(before.some((c) => c.id === bg.id && c.state === 'running')).toBe(true);

    const snap = await s.pause({ keepMemory: false });
    expect(snap).toMatchObject({ reason: 'pause', sandboxId: s.id });
    expect(await state(s.id)).toBe('paused');
    const paused = (await eventsOf(s.id)).filter((e) => e.type === 'sandbox.paused' || e.type === 'snapshot.taken').map((e) => [e.type, e.data.memory]);
    expect(paused).toContainEqual(['sandbox.paused', false]);
    expect(paused).toContainEqual(['snapshot.taken', false]);

    const r = await Sandbox.resume(s.id, booting());
    expect(await state(s.id)).toBe('running');
    const resumed = (await eventsOf(s.id)).filter((e) => e.type === 'sandbox.resumed').at(-1);
    expect(resumed?.data).toMatchObject({ snapshotId: snap.id, coldBoot: true });
    // The agent answers; the files are there, byte for byte.
    expect(await sh(r, 'cat /root/work/a.txt')).toEqual({ exitCode: 0, stdout: 'from-a-command' });
    expect(await r.files.read('/root/work/b.txt')).toBe('from the files API');
    // The process was in the memory that was discarded.
    expect((await sh(r, 'pgrep -x sleep')).exitCode).toBe(1);
    expect((await r.commands.list()).some((c) => c.id === bg.id)).toBe(false);
    // Environment and network come back with the boot: the sandbox's variable, and the egress proxy's settings.
    expect((await sh(r, 'echo "$KEPT_VAR"')).stdout).toBe('still-here');
    expect((await sh(r, 'echo "$HTTPS_PROXY"')).stdout).not.toBe('');
    expect((await api('GET', `/v1/sandboxes/${s.id}`)).body!.network).toMatchObject({ allow: ['example.com'] });

    // It keeps snapshotting from there, and the disk-only snapshot forks (a cold boot too).
    await r.files.write('/root/work/c.txt', 'after the boot');
    const next = await r.snapshot();
    expect(next.parentId).toBe(snap.id);
    const [fork] = await Sandbox.fork(snap.id, { ...booting(), timeoutS: 600 });
    toKill.push(fork!.id);
    expect(await sh(fork!, 'cat /root/work/a.txt; test -e /root/work/c.txt; echo $?')).toEqual({ exitCode: 0, stdout: 'from-a-command\n1' });
    expect((await sh(fork!, 'echo "$KEPT_VAR"')).stdout).toBe('still-here');

    // A memory pause of the booted sandbox keeps its processes again.
    await r.commands.run('sleep 200000', { background: true, timeoutMs: 0 });
    await r.pause();
    const again = await Sandbox.resume(s.id, config());
    expect((await sh(again, 'pgrep -x sleep')).exitCode).toBe(0);
  });

  it('refuses a bad keepMemory naming the field, and changes nothing', async () => {
    const s = await Sandbox.create({ ...config(), timeoutS: 600, snapshotIntervalS: 3600 });
    toKill.push(s.id);
    const bad = await api('POST', `/v1/sandboxes/${s.id}/pause`, { body: { keepMemory: 'no' } });
    expect(bad.status).toBe(400);
    expect(bad.body!.error.code).toBe('invalid_argument');
    expect(bad.body!.error.message).toMatch(/keepMemory/);
    const unknown = await api('POST', `/v1/sandboxes/${s.id}/pause`, { body: { memory: false } });
    expect(unknown.status).toBe(400);
    expect(unknown.body!.error.message).toMatch(/memory/);
    expect(await state(s.id)).toBe('running');
    expect((await sh(s, 'echo ok')).stdout).toBe('ok');
  });
});
