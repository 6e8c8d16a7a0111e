// Facts about the host the VMM needs: KVM or TCG, the unprivileged VM user, the QEMU version.
import { execFileSync } from 'node:child_process';

/** The accelerator a VM runs under; which one a host gets is proven by chooseAccel (accel.ts), never assumed. */
export type Accel = 'kvm' | 'tcg';

export const VM_USER = 'sandglass-vm';

export interface VmIdentity {
  uid: number;
  gid: number;
  name: string;
}

let cachedIdentity: VmIdentity | undefined;

/**
 * The identity QEMU runs as: the unprivileged `sandglass-vm` user when we are root (setup creates it),
 * otherwise our own (we cannot drop to another user, and are unprivileged already).
 */
export function vmIdentity(): VmIdentity {
  if (cachedIdentity) return cachedIdentity;
  if (process.getuid?.() !== 0) {
    cachedIdentity = { uid: process.getuid!(), gid: process.getgid!(), name: 'self' };
    return cachedIdentity;
  }
  try {
    const uid = Number(execFileSync('id', ['-u', VM_USER], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', VM_USER], { encoding: 'utf8' }).trim());
    cachedIdentity = { uid, gid, name: VM_USER };
    return cachedIdentity;
  } catch {
    throw new Error(`user ${VM_USER} does not exist: run \`npm run setup\` as root (it creates it with useradd --system)`);
  }
}

let cachedVersion: string | undefined;

export function qemuVersion(binary = 'qemu-system-x86_64'): string {
  cachedVersion ??= execFileSync(binary, ['--version'], { encoding: 'utf8' }).split('\n')[0]!.trim();
  return cachedVersion;
}
