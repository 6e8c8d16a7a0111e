// One running sandbox on this node: its VM, its agent connection, its commands, its deadline and its health.
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { failpoint, invalidArgument, newId, SandglassError, type Clock, type EventData, type EventType, type Logger, type Timer } from '@sandglass/core';
import type { Vm } from '@sandglass/vmm';
import type { AgentClient, InputResult, ProtocolViolation, SignalName } from '@sandglass/agent-client';
import type { ChunkStore } from '@sandglass/chunkstore';
import type { PolicyInput } from '@sandglass/egress';
import { mapAgentError, runToExit } from './agent-link.js';
import { restoreSnapshot, type Restored, type RestoreSource } from './restore.js';
import type { RamFiles } from './ram.js';
import type { NetworkSpec } from './network.js';
import type { TemplateSnapshot } from './templates.js';
import type { GatewayEvents } from './events.js';
import { SandboxFiles } from './files.js';
import { guestPath } from './paths.js';
import { METRICS_INTERVAL_MS, MetricsSeries } from './metrics.js';
import { Recorder, type ContentRef } from './recording.js';

export interface CommandRecord {
  id: string;
  pid: number;
  argv: string[];
  cwd?: string;
  pty: boolean;
  state: 'running' | 'exited';
  exitCode?: number | null;
  signal?: string | null;
  timedOut: boolean;
  outputBytes: number;
  startedAt: string;
  endedAt?: string;
}

export interface StartCommand {
  argv: string[];
  cwd?: string;
  envs?: Record<string, string>;
  user?: string;
  stdin?: boolean;
  pty?: { cols: number; rows: number };
  timeoutMs?: number;
}

export type SandboxState = 'starting' | 'running' | 'paused' | 'ended' | 'failed';

/** What the node remembers between a sandbox's snapshots: the last one, so the next stores only what changed. */
export interface CaptureBase {
  snapshotId: string;
  memory: string[];
  disk: Map<number, string>;
  /**
   * The sandbox's lowest private disk layer once a capture has read it in this VM: later captures read only the
   * layers above it and merge them into it. Unset until then (first capture after a create or restore reads all).
   */
  baseLayer?: string;
}

export interface HealthPolicy {
  intervalMs: number;
  timeoutMs: number;
  /** Consecutive unanswered pings before the sandbox is declared hung. */
  misses: number;
}

// Under TCG a loaded host can stall a guest for seconds; only a long silence means it hung.
export const DEFAULT_HEALTH: HealthPolicy = { intervalMs: 5_000, timeoutMs: 20_000, misses: 3 };

export interface SandboxOptions {
  id: string;
  tenantId: string;
  template: TemplateSnapshot;
  /** Its run directory (VM files, disk layers): removed when the sandbox releases its VM. */
  dir: string;
  timeoutS: number;
  snapshotIntervalS: number;
  events: GatewayEvents;
  /** Its deadline, health checks and command timeouts run on this clock's timers. */
  clock: Clock;
  logger: Logger;
  ram: RamFiles;
  /** Called once, when it is gone (ended, failed or paused): the node forgets it. */
  onGone: (sbx: Sandbox) => void;
  /** What its timeout does instead of ending it (a pause); should that fail while it still runs, it ends as usual. */
  onExpiry?: (sbx: Sandbox) => Promise<unknown>;
  health?: HealthPolicy;
  /** Where its inputs' bytes are recorded, up to capBytes; absent: nothing is recorded (events still name the inputs). */
  recording?: { store: ChunkStore; capBytes: number };
  /** A replay's fork: the guest's clock and entropy come from the source's recording instead of fresh. */
  replaySync?: { timeUnixNs: bigint; entropy: Buffer; sourceSandboxId: string };
}

/** An input to a running command, as the recording keeps it. */
export type CommandInput =
  | { kind: 'stdin'; data: Buffer; eof: boolean }
  | { kind: 'signal'; signal: SignalName }
  | { kind: 'resize'; cols: number; rows: number };

/**
 * What a sandbox's calls default to when they name no user or directory: a template's USER and WORKDIR. A call's own
 * user and cwd win; a relative path is taken under `workdir`. Kept in its snapshots, so resumes and forks keep them.
 */
export interface SandboxDefaults {
  user?: string;
  workdir?: string;
}

/** Defaults read from the node API or a snapshot manifest: the workdir is a guest path like any other (paths.ts). */
export function checkDefaults(value: SandboxDefaults, field = 'defaults'): SandboxDefaults {
  if (value.user !== undefined && !/^[a-z_][a-z0-9_-]{0,63}$/.test(value.user)) throw invalidArgument(`${field}.user`, 'a guest user name');
  return {
    ...(value.user === undefined ? {} : { user: value.user }),
    ...(value.workdir === undefined ? {} : { workdir: guestPath(value.workdir, `${field}.workdir`) }),
  };
}

/**
 * The sandbox owns its state: only its own methods move `state`, set the VM and agent, the network it was given
 * and the base of its next capture; everyone else reads them.
 */
export class Sandbox {
  readonly id: string;
  readonly tenantId: string;
  readonly template: TemplateSnapshot;
  readonly dir: string;
  readonly startedAt: string;
  readonly commands = new Map<string, CommandRecord>();
  readonly files: SandboxFiles;
  readonly metrics = new MetricsSeries();
  #state: SandboxState = 'starting';
  #vm?: Vm;
  #agent?: AgentClient;
  #network?: NetworkSpec;
  #defaults: SandboxDefaults = {};
  #captureBase?: CaptureBase;
  #expiresAtMs: number;
  #snapshotIntervalS: number;
  #failureReason?: string;
  #recorder?: Recorder;
  #startup?: Promise<void>;
  private readonly recordingOpts?: SandboxOptions['recording'];
  private readonly replaySync?: SandboxOptions['replaySync'];
  /** Commands whose proc.start is in flight, with their exit event if it came first. */
  private readonly starting = new Map<string, Record<string, unknown> | undefined>();
  private timeoutTimer?: Timer;
  private healthTimer?: Timer;
  private metricsTimer?: Timer;
  private readonly commandTimers = new Map<string, Timer>();
  private ending?: Promise<void>;
  private readonly events: GatewayEvents;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly ram: RamFiles;
  private readonly onGone: (sbx: Sandbox) => void;
  private readonly onExpiry?: SandboxOptions['onExpiry'];
  private readonly health: HealthPolicy;

  constructor(opts: SandboxOptions) {
    this.id = opts.id;
    this.tenantId = opts.tenantId;
    this.template = opts.template;
    this.dir = opts.dir;
    this.events = opts.events;
    this.clock = opts.clock;
    this.log = opts.logger;
    this.ram = opts.ram;
    this.onGone = opts.onGone;
    this.onExpiry = opts.onExpiry;
    this.health = opts.health ?? DEFAULT_HEALTH;
    this.recordingOpts = opts.recording;
    this.replaySync = opts.replaySync;
    this.#snapshotIntervalS = opts.snapshotIntervalS;
    this.startedAt = new Date(opts.clock.nowMs()).toISOString();
    this.#expiresAtMs = opts.clock.nowMs() + opts.timeoutS * 1000;
    this.files = new SandboxFiles({
      requireRunning: () => this.requireRunning(),
      record: (type, data) => this.record(type, data),
      recorder: () => this.#recorder,
    });
  }

  get state(): SandboxState {
    return this.#state;
  }

  get vm(): Vm | undefined {
    return this.#vm;
  }

  get failureReason(): string | undefined {
    return this.#failureReason;
  }

  /** Its recording while it runs (absent when recording is off). */
  get recorder(): Recorder | undefined {
    return this.#recorder;
  }

  get expiresAtMs(): number {
    return this.#expiresAtMs;
  }

  get snapshotIntervalS(): number {
    return this.#snapshotIntervalS;
  }

  /** Seconds between its rolling snapshots; the snapshot manager reschedules them. */
  setSnapshotInterval(intervalS: number): void {
    this.#snapshotIntervalS = intervalS;
  }

  /** The network it was given (policy, secret names, placeholders): what its snapshots keep and its forks report. */
  get network(): NetworkSpec | undefined {
    return this.#network;
  }

  /** The user and workdir its calls default to (none: root and the agent's `/`). */
  get defaults(): SandboxDefaults {
    return this.#defaults;
  }

  /** Records the defaults a resume or fork gave it, before any call can reach it. */
  setDefaults(defaults: SandboxDefaults): void {
    this.#defaults = defaults;
  }

  /** Records the network a start gave it (create, resume or fork), before the node attaches it to the guest. */
  assignNetwork(spec: NetworkSpec): void {
    this.#network = spec;
  }

  /**
   * Records a policy the node's egress proxy already enforces for it. A new spec, not an edit: a capture in flight
   * keeps the spec it read, and the secrets and placeholders stay what the sandbox was given.
   */
  policyChanged(policy: PolicyInput): void {
    if (this.#network) this.#network = { ...this.#network, policy };
  }

  /** The last committed snapshot, which the next capture stores only the changes against. */
  get captureBase(): CaptureBase | undefined {
    return this.#captureBase;
  }

  captureCommitted(base: CaptureBase): void {
    this.#captureBase = base;
  }

  /**
   * A restored sandbox continues from its snapshot: the commands it had (their ids keep working) and the snapshot
   * as the base of its next capture. Without a base (a snapshot stored under another tenant's key), the next capture
   * stores everything under this sandbox's tenant and names no parent.
   */
  adoptSnapshot(restored: { base?: CaptureBase; commands: CommandRecord[] }): void {
    for (const r of restored.commands) this.commands.set(r.id, { ...r });
    this.#captureBase = restored.base;
  }

  /**
   * Brings the sandbox up: either a warmed template restore handed over by the pool, or a restore of `source`
   * (its template, or a snapshot for a resume or fork) made now. Either way the agent then re-seeds the guest's
   * entropy and sets its clock, so no two sandboxes share random state.
   */
  start(from: { warm: Restored } | { source: () => Promise<RestoreSource> }): Promise<{ restoreMs: number; pooled: boolean }> {
    const run = this.#boot(from);
    this.#startup = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /**
   * Resolves once a start in flight has finished, or given up and removed what it made (at once when none is): a
   * sandbox killed while starting keeps writing its RAM file until its restore reaches its next check.
   */
  settled(): Promise<void> {
    return this.#startup ?? Promise.resolve();
  }

  async #boot(from: { warm: Restored } | { source: () => Promise<RestoreSource> }): Promise<{ restoreMs: number; pooled: boolean }> {
    const t0 = performance.now();
    const warm = 'warm' in from ? from.warm : undefined;
    try {
      const { vm, agent } =
        warm ??
        (await restoreSnapshot(await (from as { source: () => Promise<RestoreSource> }).source(), this.id, this.dir, this.ram, () => this.abortIfEnded()));
      this.#vm = vm;
      this.#agent = agent;
      agent.on('violation', (v) => this.onViolation(v));
      vm.exited.then((exit) => {
        if (exit.expected) return;
        const why = vm.shutdownReason ? `guest went down (${vm.shutdownReason})` : `QEMU exited (code ${exit.code}, signal ${exit.signal})`;
        void this.fail(`VM exited unexpectedly: ${why} ${exit.stderrTail}`.trim());
      });
      this.abortIfEnded();
      await this.sync(agent);
      this.abortIfEnded();
      agent.on('event', (ev) => this.onAgentEvent(ev as unknown as Record<string, unknown>));
      if (this.commands.size > 0) await this.reconcileCommands(agent);
      agent.on('close', () => {
        if (this.#state !== 'running') return;
        // When QEMU died, its exit (with the guest's shutdown reason) explains more than the closed socket: give it a moment to win.
        const grace = this.clock.setTimeout(() => void this.fail('agent connection lost'), 2000);
        void vm.exited.then(() => grace.cancel());
      });
    } catch (err) {
      if (this.ending) {
        // Killed while starting: end() already recorded it; whatever start() had made is released here.
        await this.release();
        throw new SandglassError('sandbox_not_running', `Sandbox ${this.id} was killed while it was starting.`);
      }
      const tail = this.#vm?.consoleTail() ?? '';
      await this.release();
      this.#state = 'failed';
      this.#failureReason = (err as Error).message;
      this.onGone(this);
      throw new SandglassError('vm_failed', `restoring sandbox ${this.id} failed: ${(err as Error).message}`, {
        cause: err,
        details: tail ? { consoleTail: tail.slice(-1024) } : undefined,
      });
    }
    this.#state = 'running';
    this.armTimeout();
    this.healthTimer = this.clock.setInterval(() => void this.checkHealth(), this.health.intervalMs);
    this.metricsTimer = this.clock.setInterval(() => void this.sampleMetrics(), METRICS_INTERVAL_MS);
    return { restoreMs: performance.now() - t0, pooled: warm !== undefined };
  }

  /**
   * Sets the guest's clock and credits it entropy, and records both: the time in the event, the entropy only in the
   * chunk store (whoever reads events must not be able to predict the guest's random numbers). A replay's fork gets
   * its source's recorded values instead of fresh ones.
   */
  private async sync(agent: AgentClient): Promise<void> {
    if (this.recordingOpts) {
      const { store, capBytes } = this.recordingOpts;
      this.#recorder = await Recorder.open({
        store,
        capBytes,
        tenantId: this.tenantId,
        sandboxId: this.id,
        logger: this.log,
        onCapped: (d) => void this.record('recording.capped', d).catch(() => undefined),
      });
    }
    const entropy = this.replaySync?.entropy ?? randomBytes(64);
    const timeUnixNs = this.replaySync?.timeUnixNs ?? BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
    await agent.sync({ timeUnixNs, entropy });
    const ref = this.#recorder?.content(entropy);
    await this.record('sandbox.synced', {
      timeUnixNs: timeUnixNs.toString(),
      entropyContentId: ref?.contentId ?? null,
      ...(this.replaySync ? { replayOf: this.replaySync.sourceSandboxId } : {}),
    });
  }

  /**
   * Resolves once the command's exit status is known: at once when proc.exit was seen, otherwise after a short wait
   * for it and then from proc.list (an attach stream's end can overtake the event).
   */
  async exitStatus(id: string): Promise<void> {
    const rec = this.commands.get(id);
    const exited = () => rec?.state !== 'running';
    if (exited()) return;
    for (let i = 0; i < 20 && !exited(); i++) await new Promise((r) => this.clock.setTimeout(() => r(undefined), 50));
    if (exited() || !this.#agent) return;
    const p = (await this.#agent.procList().catch(() => [])).find((x) => x.id === id);
    if (p?.exited) this.onAgentEvent({ event: 'proc.exit', id, exitCode: p.exitCode, signal: p.signal, outputBytes: p.outputBytes });
  }

  /** Exit statuses the agent raised while no host listened (before the snapshot's restore) are read back here. */
  private async reconcileCommands(agent: AgentClient): Promise<void> {
    const known = new Map((await agent.procList()).map((p) => [p.id, p]));
    for (const rec of this.commands.values()) {
      const p = known.get(rec.id);
      if (rec.state !== 'running') continue;
      if (!p) {
        rec.state = 'exited';
        continue;
      }
      if (p.exited) this.onAgentEvent({ event: 'proc.exit', id: p.id, exitCode: p.exitCode, signal: p.signal, outputBytes: p.outputBytes });
    }
  }

  get pid(): number | undefined {
    return this.#vm?.pid;
  }

  setExpiry(expiresAtMs: number): void {
    this.#expiresAtMs = expiresAtMs;
    this.armTimeout();
  }

  private armTimeout(): void {
    this.timeoutTimer?.cancel();
    this.timeoutTimer = this.clock.setTimeout(() => void this.#expire(), this.#expiresAtMs - this.clock.nowMs());
  }

  async #expire(): Promise<void> {
    if (this.onExpiry) {
      try {
        await this.onExpiry(this);
        return;
      } catch (err) {
        if (this.#state !== 'running') return;
        this.log.warn({ sandboxId: this.id, err: (err as Error).message }, 'the pause at the timeout failed: the sandbox ends instead');
      }
    }
    await this.end('timeout');
  }

  private misses = 0;

  private async sampleMetrics(): Promise<void> {
    const agent = this.#agent;
    if (this.#state !== 'running' || !agent) return;
    try {
      this.metrics.add(await agent.sysStats({ timeoutMs: METRICS_INTERVAL_MS }), this.clock.nowMs());
    } catch {
      // A missed sample is a gap in the series, not a fault: the health check is what judges the agent.
    }
  }

  private async checkHealth(): Promise<void> {
    if (this.#state !== 'running' || !this.#agent) return;
    try {
      await this.#agent.ping({ timeoutMs: this.health.timeoutMs });
      this.misses = 0;
    } catch {
      if (this.#state !== 'running') return;
      this.misses++;
      if (this.misses >= this.health.misses) {
        await this.fail(`VM hung: the agent did not answer ${this.health.misses} health checks of ${this.health.timeoutMs} ms`);
      }
    }
  }

  /** Throws once the sandbox is being ended: a restore prepared for it must not go on to boot it. */
  abortIfEnded(): void {
    if (this.ending) throw new SandglassError('sandbox_not_running', `Sandbox ${this.id} was killed while it was starting.`);
  }

  requireRunning(): AgentClient {
    if (this.#state !== 'running' || !this.#agent) {
      throw new SandglassError('sandbox_not_running', `Sandbox ${this.id} is ${this.#state}${this.#failureReason ? `: ${this.#failureReason}` : ''}.`);
    }
    return this.#agent;
  }

  /**
   * Makes the root disk at least `bytes` long and grows the guest's filesystem into it; a disk already that large is
   * left as it is. The size then travels with every snapshot (the disk layers' size), so resumes and forks keep it.
   */
  async growDisk(bytes: number): Promise<void> {
    const agent = this.requireRunning();
    const vm = this.#vm!;
    if ((await vm.diskBytes()) >= bytes) return;
    await vm.growDisk(bytes);
    await agent.diskGrow(bytes, { timeoutMs: 30_000 });
  }

  /** Runs a node-side command in the guest as root to its exit (not one of the sandbox's commands); non-zero fails. */
  async runInternal(argv: string[], timeoutMs: number): Promise<void> {
    const code = await runToExit(this.requireRunning(), argv, { timeoutMs });
    if (code !== 0) throw new SandglassError('snapshot_failed', `${argv[0]} in the guest exited with code ${code}; nothing was captured.`);
  }

  /** Appends one of this sandbox's events (through the node's per-sandbox quota). */
  /** Typed by spec/events.yaml: what the node API checks an event against is what this call compiles against. */
  record<T extends EventType>(type: T, data: EventData<T>): Promise<unknown> {
    return Promise.resolve(this.events.append({ type, tenantId: this.tenantId, sandboxId: this.id, data: data as Record<string, unknown> }));
  }

  async startCommand(req: StartCommand): Promise<CommandRecord> {
    const agent = this.requireRunning();
    const id = newId('cmd');
    // A fast command's proc.exit can arrive in the same read as the proc.start reply, before the record below exists.
    this.starting.set(id, undefined);
    let pid: number;
    try {
      ({ pid } = await agent.procStart({
        id,
        argv: req.argv,
        env: req.envs ?? {},
        cwd: req.cwd,
        user: req.user,
        stdin: req.stdin ?? false,
        pty: req.pty,
      }));
    } catch (err) {
      this.starting.delete(id);
      throw mapAgentError(err, { argv0: req.argv[0], cwd: req.cwd });
    }
    const rec: CommandRecord = {
      id,
      pid,
      argv: req.argv,
      cwd: req.cwd,
      pty: Boolean(req.pty),
      state: 'running',
      timedOut: false,
      outputBytes: 0,
      startedAt: new Date(this.clock.nowMs()).toISOString(),
    };
    this.commands.set(id, rec);
    // QEMU dies while a command runs: the command and the sandbox must end with a reason, never hang.
    if (failpoint('exec.qemu') === 'kill-qemu' && this.#vm) process.kill(this.#vm.pid, 'SIGKILL');
    const earlyExit = this.starting.get(id);
    this.starting.delete(id);
    // The event names the environment's variables; their values (which may be credentials) only in the recording.
    const spec: ContentRef | undefined = this.#recorder?.content(
      Buffer.from(
        JSON.stringify({
          argv: req.argv,
          envs: req.envs ?? {},
          cwd: req.cwd ?? null,
          user: req.user ?? null,
          stdin: req.stdin ?? false,
          pty: req.pty ?? null,
          timeoutMs: req.timeoutMs ?? null,
        }),
      ),
    );
    await this.record('command.started', {
      commandId: id,
      argv: req.argv,
      cwd: req.cwd ?? null,
      pty: rec.pty,
      user: req.user ?? 'root',
      envNames: Object.keys(req.envs ?? {}).sort(),
      stdin: req.stdin ?? false,
      timeoutMs: req.timeoutMs ?? null,
      recordingId: spec?.contentId ?? null,
    });
    if (req.timeoutMs && req.timeoutMs > 0) {
      const t = this.clock.setTimeout(() => {
        if (rec.state !== 'running') return;
        rec.timedOut = true;
        agent.procSignal(id, 'SIGKILL').catch(() => {});
      }, req.timeoutMs);
      this.commandTimers.set(id, t);
    }
    if (earlyExit) this.onAgentEvent(earlyExit);
    return rec;
  }

  /**
   * Gives a running command an input and records it as `command.input` with the output offset the agent saw when it
   * arrived; stdin bytes go to the recording, not into the event. One path for the data plane, its WebSocket and envd.
   */
  async commandInput(rec: CommandRecord, input: CommandInput): Promise<void> {
    const agent = this.requireRunning();
    let result: InputResult;
    try {
      if (input.kind === 'stdin') result = await agent.procStdin(rec.id, input.data, { eof: input.eof });
      else if (input.kind === 'signal') result = await agent.procSignal(rec.id, input.signal);
      else result = await agent.procResize(rec.id, input.cols, input.rows);
    } catch (err) {
      throw mapAgentError(err);
    }
    const base = { commandId: rec.id, kind: input.kind, outputOffset: result.outputOffset };
    if (input.kind === 'stdin') {
      const ref = input.data.length > 0 ? this.#recorder?.content(input.data) : undefined;
      await this.record('command.input', { ...base, contentId: ref?.contentId ?? null, sizeBytes: input.data.length, eof: input.eof });
    } else if (input.kind === 'signal') await this.record('command.input', { ...base, signal: input.signal });
    else await this.record('command.input', { ...base, cols: input.cols, rows: input.rows });
  }

  command(id: string): CommandRecord {
    const rec = this.commands.get(id);
    if (!rec) throw new SandglassError('command_not_found', `No command ${id} in sandbox ${this.id}.`, { details: { field: 'commandId' } });
    return rec;
  }

  /**
   * The agent's events are the guest's words: a proc.exit counts once per command the node started, only with
   * well-formed fields; replays, exits of unknown ids and anything else are ignored (they would be events to record).
   */
  private onAgentEvent(ev: Record<string, unknown>): void {
    if (ev.event !== 'proc.exit' || typeof ev.id !== 'string') return;
    const rec = this.commands.get(ev.id);
    if (!rec) {
      if (this.starting.has(ev.id) && this.starting.get(ev.id) === undefined) this.starting.set(ev.id, ev);
      return;
    }
    if (rec.state !== 'running') return;
    rec.state = 'exited';
    rec.exitCode = Number.isSafeInteger(ev.exitCode) ? (ev.exitCode as number) : null;
    rec.signal = typeof ev.signal === 'string' && /^SIG[A-Z0-9+-]{1,12}$/.test(ev.signal) ? ev.signal : null;
    rec.outputBytes = Number.isSafeInteger(ev.outputBytes) && (ev.outputBytes as number) >= 0 ? (ev.outputBytes as number) : rec.outputBytes;
    rec.endedAt = new Date(this.clock.nowMs()).toISOString();
    this.commandTimers.get(rec.id)?.cancel();
    this.commandTimers.delete(rec.id);
    const output = outputDigests(ev.output);
    void this.record('command.exited', {
      commandId: rec.id,
      exitCode: rec.exitCode,
      signal: rec.signal,
      timedOut: rec.timedOut,
      outputBytes: rec.outputBytes,
      ...(output ? { output } : {}),
    });
  }

  private violations = 0;

  /** The agent broke flow control (the client already reset that stream): recorded once, counted after. */
  private onViolation(v: ProtocolViolation): void {
    if (this.violations++ > 0) return;
    this.log.warn({ sandboxId: this.id, ...v }, "the guest agent exceeded a stream's credit: stream reset");
    this.record('agent.protocol_violation', { ...v }).catch(() => {});
  }

  /**
   * Ends the sandbox and frees its VM; records why when the node itself decided (timeout, shutdown). `paused`
   * releases the VM after a pause snapshot: the caller records sandbox.paused.
   */
  async end(reason: 'timeout' | 'shutdown' | 'killed' | 'paused'): Promise<void> {
    if (this.ending) return this.ending;
    this.ending = (async () => {
      if (this.#state === 'failed' || this.#state === 'ended' || this.#state === 'paused') return;
      this.#state = reason === 'paused' ? 'paused' : 'ended';
      await this.release();
      // A kill comes from the control plane, which records it; timeouts and shutdowns are the node's own doing.
      if (reason === 'timeout' || reason === 'shutdown') await this.record('sandbox.killed', { reason });
      this.onGone(this);
    })();
    return this.ending;
  }

  /** Marks the sandbox failed with the reason and the console tail, and frees its resources. */
  async fail(reason: string): Promise<void> {
    if (this.ending) return this.ending;
    this.ending = (async () => {
      if (this.#state !== 'running' && this.#state !== 'starting') return;
      this.#state = 'failed';
      this.#failureReason = reason;
      this.log.warn({ sandboxId: this.id, reason }, 'sandbox failed');
      const vm = this.#vm;
      await this.release();
      // Read once QEMU is gone: a panic's last lines may still be on their way when the guest is reported down.
      const consoleTail = (await vm?.consoleTailAtExit(2048)) ?? '';
      await this.record('sandbox.failed', { reason, consoleTail });
      this.onGone(this);
    })();
    return this.ending;
  }

  private async release(): Promise<void> {
    // A sandbox that never had a snapshot cannot be replayed (a replay starts from one): its recording goes with it.
    const recorder = this.#recorder;
    if (recorder) await (this.#captureBase ? recorder.close() : recorder.discard()).catch(() => undefined);
    this.timeoutTimer?.cancel();
    this.healthTimer?.cancel();
    this.metricsTimer?.cancel();
    for (const t of this.commandTimers.values()) t.cancel();
    this.commandTimers.clear();
    void this.#agent?.close();
    if (this.#vm) {
      await this.#vm.stop(1000);
      this.ram.remove(this.#vm.memPath);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The agent's digests of a command's whole output (what a replay compares), only when every field is well formed. */
function outputDigests(v: unknown): EventData<'command.exited'>['output'] {
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  const hex = (x: unknown) => typeof x === 'string' && /^[0-9a-f]{64}$/.test(x);
  const count = (x: unknown) => Number.isSafeInteger(x) && (x as number) >= 0;
  if (!hex(o.sha256) || !hex(o.stdoutSha256) || !hex(o.stderrSha256) || !count(o.stdoutBytes) || !count(o.stderrBytes)) return undefined;
  return {
    sha256: o.sha256 as string,
    stdoutSha256: o.stdoutSha256 as string,
    stderrSha256: o.stderrSha256 as string,
    stdoutBytes: o.stdoutBytes as number,
    stderrBytes: o.stderrBytes as number,
  };
}

export function sandboxDir(runDir: string, id: string): string {
  return join(runDir, id);
}
