// Which accelerator VMs use, proven by booting a guest rather than assumed from /dev/kvm; the verdict is cached per host boot and QEMU version.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { SandglassError } from '@sandglass/core';
import type { Accel } from './host.js';

/** CPU models tried under KVM, in order: `host` aborts on some nested hosts (QEMU 7.2: "failed to set MSR 0x10a"). */
export const KVM_CPU_MODELS = ['host', 'host,-arch-capabilities', 'max'] as const;
/** The CPU model under TCG. */
export const TCG_CPU_MODEL = 'max';
export const DEFAULT_PROBE_TIMEOUT_MS = 10_000;
/** The TCG control boot: slow by nature, so its limit is a cold boot's under TCG. */
export const DEFAULT_CONTROL_TIMEOUT_MS = 120_000;
// Bump when what a probe proves changes: older cached verdicts are then probed again.
const PROBE_RECIPE = 1;

export type AccelSetting = 'auto' | 'kvm' | 'tcg';

export interface AccelChoice {
  accel: Accel;
  /** The `-cpu` model QEMU gets. */
  cpu: string;
  /** One line saying why, for the log and `sandglass doctor`. */
  reason: string;
  /** What each KVM CPU model did, when a probe ran (from the cache or now). */
  attempts: ProbeResult[];
  /** True when the verdict came from the cache rather than a probe run now. */
  cached: boolean;
}

export interface ProbeResult {
  cpu: string;
  ok: boolean;
  ms: number;
  /** Why it failed: a timeout or what QEMU said when it exited. */
  error?: string;
}

export interface ProbeTarget {
  accel: Accel;
  cpu: string;
}

/**
 * Boots the real guest under this accelerator and CPU model and resolves once its agent answered `hello`; rejects
 * with what went wrong. It must stop the VM when `signal` aborts (the probe's time limit ran out) and before it settles.
 */
export type ProbeAttempt = (target: ProbeTarget, signal: AbortSignal) => Promise<void>;

export interface ChooseAccelOptions {
  /** SANDGLASS_ACCEL: `kvm` turns a failed probe into an error, `tcg` skips it; default `auto`. */
  setting?: string;
  attempt: ProbeAttempt;
  /** JSON file of cached verdicts; none = always probe. */
  cacheFile?: string;
  /** What a cached verdict is valid for (host boot, QEMU version); see probeCacheKey. */
  cacheKey: string;
  timeoutMs?: number;
  controlTimeoutMs?: number;
  kvmDevice?: string;
}

export function parseAccelSetting(value: string | undefined): AccelSetting {
  const v = (value ?? '').trim().toLowerCase();
  if (v === '' || v === 'auto') return 'auto';
  if (v === 'kvm' || v === 'tcg') return v;
  throw new SandglassError('invalid_argument', `SANDGLASS_ACCEL must be auto, kvm or tcg, got ${JSON.stringify(value)}`, {
    details: { field: 'SANDGLASS_ACCEL' },
  });
}

/** Host boot id + QEMU version: a verdict holds until either changes. */
export function probeCacheKey(qemuVersion: string, bootIdFile = '/proc/sys/kernel/random/boot_id'): string {
  let bootId = 'unknown-boot';
  try {
    bootId = readFileSync(bootIdFile, 'utf8').trim();
  } catch {
    // Without a boot id the verdict is still keyed by the QEMU version; a stale one costs a wrong accel until restart.
  }
  return `${PROBE_RECIPE}|${bootId}|${qemuVersion}`;
}

interface CacheEntry {
  key: string;
  accel: Accel;
  cpu: string;
  reason: string;
  attempts: ProbeResult[];
  at: string;
}

function readCache(file: string | undefined, key: string): CacheEntry | undefined {
  if (!file || !existsSync(file)) return undefined;
  try {
    const entry = JSON.parse(readFileSync(file, 'utf8')) as CacheEntry;
    return entry.key === key && (entry.accel === 'kvm' || entry.accel === 'tcg') ? entry : undefined;
  } catch {
    return undefined;
  }
}

/** The verdict cached for `cacheKey`, without probing (for `sandglass doctor --no-probe`). */
export function cachedAccel(cacheFile: string, cacheKey: string): AccelChoice | undefined {
  const e = readCache(cacheFile, cacheKey);
  return e && { accel: e.accel, cpu: e.cpu, reason: `${e.reason} [cached]`, attempts: e.attempts, cached: true };
}

function writeCache(file: string | undefined, entry: CacheEntry): void {
  if (!file) return;
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(entry, null, 2) + '\n', { mode: 0o600 });
  renameSync(tmp, file);
}

/** Runs one attempt under a time limit; a hang is aborted and reported as such. */
async function timed(attempt: ProbeAttempt, target: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  const { cpu } = target;
  const ctl = new AbortController();
  const t0 = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      ctl.abort();
      reject(new Error(`no agent hello within ${timeoutMs / 1000} s`));
    }, timeoutMs);
  });
  const run = attempt(target, ctl.signal);
  try {
    await Promise.race([run, limit]);
    return { cpu, ok: true, ms: Math.round(performance.now() - t0) };
  } catch (err) {
    // The attempt stops its VM on abort; wait for that so no probe QEMU outlives the verdict.
    await run.catch(() => {});
    const msg = (err as Error).message.split('\n').find((l) => l.trim() !== '') ?? 'failed';
    return { cpu, ok: false, ms: Math.round(performance.now() - t0), error: msg.trim().slice(0, 300) };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The choice no probe is needed for: TCG when the setting says so or there is no KVM device (SANDGLASS_ACCEL=kvm
 * without one is an error); undefined when only the probe, or its cached verdict, can tell.
 */
export function accelWithoutProbe(settingValue: string | undefined, device = '/dev/kvm'): AccelChoice | undefined {
  const setting = parseAccelSetting(settingValue);
  const tcg = (reason: string): AccelChoice => ({ accel: 'tcg', cpu: TCG_CPU_MODEL, reason, attempts: [], cached: false });
  if (setting === 'tcg') return tcg('SANDGLASS_ACCEL=tcg: KVM not probed');
  if (!existsSync(device)) {
    if (setting === 'kvm') throw new SandglassError('vm_failed', `SANDGLASS_ACCEL=kvm but ${device} does not exist`);
    return tcg(`no ${device}: using TCG`);
  }
  return undefined;
}

/**
 * The accelerator and CPU model for this host: KVM with the first CPU model that boots the guest to its agent within
 * the limit, TCG otherwise. `setting` kvm makes a failed probe an error; tcg skips the probe.
 */
export async function chooseAccel(opts: ChooseAccelOptions): Promise<AccelChoice> {
  const setting = parseAccelSetting(opts.setting);
  const tcg = (reason: string, attempts: ProbeResult[] = [], cached = false): AccelChoice => ({ accel: 'tcg', cpu: TCG_CPU_MODEL, reason, attempts, cached });
  const settled = accelWithoutProbe(opts.setting, opts.kvmDevice);
  if (settled) return settled;
  let entry = readCache(opts.cacheFile, opts.cacheKey);
  const cached = entry !== undefined;
  if (!entry) {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS;
    const attempts: ProbeResult[] = [];
    for (const cpu of KVM_CPU_MODELS) {
      const r = await timed(opts.attempt, { accel: 'kvm', cpu }, timeoutMs);
      attempts.push(r);
      if (r.ok) break;
    }
    const won = attempts.find((a) => a.ok);
    if (!won) {
      // The control: a guest that fails under TCG too says nothing about KVM (a broken image, a permission), and such
      // a verdict must not be cached as "KVM does not work" for the rest of the host's boot.
      const control = await timed(opts.attempt, { accel: 'tcg', cpu: TCG_CPU_MODEL }, opts.controlTimeoutMs ?? DEFAULT_CONTROL_TIMEOUT_MS);
      if (!control.ok) {
        throw new SandglassError(
          'vm_failed',
          `the guest boots under neither KVM nor TCG, so the accelerator cannot be chosen: TCG: ${control.error}; ${attempts.map((a) => `KVM -cpu ${a.cpu}: ${a.error}`).join('; ')}`,
        );
      }
    }
    entry = won
      ? {
          key: opts.cacheKey,
          accel: 'kvm',
          cpu: won.cpu,
          reason: `KVM boots a guest with -cpu ${won.cpu} (agent ready in ${(won.ms / 1000).toFixed(1)} s)`,
          attempts,
          at: new Date().toISOString(),
        }
      : {
          key: opts.cacheKey,
          accel: 'tcg',
          cpu: TCG_CPU_MODEL,
          reason: `KVM present but a guest did not boot within ${timeoutMs / 1000} s: using TCG (${attempts.map((a) => `${a.cpu}: ${a.error}`).join('; ')})`,
          attempts,
          at: new Date().toISOString(),
        };
    writeCache(opts.cacheFile, entry);
  }
  if (entry.accel === 'tcg' && setting === 'kvm') {
    throw new SandglassError('vm_failed', `SANDGLASS_ACCEL=kvm but the KVM probe failed: ${entry.reason}`);
  }
  return entry.accel === 'kvm'
    ? { accel: 'kvm', cpu: entry.cpu, reason: cached ? `${entry.reason} [cached]` : entry.reason, attempts: entry.attempts, cached }
    : tcg(cached ? `${entry.reason} [cached]` : entry.reason, entry.attempts, cached);
}
