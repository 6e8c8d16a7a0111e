// Failpoints: named places where a test or the chaos runner makes a process crash or fail on purpose, so faults are
// injected where production can fail rather than hoped for.
import { SandglassError } from './errors.js';

/**
 * What an armed failpoint does when it fires. `kill` SIGKILLs this process (a crash at exactly that point), `enospc`
 * throws storage_full (disk or /dev/shm full), `error` throws internal; the others are acted on by the site itself,
 * which receives the action as failpoint()'s answer: `drop` (a channel cut mid-frame), `reset` (a connection reset),
 * `kill-qemu` (the guest's VMM dies under the operation).
 */
export const FAILPOINT_ACTIONS = ['kill', 'enospc', 'error', 'drop', 'reset', 'kill-qemu'] as const;
export type FailpointAction = (typeof FAILPOINT_ACTIONS)[number];

/** Every failpoint site in the product, so the chaos runner and the arming route know the whole list. */
export const FAILPOINT_NAMES = [
  'capture.after_pause',
  'capture.chunks',
  'capture.after_chunks',
  'capture.after_manifest',
  'capture.qemu',
  'chunkstore.write',
  'chunkstore.manifest_commit',
  's3.put',
  's3.get',
  'db.commit',
  'events.append',
  'agent.frame',
  'exec.qemu',
  'egress.upstream',
  'shm.write',
] as const;

/** A fired failpoint, kept (bounded) so a chaos run can show which faults really happened and in which order. */
export interface FiredFailpoint {
  name: string;
  action: FailpointAction;
  atMs: number;
}

interface Armed {
  action: FailpointAction;
  /** Fires on this pass (1-based) and is then disarmed. */
  nth: number;
  passes: number;
}

const armed = new Map<string, Armed>();
const fired: FiredFailpoint[] = [];
const FIRED_KEPT = 1000;
/** Added to the system clock's reading: a clock jump a chaos run made (0 unless one was armed). */
let clockJumpMs = 0;

/**
 * Arms `name` with a spec `action[@N]`: fires on the N-th pass from now (default the next one), once. Also used for
 * `clock.jump` whose spec is a signed millisecond offset applied at once (`clock.jump=-30000`).
 */
export function armFailpoint(name: string, spec: string): void {
  if (name === 'clock.jump') {
    const ms = Number(spec);
    if (!Number.isInteger(ms)) throw new SandglassError('invalid_argument', `clock.jump wants a whole number of milliseconds, not ${JSON.stringify(spec)}.`);
    clockJumpMs += ms;
    record(name, 'error');
    return;
  }
  if (!(FAILPOINT_NAMES as readonly string[]).includes(name)) throw new SandglassError('invalid_argument', `No failpoint named ${JSON.stringify(name)}.`);
  const [action, nth = '1'] = spec.split('@');
  if (!(FAILPOINT_ACTIONS as readonly string[]).includes(action!)) {
    throw new SandglassError('invalid_argument', `Failpoint action ${JSON.stringify(action)} is not one of ${FAILPOINT_ACTIONS.join(', ')}.`);
  }
  const n = Number(nth);
  if (!Number.isInteger(n) || n < 1) throw new SandglassError('invalid_argument', `Failpoint pass ${JSON.stringify(nth)} is not a positive integer.`);
  armed.set(name, { action: action as FailpointAction, nth: n, passes: 0 });
}

/** Disarms every failpoint (the clock jump stays: time does not go back by itself). */
export function disarmFailpoints(): void {
  armed.clear();
}

export function firedFailpoints(): readonly FiredFailpoint[] {
  return fired;
}

export function armedFailpoints(): string[] {
  return [...armed.keys()];
}

export function failpointClockJumpMs(): number {
  return clockJumpMs;
}

/**
 * Whether failpoints may be armed while running (the internal arming route exists only then). Off unless the
 * operator sets SANDGLASS_CHAOS=1: a production node never exposes a way to make itself fail.
 */
export function chaosEnabled(): boolean {
  return process.env.SANDGLASS_CHAOS === '1';
}

function record(name: string, action: FailpointAction): void {
  fired.push({ name, action, atMs: Date.now() });
  if (fired.length > FIRED_KEPT) fired.shift();
}

/**
 * A failpoint site. Unarmed (always, in production) it is one map lookup. Armed, on its N-th pass it kills the
 * process or throws, or answers the action for the site to carry out (`drop`, `reset`, `kill-qemu`).
 */
export function failpoint(name: (typeof FAILPOINT_NAMES)[number]): FailpointAction | undefined {
  const fp = armed.get(name);
  if (!fp || ++fp.passes !== fp.nth) return undefined;
  armed.delete(name);
  record(name, fp.action);
  if (fp.action === 'kill') process.kill(process.pid, 'SIGKILL');
  if (fp.action === 'enospc') throw new SandglassError('storage_full', `failpoint ${name}: no space left on device (ENOSPC)`);
  if (fp.action === 'error') throw new SandglassError('internal', `failpoint ${name}`);
  return fp.action;
}

// SANDGLASS_FAILPOINTS="capture.after_chunks=kill@2,capture.chunks=enospc": armed once, at start.
for (const s of (process.env.SANDGLASS_FAILPOINTS ?? '').split(',')) {
  const entry = s.trim();
  if (!entry) continue;
  const [name, spec = 'error'] = entry.split('=');
  armFailpoint(name!, spec);
}
