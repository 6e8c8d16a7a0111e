// The sandboxes projection as a pure fold over events: appends apply it to one row, rebuilds to the whole log.
import type { EventData } from '@sandglass/core';
import { fromIso, toIso, type EndReason, type SandboxRow, type SnapshotRow } from '@sandglass/db';
import { canonicalJson } from './hash.js';
import type { StoredEvent } from './types.js';

const END_REASONS: readonly EndReason[] = ['killed', 'timeout', 'shutdown'];

/**
 * Folds events into sandbox rows, starting from `base` (left untouched). Events of other kinds pass through.
 * Ended and failed are final: a late event (a start reported after a kill) is kept in the log but moves nothing.
 */
export function project(events: Iterable<StoredEvent>, base: ReadonlyMap<string, SandboxRow> = new Map()): Map<string, SandboxRow> {
  const rows = new Map(base);
  for (const e of events) {
    if (!e.type.startsWith('sandbox.')) continue;
    if (!e.sandboxId) throw new Error(`event ${e.id} (${e.type}) names no sandbox`);
    const next = applySandboxEvent(rows.get(e.sandboxId), e);
    rows.set(next.id, next);
  }
  return rows;
}

function applySandboxEvent(row: SandboxRow | undefined, e: StoredEvent): SandboxRow {
  if (e.type === 'sandbox.created') {
    if (row) throw new Error(`sandbox ${e.sandboxId} is created twice (event ${e.id})`);
    const d = e.data as unknown as EventData<'sandbox.created'>;
    return {
      id: e.sandboxId!,
      tenant_id: e.tenantId,
      template: d.template,
      state: 'starting',
      end_reason: null,
      failure_reason: null,
      memory_mib: d.memoryMib,
      vcpus: d.vcpus,
      timeout_s: d.timeoutS,
      metadata: canonicalJson(d.metadata ?? {}),
      gateway_id: d.gatewayId ?? null,
      gateway_url: d.gatewayUrl ?? null,
      created_at: e.at,
      started_at: null,
      ended_at: null,
      expires_at: plusSeconds(e.at, d.timeoutS),
      snapshot_interval_s: d.snapshotIntervalS ?? 60,
      source_snapshot_id: d.sourceSnapshotId ?? null,
      disk_mib: d.diskMib ?? null,
      paused_at: null,
      network: networkJson(d.network),
      secrets: canonicalJson(d.secrets ?? []),
      on_timeout: d.onTimeout === 'pause' ? 'pause' : 'kill',
      on_timeout_keep_memory: d.onTimeoutKeepMemory === false ? 0 : 1,
      auto_resume: d.autoResume === true ? 1 : 0,
    };
  }
  if (!row) throw new Error(`event ${e.id} (${e.type}) is for sandbox ${e.sandboxId}, which was never created`);
  // Another tenant's event about this sandbox moves nothing: whoever wrote it, only the sandbox's own tenant speaks for it.
  if (row.tenant_id !== e.tenantId) return row;
  if (row.state === 'ended' || row.state === 'failed') return row;
  switch (e.type) {
    case 'sandbox.started':
      // The timeout counts from when the sandbox could first be used, not from when it was asked for.
      return row.state === 'starting' ? { ...row, state: 'running', started_at: e.at, expires_at: plusSeconds(e.at, row.timeout_s) } : row;
    case 'sandbox.killed': {
      const reason = (e.data as EventData<'sandbox.killed'>).reason;
      return { ...row, state: 'ended', end_reason: reason && END_REASONS.includes(reason) ? reason : 'killed', ended_at: e.at };
    }
    case 'sandbox.timeout':
      return { ...row, state: 'ended', end_reason: 'timeout', ended_at: e.at };
    case 'sandbox.failed':
      return { ...row, state: 'failed', failure_reason: String((e.data as EventData<'sandbox.failed'>).reason), ended_at: e.at };
    case 'sandbox.paused':
      return row.state === 'running' ? { ...row, state: 'paused', paused_at: e.at } : row;
    case 'sandbox.resumed':
      return row.state === 'paused' ? { ...row, state: 'running', paused_at: null, expires_at: plusSeconds(e.at, row.timeout_s) } : row;
    case 'sandbox.moved': {
      // Placed on another node, as of `snapshotId`: no VM runs until that node resumes it (sandbox.resumed).
      const d = e.data as EventData<'sandbox.moved'>;
      return { ...row, state: 'paused', paused_at: row.paused_at ?? e.at, gateway_id: d.gatewayId, gateway_url: d.gatewayUrl };
    }
    case 'sandbox.forked': {
      const d = e.data as EventData<'sandbox.forked'>;
      return {
        ...row,
        ...(d.network === undefined ? {} : { network: networkJson(d.network) }),
        ...(d.secrets === undefined ? {} : { secrets: canonicalJson(d.secrets) }),
      };
    }
    case 'sandbox.synced':
      // The guest's clock and entropy were set (a start); the recording keeps them, the projection has nothing to change.
      return row;
    case 'sandbox.configured':
      return { ...row, snapshot_interval_s: (e.data as EventData<'sandbox.configured'>).snapshotIntervalS };
    case 'sandbox.network_changed':
      return { ...row, network: networkJson(e.data as EventData<'sandbox.network_changed'>) };
    case 'sandbox.extended': {
      const d = e.data as EventData<'sandbox.extended'>;
      return { ...row, timeout_s: d.timeoutS, expires_at: d.expiresAt };
    }
    default:
      throw new Error(`unknown sandbox event type ${e.type}`);
  }
}

/** A snapshot's new name, and the pin that goes with having one. */
export interface SnapshotRename {
  id: string;
  tenantId: string;
  name: string | null;
  pinned: 0 | 1;
}

/** A snapshot to remove: only when it is of this tenant (and, when the event names one, of this sandbox). */
export interface SnapshotDeletion {
  id: string;
  tenantId: string;
  sandboxId?: string;
}

/**
 * The snapshots projection: `snapshot.taken` adds a row, `snapshot.named` renames it, `snapshot.deleted` removes it.
 * Each step is scoped by the event's tenant, so an event naming another tenant's snapshot id changes nothing of it.
 */
export function projectSnapshot(e: StoredEvent): { insert?: SnapshotRow; rename?: SnapshotRename; deletion?: SnapshotDeletion } {
  if (e.type === 'snapshot.taken') {
    const d = e.data as unknown as EventData<'snapshot.taken'>;
    return {
      insert: {
        id: d.snapshotId,
        tenant_id: e.tenantId,
        sandbox_id: e.sandboxId!,
        parent_id: d.parentId ?? null,
        // The moment the guest was captured, not when the capture was committed (seconds later).
        taken_at: d.takenAt ?? e.at,
        reason: d.reason,
        name: d.name ?? null,
        pinned: d.pinned ? 1 : 0,
        size_added_bytes: d.sizeAddedBytes,
        memory_mib: d.memoryMib,
        vcpus: d.vcpus,
        template: d.template,
        memory: d.memory === false ? 0 : 1,
      },
    };
  }
  if (e.type === 'snapshot.named') {
    const d = e.data as EventData<'snapshot.named'>;
    const name = typeof d.name === 'string' ? d.name : null;
    return { rename: { id: String(d.snapshotId), tenantId: e.tenantId, name, pinned: name === null ? 0 : 1 } };
  }
  if (e.type === 'snapshot.deleted') {
    const id = String((e.data as EventData<'snapshot.deleted'>).snapshotId);
    return { deletion: { id, tenantId: e.tenantId, ...(e.sandboxId ? { sandboxId: e.sandboxId } : {}) } };
  }
  return {};
}

/** Only the rules: whatever else an event carries beside them stays in the log, out of the projection. */
function networkJson(n: { allow?: string[]; deny?: string[] } | null | undefined): string | null {
  return n ? canonicalJson({ allow: n.allow ?? [], deny: n.deny ?? [] }) : null;
}

function plusSeconds(iso: string, seconds: number): string {
  return toIso(fromIso(iso) + seconds * 1000);
}
