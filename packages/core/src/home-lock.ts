// One home, one server: the process that serves a home holds its lock file; a second one refuses to start.
import { closeSync, linkSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { constants as fsc } from 'node:fs';
import { join } from 'node:path';
import { SandglassError } from './errors.js';
import { processCommand, processStartTime } from './proc.js';

interface LockOwner {
  pid: number;
  startTime: string;
}

export interface HomeLock {
  readonly file: string;
  release(): void;
}

const held = new Map<string, HomeLock>();

function readOwner(file: string): LockOwner | undefined {
  try {
    const o = JSON.parse(readFileSync(file, 'utf8')) as LockOwner;
    return Number.isInteger(o.pid) && typeof o.startTime === 'string' ? o : undefined;
  } catch {
    return undefined;
  }
}

/** Whether a {pid, startTime} record still names the process running under that pid. */
export function processRecordAlive(o: { pid?: unknown; startTime?: unknown } | undefined): boolean {
  return o !== undefined && Number.isInteger(o.pid) && typeof o.startTime === 'string' && alive(o as LockOwner);
}

/** Whether a live process holds `<home>/lock` (a server serving that home, or one starting up on it). */
export function homeLockHeld(home: string): boolean {
  return alive(readOwner(join(home, 'lock')));
}

function alive(o: LockOwner | undefined): o is LockOwner {
  return o !== undefined && processStartTime(o.pid) === o.startTime;
}

/**
 * Takes `<home>/lock` for this process before anything in the home is touched. Node has no flock, so the lock is a
 * file created with O_EXCL holding the owner's pid and start time; one whose owner is gone (the pid is dead, or now
 * names a process that started later) is stale and taken over. Taking it twice in one process is fine (the gateway
 * and `up` both ask). Throws `conflict`, naming the owner, while another live process holds it.
 */
export function lockHome(home: string): HomeLock {
  const file = join(home, 'lock');
  const mine = held.get(file);
  if (mine) return mine;
  const me: LockOwner = { pid: process.pid, startTime: processStartTime(process.pid) ?? '' };
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const fd = openSync(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
      writeSync(fd, JSON.stringify(me) + '\n');
      closeSync(fd);
      const lock: HomeLock = {
        file,
        release: () => {
          held.delete(file);
          const o = readOwner(file);
          if (o?.pid === me.pid && o.startTime === me.startTime) rmSync(file, { force: true });
        },
      };
      held.set(file, lock);
      return lock;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const owner = readOwner(file);
    if (alive(owner)) {
      throw new SandglassError(
        'conflict',
        `Another Sandglass server is running on ${home}: pid ${owner.pid} (${processCommand(owner.pid)}). Stop it first, or use another SANDGLASS_HOME.`,
      );
    }
    // Stale. Move it aside and check that what moved is the stale lock we judged, not a live one another starter
    // wrote in between (then it goes back, and we look again).
    const aside = `${file}.stale-${process.pid}`;
    try {
      renameSync(file, aside);
    } catch {
      continue;
    }
    const moved = readOwner(aside);
    if (alive(moved)) {
      try {
        linkSync(aside, file);
      } catch {
        // Someone else's lock is in place already.
      }
    }
    rmSync(aside, { force: true });
  }
  throw new SandglassError('conflict', `Could not take the lock of ${home} (${file}): it keeps changing hands.`);
}
