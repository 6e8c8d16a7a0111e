// Table types of the Sandglass database: one Kysely schema shared by SQLite and PostgreSQL.
import type { Generated, Insertable, Selectable } from 'kysely';

/** Every timestamp is an ISO-8601 UTC string with milliseconds (see toIso), so text order is time order on both dialects. */
export type IsoTime = string;

export interface TenantsTable {
  id: string;
  name: string;
  created_at: IsoTime;
}

/**
 * member: uses its tenant's sandboxes, secrets and snapshots. admin: also manages its own tenant's member and admin keys.
 * operator: the platform's own role, not a tenant's: creates tenants and manages keys in every tenant (it acts in the tenant
 * its key belongs to, `default` in `sandglass up`, for everything else).
 */
export type ApiKeyRole = 'member' | 'admin' | 'operator';

export interface ApiKeysTable {
  id: string;
  tenant_id: string;
  name: string | null;
  role: ApiKeyRole;
  /** Hex SHA-256 of the whole key: the key itself is shown once and never stored. */
  key_hash: string;
  /** The first characters of the key, so a person can tell keys apart. */
  prefix: string;
  created_at: IsoTime;
  /** The key that created this one; null for the local operator key `sandglass up` writes. */
  created_by_key_id: string | null;
  /** Refused from this instant on; null: never expires. */
  expires_at: IsoTime | null;
  /** Refused from this instant on; a revoked key is never reinstated. */
  revoked_at: IsoTime | null;
  revoked_by_key_id: string | null;
  /** Refreshed at most once a minute, so authentication does not write on every request. */
  last_used_at: IsoTime | null;
}

export type TemplateStatus = 'ready' | 'building' | 'failed';

export interface TemplatesTable {
  id: string;
  name: string;
  status: TemplateStatus;
  memory_mib: number;
  /** Where the template's image and snapshot live in the artifact store; null until built. */
  artifact_key: string | null;
  created_at: IsoTime;
}

export type SandboxState = 'starting' | 'running' | 'paused' | 'ended' | 'failed';
export type EndReason = 'killed' | 'timeout' | 'shutdown';

/** A projection of the event log: rebuilt from it by @sandglass/events, never written by anything else. */
export interface SandboxesTable {
  id: string;
  tenant_id: string;
  template: string;
  state: SandboxState;
  end_reason: EndReason | null;
  failure_reason: string | null;
  memory_mib: number;
  vcpus: number;
  timeout_s: number;
  /** JSON text of a string → string map. */
  metadata: string;
  gateway_id: string | null;
  gateway_url: string | null;
  created_at: IsoTime;
  started_at: IsoTime | null;
  ended_at: IsoTime | null;
  expires_at: IsoTime;
  /** How often the gateway takes a rolling snapshot of this sandbox. */
  snapshot_interval_s: number;
  /** The snapshot a fork started from (null for sandboxes created from a template). */
  source_snapshot_id: string | null;
  /** The root disk size asked for at create (MiB), inherited by forks; null: the template's own. */
  disk_mib: number | null;
  paused_at: IsoTime | null;
  /** JSON text of the egress policy `{ allow, deny }`; null: the sandbox has no network at all. */
  network: string | null;
  /** JSON text of the names of the tenant secrets bound to the sandbox. */
  secrets: string;
  /** What its timeout does: end it, or pause it (from sandbox.created's onTimeout). */
  on_timeout: OnTimeout;
  /** 0: a pause at the timeout keeps the disk alone (sandbox.created's onTimeoutKeepMemory false); 1: memory too. */
  on_timeout_keep_memory: number;
  /** 1: a request with its credential to a port or envd resumes it while paused; 0: it answers sandbox_paused. */
  auto_resume: number;
}

export type OnTimeout = 'kill' | 'pause';

export type SnapshotReason = 'rolling' | 'manual' | 'pause';

/** A projection of `snapshot.*` events: one row per committed snapshot whose manifest is in the chunk store. */
export interface SnapshotsTable {
  id: string;
  tenant_id: string;
  sandbox_id: string;
  parent_id: string | null;
  taken_at: IsoTime;
  reason: SnapshotReason;
  name: string | null;
  /** 1 when named or pinned: retention never thins it. */
  pinned: number;
  /** Bytes this snapshot added to the store (new chunks after compression and encryption, plus its manifest). */
  size_added_bytes: number;
  memory_mib: number;
  vcpus: number;
  template: string;
  /** 0: disk-only (a keepMemory false pause; its resume boots the guest); 1: memory and devices too. */
  memory: number;
}

export type SecretApproval = 'none' | 'required';

/** A tenant's secret: configuration written directly (not a projection); secret.set / secret.removed record each change. */
export interface SecretsTable {
  tenant_id: string;
  /** Environment-variable style: ^[A-Z_][A-Z0-9_]{0,63}$. */
  name: string;
  /** JSON text of the host patterns the value may be sent to. */
  hosts: string;
  header: string | null;
  format: string | null;
  /** JSON text of the media types whose request bodies are searched for the placeholder. */
  body_content_types: string;
  approval: SecretApproval;
  /** 1: the value may also be substituted into requests that go upstream in clear text. */
  allow_plaintext: Generated<number>;
  /** 1: the value may also be substituted into protocol-upgrade (WebSocket) requests, whose frames are not masked. */
  allow_upgrade: Generated<number>;
  /** Base64 of kms seal(dataKey(tenant, 'secret'), value, aad = `${tenant_id}/${name}`); the value is never stored in clear. */
  value_sealed: string;
  created_at: IsoTime;
  updated_at: IsoTime;
}

export interface EventsTable {
  seq: Generated<number>;
  id: string;
  type: string;
  tenant_id: string;
  sandbox_id: string | null;
  at: IsoTime;
  /** Canonical JSON text (sorted keys), exactly what the hash covers. */
  data: string;
  prev_hash: string;
  /** The hash of the sandbox's previous event (GENESIS_HASH for its first); null without a sandbox or before 0009. */
  sandbox_prev_hash: string | null;
  hash: string;
}

/** One row ('main'): the last appended event, so truncating the log's tail is detectable and appends are compare-and-set. */
export interface EventChainHeadTable {
  id: string;
  seq: number;
  hash: string;
}

export type NodeState = 'alive' | 'dead';

/** A gateway: registered by its first heartbeat, refreshed by every later one (see control-plane nodes.ts). */
export interface NodesTable {
  id: string;
  url: string;
  internal_url: string;
  state: NodeState;
  /** Bumped at each registration and at death; a call with an older epoch is fenced. */
  epoch: number;
  capacity_memory_mib: number;
  free_memory_mib: number;
  /** Snapshots a minute the node can sustain, by its last heartbeat; null until it has taken one. */
  capture_capacity_per_min: number | null;
  sandboxes: number;
  /** JSON text of the template keys the node has cached. */
  templates: string;
  registered_at: IsoTime;
  last_seen_at: IsoTime;
  dead_at: IsoTime | null;
}

/**
 * A node's own credential (control-plane node-credentials.ts): only the SHA-256 of its bearer key and the public half
 * of its transport key pair. One per node id; enrolling again replaces it, revoking fences the node.
 */
export interface NodeCredentialsTable {
  node_id: string;
  key_hash: string;
  /** Base64 X25519 SPKI DER: what the node API seals keys and secret values to. */
  public_key: string;
  enrolled_at: IsoTime;
  revoked_at: IsoTime | null;
}

/** A one-time enrolment token the operator issued for one node id; only its SHA-256 is kept. */
export interface NodeEnrolmentsTable {
  token_hash: string;
  node_id: string;
  created_at: IsoTime;
  expires_at: IsoTime;
  used_at: IsoTime | null;
}

/** A version of a tenant's custom template: a snapshot of the tenant's that sandboxes created from it fork. */
export interface TemplateVersionsTable {
  id: string;
  tenant_id: string;
  name: string;
  version: number;
  snapshot_id: string;
  memory_mib: number;
  vcpus: number;
  disk_mib: number | null;
  /** JSON object of the variables every sandbox from it gets. */
  envs: string;
  user: string | null;
  workdir: string | null;
  /** JSON `{cmd}` or null: what runs in it from before its snapshot. */
  start: string | null;
  build_id: string | null;
  created_at: IsoTime;
}

/** A custom template's warm pool: its size (newest version) and the node holding it. */
export interface TemplatePoolsTable {
  tenant_id: string;
  name: string;
  size: number;
  gateway_id: string | null;
  updated_at: IsoTime;
}

/** A tenant's template the operator published for every tenant (by name: its newest version, as for its own tenant). */
export interface PublishedTemplatesTable {
  name: string;
  tenant_id: string;
  published_at: IsoTime;
}

/** A build step's result, keyed by the step and everything before it: a rebuild forks it instead of running it again. */
export interface TemplateCacheTable {
  tenant_id: string;
  key: string;
  snapshot_id: string;
  created_at: IsoTime;
  /** When a build last looked the step up or stored it: the step cache evicts the least recently used first. */
  used_at: IsoTime;
}

export type TemplateBuildState = 'running' | 'ready' | 'failed';

export interface TemplateBuildsTable {
  id: string;
  tenant_id: string;
  name: string;
  status: TemplateBuildState;
  started_at: IsoTime;
  finished_at: IsoTime | null;
  /** The builder's last report: a running build not reported to for a while is stale and ends failed. */
  reported_at: IsoTime;
  /** JSON array of the steps' progress. */
  steps: string;
  /** How many log lines it holds (the next line's number). */
  lines: number;
  version_id: string | null;
  /** JSON `{message, step?}` or null. */
  error: string | null;
}

export interface TemplateBuildLinesTable {
  build_id: string;
  n: number;
  at: IsoTime;
  stream: string;
  text: string;
}

/** A named claim with an expiry: node death, a sandbox move, a GC run, a template build. */
export interface LeasesTable {
  name: string;
  holder: string;
  expires_at: IsoTime;
}

/** Template key → the snapshot in the chunk store that holds it (the first node to build it wins). */
export interface TemplateSnapshotsTable {
  key: string;
  tenant_id: string;
  snapshot_id: string;
  node_id: string;
  created_at: IsoTime;
}

/**
 * A sandbox's own environment variables (`envs` on create), written by the control plane, not a projection: values
 * stay out of the event log. A fork gets a copy of its source's row.
 */
export interface SandboxEnvsTable {
  sandbox_id: string;
  tenant_id: string;
  /** JSON text of a name → value map. */
  envs: string;
}

export interface Schema {
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
  templates: TemplatesTable;
  sandboxes: SandboxesTable;
  events: EventsTable;
  event_chain_head: EventChainHeadTable;
  nodes: NodesTable;
  leases: LeasesTable;
  template_snapshots: TemplateSnapshotsTable;
  snapshots: SnapshotsTable;
  secrets: SecretsTable;
  sandbox_envs: SandboxEnvsTable;
  node_credentials: NodeCredentialsTable;
  node_enrolments: NodeEnrolmentsTable;
  template_versions: TemplateVersionsTable;
  template_pools: TemplatePoolsTable;
  published_templates: PublishedTemplatesTable;
  template_cache: TemplateCacheTable;
  template_builds: TemplateBuildsTable;
  template_build_lines: TemplateBuildLinesTable;
}

export type TenantRow = Selectable<TenantsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type TemplateRow = Selectable<TemplatesTable>;
export type SandboxRow = Selectable<SandboxesTable>;
export type EventRow = Selectable<EventsTable>;
export type NewEventRow = Insertable<EventsTable>;
export type NodeRow = Selectable<NodesTable>;
export type NodeCredentialRow = Selectable<NodeCredentialsTable>;
export type LeaseRow = Selectable<LeasesTable>;
export type TemplateSnapshotRow = Selectable<TemplateSnapshotsTable>;
export type SnapshotRow = Selectable<SnapshotsTable>;
export type TemplateVersionRow = Selectable<TemplateVersionsTable>;
export type TemplateBuildRow = Selectable<TemplateBuildsTable>;
export type SecretRow = Selectable<SecretsTable>;
