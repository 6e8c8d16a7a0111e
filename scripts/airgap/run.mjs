#!/usr/bin/env node
// The air-gap proof: runs scripts/airgap/workload.ts (sandglass up on an empty home, then create, exec, snapshot, fork
// and egress with a secret to a loopback upstream) inside a network namespace that has only loopback, under strace
// recording every connect() of every process. Passes only when the workload succeeded and no connect() named an
// address outside loopback. With --bundle <file> it first unpacks an offline bundle (npm run bundle) into an empty
// directory and runs the bundle's own README start step (setup, offline) and workload inside the namespace.
// Usage: node scripts/airgap/run.mjs [--bundle <file>] [--artifacts <dir>] [--accel-verdict <accel.json>] [--port N] [--json]
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
function opt(name) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}
const bundle = opt('--bundle');
const artifacts = opt('--artifacts');
const accelVerdict = opt('--accel-verdict');
const port = Number(opt('--port') ?? 7270);
const asJson = args.includes('--json');

if (process.getuid?.() !== 0) {
  console.error('[airgap] needs root: it creates a network namespace (unshare --net) and traces every process (strace)');
  process.exit(2);
}
for (const tool of ['unshare', 'strace', 'ip']) {
  if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) {
    console.error(`[airgap] ${tool} is missing (apt-get install -y util-linux strace iproute2)`);
    process.exit(2);
  }
}

const work = mkdtempSync(join(tmpdir(), 'sg-airgap-'));
let repo = resolve(here, '../..');
if (bundle) {
  const unpack = spawnSync('tar', ['-xf', resolve(bundle), '-C', work], { stdio: 'inherit' });
  if (unpack.status !== 0) throw new Error(`could not unpack ${bundle}`);
  repo = join(work, 'sandglass');
}
// An empty home; with --artifacts the already-built guest artifacts (kernel, root filesystem, agent) go in, as a
// bundle carries them, so the run does not spend minutes building what is not under test.
const home = join(work, 'home');
mkdirSync(home, { recursive: true });
// A bundle's setup step puts its own artifacts into the home.
if (artifacts) cpSync(artifacts, join(home, 'artifacts'), { recursive: true });
// The accelerator verdict travels with the artifacts, or comes with --accel-verdict, when it is one this host made
// (it is keyed by host boot and QEMU version): a KVM probe under ptrace can hang on a host whose KVM cannot boot a
// guest (a vCPU thread left in tracing stop), which would prove nothing about the network.
if (accelVerdict) {
  mkdirSync(join(home, 'artifacts'), { recursive: true });
  cpSync(accelVerdict, join(home, 'artifacts/accel.json'));
}

const trace = join(work, 'connect.trace');
const tsx = join(repo, 'node_modules/.bin/tsx');
// Inside the namespace: bring loopback up (the only interface), then the README's setup step when testing a bundle
// (it must install and build nothing from the network), then the workload, all under one strace.
const inner = [
  'set -e',
  'ip link set lo up',
  `export SANDGLASS_HOME=${home}`,
  // The bundle's own Node runtime, as its README says.
  bundle ? `export PATH=${repo}/bundle/node/bin:$PATH && cd ${repo} && node scripts/setup.mjs` : ':',
  `exec ${tsx} --import ${join(repo, 'bin/workspace-source.mjs')} ${join(repo, 'scripts/airgap/workload.ts')} ${repo} ${home} ${port}`,
].join('\n');
const t0 = Date.now();
const r = spawnSync(
  'unshare',
  ['--net', '--fork', '--', 'strace', '-f', '-qq', '-e', 'trace=connect,sendto', '-e', 'signal=none', '-o', trace, 'bash', '-c', inner],
  { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, npm_config_update_notifier: 'false' } },
);
const wallS = (Date.now() - t0) / 1000;

/** The workload's deliberate connect() (scripts/airgap/workload.ts CANARY; it checks the kernel refused it): the record must show it. */
const CANARY = '192.0.2.1';

/** Every socket destination in the trace, by family: loopback, unix (and netlink), the canary and anything else. */
function judge(text) {
  const out = { calls: 0, loopback: 0, local: 0, canary: 0, outside: [] };
  for (const line of text.split('\n')) {
    if (!/\b(connect|sendto|sendmsg)\(/.test(line)) continue;
    const inet = /sa_family=AF_INET, sin_port=htons\((\d+)\), sin_addr=inet_addr\("([^"]+)"\)/.exec(line);
    const inet6 = /sa_family=AF_INET6, sin6_port=htons\((\d+)\),.*inet_pton\(AF_INET6, "([^"]+)"/.exec(line);
    if (inet || inet6) {
      out.calls++;
      const addr = (inet ?? inet6)[2];
      if (addr.startsWith('127.') || addr === '::1' || addr === '::ffff:127.0.0.1') out.loopback++;
      else if (addr === CANARY) out.canary++;
      else out.outside.push(line.trim());
    } else if (/connect\(/.test(line)) {
      out.calls++;
      out.local++;
    }
  }
  return out;
}

const record = existsSync(trace) ? judge(readFileSync(trace, 'utf8')) : { calls: 0, loopback: 0, local: 0, canary: 0, outside: ['no trace was written'] };
const last = (r.stdout ?? '').trim().split('\n').at(-1) ?? '';
let workload;
try {
  workload = JSON.parse(last);
} catch {
  workload = { ok: false, error: `the workload printed no result (exit ${r.status}): ${r.stdout}` };
}
// Exactly the canary's one refused attempt: fewer means the record missed it, and so could have missed others.
const ok = workload.ok === true && record.outside.length === 0 && record.canary === 1;
const report = { ok, wallS, bundle: bundle ?? null, workload, connects: record };
if (asJson) console.log(JSON.stringify(report));
else {
  console.log(`[airgap] workload: ${workload.ok ? 'passed' : `FAILED: ${workload.error}`}`);
  console.log(`[airgap] connect/sendto with an address: ${record.calls - record.local} (loopback ${record.loopback}), unix/netlink connects: ${record.local}`);
  console.log(`[airgap] the canary's refused connect to ${CANARY} recorded: ${record.canary === 1 ? 'yes' : `NO (${record.canary})`}`);
  console.log(`[airgap] outside loopback: ${record.outside.length}${record.outside.length ? `\n  ${record.outside.slice(0, 20).join('\n  ')}` : ''}`);
  console.log(`[airgap] ${ok ? 'PASS' : 'FAIL'} in ${wallS.toFixed(1)} s`);
}
if (ok) rmSync(work, { recursive: true, force: true });
else console.error(`[airgap] kept ${work} (trace: ${trace})`);
process.exit(ok ? 0 : 1);
