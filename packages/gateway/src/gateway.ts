// The node gateway: runs sandbox VMs restored from templates and serves their data plane (commands, files, PTYs).
import { readdirSync, rmSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { SandglassError, lockHome, type Clock, type GatewayApi, type HomeLayout, type Logger, type Timer } from '@sandglass/core';
import { configureJail, killLeftoverVms, type Accel, type AccelChoice, type JailContext } from '@sandglass/vmm';
import type { GuestImage } from '@sandglass/images';
import type { ChunkStore } from '@sandglass/chunkstore';
import type { KeyProvider } from '@sandglass/kms';
import type { RetentionPolicy } from '@sandglass/snapshots';
import { Sandbox, sandboxDir, type HealthPolicy, type SandboxDefaults, type SandboxOptions } from './sandbox.js';
import {
  templateKey,
  templatePrep,
  TemplateStore,
  templateSource,
  vmConfig,
  type TemplateProgress,
  type TemplateRegistry,
  type TemplateSnapshot,
} from './templates.js';
import { checkSize, defaultGuestBudgetMib, nodeSizes, type NodeSizes } from './sizes.js';
import { WarmPool, type Warm } from './pool.js';
import { TemplatePools } from './template-pools.js';
import { defaultImageCacheBytes, RamFiles, reapOrphanRamDirs } from './ram.js';
import type { CaptureGate } from './capture-gate.js';
import { DEFAULT_SNAPSHOT_INTERVAL_S, SnapshotManager, type SnapshotIndex, type SnapshotInfo } from './snapshots.js';
import { EventQuota, type GatewayEvents } from './events.js';
import { NetworkManager, type NetworkSpec, type SecretResolver } from './network.js';
import { DEFAULT_RECORDING_CAP_BYTES, SourceRecording, type ReplayPlan } from './recording.js';
import { RevokedKeys } from './auth.js';
import { OutputHubs } from './output-hub.js';
import { TenantRevocation } from './revocation.js';
import type { PolicyInput, ReplaySource } from '@sandglass/egress';

export const DEFAULT_WARM_POOL = 2;
/** Fork restores in flight at once: each is CPU-bound under TCG, more only queue for the same cores. */
const FORK_CONCURRENCY = 4;
/**
 * How long a create waits for the template of its size to be built. Past it the build goes on without the request
 * and the create answers `template_not_ready` with the build's phase, which the SDK and CLI wait on: well inside the
 * control plane's and the CLI's request timeouts, so no client sees a silent stall (docs/design/sizes.md).
 */
export const TEMPLATE_WAIT_MS = 20_000;
/** A build that failed is answered with its failure for this long, rather than booted again by every retry. */
const BUILD_FAILURE_HOLD_MS = 30_000;

export interface GatewayOptions {
  home: HomeLayout;
  image: GuestImage;
  kernelArgs: string;
  events: GatewayEvents;
  /** Shared with the control plane: verifies data-plane tokens and authenticates the internal API. */
  nodeSecret: Buffer;
  clock: Clock;
  logger: Logger;
  /** The accelerator and CPU model the probe proved for this host (chooseAccel). */
  accel: AccelChoice;
  /**
   * Host memory the node may give to guests; default 75% of the host's RAM less the tmpfs cache ceiling
   * (`imageCacheBytes`), which is host memory too.
   */
  guestMemoryBudgetMib?: number;
  /** Ceiling on the tmpfs caches (template and snapshot RAM images); default `defaultImageCacheBytes()`. */
  imageCacheBytes?: number;
  /** How a hung VM is told from a slow one. */
  health?: HealthPolicy;
  /** How long a create waits for its size's template build before answering `template_not_ready`; default TEMPLATE_WAIT_MS. */
  templateWaitMs?: number;
  /** Restores of the base template kept running and warmed for instant creates; 0 turns the pool off. */
  warmPoolSize?: number;
  /** Where snapshots are stored (chunks and manifests), and what retention reads the committed ones from. */
  store: ChunkStore;
  /**
   * Which snapshot in the store is each template: with it the node publishes the templates it builds and materializes
   * those other nodes built (every node must run the same template bytes). Without it templates stay on this node.
   */
  templateRegistry?: { registry: TemplateRegistry; nodeId: string };
  /** Absent in a cluster, where retention and GC run in the control plane: maintain() then refuses. */
  snapshotIndex?: SnapshotIndex;
  /** In a cluster, the control plane's gate between captures (and template publications) and its GC sweep. */
  captureGate?: CaptureGate;
  retention: RetentionPolicy;
  /** Captures running at once on this node. */
  captureConcurrency?: number;
  /** Where guest RAM files live (tmpfs); default /dev/shm. */
  shmRoot?: string;
  /** Tenant secrets, resolved (and decrypted) only when a request uses them. */
  secrets: SecretResolver;
  /** Egress proxy settings: name resolution and extra upstream CAs (on-prem), approval timeout, exchange recording. */
  egress?: {
    lookup?: (host: string) => Promise<string[]>;
    privateAllow?: string[];
    upstreamCAs?: string[];
    approvalTimeoutMs?: number;
    recordExchanges?: boolean;
  };
  /**
   * Bytes of input content (command specs, stdin, file writes, egress bodies, sync entropy) each sandbox may record
   * for replay; default DEFAULT_RECORDING_CAP_BYTES, 0 turns recording off.
   */
  recordingCapBytes?: number;
  /**
   * The tenants' key provider, asked before every boot and polled for each tenant with plaintext here, so a key
   * revoked on its HSM stops the tenant's sandboxes without an API call. Absent: the chunk store's provider is asked
   * at boots, and nothing is polled.
   */
  keys?: KeyProvider;
  /** How often the provider is polled; default DEFAULT_KEY_POLL_INTERVAL_MS. */
  keyPollIntervalMs?: number;
}

/** Egress bodies up to this size are recorded whole for a replay (the proxy holds them in memory meanwhile). */
const RECORDED_EXCHANGE_BODY_BYTES = 8 * 1024 * 1024;

/**
 * The control plane's side of a request that reaches a sandbox this node does not run, with a credential the node
 * verified for it, passed on as received (an access token or a signed port URL's token): the control plane verifies it
 * again itself (signature, expiry, the API key behind it in the database). `here` when the sandbox runs on this node
 * now (paused and opted in to autoResume: resumed for this request), `elsewhere` when it runs on another node. Throws
 * `sandbox_paused` when it is paused without that opt-in, `sandbox_not_found` for any other (unknown, ended, failed),
 * the credential's refusal, and the resume's own error when that fails.
 */
export interface SandboxWaker {
  wake(sandboxId: string, credential: string): Promise<'here' | 'elsewhere'>;
}

/** What a sandbox's timeout does: end it (sandbox.killed, reason timeout) or pause it (sandbox.paused, reason timeout). */
export type OnTimeout = 'kill' | 'pause';

/** Restoring a snapshot into a sandbox: a resume keeps the sandbox's id, a fork gets a new one. */
export interface RestoreRequest {
  id: string;
  tenantId: string;
  snapshotId: string;
  timeoutS: number;
  snapshotIntervalS?: number;
  /** The network in force now (a resume); absent: the one the snapshot was taken with. */
  network?: PolicyInput;
  secrets?: string[];
  /** The sandbox's own environment variables (a fork: its source's); given at every start, never kept in snapshots. */
  envs?: Record<string, string>;
  /** A fork from a tenant template: the user and workdir its calls default to; absent: the snapshot's. */
  defaults?: SandboxDefaults;
  /** A resume: the guest ports that were public when it stopped (a fork starts with every port private). */
  publicPorts?: number[];
  /** What its timeout does; absent: kill. */
  onTimeout?: OnTimeout;
  /** false: the pause at its timeout keeps the disk alone (its resume is a cold boot); absent: true. */
  onTimeoutKeepMemory?: boolean;
  /** A fork that replays its source: clock, entropy and egress answers from the source's recording. */
  replay?: ReplayPlan;
  /** A fork from a template another tenant published: the tenant whose key the snapshot is stored under. */
  sourceTenantId?: string;
  /** A resume that boots the guest over the snapshot's disk, its memory left unused. */
  coldBoot?: boolean;
}

export interface CreateSandboxRequest {
  id: string;
  tenantId: string;
  template: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
  snapshotIntervalS?: number;
  /** Absent: no network at all. */
  network?: PolicyInput;
  secrets?: string[];
  /** Environment variables for every process; the egress variables win over the same names. */
  envs?: Record<string, string>;
  /** The root disk is made at least this large (MiB) before the create answers; absent: the template's size. */
  diskMib?: number;
  /** What its timeout does; absent: kill. */
  onTimeout?: OnTimeout;
  /** false: the pause at its timeout keeps the disk alone (its resume is a cold boot); absent: true. */
  onTimeoutKeepMemory?: boolean;
  /** A replay from its source's creation: created like the source, then clock, entropy, placeholders and egress from its recording. */
  replay?: ReplayPlan;
}

/** The templates this node knows by name; each is the guest image booted with the request's VM shape. */
export const BASE_TEMPLATE = { name: 'base', memoryMib: 256, vcpus: 1 } as const;

export class Gateway {
  readonly sandboxes = new Map<string, Sandbox>();
  readonly templates: TemplateStore;
  readonly accel: Accel;
  /** The `-cpu` model every VM of this node gets. */
  readonly cpu: string;
  private readonly budgetMib: number;
  /** The memory sizes and vCPU counts this node serves (each is a template of its own). */
  readonly sizes: NodeSizes;
  /** Builds that failed recently, by template key: a retry gets the failure, not another boot. */
  private readonly buildFailures = new Map<string, { err: unknown; atMs: number }>();
  private baseStatus: { status: 'building' | 'ready' | 'failed'; key?: string; error?: string } = { status: 'building' };
  private pool?: WarmPool;
  /** Warm pools of tenant template versions, set by the control plane (PUT /internal/v1/template-pools). */
  readonly templatePools: TemplatePools;
  readonly ram: RamFiles;
  readonly snapshots: SnapshotManager;
  readonly network: NetworkManager;
  /** API keys revoked on the control plane whose access tokens may still be unexpired. */
  readonly revokedKeys = new RevokedKeys();
  /**
   * Guest ports open to requests without a credential, per running sandbox (GuestPorts reads the map once, at build,
   * and answers from it before any handler runs). A run's entry goes with it; a resume (any node) gets its ports back
   * from the control plane, which folds the sandbox's port.visibility events.
   */
  readonly publicPorts = new Map<string, Set<number>>();
  /** Tenants whose key was revoked: their sandboxes stop and their plaintext on this node is wiped. */
  readonly revocation: TenantRevocation;
  readonly jail: JailContext;
  /** Replays running on this node: each fork's source recording, the only content its recording route may read. */
  readonly replays = new Map<string, SourceRecording>();
  /** Commands' recent output, for reconnects that need no guest round trip. */
  readonly outputHubs = new OutputHubs();
  /**
   * Set where the control plane can resume a sandbox for a request: in the same process (`sandglass up`) or over the
   * node API (`sandglass gateway`). Unset, a request for a sandbox this node does not run is told only that.
   */
  waker?: SandboxWaker;
  /** Sandboxes whose restore (resume or fork) is in flight on this node. */
  readonly #restoring = new Set<string>();
  /** One wake in flight per sandbox: every request that arrives meanwhile waits for the same one. */
  readonly #wakes = new Map<string, Promise<'here' | 'elsewhere'>>();
  /**
   * One pause in flight per sandbox: a second one (a client retrying after its timeout, the sandbox's own timeout
   * meeting a user's pause) waits for the same snapshot instead of capturing a VM that the first is ending.
   */
  readonly #pauses = new Map<string, { keepMemory: boolean; done: Promise<SnapshotInfo> }>();

  constructor(readonly opts: GatewayOptions) {
    // Everything that records an event for a sandbox (data plane, egress, commands) goes through its quota.
    this.opts = { ...opts, events: new EventQuota(opts.events, { clock: opts.clock, logger: opts.logger }) };
    this.accel = opts.accel.accel;
    this.cpu = opts.accel.cpu;
    lockHome(opts.home.root);
    this.jail = configureJail({ recordDir: join(opts.home.root, 'vms') });
    if (this.jail.reason) opts.logger.warn({ jail: this.jail.mode }, `VMs are NOT confined: ${this.jail.reason}`);
    if (!this.jail.cgroups) opts.logger.warn({ cgroups: 'off' }, 'SANDGLASS_CGROUPS=off: VMs run WITHOUT memory or CPU limits (development only)');
    this.templates = new TemplateStore(
      opts.home.artifacts,
      opts.image,
      opts.kernelArgs,
      opts.logger,
      opts.templateRegistry && {
        store: opts.store,
        ...opts.templateRegistry,
        gate: opts.captureGate,
        onReplaced: (key) => this.ram.removeTemplateImage(key),
      },
    );
    const imageCacheBytes = opts.imageCacheBytes ?? defaultImageCacheBytes();
    this.budgetMib = opts.guestMemoryBudgetMib ?? defaultGuestBudgetMib(imageCacheBytes);
    this.sizes = nodeSizes({ budgetMib: this.budgetMib, cores: availableParallelism() });
    this.ram = new RamFiles(opts.home.root, opts.shmRoot);
    for (const dir of reapOrphanRamDirs(opts.shmRoot, this.ram.root))
      opts.logger.warn({ dir }, 'removed RAM files a dead server of another home left on tmpfs');
    this.cleanStaleRunDirs();
    this.network = new NetworkManager({
      events: this.opts.events,
      secrets: opts.secrets,
      logger: opts.logger,
      tenantOf: (id) => this.sandboxes.get(id)?.tenantId,
      ...opts.egress,
      // A replay answers requests from the recorded exchanges: with recording on, every exchange is recorded.
      ...(this.recordingCapBytes > 0 ? { recordExchanges: { maxBodyBytes: RECORDED_EXCHANGE_BODY_BYTES } } : {}),
      recorderOf: (id) => this.sandboxes.get(id)?.recorder,
    });
    this.snapshots = new SnapshotManager({
      store: opts.store,
      ram: this.ram,
      events: this.opts.events,
      index: opts.snapshotIndex,
      accel: this.accel,
      cpu: this.cpu,
      clock: opts.clock,
      logger: opts.logger,
      concurrency: opts.captureConcurrency,
      retention: opts.retention,
      gate: opts.captureGate,
      imageCacheBytes,
      diskCacheDir: join(opts.home.root, 'disk-cache'),
      guest: { kernelPath: opts.image.kernelPath, initrdPath: opts.image.initramfsPath, append: opts.kernelArgs, rootfsPath: opts.image.rootfsPath },
    });
    this.templatePools = new TemplatePools({
      manifest: (tenantId, snapshotId) => this.snapshots.manifest(tenantId, snapshotId),
      template: (m) => this.snapshotTemplate(m),
      prepare: (m, dir, template) => this.snapshots.prepareRestore(m, dir, template),
      requireKey: (tenantId) => this.revocation.requireKey(tenantId),
      room: () => this.committedMib() <= this.budgetMib,
      runDir: (id) => sandboxDir(this.opts.home.run, id),
      ram: this.ram,
      logger: opts.logger,
      clock: opts.clock,
    });
    const keys = opts.keys;
    this.revocation = new TenantRevocation({
      sandboxes: this.sandboxes,
      snapshots: this.snapshots,
      pools: this.templatePools,
      verify: async (tenantId) => {
        if (keys?.verify) await keys.verify(tenantId);
        else await opts.store.tenant(tenantId);
      },
      events: this.opts.events,
      clock: opts.clock,
      logger: opts.logger,
      pollIntervalMs: opts.keyPollIntervalMs,
    });
    if (keys) this.revocation.start();
  }

  /**
   * VMs a dead predecessor left running are found by the records their jailers wrote (pid and start time, owner
   * instance), never by what their command lines look like: the home lock taken first means no live gateway serves
   * this home, and a pid whose start time changed is someone else's. Then their directories go.
   */
  private cleanStaleRunDirs(): void {
    for (const k of killLeftoverVms(this.jail)) this.opts.logger.warn(k, 'killed a VM left running by a previous gateway');
    try {
      for (const name of readdirSync(this.opts.home.run)) rmSync(sandboxDir(this.opts.home.run, name), { recursive: true, force: true });
    } catch {
      // No run directory yet.
    }
    // RAM files of those VMs, half-written captures and the caches go: a stopped server holds no host memory.
    this.ram.removeStale();
  }

  async ensureBaseTemplate(onProgress?: (p: TemplateProgress) => void): Promise<TemplateSnapshot> {
    try {
      const t = await this.templates.ensure(BASE_TEMPLATE.name, vmConfig(BASE_TEMPLATE.memoryMib, BASE_TEMPLATE.vcpus, this.accel, this.cpu), onProgress);
      this.baseStatus = { status: 'ready', key: t.key };
      this.pool ??= new WarmPool(
        t,
        this.opts.warmPoolSize ?? DEFAULT_WARM_POOL,
        (id) => sandboxDir(this.opts.home.run, id),
        this.ram,
        this.opts.logger,
        this.opts.clock,
      );
      this.pool.refill();
      return t;
    } catch (err) {
      this.baseStatus = { status: 'failed', error: (err as Error).message };
      throw err;
    }
  }

  listTemplates(): Array<{ name: string; status: 'ready' | 'building' | 'failed'; key?: string; memoryMib: number; vcpus: number; error?: string }> {
    return [{ name: BASE_TEMPLATE.name, memoryMib: BASE_TEMPLATE.memoryMib, vcpus: BASE_TEMPLATE.vcpus, ...this.baseStatus }];
  }

  /** Refuses, before anything is done, a template this node does not have, a base not ready, or a size it does not serve. */
  private requireServed(name: string, memoryMib: number, vcpus: number): void {
    if (name !== BASE_TEMPLATE.name) {
      throw new SandglassError('template_not_found', `No template named ${JSON.stringify(name)} on this node.`, { details: { field: 'template' } });
    }
    if (this.baseStatus.status !== 'ready') throw new SandglassError('template_not_ready', `Template ${name} is ${this.baseStatus.status}.`);
    checkSize(this.sizes, memoryMib, vcpus);
  }

  /**
   * The template `name` in a VM shape, within a bounded wait: a size this node does not serve is refused at once, a
   * size not built yet starts (or joins) its build, which runs on without the caller; one not done within
   * `templateWaitMs` answers `template_not_ready` with its phase and elapsed time, for the caller to retry.
   */
  async templateFor(name: string, memoryMib: number, vcpus: number): Promise<TemplateSnapshot> {
    this.requireServed(name, memoryMib, vcpus);
    const config = vmConfig(memoryMib, vcpus, this.accel, this.cpu);
    const key = templateKey(this.opts.image, config, this.opts.kernelArgs);
    const failed = this.buildFailures.get(key);
    if (failed && this.opts.clock.nowMs() - failed.atMs < BUILD_FAILURE_HOLD_MS && !this.templates.building(config)) throw failed.err;
    const build = this.templates.ensure(name, config);
    // Whoever waits on it or not: a failure is kept for the retries that follow (and the build logged it).
    build.then(
      () => this.buildFailures.delete(key),
      (err: unknown) => this.buildFailures.set(key, { err, atMs: this.opts.clock.nowMs() }),
    );
    let timer: Timer | undefined;
    const waited = new Promise<undefined>((resolve) => {
      timer = this.opts.clock.setTimeout(() => resolve(undefined), this.opts.templateWaitMs ?? TEMPLATE_WAIT_MS);
    });
    const t = await Promise.race([build, waited]).finally(() => timer?.cancel());
    if (t) return t;
    const b = this.templates.building(config);
    const phase = b?.phase ?? 'start';
    const elapsedMs = b?.elapsedMs ?? 0;
    throw new SandglassError(
      'template_not_ready',
      `The ${memoryMib} MiB, ${vcpus} vCPU ${name} template is being built on this node (${phase}, ${Math.round(elapsedMs / 1000)} s so far); ` +
        'the build goes on without this request: retry shortly.',
      { details: { template: name, memoryMib, vcpus, phase, elapsedMs } },
    );
  }

  private committedMib(): number {
    let sum = 0;
    for (const s of this.sandboxes.values()) sum += s.template.config.memoryMib;
    return sum + this.warmAvailable * BASE_TEMPLATE.memoryMib + this.templatePools.committedMib();
  }

  async createSandbox(req: CreateSandboxRequest): Promise<Sandbox> {
    this.requireServed(req.template, req.memoryMib, req.vcpus);
    if (this.sandboxes.has(req.id)) throw new SandglassError('conflict', `Sandbox ${req.id} already exists on this node.`);
    // A warm-pool VM needs no key, but a tenant whose key is revoked or unreachable gets no sandbox.
    await this.revocation.requireKey(req.tenantId);
    if (this.committedMib() + req.memoryMib > this.budgetMib) {
      throw new SandglassError(
        'capacity_exhausted',
        `This node has ${this.budgetMib - this.committedMib()} MiB of guest memory left; ${req.memoryMib} MiB asked.`,
      );
    }
    await this.network.validate(req.tenantId, req.network, req.secrets ?? []);
    if (req.diskMib !== undefined) await this.requireDiskRoom(req.diskMib);
    const replay = req.replay && (await this.replayStart(req.tenantId, req.replay));
    // A VM shape other than the template's own is its own template snapshot, booted once and then reused; the control
    // plane asked for it first (templateFor), so this wait is bounded too.
    const template = await this.templateFor(req.template, req.memoryMib, req.vcpus);
    const warm = this.baseStatus.key === template.key ? this.pool?.take() : undefined;
    const dir = warm?.dir ?? sandboxDir(this.opts.home.run, req.id);
    const sbx = this.newSandbox(req.id, req.tenantId, template, dir, req.timeoutS, req.snapshotIntervalS, replay?.sync, req);
    this.sandboxes.set(req.id, sbx);
    if (replay) this.replays.set(req.id, replay.source);
    const { restoreMs, pooled } = await sbx.start(warm ? { warm } : { source: () => templateSource(template, this.ram) });
    if (req.diskMib !== undefined) await this.growDisk(sbx, req.diskMib);
    const fresh = this.network.newSpec(req.network, req.secrets ?? []);
    const network = replay ? { ...fresh, placeholders: { ...fresh.placeholders, ...replay.placeholders }, replayOf: replay.source.sourceSandboxId } : fresh;
    await this.connectNetwork(sbx, network, req.envs, replay && req.replay ? replay.source.answers(req.replay.exchanges) : undefined);
    this.snapshots.track(sbx);
    // What a replay from creation hands its guest again; in the recording like the entropy, the log names it by content id.
    const placeholders = network.secrets.length > 0 ? sbx.recorder?.content(Buffer.from(JSON.stringify(network.placeholders))) : undefined;
    await this.opts.events.append({
      type: 'sandbox.started',
      tenantId: req.tenantId,
      sandboxId: req.id,
      // vmId names the QEMU process (`-name sandglass-<vmId>`): the sandbox id, or the warm-pool entry it came from.
      data: {
        pid: sbx.pid ?? null,
        vmId: warm?.id ?? req.id,
        restoreMs: Math.round(restoreMs * 10) / 10,
        pooled,
        template: template.key,
        accel: this.accel,
        ...(placeholders?.contentId ? { placeholdersContentId: placeholders.contentId } : {}),
      },
    });
    if (replay) {
      await this.opts.events.append({
        type: 'sandbox.forked',
        tenantId: req.tenantId,
        sandboxId: req.id,
        data: {
          snapshotId: null,
          sourceSandboxId: replay.source.sourceSandboxId,
          network: network.policy ?? null,
          secrets: network.secrets,
          replayOf: replay.source.sourceSandboxId,
        },
      });
    }
    return sbx;
  }

  /**
   * What a replay needs of its source's recording before anything starts: the recording itself (refused when there
   * is none), the source's clock and entropy at the start point, and for a replay from creation its placeholders.
   */
  private async replayStart(
    tenantId: string,
    plan: ReplayPlan,
    takenAt?: string,
  ): Promise<{ source: SourceRecording; sync: NonNullable<SandboxOptions['replaySync']>; placeholders: Record<string, string> }> {
    // The source's last inputs may still be on their way into its recording (a source running here): commit them first.
    await this.sandboxes.get(plan.sourceSandboxId)?.recorder?.flush();
    const source = await SourceRecording.open(this.opts.store, tenantId, plan.sourceSandboxId);
    const sync = {
      sourceSandboxId: source.sourceSandboxId,
      timeUnixNs: plan.sync ? BigInt(plan.sync.timeUnixNs) : BigInt(takenAt !== undefined ? Date.parse(takenAt) : this.opts.clock.nowMs()) * 1_000_000n,
      entropy: plan.sync ? await source.read(plan.sync.entropyContentId) : Buffer.alloc(64),
    };
    let placeholders: Record<string, string> = {};
    if (plan.placeholdersContentId !== undefined) {
      const parsed: unknown = JSON.parse((await source.read(plan.placeholdersContentId)).toString('utf8'));
      if (typeof parsed !== 'object' || parsed === null || Object.values(parsed).some((v) => typeof v !== 'string')) {
        throw new SandglassError('invalid_argument', `Content ${plan.placeholdersContentId} is not a recording of placeholders.`, {
          details: { field: 'replay.placeholdersContentId' },
        });
      }
      placeholders = parsed as Record<string, string>;
    }
    return { source, sync, placeholders };
  }

  /**
   * A restored sandbox keeps its placeholders (its processes hold them) and stays a replay's if it was one; a resume
   * brings the policy in force now.
   */
  private restoredNetwork(saved: NetworkSpec | undefined, req: RestoreRequest): NetworkSpec {
    if (req.network === undefined && req.secrets === undefined) return saved ?? this.network.newSpec(undefined, []);
    const fresh = this.network.newSpec(req.network, req.secrets ?? saved?.secrets ?? []);
    return { ...fresh, placeholders: { ...fresh.placeholders, ...saved?.placeholders }, ...(saved?.replayOf ? { replayOf: saved.replayOf } : {}) };
  }

  /**
   * Disks are thin, but a sandbox asking for more disk than the node has free could fill it (and every other
   * sandbox's snapshots with it) by writing what it asked for: such a create is refused as out of capacity. Checked
   * per create against what is free now, not against what running sandboxes could still write (a commitment of
   * every disk in full would refuse most creates of a busy node).
   */
  private async requireDiskRoom(diskMib: number): Promise<void> {
    const fs = await statfs(this.opts.home.run);
    const freeMib = Math.floor((fs.bavail * fs.bsize) / (1024 * 1024));
    if (freeMib < diskMib) {
      throw new SandglassError('capacity_exhausted', `This node has ${freeMib} MiB of disk free; a ${diskMib} MiB disk was asked for.`, {
        details: { field: 'diskMib' },
      });
    }
  }

  /** Gives a started sandbox the root disk it asked for; if that fails the sandbox fails with it. */
  private async growDisk(sbx: Sandbox, diskMib: number): Promise<void> {
    try {
      await sbx.growDisk(diskMib * 1024 * 1024);
    } catch (err) {
      await sbx.fail(`growing the sandbox's disk to ${diskMib} MiB failed: ${(err as Error).message}`);
      throw err;
    }
  }

  /** Gives a started sandbox its network; if that fails the sandbox fails with it (it would not be what was asked). */
  private async connectNetwork(sbx: Sandbox, spec: NetworkSpec, envs: Record<string, string> = {}, replay?: ReplaySource): Promise<void> {
    sbx.assignNetwork(spec);
    try {
      await this.network.attach(sbx.id, sbx.tenantId, sbx.requireRunning(), spec, envs, replay);
    } catch (err) {
      await sbx.fail(`setting up the sandbox's network failed: ${(err as Error).message}`);
      throw err;
    }
  }

  get recordingCapBytes(): number {
    return this.opts.recordingCapBytes ?? DEFAULT_RECORDING_CAP_BYTES;
  }

  private newSandbox(
    id: string,
    tenantId: string,
    template: TemplateSnapshot,
    dir: string,
    timeoutS: number,
    snapshotIntervalS?: number,
    replaySync?: SandboxOptions['replaySync'],
    lifecycle: { onTimeout?: OnTimeout; onTimeoutKeepMemory?: boolean } = {},
  ): Sandbox {
    return new Sandbox({
      id,
      tenantId,
      template,
      dir,
      timeoutS,
      snapshotIntervalS: snapshotIntervalS ?? DEFAULT_SNAPSHOT_INTERVAL_S,
      events: this.opts.events,
      clock: this.opts.clock,
      logger: this.opts.logger,
      ram: this.ram,
      onGone: (s) => {
        this.sandboxes.delete(s.id);
        this.publicPorts.delete(s.id);
        this.replays.delete(s.id);
        this.outputHubs.dropSandbox(s.id);
        this.network.detach(s.id);
        void this.snapshots.untrack(s.id);
      },
      health: this.opts.health,
      ...(lifecycle.onTimeout === 'pause'
        ? { onExpiry: (s: Sandbox) => this.pauseSandbox(s.id, 'timeout', { keepMemory: lifecycle.onTimeoutKeepMemory !== false }) }
        : {}),
      ...(this.recordingCapBytes > 0 ? { recording: { store: this.opts.store, capBytes: this.recordingCapBytes } } : {}),
      ...(replaySync ? { replaySync } : {}),
    });
  }

  /**
   * Brings a snapshot back as a running sandbox: `resume` (same id, its commands and streams continue) or a fork
   * (new id). RAM, devices and disk are exactly the snapshot's; the agent then re-seeds entropy and sets the clock.
   */
  async restoreSandbox(req: RestoreRequest, kind: 'resume' | 'fork', sourceSandboxId?: string): Promise<Sandbox> {
    // Claimed before the first await: two resumes of one sandbox at once (two callers, a wake and a caller) would
    // otherwise both restore into its one run directory and break it.
    if (this.sandboxes.has(req.id) || this.#restoring.has(req.id)) {
      throw new SandglassError(kind === 'resume' ? 'sandbox_running' : 'conflict', `Sandbox ${req.id} is already running on this node.`);
    }
    this.#restoring.add(req.id);
    try {
      return await this.#restore(req, kind, sourceSandboxId);
    } finally {
      this.#restoring.delete(req.id);
    }
  }

  async #restore(req: RestoreRequest, kind: 'resume' | 'fork', sourceSandboxId?: string): Promise<Sandbox> {
    await this.revocation.requireKey(req.tenantId);
    // A published template's snapshot is read under its publisher's key, which must be in force too; what the new
    // sandbox captures is its own tenant's alone (foreign, below).
    const storedUnder = req.sourceTenantId ?? req.tenantId;
    const foreign = storedUnder !== req.tenantId;
    if (foreign && (kind !== 'fork' || req.replay !== undefined || req.network === undefined)) {
      throw new SandglassError('invalid_argument', 'sourceTenantId is for a create from a published template only (a fork with its own network, no replay).', {
        details: { field: 'sourceTenantId' },
      });
    }
    if (foreign) await this.revocation.requireKey(storedUnder).catch(hidePublisher);
    const manifest = await this.snapshots.manifest(storedUnder, req.snapshotId).catch(foreign ? hidePublisher : rethrow);
    // A cold boot reads the snapshot as a disk-only one: its disk is booted, its memory and device state are not read.
    const m = kind === 'resume' && req.coldBoot === true ? { ...manifest, diskOnly: true as const } : manifest;
    if (kind === 'resume' && m.sandboxId !== req.id) {
      throw new SandglassError('snapshot_not_found', `Snapshot ${req.snapshotId} is not a snapshot of sandbox ${req.id}; fork it instead.`, {
        details: { field: 'snapshotId' },
      });
    }
    // A create from a tenant template (a fork given its own network, no replay) takes a VM its pool restored from this
    // very snapshot of this very tenant; out of the pool, it counts as nobody's until the sandbox below holds it.
    const taken = kind === 'fork' && req.replay === undefined && req.network !== undefined ? this.templatePools.take(storedUnder, req.snapshotId) : undefined;
    let template: TemplateSnapshot;
    let replay: Awaited<ReturnType<Gateway['replayStart']>> | undefined;
    try {
      if (this.committedMib() + m.vm.memoryMib > this.budgetMib) {
        throw new SandglassError(
          'capacity_exhausted',
          `This node has ${this.budgetMib - this.committedMib()} MiB of guest memory left; ${m.vm.memoryMib} MiB asked.`,
        );
      }
      template = taken?.warm.template ?? (await this.snapshotTemplate(m));
      // A replay re-runs the recorded inputs against the snapshot's processes; a disk-only snapshot has none to re-run them on.
      if (kind === 'fork' && req.replay && m.diskOnly) {
        throw new SandglassError(
          'invalid_argument',
          `Snapshot ${req.snapshotId} is disk-only (its memory was discarded at a pause); a replay needs a snapshot with memory.`,
          { details: { field: 'replay' } },
        );
      }
      // A replay reads only its source's recording: refused before anything starts when there is none.
      replay = kind === 'fork' && req.replay ? await this.replayStart(req.tenantId, req.replay, m.takenAt) : undefined;
    } catch (err) {
      await taken?.drop();
      throw err;
    }
    const warm: Warm | undefined = taken?.warm;
    const dir = warm?.dir ?? sandboxDir(this.opts.home.run, req.id);
    const source = replay?.source;
    const sbx = this.newSandbox(req.id, req.tenantId, template, dir, req.timeoutS, req.snapshotIntervalS, replay?.sync, req);
    if (kind === 'resume' && req.publicPorts !== undefined && req.publicPorts.length > 0) this.publicPorts.set(req.id, new Set(req.publicPorts));
    this.sandboxes.set(req.id, sbx);
    if (source) this.replays.set(req.id, source);
    const t0 = performance.now();
    let prepared: Awaited<ReturnType<SnapshotManager['prepareRestore']>> | undefined;
    try {
      prepared =
        warm?.prepared ??
        (await this.snapshots.prepareRestore(m, dir, template, foreign ? { forTenant: req.tenantId } : {}).catch(foreign ? hidePublisher : rethrow));
      // Killed while its files were written (a revocation waits for them, then wipes them): it never boots.
      sbx.abortIfEnded();
    } catch (err) {
      this.sandboxes.delete(req.id);
      this.publicPorts.delete(req.id);
      await taken?.drop();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    // Chunk ids are keyed per tenant and the publisher's chunks are sealed under its key: a capture incremental to the
    // publisher's snapshot would name chunks this tenant's store does not hold (and cannot read). The first capture of
    // a sandbox from a published template stores all of it under its own tenant's key instead.
    sbx.adoptSnapshot(foreign ? { commands: prepared.commands } : prepared);
    sbx.setDefaults(req.defaults ?? prepared.defaults ?? {});
    // A pooled VM is handed over as a warm template restore is: the start re-seeds its entropy and sets its clock.
    const { restoreMs, pooled } = await sbx.start(warm ? { warm } : { source: async () => prepared!.source });
    const restored = this.restoredNetwork(prepared.network, req);
    const network = source ? { ...restored, replayOf: source.sourceSandboxId } : restored;
    await this.connectNetwork(sbx, network, req.envs, source && req.replay ? source.answers(req.replay.exchanges) : undefined);
    this.snapshots.track(sbx);
    const timing = {
      restoreMs: Math.round(restoreMs * 10) / 10,
      prepareMs: Math.round((performance.now() - t0 - restoreMs) * 10) / 10,
      // A disk-only snapshot's guest was booted, not restored: its processes are gone.
      ...(m.diskOnly ? { coldBoot: true } : {}),
    };
    if (kind === 'resume') {
      await this.opts.events.append({
        type: 'sandbox.resumed',
        tenantId: req.tenantId,
        sandboxId: req.id,
        // A resume the control plane made for a request to the paused sandbox (autoResume) says so.
        data: { snapshotId: req.snapshotId, pid: sbx.pid ?? null, ...timing, ...(this.#wakes.has(req.id) ? { trigger: 'request' } : {}) },
      });
    } else {
      await this.opts.events.append({
        type: 'sandbox.started',
        tenantId: req.tenantId,
        sandboxId: req.id,
        data: { pid: sbx.pid ?? null, vmId: warm?.id ?? req.id, pooled, template: template.key, accel: this.accel, ...timing },
      });
      // The fork's own network (its snapshot's): the source's policy may have changed since that snapshot was taken.
      await this.opts.events.append({
        type: 'sandbox.forked',
        tenantId: req.tenantId,
        sandboxId: req.id,
        data: {
          snapshotId: req.snapshotId,
          sourceSandboxId: sourceSandboxId ?? m.sandboxId,
          network: network.policy ?? null,
          secrets: network.secrets,
          ...(source ? { replayOf: source.sourceSandboxId } : {}),
        },
      });
    }
    return sbx;
  }

  /** The template a snapshot sits on, from this node or the template registry. */
  private async snapshotTemplate(m: Awaited<ReturnType<SnapshotManager['manifest']>>): Promise<TemplateSnapshot> {
    const template = await this.templates.byKey(m.vm.templateKey);
    if (!template) {
      throw new SandglassError(
        'template_not_found',
        `Snapshot ${m.snapshotId} sits on template ${m.vm.template} (${m.vm.templateKey}), which neither this node nor the template registry has.`,
      );
    }
    return template;
  }

  /** `compact`: the guest first runs a template's memory prep, so the snapshot's RAM holds only its live pages. */
  async snapshotSandbox(id: string, name: string | null, opts: { compact?: boolean } = {}): Promise<SnapshotInfo> {
    const sbx = this.get(id);
    sbx.requireRunning();
    const prep = opts.compact === true ? templatePrep(this.accel) : undefined;
    if (prep !== undefined) await sbx.runInternal(['/bin/sh', '-c', prep], 120_000);
    return this.snapshots.snapshotNow(sbx, 'manual', name);
  }

  /**
   * Snapshots the sandbox and releases its VM: a paused sandbox holds no RAM or CPU, only its snapshots. `keepMemory:
   * false` keeps its disk alone (its processes are lost; the resume boots the guest over that disk).
   */
  async pauseSandbox(id: string, reason?: 'timeout', opts: { keepMemory?: boolean } = {}): Promise<SnapshotInfo> {
    const keepMemory = opts.keepMemory !== false;
    const inFlight = this.#pauses.get(id);
    if (inFlight !== undefined) {
      if (inFlight.keepMemory !== keepMemory) {
        throw new SandglassError(
          'conflict',
          `Sandbox ${id} is being paused ${inFlight.keepMemory ? 'with' : 'without'} its memory; wait for that pause to end.`,
          { details: { field: 'keepMemory' } },
        );
      }
      return inFlight.done;
    }
    const sbx = this.get(id);
    sbx.requireRunning();
    const done = this.pauseOnce(sbx, reason, keepMemory);
    this.#pauses.set(id, { keepMemory, done });
    try {
      return await done;
    } finally {
      this.#pauses.delete(id);
    }
  }

  private async pauseOnce(sbx: Sandbox, reason: 'timeout' | undefined, keepMemory: boolean): Promise<SnapshotInfo> {
    const id = sbx.id;
    // No rolling capture may land after the pause snapshot: stop the schedule (waiting out one in flight) first.
    await this.snapshots.untrack(id);
    let snap: SnapshotInfo;
    try {
      snap = await this.snapshots.captureNow(sbx, 'pause', { memory: keepMemory });
    } catch (err) {
      if (sbx.state === 'running') this.snapshots.track(sbx);
      throw err;
    }
    await sbx.end('paused');
    await this.opts.events.append({
      type: 'sandbox.paused',
      tenantId: sbx.tenantId,
      sandboxId: id,
      data: { snapshotId: snap.id, ...(reason === undefined ? {} : { reason }), ...(keepMemory ? {} : { memory: false }) },
    });
    return snap;
  }

  /**
   * Starts forks of one snapshot, a few restores at a time (each is CPU-bound under TCG). Every fork that fails is
   * recorded as failed and reported in place; the others run.
   */
  async forkSandboxes(
    snapshotId: string,
    tenantId: string,
    forks: Array<{ id: string; timeoutS: number; snapshotIntervalS: number; onTimeout?: OnTimeout; onTimeoutKeepMemory?: boolean }>,
    opts: {
      envs?: Record<string, string>;
      replay?: ReplayPlan;
      /** A create from a tenant template: the new sandbox's own network, not the snapshot's. */
      egress?: { network: PolicyInput; secrets: string[] };
      /** A create from a tenant template: the template's user and workdir, not the snapshot's. */
      defaults?: SandboxDefaults;
      /** A create from a template another tenant published: the tenant whose key the snapshot is stored under. */
      sourceTenantId?: string;
    } = {},
  ): Promise<Array<Sandbox | GatewayApi.components['schemas']['NodeForkFailure']>> {
    const foreign = opts.sourceTenantId !== undefined && opts.sourceTenantId !== tenantId;
    const m = await this.snapshots.manifest(opts.sourceTenantId ?? tenantId, snapshotId).catch(foreign ? hidePublisher : rethrow);
    const results: Array<Sandbox | GatewayApi.components['schemas']['NodeForkFailure']> = new Array(forks.length);
    let next = 0;
    const worker = async () => {
      while (next < forks.length) {
        const i = next++;
        const f = forks[i]!;
        try {
          const sbx = await this.restoreSandbox(
            {
              id: f.id,
              tenantId,
              snapshotId,
              timeoutS: f.timeoutS,
              snapshotIntervalS: f.snapshotIntervalS,
              ...(f.onTimeout === undefined ? {} : { onTimeout: f.onTimeout }),
              ...(f.onTimeoutKeepMemory === undefined ? {} : { onTimeoutKeepMemory: f.onTimeoutKeepMemory }),
              ...(opts.envs === undefined ? {} : { envs: opts.envs }),
              ...(opts.replay === undefined ? {} : { replay: opts.replay }),
              ...(opts.egress === undefined ? {} : opts.egress),
              ...(opts.defaults === undefined ? {} : { defaults: opts.defaults }),
              ...(opts.sourceTenantId === undefined || opts.sourceTenantId === tenantId ? {} : { sourceTenantId: opts.sourceTenantId }),
            },
            'fork',
            m.sandboxId,
          );
          results[i] = sbx;
        } catch (err) {
          const e = err instanceof SandglassError ? err : new SandglassError('internal', (err as Error).message);
          await this.opts.events.append({ type: 'sandbox.failed', tenantId, sandboxId: f.id, data: { reason: e.message, code: e.code } });
          results[i] = { id: f.id, error: { code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) } };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(FORK_CONCURRENCY, forks.length) }, worker));
    return results;
  }

  async deleteSnapshot(tenantId: string, snapshotId: string): Promise<void> {
    const m = await this.snapshots.manifest(tenantId, snapshotId);
    await this.snapshots.delete(tenantId, m.sandboxId, snapshotId, 'user');
  }

  setNetwork(id: string, policy: PolicyInput): void {
    const sbx = this.get(id);
    sbx.requireRunning();
    this.network.setPolicy(id, policy);
    sbx.policyChanged(policy);
  }

  setSnapshotInterval(id: string, intervalS: number, opts: { bestEffort?: boolean } = {}): void {
    this.snapshots.setInterval(this.get(id), intervalS, opts);
  }

  /** Warmed restores ready to hand out. */
  get warmAvailable(): number {
    return this.pool?.available ?? 0;
  }

  /**
   * The sandbox a request whose credential (`credential`, as received) the caller verified for `id` reaches: the one on
   * this node, else — asked of the control plane, one wake at a time per sandbox — a paused one resumed for it, or
   * `sandbox_paused`; one that runs on another node is not found here, as without a waker.
   */
  async reach(id: string, credential: string): Promise<Sandbox> {
    const local = this.sandboxes.get(id);
    if (local?.state === 'paused') throw pausedError(id);
    if (local || !this.waker) return this.get(id);
    let wake = this.#wakes.get(id);
    if (!wake) {
      wake = this.waker.wake(id, credential).finally(() => this.#wakes.delete(id));
      this.#wakes.set(id, wake);
    }
    if ((await wake) === 'elsewhere')
      throw new SandglassError('sandbox_not_found', `Sandbox ${id} runs on another node; GET /v1/sandboxes/${id} names its gateway.`, {
        details: { field: 'id' },
      });
    return this.get(id);
  }

  get(id: string): Sandbox {
    const sbx = this.sandboxes.get(id);
    if (!sbx) throw new SandglassError('sandbox_not_found', `No sandbox ${id} is running on this node.`, { details: { field: 'id' } });
    return sbx;
  }

  async killSandbox(id: string): Promise<void> {
    const sbx = this.sandboxes.get(id);
    if (sbx) await sbx.end('killed');
  }

  /** Guest memory this node admits in all, and what admission has left (warm-pool VMs count as taken). */
  memory(): { capacityMib: number; freeMib: number } {
    return { capacityMib: this.budgetMib, freeMib: Math.max(0, this.budgetMib - this.committedMib()) };
  }

  /**
   * Stops every sandbox's VM at once, without a snapshot and without an event: the control plane fenced this node
   * and may already run them elsewhere, where their history continues.
   */
  async evictAll(): Promise<void> {
    await Promise.all([...this.sandboxes.values()].map((s) => s.end('killed')));
  }

  /**
   * Stops every VM cleanly. `end: true` (one node, the default) records each sandbox as killed (`shutdown`); in a
   * cluster (`end: false`) nothing is recorded, so the control plane moves the sandboxes to another node from their
   * newest snapshot instead of ending them.
   */
  async shutdown(opts: { end?: boolean } = {}): Promise<void> {
    this.revocation.stop();
    await this.snapshots.stop();
    await this.pool?.close();
    await this.templatePools.close();
    // A build in flight is stopped and its temporary directory removed: a stopped node leaves no half template.
    await this.templates.close();
    if (opts.end === false) await this.evictAll();
    else await Promise.all([...this.sandboxes.values()].map((s) => s.end('shutdown')));
    // Every VM is down: the caches on tmpfs are host memory no one will use until the next start rebuilds them.
    this.ram.release();
  }
}

const rethrow = (err: unknown): never => {
  throw err;
};

/**
 * A failure to read a published template under its publisher's key, as the tenant creating from it may see it: the
 * code, never the publisher's tenant id or its provider's words (they go to the log as the cause).
 */
const hidePublisher = (err: unknown): never => {
  if (err instanceof SandglassError && (err.code === 'key_revoked' || err.code === 'key_unavailable')) {
    throw new SandglassError(err.code, 'The key of the tenant that published this template cannot be used; sandboxes cannot be created from it now.', {
      cause: err,
    });
  }
  throw err;
};

function pausedError(id: string): SandglassError {
  return new SandglassError(
    'sandbox_paused',
    `Sandbox ${id} is paused; resume it (POST /v1/sandboxes/${id}/resume, sbx.resume()), or create it with autoResume so that a request with its access token resumes it.`,
  );
}
