// The guest kernel command line the VMM driver boots with, including the host TSC frequency TCG needs.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/**
 * The host TSC frequency in kHz from, in order of trust: sysfs `tsc_freq_khz` (some kernels),
 * the kernel log (`tsc: Refined TSC clocksource calibration: …` beats `tsc: Detected … MHz`),
 * /proc/cpuinfo `cpu MHz` (the current clock, equal to the TSC on VMs and fixed-clock hosts).
 */
export function parseTscKhz(sources: { sysfs?: string; kernelLog?: string; cpuinfo?: string }): number | undefined {
  const sysfs = Number.parseInt(sources.sysfs?.trim() ?? '', 10);
  if (Number.isFinite(sysfs) && sysfs > 0) return sysfs;
  const mhz = (re: RegExp, text?: string) => {
    const m = text?.match(re);
    return m?.[1] ? Math.round(Number.parseFloat(m[1]) * 1000) : undefined;
  };
  return (
    mhz(/tsc: Refined TSC clocksource calibration: ([\d.]+) MHz/, sources.kernelLog) ??
    mhz(/tsc: Detected ([\d.]+) MHz/, sources.kernelLog) ??
    mhz(/^cpu MHz\s*:\s*([\d.]+)/m, sources.cpuinfo)
  );
}

function readOrUndefined(read: () => string): string | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

let cachedTscKhz: number | undefined;

/** The host's TSC frequency in kHz (read once per process); throws when no source tells it. */
export function hostTscKhz(): number {
  if (cachedTscKhz !== undefined) return cachedTscKhz;
  const sysfs = readOrUndefined(() => readFileSync('/sys/devices/system/cpu/cpu0/tsc_freq_khz', 'utf8'));
  // dmesg may be restricted to root or rotated away; cpuinfo is the fallback.
  const kernelLog = sysfs ? undefined : readOrUndefined(() => execFileSync('dmesg', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 2000 }));
  const cpuinfo = readOrUndefined(() => readFileSync('/proc/cpuinfo', 'utf8'));
  const khz = parseTscKhz({ sysfs, kernelLog, cpuinfo });
  if (khz === undefined) throw new Error('cannot determine the host TSC frequency (no tsc_freq_khz, kernel log or cpu MHz)');
  cachedTscKhz = khz;
  return khz;
}

/**
 * Kernel arguments for booting a guest image under QEMU microvm. `tsc_early_khz` is required
 * under TCG (timer calibration otherwise fails and boots hang); the rest trim ~0.1–0.2 s of
 * probing. See shared/design/qemu-notes.md.
 */
export function defaultKernelArgs(opts: { tscKhz?: number; rootDevice?: string } = {}): string[] {
  return [
    'console=ttyS0',
    'quiet',
    `tsc_early_khz=${opts.tscKhz ?? hostTscKhz()}`,
    'tsc=reliable',
    'no_timer_check',
    'mitigations=off',
    'pci=off',
    'nokaslr',
    'cryptomgr.notests',
    '8250.nr_uarts=1',
    'i8042.noaux',
    'i8042.nomux',
    'i8042.nopnp',
    'i8042.dumbkbd',
    'panic=-1',
    // A triple fault is the reset microvm always honours: with -no-reboot a panicking guest ends QEMU at once.
    'reboot=t',
    `sandglass.root=${opts.rootDevice ?? '/dev/vda'}`,
  ];
}
