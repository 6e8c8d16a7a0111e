// Egress with real VMs and real local upstreams: default deny, TLS interception, secrets that never enter the guest, approvals.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { inject, afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Secrets } from '@sandglass/sdk';
import { startHttpsUpstream, type Upstream } from '@sandglass/egress/test-support';
import { api, apiUrl, checkResponsesAgainstSpec, config, home } from './helpers.js';

checkResponsesAgainstSpec();

const pki = inject('egressPki');
// A value that must never be found anywhere but in the upstream's view of the request.
const SECRET = `ghp_${Date.now().toString(36)}S3cr3tV4lu3xq9`;
let up: Upstream;
let other: Upstream;
const made: Sandbox[] = [];

const ports = inject('egressUpstreamPorts');

beforeAll(async () => {
  up = await startHttpsUpstream(pki, ports[0]);
  other = await startHttpsUpstream(pki, ports[1]);
  await Secrets.set('GH_TOKEN', SECRET, { ...config(), hosts: [`api.example.test:${up.port}`] });
  await Secrets.set('JIT_TOKEN', `jit-${SECRET}`, {
    ...config(),
    hosts: [`api.example.test:${up.port}`],
    header: 'x-jit',
    format: 'Token {value}',
    approval: 'required',
  });
});

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
  await up?.close();
  await other?.close();
});

async function sandbox(allow: string[], secrets: string[] = []): Promise<Sandbox> {
  const s = await Sandbox.create({ ...config(), timeoutS: 1200, snapshotIntervalS: 3600, network: { allow }, secrets });
  made.push(s);
  return s;
}

/** Runs a command, returning its output whatever its exit code. */
async function sh(s: Sandbox, cmd: string): Promise<{ code: number; out: string }> {
  try {
    const r = await s.commands.run(cmd, { timeoutMs: 60_000 });
    return { code: r.exitCode, out: r.stdout + r.stderr };
  } catch (e) {
    const r = e as { exitCode?: number; stdout?: string; stderr?: string };
    return { code: r.exitCode ?? -1, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
  }
}

describe('egress', () => {
  it('reaches an allowed HTTPS host from curl and python, substitutes the secret there, and denies everything else', async () => {
    const s = await sandbox([`api.example.test:${up.port}`], ['GH_TOKEN']);
    const env = await sh(s, 'echo "$GH_TOKEN"; echo "$HTTPS_PROXY"');
    expect(env.out).toMatch(/^sg_placeholder_[A-Za-z0-9]+\nhttp:\/\/127\.0\.0\.1:3128\n$/);
    const placeholder = env.out.split('\n')[0]!;

    const seenBefore = up.seen.length;
    const curl = await sh(s, `curl -sS --fail-with-body -H "Authorization: Bearer $GH_TOKEN" https://api.example.test:${up.port}/echo`);
    expect(curl.code).toBe(0);
    expect(JSON.parse(curl.out).url).toBe('/echo');
    // The upstream saw the real value; the guest only ever had the placeholder.
    expect(up.seen[seenBefore]!.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(curl.out).not.toContain(SECRET);

    const py = await sh(
      s,
      `python3 -c "
import urllib.request, os, json
req = urllib.request.Request('https://api.example.test:${up.port}/echo?from=python', headers={'Authorization': 'token ' + os.environ['GH_TOKEN']})
print(json.load(urllib.request.urlopen(req))['url'])"`,
    );
    expect(py.out.trim(), py.out).toBe('/echo?from=python');
    expect(up.seen.at(-1)!.headers.authorization).toBe(`token ${SECRET}`);

    // A host the policy does not allow: a clear refusal from the proxy.
    const denied = await sh(s, `curl -sS -o /dev/stderr -w '%{http_code}' https://other.example.test:${other.port}/echo`);
    expect(denied.out).toMatch(/403|egress_denied/);
    // The placeholder sent to a host the secret is not scoped to: blocked, and visible as an event.
    const s2 = await sandbox([`api.example.test:${up.port}`, `other.example.test:${other.port}`], ['GH_TOKEN']);
    const otherSeen = other.seen.length;
    const leak = await sh(s2, `curl -sS -H "Authorization: Bearer $GH_TOKEN" https://other.example.test:${other.port}/echo`);
    expect(leak.out).toContain('egress_secret_scope');
    expect(other.seen.length).toBe(otherSeen);
    const events = await s2.events();
    expect(events.some((e) => e.type === 'egress.secret_scope' && (e.data as { secret: string }).secret === 'GH_TOKEN')).toBe(true);
    expect(placeholder).not.toBe((await sh(s2, 'echo -n "$GH_TOKEN"')).out);
  });

  it('leaves programs that ignore the proxy with nowhere to connect, and refuses loopback and private destinations', async () => {
    const s = await sandbox(['api.example.test:*']);
    // No network device at all: a direct connection fails whatever the address.
    const direct = await sh(
      s,
      `python3 -c "
import socket
for host in ['127.0.0.2', '10.0.2.2', '1.1.1.1', '169.254.169.254']:
    try:
        socket.create_connection((host, 443), timeout=3); print(host, 'CONNECTED')
    except OSError as e:
        print(host, 'refused', e.errno)"`,
    );
    expect(direct.out).not.toContain('CONNECTED');
    const ifaces = await sh(s, 'ls /sys/class/net');
    expect(ifaces.out.trim()).toBe('lo');
    // api.example.test resolves to 127.0.0.1 on the node: on a port the operator did not open it is refused (no SSRF).
    const ssrf = await sh(s, `curl -sS https://api.example.test:${new URL(apiUrl).port}/echo`);
    expect(ssrf.out).toMatch(/403|egress_denied/);
    const meta = await sh(s, 'curl -sS -m 10 http://169.254.169.254/latest/meta-data/');
    expect(meta.out).toMatch(/403|egress_denied/);
  });

  it('applies a policy change to a running sandbox at once', async () => {
    const s = await sandbox([`other.example.test:${other.port}`]);
    expect((await sh(s, `curl -sS https://api.example.test:${up.port}/echo`)).out).toMatch(/403|egress_denied/);
    await s.setNetwork({ allow: [`api.example.test:${up.port}`] });
    const r = await sh(s, `curl -sS --fail-with-body https://api.example.test:${up.port}/echo`);
    expect(r.code).toBe(0);
    const bad = await api('PUT', `/v1/sandboxes/${s.id}/network`, { body: { allow: ['*.com'] } });
    expect(bad.status).toBe(400);
    expect(bad.body!.error.code).toBe('policy_invalid');
  });

  it('holds a secret that needs approval until someone decides: approve, deny, timeout', async () => {
    const s = await sandbox([`api.example.test:${up.port}`], ['JIT_TOKEN']);
    const call = () => sh(s, `curl -sS -m 60 https://api.example.test:${up.port}/echo?jit`);
    // Polls until the guest's request reaches the proxy: a busy 2-core TCG host takes well over 10 s for a curl.
    const waitPending = async () => {
      for (let i = 0; i < 1200; i++) {
        const p = await s.approvals();
        if (p.length) return p[0]!;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error('no approval request appeared within 120 s');
    };
    // Approve: the request goes through with the header added.
    let pending = call();
    const a = await waitPending();
    expect(a.secret).toBe('JIT_TOKEN');
    await s.approve(a.requestId);
    const approved = await pending;
    expect(JSON.parse(approved.out).url).toBe('/echo?jit');
    // The upstream got the header with the value; the echo the guest received has it masked.
    expect(up.seen.at(-1)!.headers['x-jit']).toBe(`Token jit-${SECRET}`);
    expect(approved.out).not.toContain(SECRET);
    // Deny.
    pending = call();
    await s.deny((await waitPending()).requestId);
    expect((await pending).out).toContain('egress_approval_denied');
    // Nobody answers: the request fails cleanly when the approval times out (4 s in the test server).
    expect((await call()).out).toContain('egress_approval_denied');
    const types = (await s.events()).map((e) => e.type);
    expect(types).toContain('secret.approval_requested');
  });

  it('keeps the secret out of guest memory, disk, snapshots, logs and events', async () => {
    const s = await sandbox([`api.example.test:${up.port}`], ['GH_TOKEN']);
    // Use the secret several times, including in a body the upstream echoes back (the guest receives the echo).
    for (let i = 0; i < 3; i++) await sh(s, `curl -sS -H "Authorization: Bearer $GH_TOKEN" https://api.example.test:${up.port}/echo?n=${i}`);
    const snap = await s.snapshot();
    const needles = [
      SECRET,
      Buffer.from(SECRET).toString('base64'),
      encodeURIComponent(`Bearer ${SECRET}`),
      Buffer.from(`Bearer ${SECRET}`).toString('base64'),
    ].map((n) => Buffer.from(n));
    const hits: string[] = [];
    const events = JSON.stringify(await s.events());
    for (const n of needles) if (events.includes(n.toString())) hits.push(`events API: ${n.toString()}`);
    const scanned: string[] = [];
    const scan = (path: string) => {
      const st = statSync(path);
      if (st.isDirectory()) {
        for (const n of readdirSync(path)) scan(join(path, n));
        return;
      }
      if (!st.isFile()) return;
      scanned.push(path);
      const buf = readFileSync(path);
      for (const n of needles) if (buf.includes(n)) hits.push(`${path}: ${n.toString()}`);
    };
    // The guest's memory (its VM's live RAM file — the VM may be a warm-pool entry under its own name — and the
    // snapshot's RAM image), its disk layers, the chunk store, the database (events) and the server log.
    const vmId = ((await s.events()).find((e) => e.type === 'sandbox.started')!.data as { vmId: string }).vmId;
    for (const dir of readdirSync('/dev/shm').filter((n) => n.startsWith('sandglass-'))) {
      for (const f of readdirSync(join('/dev/shm', dir))) if (f === `${vmId}.mem` || f === `snap-${snap.id}.img`) scan(join('/dev/shm', dir, f));
    }
    scan(join(home, 'run', vmId));
    scan(join(home, 'store'));
    scan(join(home, 'sandglass.db'));
    for (const f of readdirSync(home)) if (f.startsWith('sandglass.db-')) scan(join(home, f));
    scan(join(home, 'server.log'));
    expect(scanned.some((p) => p.endsWith('.mem'))).toBe(true);
    expect(scanned.some((p) => p.includes(snap.id))).toBe(true);
    expect(hits).toEqual([]);
  });
});
