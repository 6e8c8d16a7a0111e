// Failpoints: named places where a test can make the node crash or fail on purpose, so fault tests are deterministic.
import { SandglassError } from '@sandglass/core';

/**
 * SANDGLASS_FAILPOINTS="capture.after_chunks=kill@2,capture.chunks=enospc" — read once at start. `kill` SIGKILLs
 * the process (a crash at exactly that point), `enospc` throws storage_full, `error` throws internal; `@N` fires on
 * the N-th pass only (default: the first). Unset in production, where every failpoint is a no-op map lookup.
 */
const configured = new Map(
  (process.env.SANDGLASS_FAILPOINTS ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const [name, spec = 'error'] = s.split('=');
      const [action, nth = '1'] = spec.split('@');
      return [name!, { action: action!, nth: Number(nth), passes: 0 }] as [string, { action: string; nth: number; passes: number }];
    }),
);

export function failpoint(name: string): void {
  const fp = configured.get(name);
  if (!fp || ++fp.passes !== fp.nth) return;
  const action = fp.action;
  if (action === 'kill') process.kill(process.pid, 'SIGKILL');
  if (action === 'enospc') throw new SandglassError('storage_full', `failpoint ${name}: no space left on device (ENOSPC)`);
  throw new SandglassError('internal', `failpoint ${name}`);
}
