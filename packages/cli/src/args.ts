// Pure argument parsing for the CLI: K=V pairs, integers, times, fork sources, `cp` endpoints; errors here are usage errors (exit 2).
import { InvalidArgumentError } from 'commander';
import { parseForkSource } from '@sandglass/sdk';

/** A mistake in how the CLI was called, as opposed to a failure of the call itself. */
export class UsageError extends Error {}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Commander collector for a repeatable `--env K=V`: validates the name, keeps everything after the first '=' as the value. */
export function collectEnv(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq < 0) throw new InvalidArgumentError(`expected K=V, got '${value}'`);
  const name = value.slice(0, eq);
  if (!ENV_NAME.test(name)) throw new InvalidArgumentError(`'${name}' is not a valid variable name (letters, digits, _; not starting with a digit)`);
  return { ...previous, [name]: value.slice(eq + 1) };
}

/** Commander collector for a repeatable `--metadata K=V` (any non-empty key). */
export function collectMetadata(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`expected K=V with a non-empty K, got '${value}'`);
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

/** Commander collector for a repeatable option: `--allow a --allow b` → ['a', 'b']. */
export function collectRepeated(value: string, previous: string[] = []): string[] {
  if (value.trim() === '') throw new InvalidArgumentError('must not be empty');
  return [...previous, value];
}

/** Commander collector for a comma-separated, repeatable list: `--hosts a,b --hosts c` → ['a', 'b', 'c']. */
export function collectList(value: string, previous: string[] = []): string[] {
  const items = value.split(',').map((s) => s.trim());
  if (items.some((s) => s === '')) throw new InvalidArgumentError(`'${value}' has an empty item; separate items with single commas`);
  return [...previous, ...items];
}

const DURATION_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** A duration as `90`, `90s`, `10m`, `2h` or `1d`, in whole seconds (1…86400, as a time-boxed approval takes). */
export function parseDurationS(value: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(value.trim());
  const seconds = m ? Number(m[1]) * DURATION_UNITS[m[2] || 's']! : Number.NaN;
  if (!(seconds >= 1 && seconds <= 86400)) throw new InvalidArgumentError(`'${value}' is not a duration of 1 s to 1 d; write 90, 30s, 10m, 2h or 1d`);
  return seconds;
}

/** An API key's lifetime as `3600`, `90m`, `12h` or `30d`, in whole seconds (one second to ten years, as the server takes). */
export function parseKeyExpiryS(value: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(value.trim());
  const seconds = m ? Number(m[1]) * DURATION_UNITS[m[2] || 's']! : Number.NaN;
  if (!(seconds >= 1 && seconds <= 3650 * 86400)) throw new InvalidArgumentError(`'${value}' is not a lifetime of 1 s to 3650 d; write 3600, 90m, 12h or 30d`);
  return seconds;
}

/**
 * The secret value piped on stdin: one trailing newline (as `echo` and files add) is not part of it. Refuses an empty
 * value rather than storing one by mistake.
 */
export function secretValueFromStdin(text: string): string {
  const value = text.replace(/\r?\n$/, '');
  if (value === '')
    throw new UsageError('secrets set: the value on stdin is empty; pipe it in, e.g. printf %s "$TOKEN" | sandglass secrets set NAME --hosts api.example.com');
  return value;
}

export function parseNonNegativeInt(value: string): number {
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) throw new InvalidArgumentError('must be a whole number >= 0');
  return Number(value);
}

export function parsePositiveInt(value: string): number {
  const n = parseNonNegativeInt(value);
  if (n === 0) throw new InvalidArgumentError('must be a whole number >= 1');
  return n;
}

/**
 * A point in time for --at and sbx_…@TIME: ISO 8601 with a zone, or a local "YYYY-MM-DD HH:MM:SS" as the tables print it.
 * Returned as ISO 8601 UTC.
 */
export function parseTime(value: string): string {
  const ms = Date.parse(value);
  // Date.parse also reads "1" or "June": only a date-first form counts.
  if (!/^\d{4}-\d\d-\d\d([T ]|$)/.test(value) || Number.isNaN(ms)) {
    throw new InvalidArgumentError(`'${value}' is not a time; write 2025-06-01T12:00:00Z, or "2025-06-01 14:00:00" for local time`);
  }
  return new Date(ms).toISOString();
}

/** `snap_…`, `sbx_…` or `sbx_…@TIME` (TIME as parseTime reads it), with the time made ISO 8601 UTC. */
export function parseForkArg(value: string): string {
  const at = value.indexOf('@');
  const normalized = at < 0 ? value : `${value.slice(0, at)}@${parseTime(value.slice(at + 1))}`;
  try {
    parseForkSource(normalized);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return normalized;
}

export type CpEndpoint = { kind: 'remote'; sandboxId: string; path: string } | { kind: 'local'; path: string } | { kind: 'stdio' };

// A sandbox id followed by ':'; a local path that happens to look like one can be written ./sbx_…:x.
const REMOTE = /^(sbx_[A-Za-z0-9]+):(.*)$/s;

export function parseCpEndpoint(arg: string): CpEndpoint {
  if (arg === '-') return { kind: 'stdio' };
  const m = REMOTE.exec(arg);
  if (!m) {
    if (arg === '') throw new UsageError('cp: an empty path');
    return { kind: 'local', path: arg };
  }
  const path = m[2]!;
  if (!path.startsWith('/')) throw new UsageError(`cp: the sandbox path in '${arg}' must be absolute (${m[1]}:/path)`);
  return { kind: 'remote', sandboxId: m[1]!, path };
}

export type CpPlan =
  | { direction: 'upload'; from: Exclude<CpEndpoint, { kind: 'remote' }>; to: Extract<CpEndpoint, { kind: 'remote' }> }
  | { direction: 'download'; from: Extract<CpEndpoint, { kind: 'remote' }>; to: Exclude<CpEndpoint, { kind: 'remote' }> };

/** Exactly one side of a copy is in a sandbox. */
export function planCp(source: string, target: string): CpPlan {
  const from = parseCpEndpoint(source);
  const to = parseCpEndpoint(target);
  if (from.kind === 'remote' && to.kind !== 'remote') return { direction: 'download', from, to };
  if (to.kind === 'remote' && from.kind !== 'remote') {
    if (from.kind === 'stdio' && to.path.endsWith('/')) throw new UsageError('cp: copying stdin needs a file name, not a directory, as the target');
    return { direction: 'upload', from, to };
  }
  if (from.kind === 'remote') throw new UsageError('cp: copying between two sandboxes is not supported; copy through a local file');
  throw new UsageError('cp: one side must be in a sandbox (sbx_…:/path)');
}
