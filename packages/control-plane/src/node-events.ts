// Which events a node may append to the log: an allow-list of what gateways really send, each bound to what it runs.
import type { Kysely } from 'kysely';
import { SandglassError, type NodeApi } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import type { KeyProvider } from '@sandglass/kms';

type NodeEvent = NodeApi.components['schemas']['NodeEvent'];

/** Templates are snapshots of this tenant (the gateway's TEMPLATE_TENANT). */
export const TEMPLATE_TENANT = 'system';

/**
 * The projection-moving types a gateway records about a sandbox it runs (packages/gateway: gateway.ts, sandbox.ts,
 * snapshots.ts, revocation.ts). The rest of sandbox.* (created, moved, configured, extended, network_changed, timeout)
 * and snapshot.named are the control plane's own decisions: a node that sends one is refused.
 */
const SANDBOX_TYPES = new Set([
  'sandbox.started',
  'sandbox.resumed',
  'sandbox.forked',
  'sandbox.paused',
  'sandbox.synced',
  'sandbox.killed',
  'sandbox.failed',
  'snapshot.taken',
  'snapshot.failed',
  'snapshot.deleted',
]);

/** The node's word on a sandbox's snapshot cadence: about no snapshot, so checked by its data (cadenceRefusal). */
const CADENCE_TYPES = new Set(['snapshot.behind', 'snapshot.caught_up']);
const BEHIND_REASONS = new Set(['slots_full', 'capture_slow', 'failing']);

/** What a sandbox's node observes of it and no projection reads: the spec lets gateways add types in these families. */
const SANDBOX_FAMILIES = ['command.', 'file.', 'egress.', 'port.'];
const SANDBOX_RECORDS = new Set([
  'secret.approval_requested',
  'secret.approval_decided',
  'recording.capped',
  'agent.protocol_violation',
  'quota.events_dropped',
]);

/** The events about no sandbox a node sends: a standalone gateway's GC report, and a revoked tenant's wipe report. */
const SANDBOXLESS_TYPES: Record<string, 'system' | 'tenant'> = { 'gc.completed': 'system', 'tenant.plaintext_wiped': 'tenant' };

/** The kind of an event as the allow-list sees it, before anything is looked up: undefined when no node may send it. */
export function nodeEventKind(e: Pick<NodeEvent, 'type' | 'tenantId' | 'sandboxId'>): 'sandbox' | 'snapshot' | 'cadence' | 'system' | 'wipe' | undefined {
  if (e.sandboxId === undefined) {
    const scope = SANDBOXLESS_TYPES[e.type];
    if (scope === 'system') return e.tenantId === TEMPLATE_TENANT ? 'system' : undefined;
    if (scope === 'tenant') return e.tenantId === TEMPLATE_TENANT ? undefined : 'wipe';
    return undefined;
  }
  // The template tenant runs no sandbox; an event naming both is a forgery.
  if (e.tenantId === TEMPLATE_TENANT) return undefined;
  if (CADENCE_TYPES.has(e.type)) return 'cadence';
  if (e.type.startsWith('snapshot.')) return SANDBOX_TYPES.has(e.type) ? 'snapshot' : undefined;
  if (SANDBOX_TYPES.has(e.type) || SANDBOX_RECORDS.has(e.type) || SANDBOX_FAMILIES.some((f) => e.type.startsWith(f))) return 'sandbox';
  return undefined;
}

/**
 * Why an event from this node is not appended, or undefined. Every event must be of a kind the allow-list admits; one
 * about a sandbox counts only while the sandbox is of the event's tenant and placed on the node (so a node that comes
 * back cannot end or alter one that moved), and a snapshot.* event only when its snapshot is that sandbox's.
 */
export async function nodeEventRefusal(db: Kysely<Schema>, keys: KeyProvider, nodeId: string, e: NodeEvent): Promise<string | undefined> {
  const kind = nodeEventKind(e);
  if (kind === undefined) {
    return e.sandboxId === undefined
      ? `a node may send ${e.type} of tenant ${e.tenantId} about no sandbox: only gc.completed (system) and tenant.plaintext_wiped pass`
      : `a node may not send ${e.type} about a sandbox of tenant ${e.tenantId}`;
  }
  if (kind === 'system') return undefined;
  if (kind === 'wipe') return plaintextWipeRefusal(db, keys, nodeId, e);
  const row = await db.selectFrom('sandboxes').select(['tenant_id', 'gateway_id']).where('id', '=', e.sandboxId!).executeTakeFirst();
  if (!row) return 'no such sandbox';
  if (row.tenant_id !== e.tenantId) return 'the sandbox belongs to another tenant';
  if (row.gateway_id !== nodeId) return `the sandbox is placed on ${row.gateway_id ?? 'no node'}`;
  if (kind === 'snapshot') return snapshotRefusal(db, e);
  if (kind === 'cadence') return cadenceRefusal(e);
  return undefined;
}

/**
 * snapshot.behind and snapshot.caught_up carry numbers a reader shows as the sandbox's cadence: each must be what
 * the gateway's scheduler produces (packages/events EventDataMap), so a node cannot put text or a forged shape there.
 */
export function cadenceRefusal(e: Pick<NodeEvent, 'type' | 'data'>): string | undefined {
  const d = e.data as Record<string, unknown>;
  const seconds = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= 10 * 86400 * 1000;
  const shaped =
    seconds(d.intervalS) &&
    (d.intervalS as number) > 0 &&
    (d.achievedIntervalS === null || seconds(d.achievedIntervalS)) &&
    seconds(d.windowS) &&
    Number.isSafeInteger(d.takenInWindow) &&
    (d.takenInWindow as number) >= 0 &&
    (e.type === 'snapshot.behind' ? seconds(d.lateS) && BEHIND_REASONS.has(d.why as string) : seconds(d.behindForS));
  if (!shaped) {
    return e.type === 'snapshot.behind'
      ? 'snapshot.behind wants data {intervalS, achievedIntervalS, windowS, takenInWindow, lateS, why: slots_full|capture_slow|failing}'
      : 'snapshot.caught_up wants data {intervalS, achievedIntervalS, windowS, takenInWindow, behindForS}';
  }
  return undefined;
}

/**
 * A snapshot.* event names, in data.snapshotId, a snapshot of its own sandbox: snapshot.deleted one that exists, and
 * snapshot.taken or snapshot.failed a new id or (a capture retried) one already of that sandbox. Snapshot ids are
 * object names in the shared store, so any node can learn another tenant's; naming one must change nothing of it.
 */
async function snapshotRefusal(db: Kysely<Schema>, e: NodeEvent): Promise<string | undefined> {
  const snapshotId = (e.data as { snapshotId?: unknown }).snapshotId;
  if (typeof snapshotId !== 'string') return `${e.type} wants data.snapshotId`;
  const row = await db.selectFrom('snapshots').select(['tenant_id', 'sandbox_id']).where('id', '=', snapshotId).executeTakeFirst();
  if (!row) return e.type === 'snapshot.deleted' ? `no snapshot ${snapshotId} of sandbox ${e.sandboxId}` : undefined;
  if (row.tenant_id !== e.tenantId || row.sandbox_id !== e.sandboxId) return `snapshot ${snapshotId} is not of sandbox ${e.sandboxId}`;
  return undefined;
}

/**
 * A node's report that it wiped a revoked tenant's plaintext (gateway revocation.ts) is the one tenant event about no
 * sandbox a node may write. It counts only when it cannot be a forgery that harms: the tenant ran a sandbox on this
 * node (in any state: the wipe ended them), every sandbox it says it stopped is that tenant's and was placed here, and
 * the key provider, asked now, says the key is revoked, so a node cannot claim a live tenant's data was destroyed.
 */
async function plaintextWipeRefusal(db: Kysely<Schema>, keys: KeyProvider, nodeId: string, e: NodeEvent): Promise<string | undefined> {
  const data = e.data as { trigger?: unknown; stoppedSandboxes?: unknown; wipedFiles?: unknown };
  const stopped = data.stoppedSandboxes;
  if (
    (data.trigger !== 'api' && data.trigger !== 'provider') ||
    !Array.isArray(stopped) ||
    !stopped.every((id) => typeof id === 'string') ||
    !Number.isSafeInteger(data.wipedFiles) ||
    (data.wipedFiles as number) < 0
  ) {
    return 'a wipe report wants data {trigger, stoppedSandboxes, wipedFiles}';
  }
  const ids = [...new Set(stopped as string[])];
  // One node holds far fewer sandboxes than this; the bound keeps the query within every database's parameter limit.
  if (ids.length > 4096) return 'a wipe report names more sandboxes than a node holds';
  const want = Math.max(ids.length, 1);
  const placed = await db
    .selectFrom('sandboxes')
    .select('id')
    .where('tenant_id', '=', e.tenantId)
    .where('gateway_id', '=', nodeId)
    .$if(ids.length > 0, (q) => q.where('id', 'in', ids))
    .limit(want)
    .execute();
  if (placed.length < want) {
    return ids.length === 0 ? `tenant ${e.tenantId} has no sandbox placed on this node` : `a stopped sandbox is not of tenant ${e.tenantId} on this node`;
  }
  try {
    if (keys.verify) await keys.verify(e.tenantId);
    else await keys.dataKey(e.tenantId, 'chunk-data');
  } catch (err) {
    if (err instanceof SandglassError && err.code === 'key_revoked') return undefined;
    return `the key provider did not confirm the revocation: ${(err as Error).message}`;
  }
  return `the key of tenant ${e.tenantId} is not revoked`;
}
