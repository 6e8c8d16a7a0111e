// Guest path rules: absolute, normalised, no NUL, no '..' segments, checked on the host before the agent sees them; and the names the agent answers with.
import { posix } from 'node:path';
import { SandglassError } from '@sandglass/core';

/**
 * `workdir`: the sandbox's default directory (a template's WORKDIR), under which a relative path is taken; without one
 * a relative path is refused. The rules apply to the joined path, so a relative `..` is refused like an absolute one.
 */
export function guestPath(value: string, field = 'path', workdir?: string): string {
  const abs = workdir !== undefined && value !== '' && !value.startsWith('/') ? `${workdir}/${value}` : value;
  if (!abs.startsWith('/') || abs.includes('\0') || abs.split('/').includes('..') || abs.length > 4096) {
    throw new SandglassError(
      'path_outside_sandbox',
      `${field}: ${JSON.stringify(value.slice(0, 200))} must be an absolute guest path${workdir === undefined ? '' : ` or one relative to ${workdir}`} without NUL bytes or '..' segments`,
      {
        details: { field, rule: "absolute, no NUL, no '..'" },
      },
    );
  }
  return posix.normalize(abs);
}

/**
 * One file name as a guest agent reports it (a listing, a stat, a watch event): never empty, `.`, `..`, with a `/` or
 * NUL, or longer than NAME_MAX, so no client that joins it to a directory of its own is led out of that directory.
 */
export function isPlainName(name: unknown): name is string {
  return typeof name === 'string' && name !== '' && name !== '.' && name !== '..' && !/[/\0]/.test(name) && Buffer.byteLength(name) <= 255;
}

/** A guest path the way the agent writes it back: normalised, without a trailing `/` (except the root). */
export function cleanGuestPath(path: string): string {
  const p = posix.normalize(path);
  return p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
}

/** What the node answers when the agent named a file in a way it refuses: nothing of the answer is passed on. */
export function agentNameRefused(field: string, value: unknown, path: string): SandglassError {
  return new SandglassError(
    'vm_reply_refused',
    `The guest agent answered for ${path} with ${field} ${JSON.stringify(String(value)).slice(0, 200)}, which is not a plain file name under it; the answer was dropped.`,
    { details: { field } },
  );
}
