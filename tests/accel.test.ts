// The accelerator the running server chose is the probe's verdict for this host, and `sandglass doctor` reports the same.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { probeCacheKey, qemuVersion, KVM_CPU_MODELS } from '@sandglass/vmm';
import { gatewayUrl, home } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
const execFileP = promisify(execFile);

describe('accelerator probe on this host', () => {
  it('the server runs under the verdict its probe cached, and every failed CPU model says why', async () => {
    const health = (await (await fetch(`${gatewayUrl}/v1/health`)).json()) as { accel: string };
    const forced = process.env.SANDGLASS_ACCEL?.toLowerCase() === 'tcg';
    if (forced || !existsSync('/dev/kvm')) {
      expect(health.accel).toBe('tcg');
      return;
    }
    const verdict = JSON.parse(readFileSync(join(home, 'artifacts', 'accel.json'), 'utf8')) as {
      key: string;
      accel: string;
      cpu: string;
      attempts: Array<{ cpu: string; ok: boolean; error?: string }>;
    };
    expect(verdict.key).toBe(probeCacheKey(qemuVersion()));
    expect(health.accel).toBe(verdict.accel);
    expect(verdict.attempts.length).toBeGreaterThan(0);
    expect(verdict.attempts.map((a) => a.cpu)).toEqual(KVM_CPU_MODELS.slice(0, verdict.attempts.length));
    for (const a of verdict.attempts.filter((x) => !x.ok)) expect(a.error).toBeTruthy();
    if (verdict.accel === 'kvm') expect(verdict.attempts.at(-1)).toMatchObject({ ok: true, cpu: verdict.cpu });
    else expect(verdict.attempts).toHaveLength(KVM_CPU_MODELS.length);
  });

  it('sandglass doctor reports the host and the same choice', async () => {
    const { stdout } = await execFileP(bin, ['doctor', '--no-probe', '--json'], { env: { ...process.env, SANDGLASS_HOME: home } });
    const r = JSON.parse(stdout) as { kvm: { present: boolean }; accel: { accel: string }; cgroups: { version: string }; qemu: string; namespaces: string[] };
    const health = (await (await fetch(`${gatewayUrl}/v1/health`)).json()) as { accel: string };
    expect(r.kvm.present).toBe(existsSync('/dev/kvm'));
    expect(r.accel.accel).toBe(health.accel);
    expect(r.qemu).toBe(qemuVersion());
    expect(r.namespaces).toEqual(expect.arrayContaining(['mnt', 'net', 'pid']));
    expect(['v1', 'v2', 'none']).toContain(r.cgroups.version);
  });
});
