// The accelerator probe against fake QEMUs (real processes) that hang, abort or come up per CPU model; the verdict cache; the setting.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chooseAccel, cachedAccel, KVM_CPU_MODELS, parseAccelSetting, probeCacheKey, type ProbeAttempt } from './accel.js';

type Behaviour = 'hang' | 'abort' | 'ok';

const FAKE_QEMU = `
const how = JSON.parse(process.argv[2])[process.argv[1]];
if (how === 'abort') { process.stderr.write('qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\\n'); process.exit(1); }
if (how === 'ok') { process.stdout.write('hello\\n'); process.exit(0); }
setInterval(() => {}, 1000);
`;

/** A probe attempt that runs a fake QEMU process behaving per CPU model (`tcg` for the control boot); records every pid it started. */
function fakeQemu(behaviour: Record<string, Behaviour>, pids: number[]): ProbeAttempt {
  return ({ accel, cpu }, signal) =>
    new Promise<void>((resolve, reject) => {
      // The TCG control boot is keyed `tcg` in `behaviour`; KVM attempts by CPU model.
      const child = spawn(process.execPath, ['-e', FAKE_QEMU, accel === 'tcg' ? 'tcg' : cpu, JSON.stringify(behaviour)], { stdio: ['ignore', 'pipe', 'pipe'] });
      pids.push(child.pid!);
      let err = '';
      let out = '';
      child.stderr.on('data', (d: Buffer) => (err += d));
      child.stdout.on('data', (d: Buffer) => (out += d));
      signal.addEventListener('abort', () => child.kill('SIGKILL'));
      child.once('exit', (code, sig) =>
        code === 0 && out.includes('hello') ? resolve() : reject(new Error(err || `QEMU exited (code ${code}, signal ${sig})`)),
      );
    });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

let dir: string;
let kvm: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'accel-'));
  kvm = join(dir, 'kvm');
  writeFileSync(kvm, '');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('chooseAccel', () => {
  it('uses the first CPU model that boots, after one that aborts', async () => {
    const pids: number[] = [];
    const c = await chooseAccel({
      attempt: fakeQemu({ host: 'abort', 'host,-arch-capabilities': 'ok', max: 'ok' }, pids),
      cacheKey: 'k',
      kvmDevice: kvm,
      timeoutMs: 5000,
    });
    expect(c.accel).toBe('kvm');
    expect(c.cpu).toBe('host,-arch-capabilities');
    expect(c.attempts.map((a) => a.ok)).toEqual([false, true]);
    expect(c.attempts[0]!.error).toContain('failed to set MSR');
    expect(pids).toHaveLength(2);
  });

  it('falls back to TCG with one line saying why when every model hangs or aborts, leaving no process behind', async () => {
    const pids: number[] = [];
    const c = await chooseAccel({
      attempt: fakeQemu({ host: 'abort', 'host,-arch-capabilities': 'hang', max: 'hang', tcg: 'ok' }, pids),
      cacheKey: 'k',
      kvmDevice: kvm,
      timeoutMs: 300,
    });
    expect(c.accel).toBe('tcg');
    expect(c.cpu).toBe('max');
    expect(c.reason).toMatch(/^KVM present but a guest did not boot within 0.3 s: using TCG/);
    expect(c.reason).not.toContain('\n');
    expect(c.attempts.map((a) => a.cpu)).toEqual([...KVM_CPU_MODELS]);
    expect(c.attempts[1]!.error).toMatch(/no agent hello within/);
    expect(pids.filter(alive)).toEqual([]);
    // Three KVM attempts and the TCG control boot.
    expect(pids).toHaveLength(4);
  });

  it('caches nothing and fails when the guest does not boot under TCG either: the fault is not KVM', async () => {
    const cacheFile = join(dir, 'accel.json');
    const attempt = fakeQemu({ host: 'abort', 'host,-arch-capabilities': 'abort', max: 'abort', tcg: 'abort' }, []);
    await expect(chooseAccel({ attempt, cacheFile, cacheKey: 'k', kvmDevice: kvm, timeoutMs: 300 })).rejects.toThrow(/neither KVM nor TCG/);
    expect(cachedAccel(cacheFile, 'k')).toBeUndefined();
  });

  it('SANDGLASS_ACCEL=kvm turns a failed probe into an error; tcg skips the probe', async () => {
    const pids: number[] = [];
    await expect(
      chooseAccel({
        setting: 'kvm',
        attempt: fakeQemu({ host: 'hang', 'host,-arch-capabilities': 'abort', max: 'abort', tcg: 'ok' }, pids),
        cacheKey: 'k',
        kvmDevice: kvm,
        timeoutMs: 300,
      }),
    ).rejects.toThrow(/SANDGLASS_ACCEL=kvm but KVM present but a guest did not boot|SANDGLASS_ACCEL=kvm/);
    const before = pids.length;
    const t = await chooseAccel({ setting: 'tcg', attempt: fakeQemu({ host: 'ok' }, pids), cacheKey: 'k', kvmDevice: kvm });
    expect(t).toMatchObject({ accel: 'tcg', cpu: 'max' });
    expect(pids.length).toBe(before);
    await expect(chooseAccel({ setting: 'kvm', attempt: fakeQemu({ host: 'ok' }, pids), cacheKey: 'k', kvmDevice: join(dir, 'absent') })).rejects.toThrow(
      /does not exist/,
    );
  });

  it('without the device it is TCG and nothing runs', async () => {
    const pids: number[] = [];
    const c = await chooseAccel({ attempt: fakeQemu({ host: 'ok' }, pids), cacheKey: 'k', kvmDevice: join(dir, 'absent') });
    expect(c).toMatchObject({ accel: 'tcg', cached: false });
    expect(c.reason).toMatch(/no .*absent: using TCG/);
    expect(pids).toEqual([]);
  });

  it('caches the verdict per key: the same key probes nothing, another key probes again', async () => {
    const cacheFile = join(dir, 'accel.json');
    const pids: number[] = [];
    const attempt = fakeQemu({ host: 'ok' }, pids);
    const first = await chooseAccel({ attempt, cacheFile, cacheKey: 'boot1|qemu7.2', kvmDevice: kvm });
    expect(first).toMatchObject({ accel: 'kvm', cpu: 'host', cached: false });
    const again = await chooseAccel({ attempt, cacheFile, cacheKey: 'boot1|qemu7.2', kvmDevice: kvm });
    expect(again).toMatchObject({ accel: 'kvm', cpu: 'host', cached: true });
    expect(pids).toHaveLength(1);
    expect(cachedAccel(cacheFile, 'boot1|qemu7.2')?.cpu).toBe('host');
    expect(cachedAccel(cacheFile, 'boot2|qemu7.2')).toBeUndefined();
    await chooseAccel({ attempt, cacheFile, cacheKey: 'boot2|qemu7.2', kvmDevice: kvm });
    expect(pids).toHaveLength(2);
    expect(JSON.parse(readFileSync(cacheFile, 'utf8')).key).toBe('boot2|qemu7.2');
  });

  it('a cached TCG verdict still fails SANDGLASS_ACCEL=kvm', async () => {
    const cacheFile = join(dir, 'accel.json');
    const attempt = fakeQemu({ host: 'abort', 'host,-arch-capabilities': 'abort', max: 'abort', tcg: 'ok' }, []);
    await chooseAccel({ attempt, cacheFile, cacheKey: 'k', kvmDevice: kvm });
    await expect(chooseAccel({ setting: 'kvm', attempt, cacheFile, cacheKey: 'k', kvmDevice: kvm })).rejects.toThrow(/SANDGLASS_ACCEL=kvm/);
  });
});

describe('settings and keys', () => {
  it('parses the setting and names the variable on a bad one', () => {
    expect(parseAccelSetting(undefined)).toBe('auto');
    expect(parseAccelSetting('KVM')).toBe('kvm');
    expect(() => parseAccelSetting('hvf')).toThrow(/SANDGLASS_ACCEL must be auto, kvm or tcg/);
  });

  it('keys the cache by host boot and QEMU version', () => {
    const boot = join(dir, 'boot_id');
    writeFileSync(boot, 'abc\n');
    expect(probeCacheKey('QEMU 7.2', boot)).toContain('abc|QEMU 7.2');
    expect(probeCacheKey('QEMU 8.0', boot)).not.toBe(probeCacheKey('QEMU 7.2', boot));
  });
});
