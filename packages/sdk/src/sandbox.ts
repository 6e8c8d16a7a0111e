// A sandbox: its lifecycle on the control plane, and commands, files and terminals on its node's gateway.
import { type AuditEntry, type AuditFilter, auditTimeline, filterAudit } from './audit.js';
import { ControlPlane, DataPlane } from './client.js';
import { Commands } from './commands.js';
import type { ConnectionConfig } from './config.js';
import { InvalidArgumentError, NotFoundError, SandglassError } from './errors.js';
import { Files } from './files.js';
import { Ports } from './ports.js';
import { Pty } from './pty.js';
import type { ControlPlaneReply, GatewayReply } from './replies.js';
import { runReplay, type ReplayRunOptions } from './replay.js';
import type { ReplayReport } from './replay-report.js';
import type {
  ApprovalRequest,
  AuditPublicKey,
  NetworkPolicy,
  SandboxEvent,
  SandboxInfo,
  SandboxState,
  SnapshotCadence,
  SandboxMetric,
  SnapshotInfo,
  TemplateInfo,
} from './types.js';

export interface SandboxCreateOptions extends ConnectionConfig {
  /** Template name or id; default "base". */
  template?: string;
  memoryMib?: number;
  vcpus?: number;
  /** The sandbox is killed this long after creation unless extended with setTimeout. */
  timeoutS?: number;
  metadata?: Record<string, string>;
  /** Seconds between rolling snapshots (5…86400); default 60. */
  snapshotIntervalS?: number;
  /**
   * Take snapshotIntervalS even where the node has measured that it cannot keep it for this size (without it, that
   * is a `snapshot_interval_unachievable` error whose details.minimumS is the shortest it can keep).
   */
  snapshotBestEffort?: boolean;
  /** The egress policy; absent, the sandbox has no network at all. */
  network?: Partial<NetworkPolicy>;
  /** Names of tenant secrets (see Secrets.set): the sandbox sees each as an environment variable holding a placeholder. */
  secrets?: string[];
  /**
   * Environment variables for every process of the sandbox, for its whole life and its forks'. The proxy and CA
   * variables and secret placeholders win over the same names; use secrets for credentials (values are stored as given).
   */
  envs?: Record<string, string>;
  /**
   * The root disk in MiB (1024…65536): the filesystem is grown to at least this before the create answers; absent,
   * the template's own (about 1 GiB free). Resumes and forks keep it.
   */
  diskMib?: number;
  /**
   * What its timeout does: `kill` (the default) ends it; `pause` snapshots it and releases its VM, keeping its
   * rolling history and costing no RAM until it is resumed (if that snapshot fails, it is killed).
   */
  onTimeout?: 'kill' | 'pause';
  /**
   * With `onTimeout: 'pause'`, false makes that pause disk-only (as `pause({ keepMemory: false })`): the guest syncs,
   * its disk is kept and its memory dropped, so the resume boots it over that disk (files kept, processes gone).
   */
  onTimeoutKeepMemory?: boolean;
  /**
   * While paused, a request to one of its ports or its E2B daemon that carries its access token or a signed port URL
   * resumes it and then proceeds; without it, such a request is a `sandbox_paused` error. A public port's
   * requests without a credential never resume it.
   */
  autoResume?: boolean;
  /**
   * The first sandbox of a memory size or vCPU count a node has not served before waits for that size's template to
   * be built (tens of seconds under TCG): the node answers `template_not_ready` while it builds, and create asks again
   * every `BUILD_POLL_MS` until it is ready or `buildWaitMs` (default 10 minutes) has passed. `onProgress` hears each
   * such answer: the build's phase and how long it has run.
   */
  buildWaitMs?: number;
  onProgress?: (p: CreateProgress) => void;
}

/** A create waiting on its size's template build, as the node reported it. */
export interface CreateProgress {
  memoryMib?: number;
  vcpus?: number;
  /** boot, sync, prep, snapshot, publish, fetch (or start). */
  phase?: string;
  elapsedMs?: number;
  message: string;
}

/** How often a create waiting on a template build asks again. */
const BUILD_POLL_MS = 2000;
const DEFAULT_BUILD_WAIT_MS = 10 * 60_000;

export interface ApproveOptions extends ConnectionConfig {
  sandboxId: string;
  /** Also let the sandbox's later uses of the secret pass for this long (1…86400); absent: this request only. */
  ttlS?: number;
}

export interface DenyOptions extends ConnectionConfig {
  sandboxId: string;
}

export interface ApprovalWatchOptions {
  /** How often to ask for pending requests; default 1000. */
  intervalMs?: number;
  /** Failures to poll, and errors thrown by the callback; without it they are dropped and polling goes on. */
  onError?: (err: unknown) => void;
}

export interface EventsOptions {
  /** Resume after an event already seen. */
  afterSeq?: number;
  /** Only these types or families: ['egress', 'secret'] is every egress.* and secret.* event. */
  types?: string[];
}

export interface SandboxListOptions extends ConnectionConfig {
  state?: SandboxState;
}

export interface SnapshotOptions {
  /** 1–64 of [A-Za-z0-9._-]; a named snapshot is pinned (retention never thins it). */
  name?: string;
  /** First drop the guest's page cache and zero its freed memory: a smaller snapshot to fork from (a template's). */
  compact?: boolean;
}

export interface PauseOptions {
  /** false: keep the disk alone; the resume boots the guest over its files, its processes gone. Default true. */
  keepMemory?: boolean;
}

export interface ResumeOptions extends ConnectionConfig {
  /** Resume from the latest snapshot taken at or before this time (a string without a zone is local time). */
  at?: Date | string;
  /** Resume from this snapshot of the sandbox. Neither option: its latest snapshot. */
  snapshotId?: string;
  /** Boot the guest over the snapshot's disk instead of restoring its memory: files kept, processes gone. */
  coldBoot?: boolean;
}

export interface ForkOptions extends ConnectionConfig {
  /** How many sandboxes to start from the snapshot (1…16); default 1. */
  count?: number;
  /** Each fork is killed this long after it starts; default 300. */
  timeoutS?: number;
  metadata?: Record<string, string>;
}

/** `Sandbox.replay`: where it starts and ends, and how it judges (see ReplayRunOptions). */
export interface ReplayOptions extends ConnectionConfig, ReplayRunOptions {}

/** Where a fork starts: a snapshot, a sandbox's latest snapshot, or its latest snapshot at or before a time. */
export type ForkSource = { snapshotId: string } | { sandboxId: string; at?: string };

/** A time as the API takes it (ISO 8601 UTC); a string without a zone is local time, as `new Date(s)` reads it. */
function isoTime(at: Date | string): string {
  const ms = at instanceof Date ? at.getTime() : Date.parse(at);
  if (Number.isNaN(ms))
    throw new InvalidArgumentError('invalid_argument', `at: '${String(at)}' is not a time; give a Date or an ISO 8601 string such as 2025-06-01T12:00:00Z`, {
      details: { field: 'at' },
    });
  return new Date(ms).toISOString();
}

/** Reads `snap_…`, `sbx_…` or `sbx_…@<time>`; anything else is an InvalidArgumentError. */
export function parseForkSource(from: string): ForkSource {
  if (/^snap_[A-Za-z0-9]+$/.test(from)) return { snapshotId: from };
  const m = /^(sbx_[A-Za-z0-9]+)(?:@(.+))?$/s.exec(from);
  if (m) return m[2] === undefined ? { sandboxId: m[1]! } : { sandboxId: m[1]!, at: isoTime(m[2]) };
  throw new InvalidArgumentError('invalid_argument', `'${from}' is not a fork source: give a snapshot id (snap_…), a sandbox id (sbx_…) or sbx_…@<ISO time>`, {
    details: { field: 'from' },
  });
}

// The largest page the control plane serves.
const EVENTS_PAGE = 1000;

const sandboxPath = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

export class Sandbox {
  readonly id: string;
  readonly commands: Commands;
  readonly files: Files;
  readonly pty: Pty;
  readonly ports: Ports;
  private readonly controlPlane: ControlPlane;
  private readonly dataPlane: DataPlane;

  private constructor(controlPlane: ControlPlane, info: SandboxInfo) {
    this.id = info.id;
    this.controlPlane = controlPlane;
    const dataPlane = new DataPlane(controlPlane, info.id, info.access);
    this.commands = new Commands(dataPlane);
    this.files = new Files(dataPlane);
    this.pty = new Pty(dataPlane, (id, signal) => this.commands.kill(id, signal));
    this.ports = new Ports(dataPlane);
    this.dataPlane = dataPlane;
  }

  /**
   * `<port>-<sandbox id>.<domain>:<gateway port>`, the host name of a guest port, like E2B's getHost: a request to it
   * needs the sandbox's access token (X-Sandglass-Access-Token) unless the port is public. The gateway's address is the
   * one granted with the sandbox (create, resume, fork) or by any earlier data-plane call.
   */
  getHost(port: number): string {
    const gatewayUrl = this.dataPlane.knownGatewayUrl;
    if (gatewayUrl === undefined) {
      throw new InvalidArgumentError('invalid_argument', 'the gateway of this sandbox is not known yet: call a data-plane method first (e.g. ports.list())', {
        details: { field: 'port' },
      });
    }
    return this.ports.host(port, gatewayUrl);
  }

  static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
    const {
      template,
      memoryMib,
      vcpus,
      timeoutS,
      metadata,
      snapshotIntervalS,
      snapshotBestEffort,
      network,
      secrets,
      envs,
      diskMib,
      onTimeout,
      onTimeoutKeepMemory,
      autoResume,
      buildWaitMs,
      onProgress,
      ...config
    } = opts;
    const cp = await ControlPlane.open(config);
    const json = {
      template,
      memoryMib,
      vcpus,
      timeoutS,
      metadata,
      snapshotIntervalS,
      snapshotBestEffort,
      network,
      secrets,
      envs,
      diskMib,
      onTimeout,
      onTimeoutKeepMemory,
      autoResume,
    };
    const deadline = Date.now() + (buildWaitMs ?? DEFAULT_BUILD_WAIT_MS);
    for (;;) {
      try {
        return new Sandbox(cp, await cp.json<ControlPlaneReply<'createSandbox'>>('POST', '/v1/sandboxes', { json }));
      } catch (err) {
        // Only a size's build in progress is waited on (its details name the phase); nothing was created meanwhile.
        const building = err instanceof SandglassError && err.code === 'template_not_ready' && err.details?.phase !== undefined;
        if (!building || Date.now() + BUILD_POLL_MS > deadline) throw err;
        const d = err.details ?? {};
        onProgress?.({
          memoryMib: d.memoryMib as number | undefined,
          vcpus: d.vcpus as number | undefined,
          phase: d.phase as string | undefined,
          elapsedMs: d.elapsedMs as number | undefined,
          message: err.message,
        });
        await new Promise((resolve) => setTimeout(resolve, BUILD_POLL_MS));
      }
    }
  }

  /** Runs a paused sandbox again, under the same id, from one of its snapshots; answers once it runs. */
  static async resume(id: string, opts: ResumeOptions = {}): Promise<Sandbox> {
    const { at, snapshotId, coldBoot, ...config } = opts;
    const cp = await ControlPlane.open(config);
    const json = { at: at === undefined ? undefined : isoTime(at), snapshotId, coldBoot };
    return new Sandbox(cp, await cp.json<ControlPlaneReply<'resumeSandbox'>>('POST', `${sandboxPath(id)}/resume`, { json }));
  }

  /**
   * Starts new sandboxes from a snapshot: `from` is a snapshot id, a sandbox (id or handle; its latest snapshot) or
   * `sbx_…@<ISO time>` (its latest snapshot at or before then). Answers the forks that started; fails when none did.
   */
  static async fork(from: string | Sandbox, opts: ForkOptions = {}): Promise<Sandbox[]> {
    const { count, timeoutS, metadata, ...config } = opts;
    const source: ForkSource = from instanceof Sandbox ? { sandboxId: from.id } : parseForkSource(from);
    // A handle's own connection serves unless the caller names another.
    const sameConnection = from instanceof Sandbox && config.apiUrl === undefined && config.apiKey === undefined && config.requestTimeoutMs === undefined;
    const cp = sameConnection ? from.controlPlane : await ControlPlane.open(config);
    const { sandboxes } = await cp.json<ControlPlaneReply<'forkSandbox'>>('POST', '/v1/forks', {
      json: { ...source, count, timeoutS, metadata },
    });
    return sandboxes.map((info) => new Sandbox(cp, info));
  }

  /**
   * Replays a sandbox: forks it in replay mode at a snapshot (its first, `snapshotId`, or its latest at or before
   * `at`) or at its creation (`from: 'creation'`, the default when no snapshot precedes its first input) and re-issues every recorded input after it, up to `until`, in order (commands with their argv, env, cwd and
   * user; stdin, signals and resizes once the fork's output reaches the offset they arrived at; file writes from their
   * recorded content), with the guest's clock and entropy from the recording and egress answered only from the recorded
   * exchanges. Answers the report: per input same or different, and the first real divergence with both sides.
   */
  static async replay(source: string | Sandbox, opts: ReplayOptions = {}): Promise<ReplayReport> {
    const { from, snapshotId, at, until, nondeterministic, inputTimeoutMs, timeoutS, keepFork, prepare, ...config } = opts;
    const sameConnection = source instanceof Sandbox && config.apiUrl === undefined && config.apiKey === undefined && config.requestTimeoutMs === undefined;
    const cp = sameConnection ? source.controlPlane : await ControlPlane.open(config);
    return runReplay(cp, source instanceof Sandbox ? source.id : source, {
      from,
      snapshotId,
      at,
      until,
      nondeterministic,
      inputTimeoutMs,
      timeoutS,
      keepFork,
      prepare,
    });
  }

  /**
   * The public key the deployment signs audit exports with (no API key needed): what verifyAuditExport checks a
   * trailer against. Fetch it once and keep it apart from the exports; a key fetched next to a forged export proves nothing.
   */
  static async auditPublicKey(config?: ConnectionConfig): Promise<AuditPublicKey> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'getAuditPublicKey'>>('GET', '/v1/audit/public-key');
  }

  /** Deletes a snapshot, pinned or not; sandboxes already forked from it keep running. */
  static async deleteSnapshot(id: string, config?: ConnectionConfig): Promise<void> {
    const cp = await ControlPlane.open(config);
    await cp.request('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  }

  /**
   * Names or renames a snapshot after it was taken (1–64 of [A-Za-z0-9._-]), which pins it; null removes the name,
   * and retention may thin it again. Answers the snapshot as it is now.
   */
  static async nameSnapshot(id: string, name: string | null, config?: ConnectionConfig): Promise<SnapshotInfo> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'nameSnapshot'>>('PATCH', `/v1/snapshots/${encodeURIComponent(id)}`, { json: { name } });
  }

  /** A handle on an existing sandbox; fails with sandbox_not_found when there is none with this id. */
  static async connect(id: string, config?: ConnectionConfig): Promise<Sandbox> {
    const cp = await ControlPlane.open(config);
    return new Sandbox(cp, await cp.json<ControlPlaneReply<'getSandbox'>>('GET', sandboxPath(id)));
  }

  static async list(opts: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const { state, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listSandboxes'>>('GET', '/v1/sandboxes', { query: { state } })).sandboxes;
  }

  /** Kills a sandbox by id; false when no such sandbox exists. Killing an ended one is not an error. */
  static async kill(id: string, config?: ConnectionConfig): Promise<boolean> {
    const cp = await ControlPlane.open(config);
    try {
      await cp.request('DELETE', sandboxPath(id));
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && err.code === 'sandbox_not_found') return false;
      throw err;
    }
  }

  /** Lets a request held for approval use its secret; with ttlS, also the sandbox's later uses of it until then. */
  static async approve(requestId: string, opts: ApproveOptions): Promise<void> {
    const { sandboxId, ttlS, ...config } = opts;
    const cp = await ControlPlane.open(config);
    await cp.request('POST', `/v1/approvals/${encodeURIComponent(requestId)}`, { json: { sandboxId, decision: 'approve', ttlS } });
  }

  /** Refuses a request held for approval: the sandbox's client gets egress_approval_denied. */
  static async deny(requestId: string, opts: DenyOptions): Promise<void> {
    const { sandboxId, ...config } = opts;
    const cp = await ControlPlane.open(config);
    await cp.request('POST', `/v1/approvals/${encodeURIComponent(requestId)}`, { json: { sandboxId, decision: 'deny' } });
  }

  /** The templates a sandbox can be created from. */
  static async listTemplates(config?: ConnectionConfig): Promise<TemplateInfo[]> {
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listTemplates'>>('GET', '/v1/templates')).templates;
  }

  async kill(): Promise<void> {
    await this.controlPlane.request('DELETE', sandboxPath(this.id));
  }

  getInfo(): Promise<SandboxInfo> {
    return this.controlPlane.json<ControlPlaneReply<'getSandbox'>>('GET', sandboxPath(this.id));
  }

  /** Moves the expiry to now + timeoutS. */
  setTimeout(timeoutS: number): Promise<SandboxInfo> {
    return this.controlPlane.json<ControlPlaneReply<'setSandboxTimeout'>>('POST', `${sandboxPath(this.id)}/timeout`, { json: { timeoutS } });
  }

  /** Takes a snapshot now; with a name it is pinned. */
  snapshot(opts: SnapshotOptions = {}): Promise<SnapshotInfo> {
    return this.controlPlane.json<ControlPlaneReply<'takeSnapshot'>>('POST', `${sandboxPath(this.id)}/snapshots`, {
      json: { name: opts.name, compact: opts.compact },
    });
  }

  /**
   * Snapshots the sandbox and releases its VM; `Sandbox.resume(id)` brings it back. Answers the pause snapshot.
   * `keepMemory: false` keeps its disk alone: smaller and quicker, and the resume boots the guest over its files
   * (processes are gone; environment, user, workdir, network and secrets are kept).
   */
  async pause(opts: PauseOptions = {}): Promise<SnapshotInfo> {
    const json = opts.keepMemory === undefined ? undefined : { keepMemory: opts.keepMemory };
    return (await this.controlPlane.json<ControlPlaneReply<'pauseSandbox'>>('POST', `${sandboxPath(this.id)}/pause`, json === undefined ? {} : { json }))
      .snapshot;
  }

  /** The retained snapshots of this sandbox, oldest first. */
  async timeline(): Promise<SnapshotInfo[]> {
    return (await this.timelineWithCadence()).snapshots;
  }

  /**
   * The timeline and the snapshot cadence in one answer: the interval asked for against the one achieved, and whether
   * the sandbox is behind (its node cannot keep the interval: see the snapshot.behind event for why).
   */
  timelineWithCadence(): Promise<{ snapshots: SnapshotInfo[]; cadence: SnapshotCadence }> {
    return this.controlPlane.json<ControlPlaneReply<'listSnapshots'>>('GET', `${sandboxPath(this.id)}/snapshots`);
  }

  /**
   * Sets the seconds between rolling snapshots (5…86400). One the sandbox's node can never keep for its size is refused
   * (`snapshot_interval_unachievable`, details.minimumS) unless `bestEffort`.
   */
  setSnapshotInterval(snapshotIntervalS: number, opts: { bestEffort?: boolean } = {}): Promise<SandboxInfo> {
    return this.controlPlane.json<ControlPlaneReply<'setSnapshotInterval'>>('POST', `${sandboxPath(this.id)}/snapshot-interval`, {
      json: { snapshotIntervalS, ...(opts.bestEffort === undefined ? {} : { bestEffort: opts.bestEffort }) },
    });
  }

  /** Replaces the egress policy of the running sandbox; answers the policy now in force. */
  async setNetwork(network: Partial<NetworkPolicy>): Promise<NetworkPolicy> {
    return (await this.controlPlane.json<ControlPlaneReply<'setSandboxNetwork'>>('PUT', `${sandboxPath(this.id)}/network`, { json: network })).network;
  }

  /**
   * The running sandbox's CPU, memory and disk over the last hour, oldest first: one sample every 5 s, from its
   * gateway's memory (a resume or a move starts a new series). `start`/`end` keep only the samples between them.
   */
  async metrics(opts: { start?: Date; end?: Date } = {}): Promise<SandboxMetric[]> {
    const query = new URLSearchParams();
    if (opts.start !== undefined) query.set('start', opts.start.toISOString());
    if (opts.end !== undefined) query.set('end', opts.end.toISOString());
    const qs = query.toString();
    return (await this.dataPlane.json<GatewayReply<'getMetrics'>>('GET', `/metrics${qs ? `?${qs}` : ''}`)).metrics;
  }

  /** Requests the sandbox's egress holds until someone approves using a secret in them. */
  async approvals(): Promise<ApprovalRequest[]> {
    return (await this.controlPlane.json<ControlPlaneReply<'listApprovals'>>('GET', `${sandboxPath(this.id)}/approvals`)).approvals;
  }

  approve(requestId: string, opts: { ttlS?: number } = {}): Promise<void> {
    return this.#decide(requestId, { decision: 'approve', ttlS: opts.ttlS });
  }

  deny(requestId: string): Promise<void> {
    return this.#decide(requestId, { decision: 'deny' });
  }

  async #decide(requestId: string, body: { decision: 'approve' | 'deny'; ttlS?: number }): Promise<void> {
    await this.controlPlane.request('POST', `/v1/approvals/${encodeURIComponent(requestId)}`, { json: { sandboxId: this.id, ...body } });
  }

  /**
   * Polls for requests held for approval and calls `cb` once for each new one (decide it with approve or deny).
   * Returns a function that stops polling; until then the timer keeps the process alive.
   */
  onApprovalRequest(cb: (request: ApprovalRequest) => void | Promise<void>, opts: ApprovalWatchOptions = {}): () => void {
    const intervalMs = opts.intervalMs ?? 1000;
    const report = (err: unknown) => opts.onError?.(err);
    let seen = new Set<string>();
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    const poll = async () => {
      try {
        const pending = await this.approvals();
        // Only ids still pending are remembered, so the set stays as small as the queue.
        const next = new Set<string>();
        for (const request of pending) {
          next.add(request.requestId);
          if (stopped || seen.has(request.requestId)) continue;
          Promise.resolve()
            .then(() => cb(request))
            .catch(report);
        }
        seen = next;
      } catch (err) {
        report(err);
      }
      if (!stopped) timer = setTimeout(() => void poll(), intervalMs);
    };
    void poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  /** The sandbox's events in log order, all pages; `types: ['egress', 'secret']` keeps what the egress gateway recorded. */
  async events(opts: EventsOptions = {}): Promise<SandboxEvent[]> {
    const all: SandboxEvent[] = [];
    let afterSeq = opts.afterSeq;
    const type = opts.types?.join(',');
    for (;;) {
      const { events } = await this.controlPlane.json<ControlPlaneReply<'listSandboxEvents'>>('GET', `${sandboxPath(this.id)}/events`, {
        query: { afterSeq, limit: EVENTS_PAGE, type },
      });
      all.push(...events);
      if (events.length < EVENTS_PAGE) return all;
      afterSeq = events[events.length - 1]!.seq;
    }
  }

  /**
   * The sandbox's session as a timeline (see auditTimeline). The filter applies to entries made from the whole log, so a
   * command's entry always carries its exit, and an entry is kept or left out by its start time.
   */
  async audit(filter: AuditFilter = {}): Promise<AuditEntry[]> {
    return filterAudit(auditTimeline(await this.events()), filter);
  }

  /**
   * The sandbox's signed audit export (JSON lines: header, events, trailer), which verifyAuditExport checks offline.
   * `stream: true` gives the bytes as they arrive, for long sessions written to a file.
   */
  async exportAudit(opts?: { stream?: false }): Promise<string>;
  async exportAudit(opts: { stream: true }): Promise<AsyncIterable<Uint8Array>>;
  async exportAudit(opts: { stream?: boolean } = {}): Promise<string | AsyncIterable<Uint8Array>> {
    // The request timeout bounds the wait for the answer to begin, not the streaming of a long session's export.
    const res = await this.controlPlane.request('GET', `${sandboxPath(this.id)}/audit/export`, { stream: opts.stream });
    if (!opts.stream) return res.text();
    return res.body;
  }
}
