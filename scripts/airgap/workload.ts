// The air-gap workload: run inside a network namespace that has only loopback, it starts `sandglass up` on an empty
// home and drives create, exec, file write, snapshot, fork and egress (with a secret) to an HTTPS upstream on
// loopback. Prints one JSON line with what each step saw; scripts/airgap/run.mjs judges it and the connect() record.
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sandbox, Secrets } from '@sandglass/sdk';
import { makeUpstreamPki, startHttpsUpstream } from '@sandglass/egress/test-support';

function arg(i: number, name: string): string {
  const v = process.argv[2 + i];
  if (!v) throw new Error(`usage: workload.ts <repo> <home> <port> (missing ${name})`);
  return v;
}
const repo = arg(0, 'repo');
const home = arg(1, 'home');
const port = Number(arg(2, 'port'));
const HOST = 'api.example.test';
const SECRET = `airgap_${Date.now().toString(36)}_v4lu3`;

/**
 * The recorder's own check: one connect() to TEST-NET-1 (192.0.2.0/24, reserved for documentation, routed nowhere).
 * In a namespace with only loopback the kernel refuses it before any packet exists (ENETUNREACH); the runner must
 * find exactly this attempt in its record, or the record proves nothing.
 */
const CANARY = { host: '192.0.2.1', port: 9 };
function canary(): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(CANARY.port, CANARY.host);
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

async function main(): Promise<Record<string, unknown>> {
  const canaryResult = await canary();
  if (canaryResult !== 'ENETUNREACH') throw new Error(`the namespace is not air-gapped: a connect to ${CANARY.host} gave ${canaryResult}`);
  mkdirSync(home, { recursive: true });
  const pki = await makeUpstreamPki([HOST]);
  const caFile = join(home, 'upstream-ca.pem');
  writeFileSync(caFile, pki.caPem);
  const upstream = await startHttpsUpstream(pki, port + 20);
  const t0 = Date.now();
  const server = spawn(join(repo, 'bin/sandglass'), ['up', '--port', String(port)], {
    env: {
      ...process.env,
      SANDGLASS_HOME: home,
      SANDGLASS_LOG_LEVEL: 'warn',
      SANDGLASS_EGRESS_HOSTS: `${HOST}=127.0.0.1`,
      SANDGLASS_EGRESS_PRIVATE_ALLOW: `127.0.0.1:${upstream.port}`,
      SANDGLASS_EGRESS_CA_FILES: caFile,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    while (!existsSync(join(home, 'server.json'))) {
      if (server.exitCode !== null) throw new Error(`sandglass up exited with ${server.exitCode}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const upMs = Date.now() - t0;
    const apiKey = readFileSync(join(home, 'admin-key'), 'utf8').trim();
    const cfg = { apiUrl: `http://127.0.0.1:${port}`, apiKey };
    await Secrets.set('AIRGAP_TOKEN', SECRET, { ...cfg, hosts: [`${HOST}:${upstream.port}`] });
    const sbx = await Sandbox.create({ ...cfg, snapshotIntervalS: 3600, network: { allow: [`${HOST}:${upstream.port}`] }, secrets: ['AIRGAP_TOKEN'] });
    const exec = (await sbx.commands.run('echo $((6*7))')).stdout.trim();
    await sbx.files.write('/root/note.txt', 'before the snapshot\n');
    const snap = await sbx.snapshot({ name: 'airgap' });
    const [fork] = await Sandbox.fork(snap.id, cfg);
    if (!fork) throw new Error('the fork did not start');
    const forkRead = (await fork.commands.run('cat /root/note.txt')).stdout;
    const curl = await sbx.commands.run(`curl -sS --fail-with-body -H "Authorization: Bearer $AIRGAP_TOKEN" https://${HOST}:${upstream.port}/echo`);
    const seen = upstream.seen.at(-1)?.headers.authorization;
    await fork.kill();
    await sbx.kill();
    return { ok: true, canary: canaryResult, upMs, exec, forkRead, egressStatus: JSON.parse(curl.stdout).url, secretArrived: seen === `Bearer ${SECRET}` };
  } finally {
    const gone = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await gone;
    await upstream.close();
  }
}

main().then(
  (r) => console.log(JSON.stringify(r)),
  (err) => {
    console.log(JSON.stringify({ ok: false, error: (err as Error).stack ?? String(err) }));
    process.exitCode = 1;
  },
);
