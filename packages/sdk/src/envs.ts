// The control plane's rules for environment variables (names, count, size), checked in the SDK before anything is sent.
import { InvalidArgumentError } from './errors.js';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const MAX_ENVS = 128;
const MAX_ENVS_BYTES = 64 * 1024;

/** The error of a bad input, naming the exact place it came from (`steps[2].copy.src`, `line 7`). */
export function invalidField(field: string, message: string): InvalidArgumentError {
  return new InvalidArgumentError('invalid_argument', `${field}: ${message}`, { details: { field } });
}

/** Answers `envs` when every name, value and the total obey the control plane's checkEnvs; otherwise names the variable. */
export function checkEnvs(envs: unknown, field: string): Record<string, string> {
  if (envs === null || typeof envs !== 'object' || Array.isArray(envs)) throw invalidField(field, 'must be a map of names to strings');
  const entries = Object.entries(envs as Record<string, unknown>);
  if (entries.length > MAX_ENVS) throw invalidField(field, `has ${entries.length} variables; at most ${MAX_ENVS}`);
  let bytes = 0;
  for (const [name, value] of entries) {
    if (!ENV_NAME.test(name)) throw invalidField(`${field}.${name}`, 'must be a name like [A-Za-z_][A-Za-z0-9_]* of at most 128 characters');
    if (typeof value !== 'string') throw invalidField(`${field}.${name}`, 'must be a string');
    if (value.includes('\0')) throw invalidField(`${field}.${name}`, 'must not contain NUL');
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
  }
  if (bytes > MAX_ENVS_BYTES) throw invalidField(field, `holds ${bytes} bytes of names and values; at most ${MAX_ENVS_BYTES}`);
  return envs as Record<string, string>;
}

export function isEnvName(name: string): boolean {
  return ENV_NAME.test(name);
}
