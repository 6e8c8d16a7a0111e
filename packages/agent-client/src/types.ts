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

export interface ProcExitEvent {
  event: 'proc.exit';
  id: string;
  exitCode: number | null;
  signal: string | null;
  outputBytes: number;
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
