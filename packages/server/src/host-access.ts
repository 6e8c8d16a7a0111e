// Lets the unprivileged VM user reach the files QEMU must open under the home directory, and nothing else.
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { VM_USER } from '@sandglass/vmm';

/**
 * QEMU runs as `sandglass-vm`; a home under /root is not traversable by other users. Instead of opening
 * the directories to everyone, grant that one user search (x) permission on each ancestor with an ACL:
 * it can reach paths it is told, not list them.
 */
export function grantVmTraverse(dir: string): void {
  if (process.getuid?.() !== 0) return;
  const missing: string[] = [];
  for (let d = resolve(dir); d !== '/'; d = dirname(d)) {
    if ((statSync(d).mode & 0o001) === 0) missing.push(d);
  }
  for (const d of missing) {
    try {
      execFileSync('setfacl', ['-m', `u:${VM_USER}:x`, d], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (err) {
      throw new Error(`cannot let ${VM_USER} reach ${d}: setfacl failed (${(err as Error).message}); install Debian's acl package or set SANDGLASS_HOME to a directory under /var/lib`);
    }
  }
}
