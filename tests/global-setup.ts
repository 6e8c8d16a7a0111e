// Starts one real `sandglass up` (control plane + gateway + VMs) for the whole integration run; tests restore from its template.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, createWriteStream, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { makeUpstreamPki } from '@sandglass/egress/test-support';
import { softHsmConf } from '@sandglass/kms/softhsm-fixture';

const root = fileURLToPath(new URL('..', import.meta.url));
let server: ChildProcess | undefined;

declare module 'vitest' {
  export interface ProvidedContext {
    sandglassUrl: string;
    sandglassGatewayUrl: string;
    sandglassApiKey: string;
    sandglassHome: string;
    /** PEM files of the egress tests' upstream: a CA of the "outside world" and a leaf for the test host names. */
    egressPki: { caPem: string; certPem: string; keyPem: string };
    /** Loopback ports the egress tests' upstreams listen on: the only internal destinations the node opens. */
    egressUpstreamPorts: number[];
  }
}

/** Host names the egress tests' upstreams answer to; the gateway resolves them to loopback (SANDGLASS_EGRESS_HOSTS). */
export const EGRESS_TEST_HOSTS = ['api.example.test', 'other.example.test'];

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // A home of its own: CI starts from nothing (proving the build from scratch); locally the artifacts are reused.
  const home = process.env.SANDGLASS_TEST_HOME ?? join(root, '.sandglass-test');
  mkdirSync(home, { recursive: true });
  rmSync(join(home, 'server.json'), { force: true });
  const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070);
  const log = createWriteStream(join(home, 'server.log'), { flags: 'a' });
  // The egress tests' upstreams (HTTPS on loopback) have a CA of their own, which the gateway is told to trust.
  const pki = await makeUpstreamPki(EGRESS_TEST_HOSTS);
  const caFile = join(home, 'egress-upstream-ca.pem');
  writeFileSync(caFile, pki.caPem);
  // Sandboxes reach loopback only where the operator opened it (SANDGLASS_EGRESS_PRIVATE_ALLOW): exactly these ports,
  // never the gateway's or the control plane's.
  const upstreamPorts = Array.from({ length: 8 }, (_, i) => port + 20 + i);
  const t0 = Date.now();
  server = spawn(join(root, 'bin/sandglass'), ['up', '--port', String(port)], {
    env: {
      ...process.env,
      SANDGLASS_HOME: home,
      SANDGLASS_LOG_LEVEL: process.env.SANDGLASS_LOG_LEVEL ?? 'info',
      // Hang detection within seconds rather than a minute, still far above a busy TCG guest's ping time.
      SANDGLASS_HEALTH_INTERVAL_MS: '2000',
      SANDGLASS_HEALTH_TIMEOUT_MS: '6000',
      SANDGLASS_EGRESS_HOSTS: EGRESS_TEST_HOSTS.map((h) => `${h}=127.0.0.1`).join(','),
      SANDGLASS_EGRESS_PRIVATE_ALLOW: upstreamPorts.map((p) => `127.0.0.1:${p}`).join(','),
      SANDGLASS_EGRESS_CA_FILES: caFile,
      // Approval requests time out in seconds, so the timeout case is quick to test.
      SANDGLASS_APPROVAL_TIMEOUT_MS: '4000',
      // The BYOK test's HSM: SoftHSM2 tokens under the home, which the test initialises (tests/byok.test.ts).
      SOFTHSM2_CONF: softHsmConf(join(home, 'softhsm')),
      // A revocation on the HSM is noticed within a second.
      SANDGLASS_KEY_POLL_INTERVAL_MS: '1000',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  server.stdout!.on('data', (d: Buffer) => {
    log.write(d);
    if (process.env.SANDGLASS_TEST_VERBOSE || !process.env.CI) process.stdout.write(`[up] ${d}`);
  });
  server.stderr!.on('data', (d: Buffer) => {
    log.write(d);
    process.stderr.write(`[up] ${d}`);
  });
  const exited = new Promise<never>((_, reject) =>
    server!.once('exit', (code) => reject(new Error(`sandglass up exited with ${code} before it was ready; see ${home}/server.log`))),
  );
  const serverFile = join(home, 'server.json');
  const ready = (async () => {
    while (!existsSync(serverFile)) await new Promise((r) => setTimeout(r, 200));
  })();
  await Promise.race([ready, exited]);
  const info = JSON.parse(readFileSync(serverFile, 'utf8')) as { url: string; gatewayUrl: string; adminKeyFile: string };
  console.log(`[setup] sandglass up ready in ${((Date.now() - t0) / 1000).toFixed(1)} s at ${info.url}`);
  project.provide('sandglassUrl', info.url);
  project.provide('sandglassGatewayUrl', info.gatewayUrl);
  project.provide('sandglassApiKey', readFileSync(info.adminKeyFile, 'utf8').trim());
  project.provide('sandglassHome', home);
  project.provide('egressPki', pki);
  project.provide('egressUpstreamPorts', upstreamPorts);
  return async () => {
    if (!server || server.exitCode !== null) return;
    const gone = new Promise((r) => server!.once('exit', r));
    server.kill('SIGTERM');
    const timer = setTimeout(() => server!.kill('SIGKILL'), 30_000);
    await gone;
    clearTimeout(timer);
  };
}
