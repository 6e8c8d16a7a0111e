// A replay's fork connects nowhere, with real VMs: a session with every kind of egress request (plain HTTP, HTTPS
// through CONNECT, ws:// and wss:// upgrades, a declined upgrade, ws:// inside a plain CONNECT tunnel) is replayed, and
// the upstreams, as traps counting accepted TCP sockets, see none during the replay, in the kept fork, or once it resumed.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Sandbox, Secrets } from '@sandglass/sdk';
import { startHttpsUpstream, startHttpUpstream, type Upstream } from '@sandglass/egress/test-support';
import { checkResponsesAgainstSpec, config } from '../helpers.js';

checkResponsesAgainstSpec();

const pki = inject('egressPki');
// ports[0] to [4] belong to the other egress tests; files run one at a time, but their upstreams would be in the way.
const ports = inject('egressUpstreamPorts');
const SECRET = `rpe_${Date.now().toString(36)}Upgr4deS3cret`;
const made: string[] = [];
let tlsUp: Upstream;
let plainUp: Upstream;
let source: Sandbox;
let startSnapshotId = '';

/**
 * One request through the guest's proxy (127.0.0.1:3128), printed as the status it got. `kind` picks the path; the
 * secret's placeholder goes in the Authorization header of the upgrades to the TLS upstream (allowUpgrade).
 */
const REQUEST = `import http.client, os, ssl, sys, urllib.error, urllib.request
kind, tls_port, plain_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
host = 'api.example.test'
ws = {'Connection': 'Upgrade', 'Upgrade': 'echo'}
auth = {'Authorization': 'Bearer ' + os.environ['REPLAY_UPGRADE']}
ctx = ssl.create_default_context(cafile=os.environ['SSL_CERT_FILE'])
def tunnel(port, tls):
    c = http.client.HTTPSConnection('127.0.0.1', 3128, context=ctx, timeout=30) if tls else http.client.HTTPConnection('127.0.0.1', 3128, timeout=30)
    c.set_tunnel(host, port)
    return c
def get(url):
    try:
        return urllib.request.urlopen(url).status
    except urllib.error.HTTPError as e:
        return e.code
if kind == 'plain':
    print(get('http://%s:%d/plain' % (host, plain_port)))
elif kind == 'https':
    print(get('https://%s:%d/https' % (host, tls_port)))
else:
    if kind == 'wss':
        c, path, h = tunnel(tls_port, True), '/ws', dict(ws, **auth)
    elif kind == 'declined':
        c, path, h = tunnel(tls_port, True), '/decline', dict(ws, **auth)
    elif kind == 'ws':
        c, path, h = http.client.HTTPConnection('127.0.0.1', 3128, timeout=30), 'http://%s:%d/ws' % (host, plain_port), dict(ws)
    elif kind == 'tunnel-ws':
        c, path, h = tunnel(plain_port, False), '/ws', dict(ws)
    else:
        c, path, h = tunnel(tls_port, True), '/ws-new', dict(ws, **auth)
    try:
        c.request('GET', path, headers=h)
        print(c.getresponse().status)
    except OSError as e:
        print('error', e)
`;
const KINDS = ['plain', 'https', 'wss', 'ws', 'declined', 'tunnel-ws'] as const;

async function request(s: Sandbox, kind: string): Promise<string> {
  const r = await s.commands.run(`python3 /root/request.py ${kind} ${tlsUp.port} ${plainUp.port}`, { timeoutMs: 90_000 });
  return r.stdout.trim();
}

const sockets = () => tlsUp.sockets + plainUp.sockets;
const secretSeen = () => [...tlsUp.seen, ...plainUp.seen].filter((s) => JSON.stringify(s.headers).includes(SECRET)).length;

beforeAll(async () => {
  tlsUp = await startHttpsUpstream(pki, ports[5]);
  plainUp = await startHttpUpstream(ports[6]);
  await Secrets.set('REPLAY_UPGRADE', SECRET, { ...config(), hosts: [`api.example.test:${tlsUp.port}`], allowUpgrade: true });
  source = await Sandbox.create({
    ...config(),
    timeoutS: 1200,
    snapshotIntervalS: 3600,
    network: { allow: [`api.example.test:${tlsUp.port}`, `api.example.test:${plainUp.port}`] },
    secrets: ['REPLAY_UPGRADE'],
  });
  made.push(source.id);
  await source.files.write('/root/request.py', REQUEST);
  startSnapshotId = (await source.snapshot({ name: 'before-requests' })).id;
  // The original goes out live: each kind reaches its upstream, the upgrades to the TLS one with the secret's value.
  const live: Record<string, string> = {};
  for (const kind of KINDS) live[kind] = await request(source, kind);
  expect(live).toEqual({ plain: '200', https: '200', wss: '101', ws: '101', declined: '400', 'tunnel-ws': '101' });
  expect(secretSeen()).toBe(2);
});

afterAll(async () => {
  await Promise.all(made.map((id) => Sandbox.kill(id, config()).catch(() => false)));
  await Promise.all([tlsUp?.close(), plainUp?.close()]);
});

describe('a replay connects nowhere', () => {
  it('answers recorded exchanges, refuses every upgrade, and opens no upstream socket, also in the kept fork and after it resumes', {
    timeout: 900_000,
  }, async () => {
    const before = sockets();
    const report = await Sandbox.replay(source.id, { ...config(), snapshotId: startSnapshotId, keepFork: true });
    made.push(report.forkSandboxId);
    expect(sockets(), 'sockets the upstreams accepted during the replay').toBe(before);
    const verdicts = Object.fromEntries(
      report.inputs.filter((i) => i.kind === 'command').map((i) => [/request\.py (\S+)/.exec(i.summary)?.[1], i.verdict] as const),
    );
    // Recorded exchanges are answered from the recording; upgrades are never recorded, so they are refused (a divergence).
    expect(verdicts, JSON.stringify(report, null, 1)).toEqual({
      plain: 'same',
      https: 'same',
      wss: 'different',
      ws: 'different',
      declined: 'different',
      'tunnel-ws': 'different',
    });
    expect(report.firstDivergence!.replay).toMatchObject({ outputTail: '403\n' });

    // The kept fork stays a replay: the same requests, and an upgrade the recording never saw, connect nowhere.
    const fork = await Sandbox.connect(report.forkSandboxId, config());
    const kept: Record<string, string> = {};
    for (const kind of [...KINDS, 'new']) kept[kind] = await request(fork, kind);
    expect(kept).toEqual({ plain: '403', https: '403', wss: '403', ws: '403', declined: '403', 'tunnel-ws': '403', new: '403' });
    const unrecorded = (await fork.events()).filter((e) => e.type === 'egress.replay_unrecorded');
    expect(unrecorded.length).toBeGreaterThanOrEqual(4 + 7);
    expect(sockets(), 'sockets the upstreams accepted from the kept fork').toBe(before);

    // Paused and resumed, it is restored from its own snapshot, which says it is a replay's.
    await fork.pause();
    const resumed = await Sandbox.resume(fork.id, config());
    expect(await request(resumed, 'new')).toBe('403');
    expect(await request(resumed, 'plain')).toBe('403');
    expect(sockets(), 'sockets the upstreams accepted from the resumed fork').toBe(before);
    expect(secretSeen(), 'times the upstream saw the secret').toBe(2);
  });
});
