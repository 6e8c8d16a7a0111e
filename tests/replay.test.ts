// Replay with real VMs: a recorded session (stdin, files, HTTPS with a secret through the proxy, random numbers, the
// clock) re-run in a fork answers the same, with no network; a file changed in the fork shows as the first divergence.
import { inject, afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Secrets, type ReplayReport } from '@sandglass/sdk';
import { startHttpsUpstream, type Upstream } from '@sandglass/egress/test-support';
import { api, config } from './helpers.js';

const pki = inject('egressPki');
const ports = inject('egressUpstreamPorts');
const SECRET = `rpl_${Date.now().toString(36)}S3cr3tV4lu3`;
let up: Upstream;
let source: Sandbox;
let exitSeqOfCat = 0;
/** Where the session's replays start: its first input (the config file) precedes it, so it must be named. */
let startSnapshotId = '';
const RANDOM = 'import random; print(random.random())';

const GREET = `import sys
print("name?", flush=True)
for line in sys.stdin:
    print("hello " + line.strip(), flush=True)
print("bye")
`;

beforeAll(async () => {
  up = await startHttpsUpstream(pki, ports[0]);
  await Secrets.set('REPLAY_TOKEN', SECRET, { ...config(), hosts: [`api.example.test:${up.port}`] });
  source = await Sandbox.create({
    ...config(),
    timeoutS: 1200,
    snapshotIntervalS: 3600,
    network: { allow: [`api.example.test:${up.port}`] },
    secrets: ['REPLAY_TOKEN'],
  });
  // State before the fork point: what a replay starts from.
  await source.files.write('/root/config.txt', 'mode=original\n');
  startSnapshotId = (await source.snapshot({ name: 'replay-start' })).id;

  // The session: 20 inputs after the snapshot.
  await source.files.write('/root/app/greet.py', GREET);
  await source.files.write('/root/app/data.txt', 'twelve bytes');
  await source.files.makeDir('/root/out');
  const greet = await source.commands.exec(['python3', '/root/app/greet.py'], { background: true, stdin: true, cwd: '/root/app' });
  for (let i = 0; i < 400 && !greet.stdout.includes('name?'); i++) await new Promise((r) => setTimeout(r, 25));
  await greet.sendStdin('alice\n');
  for (let i = 0; i < 400 && !greet.stdout.includes('hello alice'); i++) await new Promise((r) => setTimeout(r, 25));
  await greet.sendStdin('bob\n');
  await greet.closeStdin();
  expect((await greet.wait()).stdout).toBe('name?\nhello alice\nhello bob\nbye\n');
  await source.commands.run('wc -c < /root/app/data.txt');
  const cat = await source.commands.run('cat /root/config.txt');
  expect(cat.stdout).toBe('mode=original\n');
  const https = await source.commands.run(
    `python3 -c "
import urllib.request, os, json
req = urllib.request.Request('https://api.example.test:${up.port}/echo?q=1', headers={'Authorization': 'Bearer ' + os.environ['REPLAY_TOKEN']})
print(json.load(urllib.request.urlopen(req))['url'])"`,
  );
  expect(https.stdout).toBe('/echo?q=1\n');
  await source.commands.exec(['python3', '-c', RANDOM]);
  await source.commands.run('date -u +%Y');
  await source.files.rename('/root/app/data.txt', '/root/app/data2.txt');
  await source.commands.run('ls /root/app');
  await source.files.remove('/root/app/data2.txt');
  await source.commands.run('sha256sum /root/app/greet.py');
  await source.commands.run('echo out; echo err >&2');
  await source.commands.run('exit 3').catch(() => undefined);
  const events = await source.events();
  exitSeqOfCat = events.find(
    (e) =>
      e.type === 'command.exited' &&
      e.data.commandId ===
        events.find((s) => s.type === 'command.started' && (s.data.argv as string[]).join(' ').includes('cat /root/config.txt'))?.data.commandId,
  )!.seq;
});

afterAll(async () => {
  await source?.kill().catch(() => undefined);
  await up?.close();
});

describe('replay', () => {
  it('re-runs the session in a fork with zero real divergences and without touching the network', async () => {
    const seen = up.seen.length;
    const report: ReplayReport = await Sandbox.replay(source.id, { ...config(), snapshotId: startSnapshotId, nondeterministic: [RANDOM] });
    expect(report.firstDivergence, JSON.stringify(report, null, 1)).toBeNull();
    expect(report.counts.different).toBe(0);
    expect(report.inputs.length).toBeGreaterThanOrEqual(17);
    expect(report.inputs.map((i) => i.kind)).toEqual(expect.arrayContaining(['file.write', 'file.mkdir', 'stdin', 'command', 'file.rename', 'file.remove']));
    // The HTTPS call was answered from the recording: the upstream saw nothing new.
    expect(up.seen.length).toBe(seen);
    // Random numbers do not repeat in a replay (docs/design/replay.md): declared, the command is classified, not hidden.
    const random = report.inputs.find((i) => i.kind === 'command' && i.summary.includes('random.random'))!;
    expect(['nondeterministic', 'same']).toContain(random.verdict);
    // The fork is marked as a replay of its source.
    expect(report.forkSandboxId).not.toBe(source.id);
  });

  it('reports the first divergence at the input that reads a file changed in the fork', async () => {
    const report = await Sandbox.replay(source.id, {
      ...config(),
      snapshotId: startSnapshotId,
      nondeterministic: [RANDOM],
      prepare: async (fork) => {
        await fork.files.write('/root/config.txt', 'mode=changed\n');
      },
    });
    expect(report.firstDivergence?.seq, JSON.stringify(report, null, 1)).toBe(exitSeqOfCat);
    expect(report.firstDivergence!.differences.join('\n')).toContain('stdout differs');
    expect(report.firstDivergence!.replay).toMatchObject({ outputTail: 'mode=changed\n' });
    expect(report.inputs.filter((i) => i.seq < exitSeqOfCat).every((i) => i.verdict !== 'different')).toBe(true);
  });

  it('replays a sandbox younger than its first snapshot from the moment it was created', async () => {
    const young = await Sandbox.create({
      ...config(),
      timeoutS: 600,
      snapshotIntervalS: 3600,
      envs: { GREETING: 'hi' },
      network: { allow: [`api.example.test:${up.port}`] },
      secrets: ['REPLAY_TOKEN'],
    });
    try {
      // Three inputs within seconds of the create, before any snapshot: what fails most often is replayable too.
      await young.files.write('/root/a.txt', 'created\n');
      await young.commands.run('cat /root/a.txt; echo "$GREETING"; printenv REPLAY_TOKEN');
      const https = await young.commands.run(
        `python3 -c "import urllib.request, os; r = urllib.request.Request('https://api.example.test:${up.port}/echo?young', headers={'Authorization': 'Bearer ' + os.environ['REPLAY_TOKEN']}); print(urllib.request.urlopen(r).status)"`,
      );
      expect(https.stdout).toBe('200\n');
      expect((await young.events()).some((e) => e.type === 'snapshot.taken')).toBe(false);
      const seen = up.seen.length;
      // No snapshot precedes the first input: the default start is the creation, as `from: 'creation'` asks.
      for (const opts of [{}, { from: 'creation' as const }]) {
        const report = await Sandbox.replay(young.id, { ...config(), ...opts });
        expect(report.snapshotId).toBeNull();
        expect(report.firstDivergence, JSON.stringify(report, null, 1)).toBeNull();
        expect(report.inputs.map((i) => [i.kind, i.verdict])).toEqual([
          ['file.write', 'same'],
          ['command', 'same'],
          ['command', 'same'],
        ]);
      }
      expect(up.seen.length).toBe(seen);
      // A start from creation is a replay's, and changes nothing when asked for otherwise.
      const bad = await api('POST', '/v1/forks', { body: { sandboxId: young.id, fromCreation: true } });
      expect([bad.status, bad.body?.error.code, bad.body?.error.details?.field]).toEqual([400, 'invalid_argument', 'fromCreation']);
    } finally {
      await young.kill().catch(() => undefined);
    }
  });
});
