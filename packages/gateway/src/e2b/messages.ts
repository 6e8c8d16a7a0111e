// Proto3 JSON of the envd messages the gateway serves (process.Process, filesystem.Filesystem): request decoders that
// check every field they read and ignore the rest, and builders of the responses and stream events.
import { posix } from 'node:path';
import { ConnectError } from './connect.js';

type Json = Record<string, unknown>;

const bad = (field: string, rule: string) => new ConnectError('invalid_argument', `${field}: ${rule}`);

/** A message field: absent or null is the empty message (proto3 default); anything but an object is refused. */
function message(v: unknown, field: string): Json {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw bad(field, 'must be an object');
  return v as Json;
}

/** The first of a field's spellings present: its JSON name (lowerCamel) or its proto name (snake_case). */
function pick(m: Json, names: string[]): unknown {
  for (const n of names) if (m[n] !== undefined && m[n] !== null) return m[n];
  return undefined;
}

function string(v: unknown, field: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw bad(field, 'must be a string');
  return v;
}

function bool(v: unknown, field: string): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw bad(field, 'must be true or false');
  return v;
}

/** uint32: a JSON number or a decimal string, as proto3 JSON allows. */
function uint32(v: unknown, field: string): number | undefined {
  if (v === undefined) return undefined;
  const n = typeof v === 'string' && /^\d{1,10}$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 0xffffffff) throw bad(field, 'must be an unsigned 32-bit integer');
  return n;
}

/** bytes: standard or URL-safe base64, padded or not. */
export function bytesFromJson(v: unknown, field: string): Buffer {
  if (typeof v !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(v) || v.replace(/=+$/, '').length % 4 === 1) {
    throw bad(field, 'must be base64');
  }
  return Buffer.from(v.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
}

/** An enum: its value name or its number; a number the schema lacks is kept (proto3 enums are open). */
export function enumFromJson<T extends string>(v: unknown, names: Record<T, number>, field: string): number {
  if (v === undefined) return 0;
  if (typeof v === 'number' && Number.isInteger(v) && v >= -(2 ** 31) && v < 2 ** 31) return v;
  if (typeof v === 'string' && Object.hasOwn(names, v)) return names[v as T];
  throw bad(field, `must be one of ${Object.keys(names).join(', ')}`);
}

function stringMap(v: unknown, field: string): Record<string, string> {
  const m = message(v, field);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(m)) {
    if (typeof val !== 'string') throw bad(`${field}.${k}`, 'must be a string');
    out[k] = val;
  }
  return out;
}

function stringList(v: unknown, field: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw bad(field, 'must be a list of strings');
  return v as string[];
}

// ---- process.Process ----

export const SIGNAL = { SIGNAL_UNSPECIFIED: 0, SIGNAL_SIGTERM: 15, SIGNAL_SIGKILL: 9 } as const;

export type ProcessSelector = { pid: number } | { tag: string };

export function processSelector(v: unknown, field = 'process'): ProcessSelector {
  const m = message(v, field);
  const pid = uint32(m.pid, `${field}.pid`);
  const tag = string(m.tag, `${field}.tag`);
  if ((pid === undefined) === (tag === undefined)) throw bad(field, 'give exactly one of pid or tag');
  return pid !== undefined ? { pid } : { tag: tag! };
}

export interface PtySize {
  cols: number;
  rows: number;
}

function pty(v: unknown, field: string): PtySize | undefined {
  if (v === undefined || v === null) return undefined;
  const size = message(message(v, field).size, `${field}.size`);
  const cols = uint32(size.cols, `${field}.size.cols`) ?? 0;
  const rows = uint32(size.rows, `${field}.size.rows`) ?? 0;
  if (cols < 1 || rows < 1 || cols > 10_000 || rows > 10_000) throw bad(`${field}.size`, 'cols and rows must be between 1 and 10000');
  return { cols, rows };
}

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export interface StartRequest {
  process: ProcessConfig;
  pty?: PtySize;
  tag?: string;
  stdin: boolean;
}

export function startRequest(v: unknown): StartRequest {
  const m = message(v, 'request');
  const p = message(m.process, 'process');
  const cmd = string(p.cmd, 'process.cmd');
  if (!cmd) throw bad('process.cmd', 'is required');
  return {
    process: { cmd, args: stringList(p.args, 'process.args'), envs: stringMap(p.envs, 'process.envs'), cwd: string(p.cwd ?? undefined, 'process.cwd') },
    pty: pty(m.pty, 'pty'),
    tag: string(m.tag ?? undefined, 'tag'),
    stdin: bool(m.stdin ?? undefined, 'stdin') ?? false,
  };
}

export function selectorRequest(v: unknown): ProcessSelector {
  return processSelector(message(v, 'request').process);
}

export function sendInputRequest(v: unknown): { process: ProcessSelector; input: Buffer; pty: boolean } {
  const m = message(v, 'request');
  const input = message(m.input, 'input');
  const stdin = input.stdin ?? undefined;
  const ptyBytes = input.pty ?? undefined;
  if ((stdin === undefined) === (ptyBytes === undefined)) throw bad('input', 'give exactly one of stdin or pty');
  return {
    process: processSelector(m.process),
    input: stdin !== undefined ? bytesFromJson(stdin, 'input.stdin') : bytesFromJson(ptyBytes, 'input.pty'),
    pty: ptyBytes !== undefined,
  };
}

export function sendSignalRequest(v: unknown): { process: ProcessSelector; signal: 'SIGTERM' | 'SIGKILL' } {
  const m = message(v, 'request');
  const n = enumFromJson(m.signal ?? undefined, SIGNAL, 'signal');
  if (n !== SIGNAL.SIGNAL_SIGTERM && n !== SIGNAL.SIGNAL_SIGKILL) throw bad('signal', 'must be SIGNAL_SIGTERM or SIGNAL_SIGKILL');
  return { process: processSelector(m.process), signal: n === SIGNAL.SIGNAL_SIGKILL ? 'SIGKILL' : 'SIGTERM' };
}

export function updateRequest(v: unknown): { process: ProcessSelector; pty?: PtySize } {
  const m = message(v, 'request');
  return { process: processSelector(m.process), pty: pty(m.pty, 'pty') };
}

/** A ProcessEvent: exactly one of its oneof members is set. */
export type ProcessEvent =
  | { start: { pid: number } }
  | { data: { stdout: string } | { stderr: string } | { pty: string } }
  | { end: { exitCode: number; exited: boolean; status: string; error?: string } }
  | { keepalive: Json };

export function processEvent(event: ProcessEvent): { event: ProcessEvent } {
  return { event };
}

export function dataEvent(kind: 'stdout' | 'stderr' | 'pty', bytes: Buffer): { event: ProcessEvent } {
  return { event: { data: { [kind]: bytes.toString('base64') } as { stdout: string } } };
}

// Go's names for the signals a guest process can die of (os.ProcessState.String() prints "signal: <name>").
const GO_SIGNAL_NAMES: Record<string, string> = {
  SIGHUP: 'hangup',
  SIGINT: 'interrupt',
  SIGQUIT: 'quit',
  SIGILL: 'illegal instruction',
  SIGTRAP: 'trace/breakpoint trap',
  SIGABRT: 'aborted',
  SIGBUS: 'bus error',
  SIGFPE: 'floating point exception',
  SIGKILL: 'killed',
  SIGUSR1: 'user defined signal 1',
  SIGSEGV: 'segmentation fault',
  SIGUSR2: 'user defined signal 2',
  SIGPIPE: 'broken pipe',
  SIGALRM: 'alarm clock',
  SIGTERM: 'terminated',
};

/**
 * The end event of a command, as envd words it: "exit status N", or "signal: killed" with exitCode -1 for a
 * process a signal ended. `error` carries the same text when the command did not exit 0.
 */
export function endEvent(exit: { exitCode?: number | null; signal?: string | null }): ProcessEvent {
  if (exit.exitCode !== undefined && exit.exitCode !== null) {
    const status = `exit status ${exit.exitCode}`;
    return { end: { exitCode: exit.exitCode, exited: true, status, ...(exit.exitCode !== 0 ? { error: status } : {}) } };
  }
  const sig = exit.signal ?? 'SIGKILL';
  const status = `signal: ${GO_SIGNAL_NAMES[sig] ?? sig}`;
  return { end: { exitCode: -1, exited: false, status, error: status } };
}

export interface ProcessInfo {
  config: ProcessConfig;
  pid: number;
  tag?: string;
}

// ---- filesystem.Filesystem ----

export const FILE_TYPE = { FILE_TYPE_UNSPECIFIED: 0, FILE_TYPE_FILE: 1, FILE_TYPE_DIRECTORY: 2, FILE_TYPE_SYMLINK: 3 } as const;
export const EVENT_TYPE = {
  EVENT_TYPE_UNSPECIFIED: 0,
  EVENT_TYPE_CREATE: 1,
  EVENT_TYPE_WRITE: 2,
  EVENT_TYPE_REMOVE: 3,
  EVENT_TYPE_RENAME: 4,
  EVENT_TYPE_CHMOD: 5,
} as const;
export type EventTypeName = keyof typeof EVENT_TYPE;

export function pathRequest(v: unknown): { path: string } {
  const path = string(message(v, 'request').path ?? undefined, 'path');
  if (!path) throw bad('path', 'is required');
  return { path };
}

export function listDirRequest(v: unknown): { path: string; depth: number } {
  const { path } = pathRequest(v);
  // proto3 omits a depth of 0: the SDK's default and minimum is 1.
  const depth = uint32(message(v, 'request').depth ?? undefined, 'depth') || 1;
  if (depth > 64) throw bad('depth', 'must be at most 64');
  return { path, depth };
}

export function moveRequest(v: unknown): { source: string; destination: string } {
  const m = message(v, 'request');
  const source = string(m.source ?? undefined, 'source');
  const destination = string(m.destination ?? undefined, 'destination');
  if (!source) throw bad('source', 'is required');
  if (!destination) throw bad('destination', 'is required');
  return { source, destination };
}

export function watchRequest(v: unknown): { path: string; recursive: boolean; includeEntry: boolean } {
  const m = message(v, 'request');
  const { path } = pathRequest(m);
  return {
    path,
    recursive: bool(pick(m, ['recursive']), 'recursive') ?? false,
    includeEntry: bool(pick(m, ['includeEntry', 'include_entry']), 'includeEntry') ?? false,
  };
}

export function watcherIdRequest(v: unknown): { watcherId: string } {
  const watcherId = string(pick(message(v, 'request'), ['watcherId', 'watcher_id']), 'watcherId');
  if (!watcherId) throw bad('watcherId', 'is required');
  return { watcherId };
}

/** What the gateway knows of a guest file: the agent's stat, with owner names once the agent reports them. */
export interface StatLike {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  sizeBytes: number;
  mode: number;
  mtimeMs: number;
  symlinkTarget?: string;
  owner?: string;
  group?: string;
  xattrs?: Record<string, string>;
}

export interface EntryInfo {
  name: string;
  type: keyof typeof FILE_TYPE;
  path: string;
  size: string;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modifiedTime: string;
  symlinkTarget?: string;
  /** envd 0.6.2: the file's metadata, its `user.` extended attributes. */
  metadata?: Record<string, string>;
}

const TYPE_NAME: Record<StatLike['type'], EntryInfo['type']> = {
  file: 'FILE_TYPE_FILE',
  dir: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};

/**
 * Go's FileMode.String() of a stat: type letter (d, L, ? for other non-regular files), then u/g/t for
 * setuid/setgid/sticky, then rwx for the nine permission bits; "-" leads when none of the letters apply.
 */
export function permissionsString(type: StatLike['type'], mode: number): string {
  let head = '';
  if (type === 'dir') head += 'd';
  if (type === 'symlink') head += 'L';
  if (mode & 0o4000) head += 'u';
  if (mode & 0o2000) head += 'g';
  if (mode & 0o1000) head += 't';
  if (type === 'other') head += '?';
  let rwx = '';
  for (let i = 0; i < 9; i++) rwx += mode & (1 << (8 - i)) ? 'rwxrwxrwx'[i] : '-';
  return (head || '-') + rwx;
}

export function entryInfo(st: StatLike): EntryInfo {
  return {
    name: st.name,
    type: TYPE_NAME[st.type],
    path: st.path,
    size: String(st.sizeBytes),
    // envd reports the permission bits only (Go's FileMode.Perm()).
    mode: st.mode & 0o777,
    permissions: permissionsString(st.type, st.mode),
    owner: st.owner ?? '',
    group: st.group ?? '',
    modifiedTime: new Date(st.mtimeMs).toISOString(),
    // envd gives the absolute path a link resolves to, not the link's text: a relative target is taken from the
    // link's own directory.
    ...(st.symlinkTarget !== undefined ? { symlinkTarget: posix.resolve(posix.dirname(st.path), st.symlinkTarget) } : {}),
    ...(st.xattrs !== undefined ? { metadata: st.xattrs } : {}),
  };
}

export interface FilesystemEvent {
  name: string;
  type: EventTypeName;
  /** envd 0.6.3, asked for with includeEntry: the entry as it stands once the event is seen, when it still exists. */
  entry?: EntryInfo;
}
