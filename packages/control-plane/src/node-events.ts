// Which events a node may append to the log: the types spec/events.yaml lets nodes send, in their schema, each bound to what the node runs.
import type { Kysely } from 'kysely';
import { eventDataProblem, eventSpec, isEventType, SandglassError, type EventData, type EventType, type NodeApi } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import type { KeyProvider } from '@sandglass/kms';

type NodeEvent = NodeApi.components['schemas']['NodeEvent'];

/** Templates are snapshots of this tenant (the gateway's TEMPLATE_TENANT). */
export const TEMPLATE_TENANT = 'system';

/** Why an event was dropped: the stable code, the JSON pointer of the field at fault (into the event), and the rule. */
export interface NodeEventDrop {
  /** node_event_invalid: not an event the spec knows in that shape; node_event_refused: not this node's to send. */
  code: 'node_event_invalid' | 'node_event_refused';
  field: string;
  reason: string;
}

const invalid = (field: string, reason: string): NodeEventDrop => ({ code: 'node_event_invalid', field, reason });
const refused = (field: string, reason: string): NodeEventDrop => ({ code: 'node_event_refused', field, reason });

/** The node events whose data.snapshotId names a snapshot of the event's own sandbox (sandbox.forked names its source's). */
const OWN_SNAPSHOT_TYPES = new Set<EventType>(['snapshot.taken', 'snapshot.failed', 'snapshot.deleted', 'sandbox.paused', 'sandbox.resumed']);

/** Of those, the ones whose snapshot must already be in the log. */
const MUST_EXIST = new Set<EventType>(['snapshot.deleted', 'sandbox.paused', 'sandbox.resumed']);

/** A node event that passed nodeEventShapeDrop: a type of the spec, its data in that type's shape. */
export type CheckedNodeEvent = Omit<NodeEvent, 'type'> & { type: EventType };

/**
 * Why the event cannot be appended whatever the database holds, or undefined. It must be of a type spec/events.yaml
 * lists (else node_event_invalid), one a node may send (else node_event_refused), about what its scope says (a
 * sandbox, a tenant, or the system tenant), and its data must fit the type's schema exactly (node_event_invalid
 * naming the field): a node cannot put a field, a type or a value the platform never writes into the log.
 */
export function nodeEventShapeDrop(e: NodeEvent): NodeEventDrop | undefined {
  if (!isEventType(e.type)) return invalid('/type', `${e.type} is not an event type of spec/events.yaml`);
  const spec = eventSpec(e.type);
  if (!spec.node) return refused('/type', `a node may not send ${e.type}: the control plane records it`);
  if (spec.scope === 'sandbox') {
    if (e.sandboxId === undefined) return invalid('/sandboxId', `${e.type} is about a sandbox: it names a sandboxId`);
    // The template tenant runs no sandbox; an event naming both is a forgery.
    if (e.tenantId === TEMPLATE_TENANT) return refused('/tenantId', `tenant ${TEMPLATE_TENANT} runs no sandbox`);
  } else {
    if (e.sandboxId !== undefined) return invalid('/sandboxId', `${e.type} is about no sandbox`);
    if ((spec.scope === 'system') !== (e.tenantId === TEMPLATE_TENANT)) {
      return refused('/tenantId', spec.scope === 'system' ? `${e.type} is of tenant ${TEMPLATE_TENANT}` : `${e.type} is not of tenant ${TEMPLATE_TENANT}`);
    }
  }
  const problem = eventDataProblem(e.type, e.data);
  return problem ? invalid(problem.field, problem.message) : undefined;
}

/**
 * Why an event from this node is not appended, or undefined. Its shape first (nodeEventShapeDrop); then one about a
 * sandbox counts only while the sandbox is of the event's tenant and placed on the node (so a node that comes back
 * cannot end or alter one that moved), and one naming a snapshot of its sandbox only when the snapshot is that
 * sandbox's; a wipe report only when it cannot be a harmful forgery (plaintextWipeRefusal).
 */
export async function nodeEventRefusal(db: Kysely<Schema>, keys: KeyProvider, nodeId: string, e: NodeEvent): Promise<NodeEventDrop | undefined> {
  const shape = nodeEventShapeDrop(e);
  if (shape) return shape;
  const checked = e as CheckedNodeEvent;
  const scope = eventSpec(checked.type).scope;
  if (scope === 'system') return undefined;
  if (scope === 'tenant') return plaintextWipeRefusal(db, keys, nodeId, checked as CheckedNodeEvent & { type: 'tenant.plaintext_wiped' });
  const row = await db.selectFrom('sandboxes').select(['tenant_id', 'gateway_id']).where('id', '=', e.sandboxId!).executeTakeFirst();
  if (!row) return refused('/sandboxId', 'no such sandbox');
  if (row.tenant_id !== e.tenantId) return refused('/sandboxId', 'the sandbox belongs to another tenant');
  if (row.gateway_id !== nodeId) return refused('/sandboxId', `the sandbox is placed on ${row.gateway_id ?? 'no node'}`);
  if (OWN_SNAPSHOT_TYPES.has(checked.type)) return snapshotRefusal(db, checked);
  return undefined;
}

/**
 * An event that names, in data.snapshotId, a snapshot of its own sandbox: snapshot.deleted, sandbox.paused and
 * sandbox.resumed one that exists (the pause's snapshot.taken comes first in the node's outbox), snapshot.taken or
 * snapshot.failed a new id or (a capture retried) one already of that sandbox. Snapshot ids are object names in the
 * shared store, so any node can learn another tenant's; naming one must change nothing of it.
 */
async function snapshotRefusal(db: Kysely<Schema>, e: CheckedNodeEvent): Promise<NodeEventDrop | undefined> {
  // The schema made it a snap_ id where the type has one (snapshot.failed may name none: nothing to bind).
  const snapshotId = (e.data as { snapshotId?: string }).snapshotId;
  if (snapshotId === undefined) return undefined;
  const row = await db.selectFrom('snapshots').select(['tenant_id', 'sandbox_id']).where('id', '=', snapshotId).executeTakeFirst();
  if (!row) return MUST_EXIST.has(e.type) ? refused('/data/snapshotId', `no snapshot ${snapshotId} of sandbox ${e.sandboxId}`) : undefined;
  if (row.tenant_id !== e.tenantId || row.sandbox_id !== e.sandboxId)
    return refused('/data/snapshotId', `snapshot ${snapshotId} is not of sandbox ${e.sandboxId}`);
  return undefined;
}

/**
 * A node's report that it wiped a revoked tenant's plaintext (gateway revocation.ts) is the one tenant event about no
 * sandbox a node may write. It counts only when it cannot be a forgery that harms: the tenant ran a sandbox on this
 * node (in any state: the wipe ended them), every sandbox it says it stopped is that tenant's and was placed here, and
 * the key provider, asked now, says the key is revoked, so a node cannot claim a live tenant's data was destroyed.
 */
async function plaintextWipeRefusal(
  db: Kysely<Schema>,
  keys: KeyProvider,
  nodeId: string,
  e: CheckedNodeEvent & { type: 'tenant.plaintext_wiped' },
): Promise<NodeEventDrop | undefined> {
  // The schema checked the shape, and bounded the list (4096) within every database's parameter limit.
  const data = e.data as EventData<'tenant.plaintext_wiped'>;
  const ids = [...new Set(data.stoppedSandboxes)];
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
    return ids.length === 0
      ? refused('/tenantId', `tenant ${e.tenantId} has no sandbox placed on this node`)
      : refused('/data/stoppedSandboxes', `a stopped sandbox is not of tenant ${e.tenantId} on this node`);
  }
  try {
    if (keys.verify) await keys.verify(e.tenantId);
    else await keys.dataKey(e.tenantId, 'chunk-data');
  } catch (err) {
    if (err instanceof SandglassError && err.code === 'key_revoked') return undefined;
    return refused('/tenantId', `the key provider did not confirm the revocation: ${(err as Error).message}`);
  }
  return refused('/tenantId', `the key of tenant ${e.tenantId} is not revoked`);
}
