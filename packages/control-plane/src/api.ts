// Wire shapes of spec/control-plane.yaml, generated from it (`npm run gen`), and the mapping from database rows to them.
import type { ControlPlaneApi } from '@sandglass/core';
import type { SandboxRow, SnapshotRow, TemplateRow, TenantRow } from '@sandglass/db';

type Schemas = ControlPlaneApi.components['schemas'];

export type Access = Schemas['Access'];
export type Sandbox = Schemas['Sandbox'];
/** Egress rules in the grammar of @sandglass/egress; deny wins, nothing allowed means denied. */
export type NetworkPolicy = Schemas['NetworkPolicy'];
/** A request the egress gateway holds until someone approves or denies using a secret in it. */
export type ApprovalRequest = Schemas['ApprovalRequest'];
export type ApprovalDecision = Schemas['ApprovalDecisionRequest'];
export type Snapshot = Schemas['Snapshot'];
export type SnapshotCadence = Schemas['SnapshotCadence'];
export type Template = Schemas['Template'];
export type Tenant = Schemas['Tenant'];
/** An API key as listed: metadata only, never the key or its hash. */
export type ApiKeyInfo = Schemas['ApiKeyInfo'];
/** A key just created: the only answer that ever carries the key itself. */
export type ApiKey = Schemas['ApiKey'];
// Request schemas as a handler sees them: validation filled in the spec's defaults, so those fields are present.
export type CreateSandboxRequest = Schemas['CreateSandboxRequest'];
export type ResumeSandboxRequest = Schemas['ResumeSandboxRequest'];
export type CreateApiKeyInTenantRequest = Schemas['CreateApiKeyInTenantRequest'];
export type ForkRequest = Schemas['ForkRequest'];
export type ForkResponse = Schemas['ForkResponse'];
export type PauseResponse = Schemas['PauseResponse'];

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
    diskMib: row.disk_mib,
    pausedAt: row.paused_at,
    gatewayId: row.gateway_id,
    network: row.network === null ? null : (JSON.parse(row.network) as NetworkPolicy),
    secrets: JSON.parse(row.secrets) as string[],
    onTimeout: row.on_timeout,
    onTimeoutKeepMemory: row.on_timeout_keep_memory === 1,
    autoResume: row.auto_resume === 1,
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
    memory: row.memory === 1,
  };
}

export function toTemplate(row: TemplateRow): Template {
  return { id: row.id, name: row.name, status: row.status, memoryMib: row.memory_mib, createdAt: row.created_at };
}

export function toTenant(row: TenantRow): Tenant {
  return { id: row.id, name: row.name, createdAt: row.created_at };
}
