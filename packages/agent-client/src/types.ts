// Parameter, result and event types of the agent protocol's methods (spec/agent-protocol.md).

export type AgentErrorCode =
  | 'bad_request'
  | 'not_found'
  | 'exists'
  | 'not_a_directory'
  | 'is_a_directory'
  | 'permission_denied'
  | 'command_not_found'
  | 'io'
  | 'unknown_method'
  | 'busy'
  // Raised on the host side, never sent by the agent:
  | 'agent_disconnected'
  | 'agent_timeout'
  | 'agent_protocol';

export interface HelloResult {
  version: number;
  agentVersion: string;
  bootId: string;
  uptimeMs: number;
}

export interface SyncResult {
  /** true when the agent runs outside a guest (--serve-stdio, --listen) and left the host alone. */
  skipped?: boolean;
}

export type SignalName = 'SIGTERM' | 'SIGKILL' | 'SIGINT' | 'SIGHUP' | 'SIGQUIT' | 'SIGUSR1' | 'SIGUSR2';

export interface ProcStartParams {
  id: string;
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  stdin?: boolean;
  pty?: { cols: number; rows: number };
  bufferBytes?: number;
}

export interface ProcInfo {
  id: string;
  pid: number;
  argv: string[];
  exited: boolean;
  exitCode: number | null;
  signal: string | null;
  outputBytes: number;
  pty: boolean;
}

export interface AttachResult {
  startOffset: number;
  endOffset: number;
  exited: boolean;
}

export type FileType = 'file' | 'dir' | 'symlink' | 'other';

export interface FileStat {
  name: string;
  path: string;
  type: FileType;
  sizeBytes: number;
  mode: number;
  mtimeMs: number;
  uid: number;
  gid: number;
  /** The name of uid in the guest's /etc/passwd; "" when it has none. */
  owner: string;
  /** The name of gid in the guest's /etc/group; "" when it has none. */
  group: string;
  symlinkTarget?: string;
  /** The path's `user.` extended attributes, names without the prefix; absent when it has none. */
  xattrs?: Record<string, string>;
}

export interface ErrorInfo {
  code: string;
  message: string;
}

/** SHA-256 (hex) of everything a process wrote, and of each stream, hashed as written: what a replay compares. */
export interface OutputDigests {
  sha256: string;
  stdoutSha256: string;
  stderrSha256: string;
  stdoutBytes: number;
  stderrBytes: number;
}

export interface ProcExitEvent {
  event: 'proc.exit';
  id: string;
  exitCode: number | null;
  signal: string | null;
  outputBytes: number;
  output: OutputDigests;
}

export interface FileWrittenEvent {
  event: 'file.written';
  streamId: number;
  path: string;
  sizeBytes: number;
  /** file.writeTar: the archive's entries extracted. */
  entries?: number;
}

export interface FileWriteFailedEvent {
  event: 'file.write_failed';
  streamId: number;
  path: string;
  error: ErrorInfo;
}

/**
 * A guest program connected to the relay listener (net.listen). The client turns it into a NetConnection for its
 * `net.open` listeners rather than an `event`.
 */
export interface NetOpenEvent {
  event: 'net.open';
  /** Agent-allocated: bit 31 set. */
  stream: number;
  /** The guest program's address, "127.0.0.1:port". */
  peer: string;
  /** Bytes the agent may send before the host grants more (net.listen's window). */
  window: number;
  /** Bytes the host may send before the agent grants more. */
  recvWindow: number;
}

export interface NetOpenInfo {
  stream: number;
  peer: string;
}

/** The guest's own account of its load (sys.stats); a figure the guest could not read is absent. */
export interface GuestStats {
  cpuCount: number;
  /** /proc/stat's ticks since boot, all and idle (idle + iowait): CPU use is their change between two samples. */
  cpuTotalTicks?: number;
  cpuIdleTicks?: number;
  memTotalBytes?: number;
  /** MemTotal − MemAvailable. */
  memUsedBytes?: number;
  /** The page cache (Cached). */
  memCacheBytes?: number;
  /** The root filesystem's size and its blocks in use. */
  diskTotalBytes?: number;
  diskUsedBytes?: number;
}

/** A TCP socket listening in the guest (net.ports). */
export interface ListeningPort {
  port: number;
  /** What it is bound to: 0.0.0.0, 127.0.0.1, ::, ::1 … */
  address: string;
}

export type FsEventOp = 'create' | 'write' | 'remove' | 'rename' | 'chmod';

/**
 * A change in a watched directory (fs.watch), `name` relative to it; or `overflow`: events were lost. The client
 * hands these to the watch's onEvent rather than emitting them as `event`.
 */
export type FsEvent = { event: 'fs.event'; watchId: string; op: FsEventOp; name: string } | { event: 'fs.event'; watchId: string; op: 'overflow' };

export type AgentEvent = ProcExitEvent | FileWrittenEvent | FileWriteFailedEvent | { event: string; [key: string]: unknown };

/** A method's params or result with no fields. */
export type NoFields = Record<never, never>;

/** What the host sends each method (spec/agent-protocol.md); the client's calls are checked against it. */
export interface AgentParams {
  hello: { version: number; resync?: string };
  ping: NoFields;
  sync: { timeUnixNs: string; entropy: string };
  'proc.start': ProcStartParams;
  'proc.attach': { id: string; streamId: number; fromOffset: number; window?: number };
  'proc.detach': { streamId: number };
  'proc.stdin': { id: string; data?: string; eof?: boolean };
  'proc.signal': { id: string; signal: SignalName };
  'proc.resize': { id: string; cols: number; rows: number };
  'proc.list': NoFields;
  'proc.forget': { id: string };
  'file.stat': { path: string };
  'file.list': { path: string; depth?: number };
  'file.mkdir': { path: string; parents?: boolean; owner?: string };
  'file.remove': { path: string; recursive?: boolean };
  'file.rename': { from: string; to: string };
  'file.read': { path: string; streamId: number; window?: number };
  'file.readTar': { path: string; streamId: number; window?: number };
  'file.write': { path: string; streamId: number; mode?: number; parents?: boolean; append?: boolean; owner?: string; xattrs?: Record<string, string> };
  'file.writeTar': { path: string; streamId: number; owner?: string };
  'fs.watch': { watchId: string; path: string; recursive?: boolean };
  'fs.unwatch': { watchId: string };
  'env.defaults': { env: Record<string, string> };
  'disk.grow': { bytes: number };
  'net.listen': { port: number; address?: string; window?: number };
  'net.close': NoFields;
  'net.dial': { streamId: number; port: number; address?: string; window?: number };
  'net.ports': NoFields;
  'sys.stats': NoFields;
}

/**
 * What a conforming agent answers each method. The guest is hostile: code that acts on a reply still checks each
 * field it reads; this is the contract the agent is held to (agent/protocol_test.go), not a promise about the bytes.
 */
export interface AgentResults {
  hello: HelloResult;
  ping: NoFields;
  sync: SyncResult;
  'proc.start': { pid: number };
  'proc.attach': AttachResult;
  'proc.detach': NoFields;
  'proc.stdin': { outputOffset: number };
  'proc.signal': { outputOffset: number };
  'proc.resize': { outputOffset: number };
  'proc.list': { processes: ProcInfo[] };
  'proc.forget': NoFields;
  'file.stat': FileStat;
  'file.list': { entries: FileStat[] };
  'file.mkdir': { created: boolean };
  'file.remove': NoFields;
  'file.rename': NoFields;
  'file.read': { sizeBytes: number };
  'file.readTar': NoFields;
  'file.write': { window: number };
  'file.writeTar': { window: number };
  'fs.watch': NoFields;
  'fs.unwatch': NoFields;
  'env.defaults': NoFields;
  'disk.grow': { bytes: number };
  'net.listen': { port: number };
  'net.close': NoFields;
  'net.dial': { recvWindow: number; peer: string };
  'net.ports': { ports: ListeningPort[] };
  'sys.stats': GuestStats;
}

export type AgentMethod = keyof AgentParams;
