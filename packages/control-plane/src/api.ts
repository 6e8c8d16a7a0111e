// Wire shapes of spec/control-plane.yaml as TypeScript, and the mapping from database rows to them.
import type { ApiKeyRole, EndReason, SandboxRow, SandboxState, SnapshotReason, SnapshotRow, TemplateRow, TemplateStatus, TenantRow } from '@sandglass/db';

export interface Access {
  gatewayUrl: string;
  token: string;
  expiresAt: string;
}

export interface Sandbox {
  id: string;
  tenantId: string;
  template: string;
  state: SandboxState;
  endReason?: EndReason;
  failureReason?: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
  metadata: Record<string, string>;
  createdAt: string;
  startedAt?: string;
  endedAt?: string;
  expiresAt: string;
  snapshotIntervalS: number;
  /** The snapshot a fork started from; null for a sandbox created from a template. */
  sourceSnapshotId: string | null;
  pausedAt: string | null;
  /** The egress policy; null: no network at all. */
  network: NetworkPolicy | null;
  /** Names of the tenant secrets bound to it. */
  secrets: string[];
  access?: Access;
}

/** Egress rules in the grammar of @sandglass/egress; deny wins, nothing allowed means denied. */
export interface NetworkPolicy {
  allow: string[];
  deny: string[];
}

/** A request the egress gateway holds until someone approves or denies using a secret in it. */
export interface ApprovalRequest {
  requestId: string;
  sandboxId: string;
  /** The secret's name. */
  secret: string;
  host: string;
  port: number;
  method: string;
  path: string;
  requestedAt: string;
  /** When it is denied unless decided. */
  expiresAt: string;
}

export interface ApprovalDecision {
  sandboxId: string;
  decision: 'approve' | 'deny';
  /** Approve for this long (later uses of the secret by the sandbox pass); absent: this request only. */
  ttlS?: number;
}

export interface Snapshot {
  id: string;
  sandboxId: string;
  parentId: string | null;
  takenAt: string;
  reason: SnapshotReason;
  name: string | null;
  pinned: boolean;
  sizeAddedBytes: number;
  memoryMib: number;
  vcpus: number;
  template: string;
}

export interface Template {
  id: string;
  name: string;
  status: TemplateStatus;
  memoryMib: number;
  createdAt: string;
}

export interface Tenant {
  id: string;
  name: string;
  createdAt: string;
}

/** An API key as listed: metadata only, never the key or its hash. */
export interface ApiKeyInfo {
  id: string;
  tenantId: string;
  name?: string;
  role: ApiKeyRole;
  /** The key's first characters, to tell keys apart. */
  prefix: string;
  createdAt: string;
  createdByKeyId: string | null;
  expiresAt: string | null;
  /** To the minute. */
  lastUsedAt: string | null;
  revokedAt: string | null;
}

/** A key just created: the only answer that ever carries the key itself. */
export interface ApiKey extends ApiKeyInfo {
  key: string;
}

/** The body after validation: the spec's defaults are filled in. */
export interface CreateSandboxRequest {
  template: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
  metadata?: Record<string, string>;
  snapshotIntervalS: number;
  /** Absent: no network at all. */
  network?: { allow?: string[]; deny?: string[] };
  /** Names of tenant secrets to bind. */
  secrets?: string[];
}

export interface ResumeSandboxRequest {
  at?: string;
  snapshotId?: string;
}

/** The body after validation: count and timeoutS are filled in. */
export interface ForkRequest {
  snapshotId?: string;
  sandboxId?: string;
  at?: string;
  count: number;
  timeoutS: number;
  metadata?: Record<string, string>;
}

export interface ForkResponse {
  snapshotId: string;
  /** The forks that started, each with access. */
  sandboxes: Sandbox[];
}

export interface PauseResponse {
  sandbox: Sandbox;
  snapshot: Snapshot;
}

export function toSandbox(row: SandboxRow): Sandbox {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    template: row.template,
    state: row.state,
    ...(row.end_reason === null ? {} : { endReason: row.end_reason }),
    ...(row.failure_reason === null ? {} : { failureReason: row.failure_reason }),
    memoryMib: row.memory_mib,
    vcpus: row.vcpus,
    timeoutS: row.timeout_s,
    metadata: JSON.parse(row.metadata) as Record<string, string>,
    createdAt: row.created_at,
    ...(row.started_at === null ? {} : { startedAt: row.started_at }),
    ...(row.ended_at === null ? {} : { endedAt: row.ended_at }),
    expiresAt: row.expires_at,
    snapshotIntervalS: row.snapshot_interval_s,
    sourceSnapshotId: row.source_snapshot_id,
    pausedAt: row.paused_at,
    network: row.network === null ? null : (JSON.parse(row.network) as NetworkPolicy),
    secrets: JSON.parse(row.secrets) as string[],
  };
}

export function toSnapshot(row: SnapshotRow): Snapshot {
  return {
    id: row.id,
    sandboxId: row.sandbox_id,
    parentId: row.parent_id,
    takenAt: row.taken_at,
    reason: row.reason,
    name: row.name,
    pinned: row.pinned === 1,
    sizeAddedBytes: row.size_added_bytes,
    memoryMib: row.memory_mib,
    vcpus: row.vcpus,
    template: row.template,
  };
}

export function toTemplate(row: TemplateRow): Template {
  return { id: row.id, name: row.name, status: row.status, memoryMib: row.memory_mib, createdAt: row.created_at };
}

export function toTenant(row: TenantRow): Tenant {
  return { id: row.id, name: row.name, createdAt: row.created_at };
}
