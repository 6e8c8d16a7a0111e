// The egress proxy: each sandbox's byte streams in, plain HTTP and CONNECT (TLS terminated with the sandbox's CA) out,
// every request judged by policy, destination safety, secret scope and approval, and reported as an event.
// This file holds the sandboxes and their connections; tunnel.ts serves CONNECT, decision.ts judges each request
// without I/O, exchange.ts gathers what the decision asks for and forwards, upstream.ts and record.ts do the rest.
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { lookup as dnsLookup } from 'node:dns/promises';
import { lstatSync, unlinkSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import { SandglassError, createLogger, systemClock, type Clock, type Logger } from '@sandglass/core';
import { nodeAddresses, parsePrivateAllow } from './address.js';
import type { ApprovalBroker } from './approvals.js';
import { SandboxCa } from './ca.js';
import { ProxyContext, type ReplaySource, type Sandbox } from './context.js';
import type { EgressEvent } from './events.js';
import { Exchanges } from './exchange.js';
import { Policy } from './policy.js';
import { checkBindings, type SecretBinding } from './secrets.js';
import { Tunnels } from './tunnel.js';
import { errorReply, replyRawAndClose } from './wire.js';

export interface EgressLimits {
  /** Concurrent client connections per sandbox; more are refused at once with 503. Default 64. */
  maxConnectionsPerSandbox?: number;
  /** Request line and headers, per request (client side) and per response (upstream side). Default 64 KiB. */
  maxHeaderBytes?: number;
  /** DNS resolution plus TCP and TLS set-up to an upstream. Default 10 s. */
  connectTimeoutMs?: number;
  /** A client connection with no request in progress, or an upstream exchange with no bytes moving. Default 120 s. */
  idleTimeoutMs?: number;
  /** From the request fully sent to the response headers. Default 120 s. */
  upstreamResponseTimeoutMs?: number;
  /** Bodies of a type some secret declares (bodyContentTypes) are buffered and searched, up to this size. Default 1 MiB. */
  maxScannedBodyBytes?: number;
  /**
   * A compressed response to a request that carried a secret is decompressed to be masked; past this many decoded bytes
   * the response is cut. Default 64 MiB.
   */
  maxDecodedBodyBytes?: number;
}

export interface EgressProxyOptions {
  /**
   * Resolves a host name to addresses; default: the system resolver. Every address it returns is vetted (internal
   * and node addresses only through privateAllow) and the connection goes to a vetted one, so a second, different
   * answer can't be slipped in. Tests inject a map (api.example.test → 127.0.0.1); it changes only name resolution,
   * never the vetting.
   */
  lookup?: (host: string) => Promise<string[]>;
  /**
   * Internal destinations the node operator opens, as `ip:port` or `[ipv6]:port` (SANDGLASS_EGRESS_PRIVATE_ALLOW; a bad
   * entry throws).
   * Nothing else in loopback, private, link-local, metadata or other special ranges, and none of the node's own
   * addresses, is reachable, whatever a sandbox's policy says.
   */
  privateAllow?: string[];
  /** The node's own addresses, asked for at each vetting (interfaces change); default: os.networkInterfaces(). */
  nodeAddresses?: () => ReadonlySet<string>;
  /** PEM CAs trusted for upstreams besides Node's bundled Mozilla roots. Without it Node's default trust applies. */
  upstreamCAs?: string[];
  approvals: ApprovalBroker;
  onEvent: (e: EgressEvent) => void;
  /** Emit an egress.exchange event per allowed exchange (bodies up to maxBodyBytes, default 64 KiB). */
  recordExchanges?: boolean | { maxBodyBytes?: number };
  limits?: EgressLimits;
  clock?: Clock;
  logger?: Logger;
}

export interface SandboxConfig {
  policy: Policy;
  secrets: SecretBinding[];
  /** Reuse a CA (a sandbox forked in this process keeps its parent's); default: a new one. */
  ca?: SandboxCa;
  /** A replay's fork: answer from the recording, never connect upstream. */
  replay?: ReplaySource;
}

export interface SandboxEgress {
  readonly sandboxId: string;
  /** The sandbox's CA certificate, for the guest's trust store. */
  readonly caCertPem: string;
  readonly ca: SandboxCa;
  readonly policy: Policy;
  /** Takes effect with the next request, also inside open connections. */
  setPolicy(p: Policy): void;
  /** Checked like addSandbox's; takes effect with the next request. */
  setSecrets(s: SecretBinding[]): void;
  /** Serves one client byte stream of this sandbox (identity comes from here, never from the stream's content). */
  handle(socket: Duplex): void;
  /** Serves a unix socket; the returned function closes it and the connections it accepted. */
  listen(unixPath: string): Promise<() => Promise<void>>;
  readonly activeConnections: number;
}

const DEFAULTS = {
  maxConnectionsPerSandbox: 64,
  maxHeaderBytes: 64 * 1024,
  connectTimeoutMs: 10_000,
  idleTimeoutMs: 120_000,
  upstreamResponseTimeoutMs: 120_000,
  maxScannedBodyBytes: 1024 * 1024,
  maxDecodedBodyBytes: 64 * 1024 * 1024,
};
const DEFAULT_RECORD_BYTES = 64 * 1024;

function defaultLookup(host: string): Promise<string[]> {
  return dnsLookup(host, { all: true, verbatim: true }).then((r) => r.map((a) => a.address));
}

export class EgressProxy {
  readonly #opts: EgressProxyOptions;
  readonly #ctx: ProxyContext;
  readonly #upstreamContext: tls.SecureContext | undefined;
  readonly #sandboxes = new Map<string, Sandbox>();
  /** Serves sandbox connections: absolute-form plain HTTP requests and CONNECT. */
  readonly #front: http.Server;
  /** Serves what runs inside CONNECT tunnels: decrypted TLS, or plain HTTP. */
  readonly #inner: http.Server;

  constructor(opts: EgressProxyOptions) {
    this.#opts = opts;
    const limits: Required<EgressLimits> = { ...DEFAULTS, ...Object.fromEntries(Object.entries(opts.limits ?? {}).filter(([, v]) => v !== undefined)) };
    for (const [k, v] of Object.entries(limits)) {
      if (!Number.isInteger(v) || v <= 0)
        throw new SandglassError('invalid_argument', `limits.${k}: must be a positive integer`, {
          details: { field: `limits.${k}`, rule: 'a positive integer' },
        });
    }
    const ctx = new ProxyContext({
      limits,
      clock: opts.clock ?? systemClock,
      log: opts.logger ?? createLogger('egress'),
      onEvent: opts.onEvent,
      lookup: opts.lookup ?? defaultLookup,
      privateAllow: new Set(parsePrivateAllow((opts.privateAllow ?? []).join(','))),
      nodeAddresses: opts.nodeAddresses ?? nodeAddresses,
      approvals: opts.approvals,
      recordBytes: opts.recordExchanges
        ? typeof opts.recordExchanges === 'object'
          ? (opts.recordExchanges.maxBodyBytes ?? DEFAULT_RECORD_BYTES)
          : DEFAULT_RECORD_BYTES
        : undefined,
    });
    this.#ctx = ctx;
    this.#upstreamContext = opts.upstreamCAs?.length ? tls.createSecureContext({ ca: [...tls.rootCertificates, ...opts.upstreamCAs] }) : undefined;
    const serverOpts: http.ServerOptions = {
      maxHeaderSize: limits.maxHeaderBytes,
      requestTimeout: 0,
      keepAliveTimeout: limits.idleTimeoutMs,
      requireHostHeader: true,
    };
    const exchanges = new Exchanges(ctx);
    this.#inner = http.createServer(serverOpts);
    this.#inner.on('request', (req: IncomingMessage, res: ServerResponse) => void exchanges.onRequest(req, res, true));
    this.#inner.on('connect', (req: IncomingMessage, socket: Duplex) =>
      this.#refuseRaw(
        req.socket,
        socket,
        new SandglassError('invalid_argument', 'CONNECT inside a CONNECT tunnel is not supported.', {
          details: { field: 'method', rule: 'not CONNECT inside a tunnel' },
        }),
      ),
    );
    this.#inner.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => void exchanges.onUpgrade(req, socket, head, true));
    this.#inner.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => this.#onClientError(err, socket));
    const tunnels = new Tunnels(ctx, (socket) => this.#inner.emit('connection', socket));
    this.#front = http.createServer(serverOpts);
    this.#front.on('request', (req: IncomingMessage, res: ServerResponse) => void exchanges.onRequest(req, res, false));
    this.#front.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => void tunnels.onConnect(req, socket, head));
    this.#front.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => void exchanges.onUpgrade(req, socket, head, false));
    this.#front.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => this.#onClientError(err, socket));
  }

  /** Starts serving a sandbox: a new CA (P-256, key only in this process) unless one is given, its policy and secrets. */
  async addSandbox(sandboxId: string, cfg: SandboxConfig): Promise<SandboxEgress> {
    if (this.#sandboxes.has(sandboxId)) throw new SandglassError('conflict', `Sandbox ${sandboxId} already has an egress proxy.`);
    if (!(cfg.policy instanceof Policy))
      throw new SandglassError('invalid_argument', 'policy: must come from parsePolicy', { details: { field: 'policy', rule: 'from parsePolicy' } });
    const secrets = checkBindings(cfg.secrets);
    const ca = cfg.ca ?? (await SandboxCa.generate({ name: sandboxId, clock: this.#ctx.clock }));
    if (this.#sandboxes.has(sandboxId)) throw new SandglassError('conflict', `Sandbox ${sandboxId} already has an egress proxy.`);
    const agentOpts = { keepAlive: true, maxFreeSockets: 16, timeout: this.#ctx.limits.idleTimeoutMs, scheduling: 'lifo' as const };
    const sb: Sandbox = {
      id: sandboxId,
      ca,
      policy: cfg.policy,
      secrets,
      sockets: new Set(),
      listeners: new Set(),
      httpAgent: new http.Agent(agentOpts),
      httpsAgent: new https.Agent({ ...agentOpts, minVersion: 'TLSv1.2', ...(this.#upstreamContext ? { secureContext: this.#upstreamContext } : {}) }),
      removed: false,
      ...(cfg.replay ? { replay: cfg.replay } : {}),
    };
    this.#sandboxes.set(sandboxId, sb);
    return this.#facade(sb);
  }

  /** Stops serving a sandbox: closes its listeners and connections, withdraws its pending approvals and grants. */
  removeSandbox(sandboxId: string): void {
    const sb = this.#sandboxes.get(sandboxId);
    if (!sb) return;
    sb.removed = true;
    this.#sandboxes.delete(sandboxId);
    for (const l of sb.listeners) l.close();
    for (const s of sb.sockets) s.destroy();
    sb.httpAgent.destroy();
    sb.httpsAgent.destroy();
    this.#opts.approvals.revoke(sandboxId);
  }

  /** Removes every sandbox. */
  close(): void {
    for (const id of [...this.#sandboxes.keys()]) this.removeSandbox(id);
  }

  #facade(sb: Sandbox): SandboxEgress {
    const proxy = this;
    return {
      sandboxId: sb.id,
      caCertPem: sb.ca.certPem,
      ca: sb.ca,
      get policy() {
        return sb.policy;
      },
      setPolicy(p: Policy) {
        if (!(p instanceof Policy))
          throw new SandglassError('invalid_argument', 'policy: must come from parsePolicy', { details: { field: 'policy', rule: 'from parsePolicy' } });
        sb.policy = p;
      },
      setSecrets(s: SecretBinding[]) {
        const checked = checkBindings(s);
        const kept = new Set(checked.map((c) => c.name));
        for (const old of sb.secrets) if (!kept.has(old.name)) proxy.#opts.approvals.revoke(sb.id, old.name);
        sb.secrets = checked;
      },
      handle: (socket: Duplex) => this.#accept(sb, socket),
      listen: (unixPath: string) => this.#listen(sb, unixPath),
      get activeConnections() {
        return sb.sockets.size;
      },
    };
  }

  async #listen(sb: Sandbox, unixPath: string): Promise<() => Promise<void>> {
    try {
      if (lstatSync(unixPath).isSocket()) unlinkSync(unixPath);
    } catch {
      /* absent: nothing stale to remove */
    }
    const accepted = new Set<Duplex>();
    const server = net.createServer((s) => {
      accepted.add(s);
      s.once('close', () => accepted.delete(s));
      this.#accept(sb, s);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(unixPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
    if (sb.removed) server.close();
    else sb.listeners.add(server);
    return async () => {
      sb.listeners.delete(server);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of accepted) s.destroy();
      });
    };
  }

  #accept(sb: Sandbox, socket: Duplex): void {
    socket.on('error', () => socket.destroy());
    if (sb.removed) {
      socket.destroy();
      return;
    }
    const max = this.#ctx.limits.maxConnectionsPerSandbox;
    if (sb.sockets.size >= max) {
      const err = new SandglassError('capacity_exhausted', `The sandbox has ${max} egress connections open, its limit; close some and retry.`, {
        details: { limit: max },
      });
      this.#ctx.rejected(sb, { reason: 'connection limit', status: err.status, code: err.code });
      replyRawAndClose(socket, errorReply(err));
      return;
    }
    sb.sockets.add(socket);
    socket.once('close', () => sb.sockets.delete(socket));
    this.#ctx.conns.set(socket, { sb });
    this.#ctx.armIdle(socket);
    this.#front.emit('connection', socket);
  }

  #onClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
    const conn = this.#ctx.conns.get(socket);
    // A client that hangs up mid-request is gone, not wrong: nothing to answer or report.
    if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || !socket.writable || !conn) {
      socket.destroy();
      return;
    }
    const se =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? new SandglassError('invalid_argument', `The request's headers exceed ${this.#ctx.limits.maxHeaderBytes} bytes.`, {
            details: { field: 'headers', rule: `at most ${this.#ctx.limits.maxHeaderBytes} bytes` },
          })
        : new SandglassError('invalid_argument', `The request is not valid HTTP/1.1 (${err.code ?? err.message}).`, {
            details: { field: 'request', rule: 'valid HTTP/1.1' },
          });
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
    this.#ctx.rejected(conn.sb, { reason: se.message, status, code: se.code, ...(conn.tunnel ? { host: conn.tunnel.host.host, port: conn.tunnel.port } : {}) });
    replyRawAndClose(socket, errorReply(se, status));
  }

  #refuseRaw(owner: Duplex, socket: Duplex, err: SandglassError): void {
    const conn = this.#ctx.conns.get(owner) ?? this.#ctx.conns.get(socket);
    if (conn) this.#ctx.rejected(conn.sb, { reason: err.message, status: err.status, code: err.code });
    replyRawAndClose(socket, errorReply(err));
  }
}
