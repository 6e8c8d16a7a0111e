// Guest path rules: absolute, normalised, no NUL, no '..' segments. Checked on the host before the agent sees them.
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
