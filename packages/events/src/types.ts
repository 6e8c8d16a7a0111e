// Event types of the one log and the data each carries.
import type { EndReason } from '@sandglass/db';

export interface SandboxCreatedData {
  template: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
  metadata: Record<string, string>;
  gatewayId: string | null;
  gatewayUrl: string | null;
  /** Seconds between rolling snapshots (absent in events older than snapshots: 60). */
  snapshotIntervalS?: number;
  /** Set on forks: the snapshot the sandbox started from. */
  sourceSnapshotId?: string;
  /** The egress policy it started with; absent or null: no network at all. */
  network?: NetworkPolicyData | null;
  /** Names of the tenant secrets bound to it (never values). */
  secrets?: string[];
  /** The root disk size asked for (MiB); absent: the template's. */
  diskMib?: number;
  /** What its timeout does; absent: kill. */
  onTimeout?: 'kill' | 'pause';
  /** false: a pause at the timeout keeps the disk alone; absent: memory too. */
  onTimeoutKeepMemory?: false;
  /** A request with its credential resumes it while paused; absent: false. */
  autoResume?: boolean;
}

/** An egress policy as the API takes it: rules in the grammar of @sandglass/egress. */
export interface NetworkPolicyData {
  allow: string[];
  deny: string[];
}

export interface SnapshotTakenData {
  snapshotId: string;
  /** When the guest was stopped for the capture (the event's own time is when it was committed). */
  takenAt?: string;
  parentId: string | null;
  reason: 'rolling' | 'manual' | 'pause';
  name: string | null;
  pinned: boolean;
  sizeAddedBytes: number;
  memoryMib: number;
  vcpus: number;
  template: string;
  /** false: disk-only (no memory or device state); absent: the whole VM. */
  memory?: false;
}

/** A sandbox's snapshot cadence: the interval asked for and the one achieved over the last window (null: none yet). */
export interface SnapshotCadenceData {
  intervalS: number;
  achievedIntervalS: number | null;
  windowS: number;
  takenInWindow: number;
}

/** Data beyond the known fields is kept in the log (and hashed) but ignored by the projection. */
type Open<T> = T & { [extra: string]: unknown };

/**
 * The data the projection reads from each event type. The full list of types and the exact schema of each is
 * spec/events.yaml (core's EventType and EventData<T>); the node API admits nothing else from a node.
 */
export interface EventDataMap {
  'sandbox.created': SandboxCreatedData;
  'sandbox.started': Open<{ pid?: number | null }>;
  /** reason: killed (absent means killed), timeout or shutdown. */
  'sandbox.killed': Open<{ reason?: EndReason }>;
  'sandbox.failed': Open<{ reason: string; code?: string; consoleTail?: string }>;
  'sandbox.timeout': Open<object>;
  /** The expiry moved to `expiresAt`, `timeoutS` from when it was asked. */
  'sandbox.extended': Open<{ timeoutS: number; expiresAt: string }>;
  /** The VM was snapshotted and released; `snapshotId` brings it back. `reason: timeout`: its timeout paused it (onTimeout). */
  'sandbox.paused': Open<{ snapshotId: string; reason?: 'timeout' }>;
  /** Running again from `snapshotId`, in a new VM; the timeout counts afresh. `trigger: request`: a request woke it (autoResume). */
  'sandbox.resumed': Open<{ snapshotId: string; pid?: number | null; trigger?: 'request' }>;
  /**
   * A fork started from `snapshotId` (recorded on the new sandbox, after its sandbox.created). `network` and `secrets`,
   * when the gateway reports them, are what the fork really got (the snapshot's), correcting what sandbox.created assumed.
   */
  'sandbox.forked': Open<{ snapshotId: string | null; sourceSandboxId: string; network?: NetworkPolicyData | null; secrets?: string[] }>;
  /**
   * Placed on another node (`gatewayId`) from `snapshotId`: its node died (`reason: node_dead`), registered again after
   * a crash (`node_restarted`), or a paused sandbox resumes elsewhere (`resume`). The new node's sandbox.resumed follows.
   */
  'sandbox.moved': Open<{
    fromGatewayId: string | null;
    gatewayId: string;
    gatewayUrl: string;
    reason: 'node_dead' | 'node_restarted' | 'resume';
    snapshotId: string;
    snapshotTakenAt: string;
  }>;
  'sandbox.configured': Open<{ snapshotIntervalS: number }>;
  /**
   * The gateway set the guest's clock and credited it entropy (every start: create, resume, fork). The entropy bytes
   * are only in the tenant's chunk store (`entropyContentId`): an event reader must not learn what seeded the guest.
   */
  'sandbox.synced': Open<{ timeUnixNs: string; entropyContentId: string | null; replayOf?: string }>;
  /** The sandbox's recording reached its cap: inputs after this event carry no content and cannot be replayed. */
  'recording.capped': Open<{ capBytes: number; recordedBytes: number }>;
  /** The egress policy was replaced by this one (the gateway applied it first). */
  'sandbox.network_changed': Open<NetworkPolicyData>;
  'snapshot.taken': Open<SnapshotTakenData>;
  'snapshot.failed': Open<{ reason: string; code: string; attempt?: number; willRetry?: boolean }>;
  'snapshot.deleted': Open<{ snapshotId: string; why: 'retention' | 'user' }>;
  /**
   * The sandbox's rolling snapshots fell behind the interval asked for (a capture started, or still waits, more than
   * half an interval late): recorded once, until snapshot.caught_up. `achievedIntervalS` is over the last `windowS`.
   */
  'snapshot.behind': Open<SnapshotCadenceData & { lateS: number; why: 'slots_full' | 'capture_slow' | 'failing' }>;
  /** Rolling snapshots of a sandbox that was behind started on time again (three in a row). */
  'snapshot.caught_up': Open<SnapshotCadenceData & { behindForS: number }>;
  /** Named, renamed or (name null) unnamed after it was taken; a named snapshot is pinned, an unnamed one is not. */
  'snapshot.named': Open<{ snapshotId: string; name: string | null; previousName: string | null }>;
  'gc.completed': Open<object>;
  /** The guest agent sent past a stream's credit; the stream was reset. Recorded once per sandbox. */
  'agent.protocol_violation': Open<{ kind: string; stream: number; creditBytes: number; frameBytes: number }>;
  /** The sandbox reached its event quota: its further events in this window are dropped (lifecycle events never are). */
  'quota.events_dropped': Open<{ maxPerWindow: number; windowS: number; firstDroppedType: string }>;
  'command.started': Open<object>;
  'command.exited': Open<object>;
  'file.written': Open<object>;
  'file.removed': Open<object>;
  'tenant.created': Open<{ name: string }>;
  /** data.createdByKeyId is the actor (absent for the local operator key); never the key or its hash. */
  'api_key.created': Open<{ keyId: string; role: string; prefix: string; createdByKeyId?: string; expiresAt?: string }>;
  /** Refused from now on; data.revokedByKeyId is the actor. */
  'api_key.revoked': Open<{ keyId: string; role: string; prefix: string; revokedByKeyId: string }>;
  /** The local key file's key, registered as admin by an earlier version, became the operator key at start. */
  'api_key.role_changed': Open<{ keyId: string; from: string; to: string }>;
  /** A tenant secret was created or replaced: its configuration, never its value. */
  'secret.set': Open<{ name: string; hosts: string[]; header: string | null; approval: 'none' | 'required' }>;
  'secret.removed': Open<{ name: string }>;
  /** The tenant's key provider was registered (token and key labels, never a PIN or key); byKeyId is the actor. */
  'key.provider_set': Open<{ provider: 'keyring' | 'pkcs11'; token?: string; key?: string; currentVersion: number; byKeyId: string }>;
  /** New writes use data key version toVersion; with an HSM every older version was wrapped again (rewrappedVersions). */
  'key.rotated': Open<{ provider: string; fromVersion: number; toVersion: number; key?: string; rewrappedVersions?: number[]; byKeyId: string }>;
  /** The tenant's wrapped data keys were destroyed: nothing of it can be read again. */
  'key.revoked': Open<{ provider: string; versions: number[]; byKeyId: string }>;
  /** A gateway stopped the tenant's sandboxes and wiped its plaintext: the control plane told it, or its provider refused. */
  'tenant.plaintext_wiped': Open<{ trigger: 'api' | 'provider'; stoppedSandboxes: string[]; wipedFiles: number }>;
  /** A snapshot of the tenant's became a version of its template `name` (by a build, or promoted directly). */
  'template.published': Open<{ name: string; version: number; versionId: string; snapshotId: string; buildId: string | null }>;
  /** Versions of a tenant template were deleted; the snapshots they held went back to their sandbox's retention. */
  'template.deleted': Open<{ name: string; versions: number[] }>;
  /** A revoked tenant's chunks and manifests, unreadable since the revocation, were deleted after the retention period. */
  'tenant.data_purged': Open<{ manifests: number; chunks: number; freedBytes: number; revokedAt: string }>;
}

/** Lowercase dotted names: `sandbox.created`, `file.dir_created`. */
export const EVENT_TYPE_PATTERN = /^[a-z][a-z_]*(\.[a-z][a-z_]*)+$/;

export interface AppendInput {
  type: string;
  tenantId: string;
  /** Required for `sandbox.*` events. */
  sandboxId?: string;
  data: Record<string, unknown>;
  /**
   * Given by a gateway that recorded the event earlier (its outbox): the append is then idempotent by id, and `at`
   * keeps the time it happened rather than the time it arrived. Absent: a new id, and now.
   */
  id?: string;
  at?: string;
}

/** An event as stored: what `list` returns and the API serves. */
export interface StoredEvent {
  seq: number;
  id: string;
  type: string;
  tenantId: string;
  sandboxId: string | null;
  /** ISO-8601 UTC. */
  at: string;
  data: Record<string, unknown>;
  prevHash: string;
  /**
   * The hash of the previous event of the same sandbox (GENESIS_HASH for its first): the sandbox's own chain, which an
   * export of that sandbox alone can verify. Absent on events without a sandbox and on those written before it existed.
   */
  sandboxPrevHash?: string;
  hash: string;
}
