// Sandbox lifecycle as the control plane drives it: typed commands in, events appended, gateways called; no HTTP here.
import type { Kysely } from 'kysely';
import {
  deriveNodeKeys,
  errorFromBody,
  invalidArgument,
  newId,
  SandglassError,
  signAccessToken,
  signTrafficToken,
  trafficTokenKey,
  verifyDataPlaneCredential,
  type Clock,
  type ControlPlaneApi,
} from '@sandglass/core';
import {
  fromIso,
  isPostgres,
  preparedQuery,
  toIso,
  type SandboxRow,
  type SandboxState,
  type Schema,
  type SnapshotRow,
  type TemplateVersionRow,
} from '@sandglass/db';
import { parsePolicy } from '@sandglass/egress';
import { auditExport, type AuditExportSigner, type EventLog, type StoredEvent } from '@sandglass/events';
import type { KeyProvider } from '@sandglass/kms';
import type { TemplatePools } from './template-pools.js';
import { achievedCadence } from '@sandglass/snapshots';
import {
  toSandbox,
  toSnapshot,
  type Access,
  type ApprovalDecision,
  type ApprovalRequest,
  type CreateSandboxRequest,
  type ForkRequest,
  type ForkResponse,
  type NetworkPolicy,
  type PauseResponse,
  type ResumeSandboxRequest,
  type Sandbox,
  type Snapshot,
  type SnapshotCadence,
} from './api.js';
import type {
  GatewayClient,
  GatewayCreateRequest,
  GatewayDirectory,
  GatewayEndpoint,
  GatewayForkReply,
  GatewayForkRequest,
  GatewayMetrics,
} from './gateways.js';
import type { Principal } from './keys.js';
import { renameRuleField, type SecretStore } from './secrets.js';
import { findTemplate, findUsableVersion, versionHolding } from './templates.js';

/** How long a data-plane token lives: short, because it cannot be revoked. */
export const ACCESS_TOKEN_TTL_MS = 15 * 60_000;
/**
 * How long an E2B `envdAccessToken` lives: the E2B SDK never refreshes it, so it must last as long as a sandbox can run
 * between two connects. A revoked key's tokens are refused by the gateways for this long (LONGEST_TOKEN_TTL_MS).
 */
export const E2B_ENVD_TOKEN_TTL_MS = 7 * 24 * 3600_000;
/** The longest any access token lives: how long gateways must keep refusing the tokens of a revoked key. */
export const LONGEST_TOKEN_TTL_MS = Math.max(ACCESS_TOKEN_TTL_MS, E2B_ENVD_TOKEN_TTL_MS);

/** Bounds of a sandbox's `envs`: the count and name length are in the specs too; the total keeps env.defaults small. */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const MAX_ENVS = 128;
const MAX_ENVS_BYTES = 64 * 1024;

/** Checks sandbox-wide environment variables, naming `${field}.NAME` and the rule. */
export function checkEnvs(envs: Record<string, string>, field: string): Record<string, string> {
  const entries = Object.entries(envs);
  if (entries.length > MAX_ENVS) throw invalidArgument(field, `has ${entries.length} variables; at most ${MAX_ENVS}`);
  let bytes = 0;
  for (const [name, value] of entries) {
    if (!ENV_NAME.test(name)) throw invalidArgument(`${field}.${name}`, 'must be a name like [A-Za-z_][A-Za-z0-9_]* of at most 128 characters');
    if (typeof value !== 'string') throw invalidArgument(`${field}.${name}`, 'must be a string');
    if (value.includes('\0')) throw invalidArgument(`${field}.${name}`, 'must not contain NUL');
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
  }
  if (bytes > MAX_ENVS_BYTES) throw invalidArgument(field, `holds ${bytes} bytes of names and values; at most ${MAX_ENVS_BYTES}`);
  return envs;
}

export interface SandboxServiceDeps {
  db: Kysely<Schema>;
  events: EventLog;
  gateways: GatewayDirectory;
  gatewayClient: GatewayClient;
  nodeSecret: Buffer;
  clock: Clock;
  /** For `secrets` on create: each must exist for the tenant. */
  secrets: SecretStore;
  /** The data-plane URL clients are given, when it differs from the URL the control plane reaches the gateway at. */
  publicGatewayUrl?: string;
  /** The tenants' key provider: a failover move asks it (verify) before it brings a sandbox back anywhere. */
  keys?: KeyProvider;
  /** Custom templates' warm pools: a create from one prefers the node holding its pool. */
  templatePools?: TemplatePools;
}

const isFinal = (state: SandboxState) => state === 'ended' || state === 'failed';

/** Checks the rules with the egress grammar, naming `${field}.allow[i]`; absent lists are empty. */
function checkNetwork(input: { allow?: string[]; deny?: string[] }, field: string): NetworkPolicy {
  try {
    parsePolicy(input);
  } catch (err) {
    throw renameRuleField(err, (f) => `${field}.${f}`);
  }
  return { allow: input.allow ?? [], deny: input.deny ?? [] };
}

/** Paging and filtering of a sandbox's events: `type` is comma-separated types or families ('egress,secret'). */
export type EventsQuery = NonNullable<ControlPlaneApi.operations['listSandboxEvents']['parameters']['query']>;

/** Which snapshot a resume or fork starts from: one by id, the latest at or before a time, or (neither) the latest. */
interface SnapshotChoice {
  snapshotId?: string;
  at?: string;
}

/** A snapshot a template version holds is the template's: it changes only through /v1/templates. */
async function refuseTemplateData(db: Kysely<Schema>, who: Principal, snapshotId: string, what: 'renamed' | 'deleted'): Promise<void> {
  const version = await versionHolding(db, who.tenantId, snapshotId);
  if (!version) return;
  throw new SandglassError(
    'conflict',
    `Snapshot ${snapshotId} is version ${version.version} of template ${version.name}; it cannot be ${what} while the template holds it (DELETE /v1/templates/${version.name}?version=${version.version} first).`,
    { details: { field: 'id', template: version.name, version: version.version } },
  );
}

/** A tenant's sandbox by id: the lookup behind most routes (`Sandbox.connect` among them), compiled once. */
const ownRow = preparedQuery(2, (db: Kysely<Schema>, id: string, tenantId: string) =>
  db.selectFrom('sandboxes').selectAll().where('id', '=', id).where('tenant_id', '=', tenantId),
);

/**
 * The control plane appends only `sandbox.created`, `sandbox.killed`, `sandbox.extended`, `sandbox.configured` and
 * `sandbox.network_changed` (and `sandbox.failed` when the gateway could not); the gateway appends `sandbox.started`, `sandbox.failed`,
 * `sandbox.paused/resumed/forked`, `snapshot.*`, `command.*` and `file.*` itself.
 * No transaction is ever held across a gateway call: in the embedded deployment the gateway appends to the same database meanwhile.
 */
/** Where a replay from creation starts: the source's VM shape and the network and secrets it was created with. */
interface CreationPoint {
  shape: { template: string; memoryMib: number; vcpus: number };
  network: NetworkPolicy | null;
  secrets: string[];
}

/** sandbox.created's lifecycle fields, only when not the defaults, so the events of every other sandbox stay as they were. */
function lifecycleData(req: Pick<CreateSandboxRequest, 'onTimeout' | 'onTimeoutKeepMemory' | 'autoResume'>): {
  onTimeout?: 'pause';
  onTimeoutKeepMemory?: false;
  autoResume?: true;
} {
  return {
    ...(req.onTimeout === 'pause' ? { onTimeout: 'pause' as const } : {}),
    ...(req.onTimeoutKeepMemory === false ? { onTimeoutKeepMemory: false as const } : {}),
    ...(req.autoResume ? { autoResume: true as const } : {}),
  };
}

/** A disk-only pause is a kind of pause: asked for with a timeout that kills, it would say something that never happens. */
function checkLifecycle(req: Pick<CreateSandboxRequest, 'onTimeout' | 'onTimeoutKeepMemory'>): void {
  if (req.onTimeoutKeepMemory === false && req.onTimeout !== 'pause')
    throw invalidArgument('onTimeoutKeepMemory', 'false is only allowed with onTimeout: pause');
}

/** The node's onTimeout, only when it is not its default: a node request for any other sandbox stays as it was. */
function nodeLifecycle(onTimeout: 'kill' | 'pause' | undefined, keepMemory = true): { onTimeout?: 'pause'; onTimeoutKeepMemory?: false } {
  return onTimeout === 'pause' ? { onTimeout, ...(keepMemory ? {} : { onTimeoutKeepMemory: false as const }) } : {};
}

export class SandboxService {
  /** Signs data-plane tokens: the node secret's access-token key, never the secret itself nor the internal bearer. */
  readonly #accessTokenKey: Buffer;
  /** Resumes made for requests (autoResume), one per sandbox at a time. */
  readonly #wakes = new Map<string, Promise<void>>();

  constructor(private readonly deps: SandboxServiceDeps) {
    this.#accessTokenKey = deriveNodeKeys(deps.nodeSecret).accessToken;
  }

  async create(who: Principal, req: CreateSandboxRequest): Promise<Sandbox> {
    const { db, events, gateways, gatewayClient, clock } = this.deps;
    checkLifecycle(req);
    const template = await findTemplate(db, req.template);
    if (!template) {
      const version = await findUsableVersion(db, who.tenantId, req.template);
      if (version) return this.#createFromVersion(who, req, version);
      throw new SandglassError('template_not_found', `No template ${JSON.stringify(req.template)}; GET /v1/templates lists them.`, {
        details: { field: 'template' },
      });
    }
    if (template.status === 'failed')
      throw new SandglassError('template_not_ready', `Template ${template.name} failed to build; rebuild it before creating sandboxes from it.`);
    if (template.status !== 'ready') throw new SandglassError('template_not_ready', `Template ${template.name} is still being built; retry shortly.`);
    const network = req.network === undefined ? undefined : checkNetwork(req.network, 'network');
    // Secrets without a network policy are allowed: the placeholders exist, but nothing can be reached to use them on.
    const secrets = await this.#requestSecrets(who, req.secrets);
    const envs = checkEnvs(req.envs ?? {}, 'envs');
    const envNames = Object.keys(envs);

    const gateway = await gateways.pick({
      tenantId: who.tenantId,
      memoryMib: req.memoryMib,
      vcpus: req.vcpus,
      snapshotIntervalS: req.snapshotIntervalS,
      ...(template.artifact_key === null ? {} : { templateKey: template.artifact_key }),
    });
    // Before the sandbox exists in the log: a size whose template is still being built answers `template_not_ready`
    // (retryable; its build goes on on the node) and leaves no failed sandbox behind; one the node does not serve,
    // `size_unsupported`.
    // The node also refuses here an interval it has measured it can never keep for this size (snapshot_interval_unachievable).
    await gatewayClient.prepareTemplate(gateway, {
      template: template.name,
      memoryMib: req.memoryMib,
      vcpus: req.vcpus,
      snapshotIntervalS: req.snapshotIntervalS,
      bestEffort: req.snapshotBestEffort,
    });
    const id = newId('sbx');
    const spec = {
      template: template.name,
      memoryMib: req.memoryMib,
      vcpus: req.vcpus,
      timeoutS: req.timeoutS,
      snapshotIntervalS: req.snapshotIntervalS,
      ...(req.diskMib === undefined ? {} : { diskMib: req.diskMib }),
    };
    const egress = { ...(network === undefined ? {} : { network }), ...(secrets.length === 0 ? {} : { secrets }) };
    // Before the sandbox exists in the log, so every later start finds them; the log names the variables, never their values.
    if (envNames.length > 0) await this.#saveEnvs(id, who.tenantId, envs);
    await events.append(
      {
        type: 'sandbox.created',
        tenantId: who.tenantId,
        sandboxId: id,
        data: {
          ...spec,
          metadata: req.metadata ?? {},
          gatewayId: gateway.id,
          gatewayUrl: gateway.url,
          network: network ?? null,
          secrets,
          ...(envNames.length === 0 ? {} : { envNames }),
          ...lifecycleData(req),
        },
      },
      { clock },
    );
    try {
      await gatewayClient.createSandbox(gateway, {
        id,
        tenantId: who.tenantId,
        ...spec,
        ...egress,
        ...(envNames.length === 0 ? {} : { envs }),
        ...nodeLifecycle(req.onTimeout, req.onTimeoutKeepMemory),
      });
    } catch (err) {
      throw await this.#failUnlessFinal(who, [id], err);
    }
    const row = await this.#row(id);
    return { ...toSandbox(row), access: this.#access(who, row, gateway) };
  }

  /**
   * A sandbox from a version of the tenant's own template: a fork of the version's snapshot, so it wakes with what the
   * build left running. It gets the network and secrets this request names (none: deny all), never the build's, and
   * the template's variables under its own. Its size is the template's: the snapshot's memory and disk. Its commands,
   * PTYs and relative paths default to the template's user and workdir (the node keeps them in its snapshots).
   * A version of another tenant (a template the operator published) is read under that tenant's key; the sandbox and
   * everything it captures are this tenant's alone (the node stores its first capture in full under this tenant's key).
   */
  async #createFromVersion(who: Principal, req: CreateSandboxRequest, version: TemplateVersionRow): Promise<Sandbox> {
    const { events, gateways, gatewayClient, clock } = this.deps;
    if (req.diskMib !== undefined && req.diskMib !== version.disk_mib) {
      throw invalidArgument(
        'diskMib',
        `template ${version.name} has the disk it was built with (${version.disk_mib ?? 'the base size'} MiB); build it with another`,
      );
    }
    const network = checkNetwork(req.network ?? {}, 'network');
    const secrets = await this.#requestSecrets(who, req.secrets);
    const envs = checkEnvs({ ...(JSON.parse(version.envs) as Record<string, string>), ...(req.envs ?? {}) }, 'envs');
    const envNames = Object.keys(envs);
    const publisher = version.tenant_id === who.tenantId ? undefined : version.tenant_id;
    const preferNode = await this.deps.templatePools?.nodeFor(version.tenant_id, version.name);
    const gateway = await gateways.pick({
      tenantId: who.tenantId,
      memoryMib: version.memory_mib,
      vcpus: version.vcpus,
      ...(preferNode === undefined ? {} : { preferNode }),
    });
    const id = newId('sbx');
    if (envNames.length > 0) await this.#saveEnvs(id, who.tenantId, envs);
    await events.append(
      {
        type: 'sandbox.created',
        tenantId: who.tenantId,
        sandboxId: id,
        data: {
          template: version.name,
          templateVersionId: version.id,
          memoryMib: version.memory_mib,
          vcpus: version.vcpus,
          timeoutS: req.timeoutS,
          snapshotIntervalS: req.snapshotIntervalS,
          ...(version.disk_mib === null ? {} : { diskMib: version.disk_mib }),
          sourceSnapshotId: version.snapshot_id,
          metadata: req.metadata ?? {},
          gatewayId: gateway.id,
          gatewayUrl: gateway.url,
          network,
          secrets,
          ...(envNames.length === 0 ? {} : { envNames }),
          ...lifecycleData(req),
        },
      },
      { clock },
    );
    let reply: GatewayForkReply;
    try {
      reply = await gatewayClient.forkSandboxes(gateway, {
        snapshotId: version.snapshot_id,
        tenantId: who.tenantId,
        ...(publisher === undefined ? {} : { sourceTenantId: publisher }),
        network,
        secrets,
        ...(envNames.length === 0 ? {} : { envs }),
        defaults: versionDefaults(version),
        sandboxes: [{ id, timeoutS: req.timeoutS, snapshotIntervalS: req.snapshotIntervalS, ...nodeLifecycle(req.onTimeout, req.onTimeoutKeepMemory) }],
      });
    } catch (err) {
      throw await this.#failUnlessFinal(who, [id], err);
    }
    const result = reply.sandboxes.find((r) => r.id === id);
    if (!result || 'error' in result) {
      const error = result
        ? errorFromBody(500, { error: result.error })
        : new SandglassError('internal', undefined, { cause: new Error(`gateway ${gateway.id} did not report sandbox ${id}`) });
      throw await this.#failUnlessFinal(who, [id], error);
    }
    const row = await this.#row(id);
    return { ...toSandbox(row), access: this.#access(who, row, gateway) };
  }

  /** The tenant's sandboxes, newest first; `state` keeps those in that state (or any of those states). */
  async list(who: Principal, state?: SandboxState | SandboxState[]): Promise<Sandbox[]> {
    let q = this.deps.db.selectFrom('sandboxes').selectAll().where('tenant_id', '=', who.tenantId);
    if (Array.isArray(state)) q = q.where('state', 'in', state);
    else if (state) q = q.where('state', '=', state);
    return (await q.orderBy('created_at', 'desc').orderBy('id', 'desc').execute()).map(toSandbox);
  }

  async get(who: Principal, id: string): Promise<Sandbox> {
    return toSandbox(await this.#own(who, id));
  }

  /** Tells the gateway first, then records the kill; an ended sandbox is left as it is. */
  async kill(who: Principal, id: string): Promise<void> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) return;
    // A node that is dead (or was never heard of) runs nothing the log still needs to stop: should it come back, its
    // heartbeat learns the sandbox ended and it stops the VM (nodes.ts).
    const gateway = row.gateway_id === null ? undefined : await this.deps.gateways.get(row.gateway_id);
    try {
      if (gateway && row.state !== 'paused') await this.deps.gatewayClient.killSandbox(gateway, id);
    } catch (err) {
      // The gateway no longer runs it (it restarted, or the VM just ended): the kill has nothing left to do there.
      if (!(err instanceof SandglassError && (err.code === 'sandbox_not_found' || err.code === 'sandbox_not_running'))) throw err;
    }
    if (!isFinal((await this.#row(id)).state)) {
      await this.deps.events.append({ type: 'sandbox.killed', tenantId: who.tenantId, sandboxId: id, data: { reason: 'killed' } }, { clock: this.deps.clock });
    }
  }

  /** Moves the expiry to now + timeoutS, on the gateway first (it enforces it), then in the log. */
  async setTimeout(who: Principal, id: string, timeoutS: number): Promise<Sandbox> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) throw new SandglassError('sandbox_not_running', `Sandbox ${id} has ${row.state}; its timeout can no longer change.`);
    const expiresAt = toIso(this.deps.clock.nowMs() + timeoutS * 1000);
    // A paused sandbox has no VM to expire: its timeout counts afresh from the resume.
    if (row.state !== 'paused') await this.deps.gatewayClient.setExpiry(await this.#gatewayOf(row), id, expiresAt);
    await this.deps.events.append(
      { type: 'sandbox.extended', tenantId: who.tenantId, sandboxId: id, data: { timeoutS, expiresAt } },
      { clock: this.deps.clock },
    );
    return toSandbox(await this.#row(id));
  }

  /** A token for a running sandbox; `ttlMs` longer than ACCESS_TOKEN_TTL_MS only for E2B's envd (E2B_ENVD_TOKEN_TTL_MS). */
  async access(who: Principal, id: string, ttlMs: number = ACCESS_TOKEN_TTL_MS): Promise<Access> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) throw new SandglassError('sandbox_not_running', `Sandbox ${id} has ${row.state}; there is nothing to connect to.`);
    if (row.state === 'paused')
      throw new SandglassError('sandbox_not_running', `Sandbox ${id} is paused; resume it (POST /v1/sandboxes/${id}/resume) to connect to it.`);
    return this.#access(who, row, await this.#gatewayOf(row), ttlMs);
  }

  /**
   * An access token for E2B's SDK, which also signs file URLs with it by itself: the sandbox's gateway is told of it,
   * so a URL signed with it opens before the client's first envd request. Telling is best effort: a gateway that did
   * not hear still learns the token from that first request.
   */
  /**
   * E2B's credentials for a sandbox: the envd access token, and the traffic token for its guest ports alone
   * (`trafficAccessToken`), which lives and dies with it (same expiry, same API key).
   */
  async envdAccess(who: Principal, id: string, ttlMs: number): Promise<Access & { trafficToken: string }> {
    const row = await this.#own(who, id);
    const granted = await this.access(who, id, ttlMs);
    await this.deps.gatewayClient.rememberEnvdToken(await this.#gatewayOf(row), id, granted.token).catch(() => undefined);
    const trafficToken = signTrafficToken(
      { sbx: row.id, ten: row.tenant_id, exp: fromIso(granted.expiresAt), kid: who.keyId },
      trafficTokenKey(this.#accessTokenKey),
    );
    return { ...granted, trafficToken };
  }

  async events(who: Principal, id: string, query: EventsQuery): Promise<StoredEvent[]> {
    await this.#own(who, id);
    const { type, ...page } = query;
    return this.deps.events.list({ sandboxId: id, tenantId: who.tenantId, ...page, ...(type === undefined ? {} : { types: type.split(',') }) });
  }

  /** The sandbox's signed audit export (spec/audit-export.md), as lines to stream; the tenant's own sandboxes only. */
  async auditExport(who: Principal, id: string, signer: AuditExportSigner): Promise<AsyncIterable<string>> {
    await this.#own(who, id);
    return auditExport(this.deps.events, { tenantId: who.tenantId, sandboxId: id }, { clock: this.deps.clock, signer });
  }

  /** Replaces the egress policy of a running sandbox: on the gateway first (it enforces it), then in the log. */
  async setNetwork(who: Principal, id: string, input: { allow?: string[]; deny?: string[] }): Promise<{ network: NetworkPolicy }> {
    const network = checkNetwork(input, 'network');
    const row = await this.#running(who, id, 'change the network of');
    await this.deps.gatewayClient.setNetwork(await this.#gatewayOf(row), id, network);
    await this.deps.events.append({ type: 'sandbox.network_changed', tenantId: who.tenantId, sandboxId: id, data: { ...network } }, { clock: this.deps.clock });
    return { network };
  }

  /** The running sandbox's samples between `start` and `end` (RFC 3339), from the gateway that runs it. */
  async metrics(who: Principal, id: string, query: { start?: string; end?: string } = {}): Promise<GatewayMetrics> {
    const row = await this.#running(who, id, 'read the metrics of');
    return this.deps.gatewayClient.metrics(await this.#gatewayOf(row), id, query);
  }

  /** Requests the sandbox's egress holds for approval; only a running sandbox can have any. */
  async approvals(who: Principal, id: string): Promise<ApprovalRequest[]> {
    const row = await this.#own(who, id);
    if (row.state !== 'running') return [];
    return this.deps.gatewayClient.listApprovals(await this.#gatewayOf(row), id);
  }

  async decideApproval(who: Principal, requestId: string, req: ApprovalDecision): Promise<void> {
    if (req.ttlS !== undefined && req.decision !== 'approve')
      throw invalidArgument('ttlS', 'applies only to decision approve: a denial is always for this request only');
    const row = await this.#own(who, req.sandboxId);
    if (row.state !== 'running') {
      throw new SandglassError('approval_not_found', `Sandbox ${req.sandboxId} is ${row.state}, so it has no pending approval request ${requestId}.`);
    }
    const decision = { decision: req.decision, ...(req.ttlS === undefined ? {} : { ttlS: req.ttlS }) };
    await this.deps.gatewayClient.decideApproval(await this.#gatewayOf(row), req.sandboxId, requestId, decision);
  }

  /** Sets the rolling-snapshot interval: on the gateway when a VM runs, then in the log (a paused sandbox takes it along when resumed). */
  async setSnapshotInterval(who: Principal, id: string, snapshotIntervalS: number, opts: { bestEffort?: boolean } = {}): Promise<Sandbox> {
    const row = await this.#own(who, id);
    if (isFinal(row.state)) throw new SandglassError('sandbox_not_running', `Sandbox ${id} has ${row.state}; it takes no more snapshots.`);
    // The node refuses an interval it can never keep (snapshot_interval_unachievable) before anything is recorded.
    if (row.state !== 'paused') await this.deps.gatewayClient.setSnapshotInterval(await this.#gatewayOf(row), id, snapshotIntervalS, opts.bestEffort ?? false);
    await this.deps.events.append(
      { type: 'sandbox.configured', tenantId: who.tenantId, sandboxId: id, data: { snapshotIntervalS } },
      { clock: this.deps.clock },
    );
    return toSandbox(await this.#row(id));
  }

  /**
   * The sandbox's retained snapshots, oldest first (an ended sandbox keeps its timeline until retention thins it), and
   * its cadence: the interval asked for against the one its snapshots achieved, by the scheduler's own measure.
   */
  async timeline(who: Principal, id: string): Promise<{ snapshots: Snapshot[]; cadence: SnapshotCadence }> {
    const row = await this.#own(who, id);
    const snapshots = (await this.#snapshotsOf(who, id).orderBy('taken_at').orderBy('id').execute()).map(toSnapshot);
    const intervalMs = row.snapshot_interval_s * 1000;
    if (row.state !== 'running') {
      return { snapshots, cadence: { intervalS: row.snapshot_interval_s, achievedIntervalS: null, windowS: 0, takenInWindow: 0, behind: false } };
    }
    // The window starts no earlier than the sandbox last started running or had its interval changed.
    const last = (types: string[]) =>
      this.deps.db
        .selectFrom('events')
        .select(['type', 'at'])
        .where('sandbox_id', '=', id)
        .where('tenant_id', '=', who.tenantId)
        .where('type', 'in', types)
        .orderBy('seq', 'desc')
        .limit(1)
        .executeTakeFirst();
    const since = await last(['sandbox.started', 'sandbox.resumed', 'sandbox.configured']);
    const lastReport = await last(['snapshot.behind', 'snapshot.caught_up']);
    const c = achievedCadence(
      snapshots.map((s) => Date.parse(s.takenAt)),
      this.deps.clock.nowMs(),
      intervalMs,
      since ? Date.parse(since.at) : Date.parse(row.created_at),
    );
    return {
      snapshots,
      cadence: {
        intervalS: row.snapshot_interval_s,
        achievedIntervalS: c.achievedIntervalMs === null ? null : Math.round(c.achievedIntervalMs / 100) / 10,
        windowS: Math.round(c.windowMs / 100) / 10,
        takenInWindow: c.takenInWindow,
        behind: lastReport?.type === 'snapshot.behind',
      },
    };
  }

  /** The tenant's named (kept) snapshots, newest first; `sandboxId` and `name` narrow them. */
  async namedSnapshots(who: Principal, opts: { sandboxId?: string; name?: string } = {}): Promise<Snapshot[]> {
    let q = this.deps.db.selectFrom('snapshots').selectAll().where('tenant_id', '=', who.tenantId).where('name', 'is not', null);
    if (opts.sandboxId !== undefined) q = q.where('sandbox_id', '=', opts.sandboxId);
    if (opts.name !== undefined) q = q.where('name', '=', opts.name);
    return (await q.orderBy('taken_at', 'desc').orderBy('id', 'desc').execute()).map(toSnapshot);
  }

  async takeSnapshot(who: Principal, id: string, name?: string, opts: { compact?: boolean } = {}): Promise<Snapshot> {
    const row = await this.#running(who, id, 'snapshot');
    const reply = await this.deps.gatewayClient.takeSnapshot(await this.#gatewayOf(row), id, {
      ...(name === undefined ? {} : { name }),
      ...(opts.compact === true ? { compact: true } : {}),
    });
    return reply.snapshot;
  }

  async getSnapshot(who: Principal, snapshotId: string): Promise<Snapshot> {
    return toSnapshot(await this.#ownSnapshot(who, snapshotId));
  }

  /**
   * Names, renames or (null) unnames a snapshot: `snapshot.named`, whose projection pins a named one and unpins an
   * unnamed one, which is all retention reads. Read and appended in one transaction, the row locked on PostgreSQL, so a
   * deletion cannot slip between them and previousName is the name this rename replaced.
   */
  /** `pinForTemplate`: the template service pinning a version's snapshot, which the guard below would refuse. */
  async nameSnapshot(who: Principal, snapshotId: string, name: string | null, opts: { pinForTemplate?: boolean } = {}): Promise<Snapshot> {
    const { db, events, clock } = this.deps;
    return db.transaction().execute(async (trx) => {
      const q = trx.selectFrom('snapshots').selectAll().where('id', '=', snapshotId).where('tenant_id', '=', who.tenantId);
      const snap = await (isPostgres(trx) ? q.forUpdate() : q).executeTakeFirst();
      if (!snap) throw noSuchSnapshot(snapshotId);
      if (name !== snap.name && opts.pinForTemplate !== true) await refuseTemplateData(trx, who, snapshotId, 'renamed');
      await events.append(
        { type: 'snapshot.named', tenantId: who.tenantId, sandboxId: snap.sandbox_id, data: { snapshotId, name, previousName: snap.name } },
        { clock, trx },
      );
      return toSnapshot({ ...snap, name, pinned: name === null ? 0 : 1 });
    });
  }

  /** The gateway deletes the manifest and records snapshot.deleted; forks already started from it keep running. */
  async deleteSnapshot(who: Principal, snapshotId: string): Promise<void> {
    const snap = await this.#ownSnapshot(who, snapshotId);
    await refuseTemplateData(this.deps.db, who, snapshotId, 'deleted');
    const sandbox = await this.#row(snap.sandbox_id);
    await this.deps.gatewayClient.deleteSnapshot(await this.#gatewayFor(sandbox), snapshotId, who.tenantId);
  }

  /** Snapshots the sandbox (reason pause) and releases its VM; the gateway records snapshot.taken and sandbox.paused. */
  async pause(who: Principal, id: string, opts: { keepMemory?: boolean | undefined } = {}): Promise<PauseResponse> {
    const row = await this.#running(who, id, 'pause');
    const { snapshot } = await this.deps.gatewayClient.pauseSandbox(await this.#gatewayOf(row), id, opts.keepMemory === false ? { keepMemory: false } : {});
    return { sandbox: toSandbox(await this.#row(id)), snapshot };
  }

  /** Runs a paused sandbox again under its id from one of its snapshots; the gateway records sandbox.resumed. */
  async resume(who: Principal, id: string, req: ResumeSandboxRequest): Promise<Sandbox> {
    if (req.at !== undefined && req.snapshotId !== undefined)
      throw invalidArgument('at', 'cannot be combined with snapshotId; give one of them, or neither for the latest snapshot');
    const row = await this.#own(who, id);
    if (row.state === 'running' || row.state === 'starting') {
      throw new SandglassError(
        'sandbox_running',
        `Sandbox ${id} is ${row.state}; pause it before resuming it, or fork it to run a copy from one of its snapshots.`,
      );
    }
    if (isFinal(row.state)) {
      throw new SandglassError(
        'sandbox_not_running',
        `Sandbox ${id} has ${row.state} and cannot be resumed; fork it (POST /v1/forks) to run a new sandbox from one of its snapshots.`,
      );
    }
    const snap = await this.#choose(who, row, req);
    const gateway = await this.#gatewayFor(row);
    // Any node can resume any snapshot (the store and the templates are shared): if it is not the last one, say so first.
    if (gateway.id !== row.gateway_id) await this.#recordMove(row, gateway, snap, 'resume');
    await this.#resumeOn(gateway, row, snap, { coldBoot: req.coldBoot === true });
    const resumed = await this.#row(id);
    return { ...toSandbox(resumed), access: this.#access(who, resumed, gateway) };
  }

  /**
   * A request to a guest port or envd of a sandbox its node does not run, with the credential it carried for it as
   * received (an access token or a signed port URL's token), which the node verified and which is verified here again
   * from scratch, so a node cannot wake a sandbox by naming its id: signature and expiry under the access-token key, the
   * sandbox (and tenant) it names, and the API key behind it in the database (of that tenant, not revoked, not
   * expired). A paused sandbox opted in to autoResume is resumed through the ordinary path (one resume per sandbox
   * however many requests ask); one without it is `sandbox_paused`; anything else not running is not found, as the
   * node would say. Answers the node the sandbox runs on now.
   */
  async wake(id: string, credential: string): Promise<{ gatewayId: string }> {
    const claims = verifyDataPlaneCredential(credential, this.#accessTokenKey, this.deps.clock.nowMs());
    if (claims.sbx !== id) throw new SandglassError('permission_denied', 'This credential is for another sandbox.');
    if (claims.kid === undefined) throw new SandglassError('permission_denied', 'This credential names no API key, so it wakes nothing.');
    const row = await this.deps.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row || isFinal(row.state)) throw notHere(id);
    if (claims.ten !== undefined && claims.ten !== row.tenant_id) throw new SandglassError('permission_denied', 'This credential is for another tenant.');
    // The node refuses revoked keys it was told of; the database is asked too, so no push still in flight lets one through.
    const key = await this.deps.db.selectFrom('api_keys').select(['tenant_id', 'revoked_at', 'expires_at']).where('id', '=', claims.kid).executeTakeFirst();
    if (!key || key.tenant_id !== row.tenant_id) throw new SandglassError('permission_denied', 'This credential is for another tenant.');
    if (key.revoked_at !== null) throw new SandglassError('api_key_revoked', 'The API key this credential was obtained with was revoked.');
    if (key.expires_at !== null && fromIso(key.expires_at) <= this.deps.clock.nowMs())
      throw new SandglassError('api_key_expired', 'The API key this credential was obtained with has expired.');
    if (row.state === 'paused') {
      if (row.auto_resume !== 1) {
        throw new SandglassError(
          'sandbox_paused',
          `Sandbox ${id} is paused; resume it (POST /v1/sandboxes/${id}/resume, sbx.resume()), or create it with autoResume so that a request with its access token resumes it.`,
        );
      }
      let wake = this.#wakes.get(id);
      if (!wake) {
        wake = this.#wakeOnce(row, claims.kid).finally(() => this.#wakes.delete(id));
        this.#wakes.set(id, wake);
      }
      await wake;
    }
    const now = await this.#row(id);
    if ((now.state !== 'running' && now.state !== 'starting') || now.gateway_id === null) throw notHere(id);
    return { gatewayId: now.gateway_id };
  }

  async #wakeOnce(row: SandboxRow, keyId: string): Promise<void> {
    try {
      await this.resume({ tenantId: row.tenant_id, keyId, role: 'member' }, row.id, {});
    } catch (err) {
      // Another replica's wake (or the owner's resume) got there first: it runs, which is what this request wanted.
      if (!(err instanceof SandglassError && err.code === 'sandbox_running')) throw err;
    }
  }

  /**
   * Brings back a sandbox whose node was lost, on another node, from its latest committed snapshot, keeping its id and
   * its command records; one with no snapshot yet fails with the reason. The caller holds the sandbox's move lease.
   * Throws `capacity_exhausted` (nothing recorded: retry later) or the resume's error (it is then paused on the new node).
   */
  async move(id: string, reason: 'node_dead' | 'node_restarted'): Promise<'moved' | 'failed' | 'skipped'> {
    const { events, clock, gateways } = this.deps;
    const row = await this.#row(id);
    if (row.state !== 'running' && row.state !== 'starting') return 'skipped';
    const from = row.gateway_id ?? 'unknown';
    const why = reason === 'node_dead' ? `node ${from} stopped answering` : `node ${from} restarted and its VMs died with it`;
    const snap = await this.deps.db
      .selectFrom('snapshots')
      .selectAll()
      .where('sandbox_id', '=', id)
      .where('tenant_id', '=', row.tenant_id)
      .orderBy('taken_at', 'desc')
      .orderBy('id', 'desc')
      .executeTakeFirst();
    if (!snap) {
      await events.append(
        {
          type: 'sandbox.failed',
          tenantId: row.tenant_id,
          sandboxId: id,
          data: { reason: `${why} before the sandbox's first snapshot, so there is nothing to bring back.`, code: 'gateway_unavailable' },
        },
        { clock },
      );
      return 'failed';
    }
    // A move is a boot: the provider is asked first, so plaintext never comes back on a key that is gone. Revoked:
    // the sandbox fails for good. Unavailable: it stays where it was lost, and a later round asks again.
    try {
      await this.deps.keys?.verify?.(row.tenant_id);
    } catch (err) {
      if (!(err instanceof SandglassError && err.code === 'key_revoked')) throw err;
      await events.append(
        {
          type: 'sandbox.failed',
          tenantId: row.tenant_id,
          sandboxId: id,
          data: { reason: `${why}, and the tenant's key was revoked, so it is not brought back.`, code: 'key_revoked' },
        },
        { clock },
      );
      return 'failed';
    }
    const template = await findTemplate(this.deps.db, snap.template);
    const gateway = await gateways.pick({
      tenantId: row.tenant_id,
      memoryMib: snap.memory_mib,
      vcpus: snap.vcpus,
      snapshotIntervalS: row.snapshot_interval_s,
      ...(reason === 'node_dead' && row.gateway_id !== null ? { exclude: [row.gateway_id] } : {}),
      ...(template?.artifact_key ? { templateKey: template.artifact_key } : {}),
    });
    await this.#recordMove(row, gateway, snap, reason);
    // Should the resume fail, the sandbox stays paused on the new node with its snapshot intact: a later resume (any
    // node) brings it back, rather than a failure record ending it for good.
    await this.#resumeOn(gateway, await this.#row(id), snap);
    return 'moved';
  }

  async #recordMove(row: SandboxRow, to: GatewayEndpoint, snap: SnapshotRow, reason: 'node_dead' | 'node_restarted' | 'resume'): Promise<void> {
    await this.deps.events.append(
      {
        type: 'sandbox.moved',
        tenantId: row.tenant_id,
        sandboxId: row.id,
        data: { fromGatewayId: row.gateway_id, gatewayId: to.id, gatewayUrl: to.url, reason, snapshotId: snap.id, snapshotTakenAt: snap.taken_at },
      },
      { clock: this.deps.clock },
    );
  }

  /** The gateway restores the snapshot under the sandbox's id, with the policy and secrets it had, and records sandbox.resumed. */
  async #resumeOn(gateway: GatewayEndpoint, row: SandboxRow, snap: SnapshotRow, opts: { coldBoot?: boolean } = {}): Promise<void> {
    const secrets = JSON.parse(row.secrets) as string[];
    const envs = await this.#envsOf(row.id);
    const publicPorts = await this.#publicPortsOf(row.id);
    await this.deps.gatewayClient.resumeSandbox(gateway, row.id, {
      snapshotId: snap.id,
      tenantId: row.tenant_id,
      timeoutS: row.timeout_s,
      snapshotIntervalS: row.snapshot_interval_s,
      ...(row.network === null ? {} : { network: JSON.parse(row.network) as NetworkPolicy }),
      ...(secrets.length === 0 ? {} : { secrets }),
      ...(envs === undefined ? {} : { envs }),
      ...(publicPorts.length === 0 ? {} : { publicPorts }),
      ...nodeLifecycle(row.on_timeout, row.on_timeout_keep_memory === 1),
      ...(opts.coldBoot === true ? { coldBoot: true } : {}),
    });
  }

  /** The sandbox's public guest ports, folded from its port.visibility events: what a resume (any node) opens again. */
  async #publicPortsOf(sandboxId: string): Promise<number[]> {
    const rows = await this.deps.db
      .selectFrom('events')
      .select('data')
      .where('sandbox_id', '=', sandboxId)
      .where('type', '=', 'port.visibility')
      .orderBy('seq')
      .execute();
    const open = new Set<number>();
    for (const r of rows) {
      const d = JSON.parse(r.data) as { port?: unknown; public?: unknown };
      if (typeof d.port !== 'number' || !Number.isInteger(d.port) || d.port < 1 || d.port > 65535) continue;
      if (d.public === true) open.add(d.port);
      else open.delete(d.port);
    }
    return [...open].sort((a, b) => a - b);
  }

  /**
   * Starts `count` new sandboxes from one snapshot: each is recorded as created here, then the gateway restores them all
   * and records sandbox.started and sandbox.forked (or sandbox.failed) per fork. Answers the forks that started.
   */
  async fork(who: Principal, req: ForkRequest): Promise<ForkResponse> {
    const { events, gateways, gatewayClient, clock } = this.deps;
    if (req.snapshotId !== undefined && req.sandboxId !== undefined)
      throw invalidArgument('sandboxId', 'cannot be combined with snapshotId; give exactly one of them');
    if (req.snapshotId === undefined && req.sandboxId === undefined)
      throw invalidArgument('snapshotId', 'is required unless sandboxId is given; give exactly one of them');
    if (req.snapshotId !== undefined && req.at !== undefined)
      throw invalidArgument('at', 'only applies with sandboxId; a snapshotId already names one point in time');
    if (req.fromCreation === true) {
      if (req.sandboxId === undefined) throw invalidArgument('fromCreation', 'only applies with sandboxId; a snapshotId already names one point in time');
      if (req.at !== undefined) throw invalidArgument('at', 'cannot be combined with fromCreation; give one of them');
      if (req.replay !== true) throw invalidArgument('fromCreation', 'only applies with replay: true');
    }

    // The point the forks start from: a snapshot, or (fromCreation) what the source was created with.
    let snap: SnapshotRow | undefined;
    let source: SandboxRow;
    let creation: CreationPoint | undefined;
    if (req.snapshotId !== undefined) {
      snap = await this.#ownSnapshot(who, req.snapshotId);
      source = await this.#row(snap.sandbox_id);
    } else if (req.fromCreation === true) {
      source = await this.#own(who, req.sandboxId!);
      creation = await this.#creation(who, source);
    } else {
      source = await this.#own(who, req.sandboxId!);
      snap = await this.#choose(who, source, { at: req.at });
    }
    const shape = snap ? { template: snap.template, memoryMib: snap.memory_mib, vcpus: snap.vcpus } : creation!.shape;

    const gateway = await gateways.pick({
      tenantId: who.tenantId,
      memoryMib: shape.memoryMib,
      vcpus: shape.vcpus,
      snapshotIntervalS: source.snapshot_interval_s,
    });
    const ids = Array.from({ length: req.count }, () => newId('sbx'));
    // A fork is a copy of its source: its processes already hold the source's variables, and new ones get them too.
    const envs = await this.#envsOf(source.id);
    for (const id of ids) {
      if (envs !== undefined) await this.#saveEnvs(id, who.tenantId, envs);
      const data = {
        ...shape,
        timeoutS: req.timeoutS,
        metadata: req.metadata ?? {},
        gatewayId: gateway.id,
        gatewayUrl: gateway.url,
        snapshotIntervalS: source.snapshot_interval_s,
        ...(snap ? { sourceSnapshotId: snap.id } : {}),
        // The disk is the snapshot's (its layers carry the size); the source's request says what that is.
        ...(source.disk_mib === null ? {} : { diskMib: source.disk_mib }),
        // The gateway restores the snapshot's network; until its sandbox.forked says which, the source's is the best guess.
        network: creation ? creation.network : source.network === null ? null : (JSON.parse(source.network) as NetworkPolicy),
        secrets: creation ? creation.secrets : (JSON.parse(source.secrets) as string[]),
        ...(envs === undefined ? {} : { envNames: Object.keys(envs) }),
      };
      await events.append({ type: 'sandbox.created', tenantId: who.tenantId, sandboxId: id, data }, { clock });
    }

    const replay = req.replay === true ? await this.#replayPlan(who, source, snap) : undefined;
    let reply: GatewayForkReply;
    try {
      reply = snap
        ? await gatewayClient.forkSandboxes(gateway, {
            snapshotId: snap.id,
            tenantId: who.tenantId,
            ...(envs === undefined ? {} : { envs }),
            ...(replay === undefined ? {} : { replay }),
            sandboxes: ids.map((id) => ({ id, timeoutS: req.timeoutS, snapshotIntervalS: source.snapshot_interval_s })),
          })
        : await this.#createReplays(gateway, who, ids, {
            ...shape,
            timeoutS: req.timeoutS,
            snapshotIntervalS: source.snapshot_interval_s,
            ...(source.disk_mib === null ? {} : { diskMib: source.disk_mib }),
            ...(creation!.network === null ? {} : { network: creation!.network }),
            ...(creation!.secrets.length === 0 ? {} : { secrets: creation!.secrets }),
            ...(envs === undefined ? {} : { envs }),
            replay: replay!,
          });
    } catch (err) {
      throw await this.#failUnlessFinal(who, ids, err);
    }

    const started: Sandbox[] = [];
    let firstError: SandglassError | undefined;
    for (const id of ids) {
      const result = reply.sandboxes.find((r) => r.id === id);
      if (result && !('error' in result)) {
        const row = await this.#row(id);
        started.push({ ...toSandbox(row), access: this.#access(who, row, gateway) });
        continue;
      }
      const error = result
        ? errorFromBody(500, { error: result.error })
        : new SandglassError('internal', undefined, { cause: new Error(`gateway ${gateway.id} did not report fork ${id}`) });
      firstError ??= error;
      await this.#failUnlessFinal(who, [id], error);
    }
    if (started.length === 0) throw firstError!;
    return { snapshotId: snap?.id ?? null, sandboxes: started };
  }

  /**
   * What a sandbox was created with, from its sandbox.created (its network then, not now): the point a replay from
   * creation starts at. A fork was created from a snapshot, which is where its replay starts instead.
   */
  async #creation(who: Principal, source: SandboxRow): Promise<CreationPoint> {
    if (source.source_snapshot_id !== null) {
      throw new SandglassError(
        'snapshot_not_found',
        `Sandbox ${source.id} was forked from snapshot ${source.source_snapshot_id}, not created from a template; replay it from that snapshot or one of its own.`,
        { details: { field: 'fromCreation' } },
      );
    }
    const [created] = await this.deps.events.list({ sandboxId: source.id, tenantId: who.tenantId, types: ['sandbox.created'] });
    const d = (created?.data ?? {}) as { network?: NetworkPolicy | null; secrets?: string[] };
    return {
      shape: { template: source.template, memoryMib: source.memory_mib, vcpus: source.vcpus },
      network: d.network ?? null,
      secrets: Array.isArray(d.secrets) ? d.secrets : [],
    };
  }

  /** Starts each replay from creation on the gateway like a create; each one that fails is reported in place, like a fork's. */
  async #createReplays(
    gateway: GatewayEndpoint,
    who: Principal,
    ids: string[],
    spec: Omit<GatewayCreateRequest, 'id' | 'tenantId'>,
  ): Promise<GatewayForkReply> {
    const sandboxes: GatewayForkReply['sandboxes'] = [];
    for (const id of ids) {
      try {
        sandboxes.push(await this.deps.gatewayClient.createSandbox(gateway, { id, tenantId: who.tenantId, ...spec }));
      } catch (err) {
        if (!(err instanceof SandglassError) || ids.length === 1) throw err;
        sandboxes.push({ id, error: { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) } });
      }
    }
    return { sandboxes };
  }

  /**
   * What a replay's fork needs from its source's log: the guest's time at the start point, the entropy of the
   * source's last sync at or before it (a content id: the bytes never leave the store), and the exchanges recorded
   * after it in order. From creation (no snapshot): the source's first sync, every exchange, and the placeholders its
   * sandbox.started names.
   */
  async #replayPlan(who: Principal, source: SandboxRow, snap: SnapshotRow | undefined): Promise<NonNullable<GatewayForkRequest['replay']>> {
    const takenMs = snap ? Date.parse(snap.taken_at) : Number.NEGATIVE_INFINITY;
    const events = await this.deps.events.list({
      sandboxId: source.id,
      tenantId: who.tenantId,
      types: ['sandbox.started', 'sandbox.synced', 'egress.exchange'],
    });
    let sync: { timeUnixNs: string; entropyContentId: string } | undefined;
    let placeholdersContentId: string | undefined;
    const exchanges: NonNullable<GatewayForkRequest['replay']>['exchanges'] = [];
    const content = (b: unknown) => {
      const c = b as { contentId?: unknown; recordedBytes?: unknown } | undefined;
      return typeof c?.contentId === 'string' && Number.isSafeInteger(c.recordedBytes)
        ? { contentId: c.contentId, recordedBytes: c.recordedBytes as number }
        : undefined;
    };
    for (const e of events) {
      const d = e.data as Record<string, unknown>;
      if (e.type === 'sandbox.started') {
        if (!snap && placeholdersContentId === undefined && typeof d.placeholdersContentId === 'string') placeholdersContentId = d.placeholdersContentId;
        continue;
      }
      if (e.type === 'sandbox.synced') {
        if (typeof d.entropyContentId !== 'string') continue;
        if (snap && Date.parse(e.at) <= takenMs) sync = { timeUnixNs: (BigInt(takenMs) * 1_000_000n).toString(), entropyContentId: d.entropyContentId };
        // From creation: the first sync, with the time the source's guest was given then.
        else if (!snap && sync === undefined && typeof d.timeUnixNs === 'string') sync = { timeUnixNs: d.timeUnixNs, entropyContentId: d.entropyContentId };
        continue;
      }
      const requestBody = content(d.requestBody);
      const responseBody = content(d.responseBody);
      // Exchanges without recorded bodies (recording off or capped) cannot be answered: the replay reports them.
      if (typeof d.startedAtMs !== 'number' || d.startedAtMs < takenMs || !requestBody || !responseBody) continue;
      exchanges.push({
        method: String(d.method),
        url: String(d.url),
        requestBody,
        status: Number(d.status),
        responseHeaders: Array.isArray(d.responseHeaders) ? (d.responseHeaders as string[][]) : [],
        responseBody,
      });
    }
    return {
      sourceSandboxId: source.id,
      ...(sync === undefined ? {} : { sync }),
      ...(placeholdersContentId === undefined ? {} : { placeholdersContentId }),
      exchanges,
    };
  }

  /** A create's secret names: each once, each the tenant's. */
  async #requestSecrets(who: Principal, names: string[] | undefined): Promise<string[]> {
    const secrets = names ?? [];
    const dup = secrets.findIndex((name, i) => secrets.indexOf(name) !== i);
    if (dup >= 0) throw invalidArgument(`secrets[${dup}]`, `names ${secrets[dup]} twice`);
    await this.deps.secrets.checkExist(who.tenantId, secrets);
    return secrets;
  }

  async #saveEnvs(sandboxId: string, tenantId: string, envs: Record<string, string>): Promise<void> {
    await this.deps.db
      .insertInto('sandbox_envs')
      .values({ sandbox_id: sandboxId, tenant_id: tenantId, envs: JSON.stringify(envs) })
      .execute();
  }

  /** The sandbox's own environment variables; undefined when it has none. */
  async #envsOf(sandboxId: string): Promise<Record<string, string> | undefined> {
    const row = await this.deps.db.selectFrom('sandbox_envs').select('envs').where('sandbox_id', '=', sandboxId).executeTakeFirst();
    return row === undefined ? undefined : (JSON.parse(row.envs) as Record<string, string>);
  }

  async #row(id: string): Promise<SandboxRow> {
    return this.deps.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  }

  /** Another tenant's sandbox is indistinguishable from one that does not exist. */
  async #own(who: Principal, id: string): Promise<SandboxRow> {
    const [row] = await ownRow(this.deps.db, id, who.tenantId);
    if (!row) throw new SandglassError('sandbox_not_found', `No sandbox ${id} exists for your tenant.`);
    return row;
  }

  /** A sandbox a VM runs for right now: what snapshot and pause need. */
  async #running(who: Principal, id: string, what: 'snapshot' | 'pause' | 'change the network of' | 'read the metrics of'): Promise<SandboxRow> {
    const row = await this.#own(who, id);
    if (row.state === 'running') return row;
    const why =
      row.state === 'paused'
        ? `is already paused (its pause snapshot is in GET /v1/sandboxes/${id}/snapshots); resume it first`
        : row.state === 'starting'
          ? 'is still starting; retry once it runs'
          : `has ${row.state}; fork it from one of its snapshots instead`;
    throw new SandglassError('sandbox_not_running', `Cannot ${what} sandbox ${id}: it ${why}.`);
  }

  #snapshotsOf(who: Principal, sandboxId: string) {
    return this.deps.db.selectFrom('snapshots').selectAll().where('sandbox_id', '=', sandboxId).where('tenant_id', '=', who.tenantId);
  }

  /** Another tenant's snapshot is indistinguishable from one that does not exist. */
  async #ownSnapshot(who: Principal, snapshotId: string): Promise<SnapshotRow> {
    const row = await this.deps.db.selectFrom('snapshots').selectAll().where('id', '=', snapshotId).where('tenant_id', '=', who.tenantId).executeTakeFirst();
    if (!row) throw noSuchSnapshot(snapshotId);
    return row;
  }

  /** Resolves a SnapshotChoice among the sandbox's own snapshots. */
  async #choose(who: Principal, sandbox: SandboxRow, choice: SnapshotChoice): Promise<SnapshotRow> {
    const timeline = `GET /v1/sandboxes/${sandbox.id}/snapshots lists them`;
    if (choice.snapshotId !== undefined) {
      const snap = await this.#snapshotsOf(who, sandbox.id).where('id', '=', choice.snapshotId).executeTakeFirst();
      if (!snap)
        throw new SandglassError('snapshot_not_found', `Sandbox ${sandbox.id} has no snapshot ${choice.snapshotId}; ${timeline}.`, {
          details: { field: 'snapshotId' },
        });
      return snap;
    }
    let q = this.#snapshotsOf(who, sandbox.id);
    // Stored times are toIso strings, whose text order is time order; `at` may carry any offset, so it is normalized first.
    if (choice.at !== undefined) q = q.where('taken_at', '<=', toIso(fromIso(choice.at)));
    const snap = await q.orderBy('taken_at', 'desc').orderBy('id', 'desc').executeTakeFirst();
    if (snap) return snap;
    if (choice.at === undefined) throw new SandglassError('snapshot_not_found', `Sandbox ${sandbox.id} has no snapshots left to start from.`);
    const oldest = await this.#snapshotsOf(who, sandbox.id).select('taken_at').orderBy('taken_at').executeTakeFirst();
    const retained = oldest ? `the oldest retained one was taken at ${oldest.taken_at}` : 'it has no snapshots left';
    throw new SandglassError('snapshot_out_of_range', `Sandbox ${sandbox.id} has no snapshot taken at or before ${choice.at}: ${retained}; ${timeline}.`, {
      details: { field: 'at', oldest: oldest?.taken_at ?? null },
    });
  }

  /**
   * Records sandbox.failed for each sandbox the gateway did not already end (it may have recorded the failure itself),
   * and returns the error to throw.
   */
  async #failUnlessFinal(who: Principal, ids: string[], err: unknown): Promise<SandglassError> {
    const cause = err instanceof SandglassError ? err : new SandglassError('internal', undefined, { cause: err });
    for (const id of ids) {
      if (isFinal((await this.#row(id)).state)) continue;
      await this.deps.events.append(
        { type: 'sandbox.failed', tenantId: who.tenantId, sandboxId: id, data: { reason: cause.message, code: cause.code } },
        { clock: this.deps.clock },
      );
    }
    return cause;
  }

  async #gatewayOf(row: SandboxRow): Promise<GatewayEndpoint> {
    const known = row.gateway_id === null ? undefined : await this.deps.gateways.get(row.gateway_id);
    // Not the recorded data-plane URL in its place: the internal API (and its bearer) never goes to that port.
    if (known) return known;
    throw new SandglassError('gateway_unavailable', `The gateway that runs sandbox ${row.id} is not known any more.`);
  }

  /** The gateway the sandbox last ran on when the directory still knows it, else any with room for its shape: for work on stored snapshots. */
  async #gatewayFor(row: SandboxRow): Promise<GatewayEndpoint> {
    const known = row.gateway_id === null ? undefined : await this.deps.gateways.get(row.gateway_id);
    return known ?? this.deps.gateways.pick({ tenantId: row.tenant_id, memoryMib: row.memory_mib, vcpus: row.vcpus });
  }

  /** A token for the sandbox's data plane, tied to the key that asked: it never outlives that key, nor its revocation. */
  #access(who: Principal, row: SandboxRow, gateway: GatewayEndpoint, ttlMs: number = ACCESS_TOKEN_TTL_MS): Access {
    const expMs = Math.min(this.deps.clock.nowMs() + Math.min(ttlMs, LONGEST_TOKEN_TTL_MS), who.expiresAtMs ?? Number.POSITIVE_INFINITY);
    return {
      gatewayUrl: this.deps.publicGatewayUrl ?? gateway.url,
      token: signAccessToken({ sbx: row.id, ten: row.tenant_id, exp: expMs, kid: who.keyId }, this.#accessTokenKey),
      expiresAt: toIso(expMs),
    };
  }
}

/** What a node answers for a sandbox it does not run: the wake says the same of one that runs nowhere. */
function notHere(id: string): SandglassError {
  return new SandglassError('sandbox_not_found', `No sandbox ${id} is running on this node.`, { details: { field: 'id' } });
}

/** Another tenant's snapshot and one thinned or deleted answer alike. */
function noSuchSnapshot(snapshotId: string): SandglassError {
  return new SandglassError('snapshot_not_found', `No snapshot ${snapshotId} exists for your tenant (retention may have thinned it, or it was deleted).`);
}

/** The user and workdir a template version's sandboxes default to; a version that names neither leaves the node's. */
function versionDefaults(version: TemplateVersionRow): { user?: string; workdir?: string } {
  return { ...(version.user === null ? {} : { user: version.user }), ...(version.workdir === null ? {} : { workdir: version.workdir }) };
}
