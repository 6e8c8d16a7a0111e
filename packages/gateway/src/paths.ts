// Guest path rules: absolute, normalised, no NUL, no '..' segments, checked on the host before the agent sees them; and the names the agent answers with.
import { posix } from 'node:path';
import { SandglassError } from '@sandglass/core';

export function guestPath(value: string, field = 'path'): string {
  if (!value.startsWith('/') || value.includes('\0') || value.split('/').includes('..') || value.length > 4096) {
    throw new SandglassError(
      'path_outside_sandbox',
      `${field}: ${JSON.stringify(value.slice(0, 200))} must be an absolute guest path without NUL bytes or '..' segments`,
      {
        details: { field, rule: "absolute, no NUL, no '..'" },
      },
    );
  }
  return posix.normalize(value);
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
