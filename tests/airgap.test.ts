// Air-gap proof (issue 14): a fresh `sandglass up` on an empty home, in a network namespace that has only loopback,
// runs create, exec, file write, snapshot, fork and egress with a secret to a loopback upstream, while strace records
// every connect() and sendto() of every process it starts. Not one may name an address outside loopback.
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { home } from './helpers.js';

const runner = fileURLToPath(new URL('../scripts/airgap/run.mjs', import.meta.url));
const isRoot = process.getuid?.() === 0;
const hasTools = ['unshare', 'strace', 'ip'].every((t) => spawnSync('sh', ['-c', `command -v ${t}`]).status === 0);
const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 40;

interface Report {
  ok: boolean;
  workload: { ok: boolean; error?: string; exec?: string; forkRead?: string; egressStatus?: string; secretArrived?: boolean };
  connects: { calls: number; loopback: number; local: number; canary: number; outside: string[] };
}

describe.skipIf(!isRoot || !hasTools)('air-gapped', () => {
  it('starts on an empty home and runs a session with no connection outside loopback', async () => {
    let out: string;
    try {
      // The suite's built guest artifacts stand in for a bundle's: building them is not what is under test here.
      ({ stdout: out } = await promisify(execFile)('node', [runner, '--artifacts', join(home, 'artifacts'), '--port', String(port), '--json'], {
        encoding: 'utf8',
        timeout: 600_000,
      }));
    } catch (err) {
      out = (err as { stdout?: string }).stdout ?? '';
    }
    const report = JSON.parse(out.trim().split('\n').at(-1)!) as Report;
    expect(report.workload.error).toBeUndefined();
    expect(report.workload).toMatchObject({ ok: true, exec: '42', forkRead: 'before the snapshot\n', egressStatus: '/echo', secretArrived: true });
    // The record is real: the session's own loopback traffic (API calls, the upstream) is in it, and so is the one
    // deliberate connect to TEST-NET-1 that the kernel refused before any packet existed…
    expect(report.connects.loopback).toBeGreaterThan(0);
    expect(report.connects.canary).toBe(1);
    // …and nothing else.
    expect(report.connects.outside).toEqual([]);
    expect(report.ok).toBe(true);
  });
});
