// What the parts of one egress proxy share: limits, clock, log, events, which sandbox each stream belongs to, lookups.
import type http from 'node:http';
import type https from 'node:https';
import type net from 'node:net';
import type { Duplex } from 'node:stream';
import { SandglassError, type Clock, type ErrorCode, type Logger } from '@sandglass/core';
import type { CanonicalHost } from './address.js';
import type { ApprovalBroker } from './approvals.js';
import type { SandboxCa } from './ca.js';
import type { Account, AddressFacts, TunnelFacts } from './decision.js';
import type { EgressEvent, EgressRequestData, RejectedData } from './events.js';
import type { Policy } from './policy.js';
import type { EgressLimits } from './proxy.js';
import type { SecretBinding } from './secrets.js';
import { UpstreamTimeout, withTimeout } from './upstream.js';

export interface Sandbox {
  id: string;
  ca: SandboxCa;
  policy: Policy;
  secrets: SecretBinding[];
  /** A replay's fork: allowed requests are answered from its source's recorded exchanges and never sent upstream. */
  replay?: ReplaySource;
  sockets: Set<Duplex>;
  listeners: Set<net.Server>;
  httpAgent: http.Agent;
  httpsAgent: https.Agent;
  removed: boolean;
}

/** A recorded answer: the status, headers and body the original guest got. */
export interface RecordedAnswer {
  status: number;
  headers: [string, string][];
  body: Buffer;
}

/**
 * Where a replay's fork gets its answers. A request is named as the recording names it (method, URL and body with
 * every secret value and placeholder redacted); undefined means the recording has no such exchange left.
 */
export interface ReplaySource {
  answer(req: { method: string; url: string; requestBody: Buffer }): Promise<RecordedAnswer | undefined>;
}

/** A client stream: its sandbox (from where it came in, never from its content), and the tunnel it runs inside. */
export interface Conn {
  sb: Sandbox;
  tunnel?: TunnelFacts;
}

/** One request's account: what the egress.request event reports. */
export interface Ex extends Omit<EgressRequestData, 'durationMs'> {
  sb: Sandbox;
  startedAtMs: number;
  reported: boolean;
}

// Codes by which the proxy refused a request (as opposed to an upstream failing it).
export const REFUSALS = new Set<ErrorCode>(['egress_denied', 'egress_secret_scope', 'egress_approval_denied', 'payload_too_large', 'invalid_argument']);

export interface ContextOptions {
  limits: Required<EgressLimits>;
  clock: Clock;
  log: Logger;
  onEvent: (e: EgressEvent) => void;
  lookup: (host: string) => Promise<string[]>;
  privateAllow: ReadonlySet<string>;
  nodeAddresses: () => ReadonlySet<string>;
  approvals: ApprovalBroker;
  /** Set when exchanges are recorded: the body bytes kept per direction. */
  recordBytes: number | undefined;
}

export class ProxyContext {
  readonly limits: Required<EgressLimits>;
  readonly clock: Clock;
  readonly log: Logger;
  readonly privateAllow: ReadonlySet<string>;
  readonly approvals: ApprovalBroker;
  readonly recordBytes: number | undefined;
  readonly conns = new WeakMap<Duplex, Conn>();
  readonly #opts: ContextOptions;

  constructor(opts: ContextOptions) {
    this.#opts = opts;
    this.limits = opts.limits;
    this.clock = opts.clock;
    this.log = opts.log;
    this.privateAllow = opts.privateAllow;
    this.approvals = opts.approvals;
    this.recordBytes = opts.recordBytes;
  }

  emit(e: EgressEvent): void {
    try {
      this.#opts.onEvent(e);
    } catch (err) {
      this.log.error({ err, type: e.type }, 'egress event listener threw');
    }
  }

  /**
   * A replay's fork asked for what its recording cannot answer: reported as `egress.replay_unrecorded` (a divergence
   * of the replay) and refused with egress_denied, rule `replay`. `url` is the request as the recording names it.
   */
  replayUnrecorded(ex: Ex, url: string, requestBytes: number): SandglassError {
    this.emit({ type: 'egress.replay_unrecorded', sandboxId: ex.sb.id, data: { method: ex.method, url, requestBytes } });
    ex.allowed = false;
    return new SandglassError('egress_denied', `This replay's recording has no ${ex.method} ${url} (with this body) left to answer with.`, {
      details: { rule: 'replay' },
    });
  }

  rejected(sb: Sandbox, data: RejectedData): void {
    this.emit({ type: 'egress.rejected', sandboxId: sb.id, data });
  }

  newEx(sb: Sandbox, startedAtMs: number, f: { host: string; port: number; scheme: Ex['scheme']; method: string; path: string }): Ex {
    return { sb, startedAtMs, reported: false, ...f, allowed: true, reason: '', secrets: [], bytesUp: 0, bytesDown: 0 };
  }

  /** Takes what a decision established into the request's account. */
  account(ex: Ex, a: Account): void {
    if (a.host !== undefined) ex.host = a.host;
    if (a.port !== undefined) ex.port = a.port;
    if (a.scheme !== undefined) ex.scheme = a.scheme;
    if (a.path !== undefined) ex.path = a.path;
    if (a.rule !== undefined) ex.rule = a.rule;
    else delete ex.rule;
    if (a.reason !== undefined) ex.reason = a.reason;
    if (a.secrets !== undefined) ex.secrets = a.secrets;
  }

  /** Emits the request's egress.request event, once. */
  report(ex: Ex): void {
    if (ex.reported) return;
    ex.reported = true;
    const { sb, startedAtMs, reported: _r, ...data } = ex;
    this.emit({ type: 'egress.request', sandboxId: sb.id, data: { ...data, durationMs: Math.max(0, this.clock.nowMs() - startedAtMs) } });
  }

  // Until a request arrives a connection may idle for idleTimeoutMs; node's server then closes it (keep-alive timeout
  // between requests likewise). While a request is in flight, the upstream side's timers govern.
  armIdle(socket: Duplex): void {
    (socket as Partial<net.Socket>).setTimeout?.(this.limits.idleTimeoutMs);
  }

  disarmIdle(socket: Duplex): void {
    (socket as Partial<net.Socket>).setTimeout?.(0);
  }

  timeoutsMs(): { connect: number; response: number; idle: number } {
    return { connect: this.limits.connectTimeoutMs, response: this.limits.upstreamResponseTimeoutMs, idle: this.limits.idleTimeoutMs };
  }

  /**
   * The addresses a decision vets: a tunnel's pinned ones, an IP literal, or the resolver's answers (one lookup, so a
   * second, different answer can't be slipped in), and the node's own addresses now.
   */
  async addressFacts(dest: { host: CanonicalHost; port: number; pinned?: readonly string[] }): Promise<AddressFacts> {
    const answers = dest.pinned ?? (dest.host.kind === 'name' ? await this.#lookup(dest.host.host, dest.port) : [dest.host.host]);
    let own: ReadonlySet<string> | undefined;
    try {
      own = this.#opts.nodeAddresses();
    } catch {
      own = undefined;
    }
    return { answers, nodeAddresses: own };
  }

  async #lookup(host: string, port: number): Promise<unknown[]> {
    let answers: unknown;
    try {
      answers = await withTimeout(this.#opts.lookup(host), this.limits.connectTimeoutMs);
    } catch (err) {
      if (err instanceof UpstreamTimeout)
        throw new SandglassError('timeout', `Resolving ${host} took longer than ${this.limits.connectTimeoutMs} ms.`, {
          details: { host, port, phase: 'dns' },
        });
      throw new SandglassError('gateway_unavailable', `${host} could not be resolved.`, { details: { host, port } });
    }
    if (!Array.isArray(answers) || answers.length === 0)
      throw new SandglassError('gateway_unavailable', `${host} resolves to no address.`, { details: { host, port } });
    return answers;
  }
}
