// Wire types of the control-plane and gateway APIs (docs/design/api.md; spec/control-plane.yaml and spec/gateway.yaml are normative).

/** A short-lived data-plane grant for one sandbox. */
export interface Access {
  gatewayUrl: string;
  token: string;
  /** ISO 8601. */
  expiresAt: string;
}

export type SandboxState = 'starting' | 'running' | 'paused' | 'ended' | 'failed';

export interface SandboxInfo {
  id: string;
  tenantId: string;
  template: string;
  state: SandboxState;
  endReason?: 'killed' | 'timeout' | 'shutdown';
  failureReason?: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
  metadata: Record<string, string>;
  createdAt: string;
  startedAt?: string;
  endedAt?: string;
  expiresAt: string;
  /** Seconds between the rolling snapshots the gateway takes while the sandbox runs. */
  snapshotIntervalS: number;
  /** The snapshot a fork started from; null for a sandbox created from a template. */
  sourceSnapshotId: string | null;
  /** ISO 8601; null unless the state is paused. */
  pausedAt: string | null;
  /** The egress policy in force; null: the sandbox has no network at all. */
  network: NetworkPolicy | null;
  /** Names of the tenant secrets bound to it. */
  secrets: string[];
  /** Only in the answers that start a sandbox: create, resume, fork. */
  access?: Access;
}

/**
 * Egress rules, `host[:port] [METHOD] [/path-prefix]`: an exact host, `*.domain` (its subdomains) or an IP; no port
 * means 80 and 443 in allow rules, every port in deny rules. Deny wins; a destination no allow rule names is denied.
 */
export interface NetworkPolicy {
  allow: string[];
  deny: string[];
}

/** A tenant secret as the API shows it: never its value. */
export interface SecretInfo {
  name: string;
  hosts: string[];
  header: string | null;
  format: string | null;
  bodyContentTypes: string[];
  approval: 'none' | 'required';
  allowPlaintext: boolean;
  allowUpgrade: boolean;
  createdAt: string;
  updatedAt: string;
}

/** A request the sandbox's egress holds until someone approves using a secret in it. */
export interface ApprovalRequest {
  requestId: string;
  sandboxId: string;
  /** The secret's name. */
  secret: string;
  host: string;
  port: number;
  method: string;
  path: string;
  /** ISO 8601. */
  requestedAt: string;
  /** ISO 8601: denied unless decided by then. */
  expiresAt: string;
}

/** One retained point of a sandbox's timeline; resume or fork from it. */
export interface SnapshotInfo {
  /** `snap_…` */
  id: string;
  sandboxId: string;
  /** The snapshot it is a delta of; null for the first of a chain. */
  parentId: string | null;
  /** ISO 8601. */
  takenAt: string;
  reason: 'rolling' | 'manual' | 'pause';
  name: string | null;
  /** Retention never thins a pinned snapshot (a named one is always pinned). */
  pinned: boolean;
  /** Bytes this snapshot added to the store. */
  sizeAddedBytes: number;
  memoryMib: number;
  vcpus: number;
  template: string;
}

export interface TemplateInfo {
  id: string;
  name: string;
  status: 'ready' | 'building' | 'failed';
  memoryMib: number;
  createdAt: string;
}

export interface SandboxEvent {
  seq: number;
  id: string;
  type: string;
  sandboxId: string | null;
  tenantId: string;
  at: string;
  data: Record<string, unknown>;
  hash: string;
  prevHash: string;
}

/** A process in the sandbox, as the gateway reports it. */
export interface CommandInfo {
  id: string;
  pid: number;
  argv: string[];
  cwd?: string | null;
  /** Whether it runs on a PTY. */
  pty: boolean;
  state: 'running' | 'exited';
  exitCode?: number | null;
  signal?: string | null;
  timedOut: boolean;
  /** Bytes of output (stdout and stderr together) the command has produced so far. */
  outputBytes: number;
  startedAt: string;
  endedAt?: string | null;
}

/** The signals the gateway forwards to a command's process group. */
export type SignalName = 'SIGTERM' | 'SIGKILL' | 'SIGINT' | 'SIGHUP' | 'SIGQUIT' | 'SIGUSR1' | 'SIGUSR2';

export interface FileInfo {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  sizeBytes: number;
  mode: number;
  mtime: string;
  symlinkTarget?: string;
}

/** The body of POST …/commands. */
export interface StartCommandRequest {
  cmd?: string;
  argv?: string[];
  cwd?: string;
  envs?: Record<string, string>;
  user?: string;
  stdin?: boolean;
  pty?: { cols: number; rows: number };
  timeoutMs?: number;
}

/** Text messages of a command's output WebSocket (server → client); a startOffset past the requested fromOffset means older bytes left the bounded buffer. */
export type StreamMessage =
  | { type: 'start'; startOffset: number; command: CommandInfo }
  | { type: 'exit'; exitCode: number | null; signal: string | null; timedOut: boolean; endOffset: number };
