// Naming one process across time: a pid can be reused, a pid with the start time the kernel reports for it cannot.
import { readFileSync } from 'node:fs';

/**
 * Field 22 of /proc/<pid>/stat (clock ticks after boot when the process started), or undefined when no such process
 * exists. The command name (field 2) may hold spaces and parentheses, so fields are counted from its last ')'.
 */
export function processStartTime(pid: number): string | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  return parseStatStartTime(stat);
}

export function parseStatStartTime(stat: string): string | undefined {
  const fields = stat
    .slice(stat.lastIndexOf(')') + 1)
    .trim()
    .split(/\s+/);
  return stat.includes(')') && fields.length >= 20 ? fields[19] : undefined;
}

/** The command line of a live process, for messages that name it. */
export function processCommand(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
  } catch {
    return '(unknown)';
  }
}
