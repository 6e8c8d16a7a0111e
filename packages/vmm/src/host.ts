// Facts about the host the VMM needs: KVM or TCG, the QEMU version (who a VM runs as: jail.ts).
import { execFileSync } from 'node:child_process';

/** The accelerator a VM runs under; which one a host gets is proven by chooseAccel (accel.ts), never assumed. */
export type Accel = 'kvm' | 'tcg';

let cachedVersion: string | undefined;

export function qemuVersion(binary = 'qemu-system-x86_64'): string {
  cachedVersion ??= execFileSync(binary, ['--version'], { encoding: 'utf8' }).split('\n')[0]!.trim();
  return cachedVersion;
}
