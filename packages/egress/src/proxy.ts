// The egress proxy: each sandbox's byte streams in, plain HTTP and CONNECT (TLS terminated with the sandbox's CA) out,
// every request judged by policy, destination safety, secret scope and approval, and reported as an event.
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { lookup as dnsLookup } from 'node:dns/promises';
import { lstatSync, unlinkSync } from 'node:fs';
import { PassThrough, Transform, pipeline, type Duplex, type Readable, type TransformCallback } from 'node:stream';
import zlib from 'node:zlib';
import { SandglassError, createLogger, systemClock, type Clock, type ErrorCode, type Logger } from '@sandglass/core';
import { canonicalIp, hostForUrl, nodeAddresses, parseHostPort, parsePrivateAllow, vetAddress, type CanonicalHost } from './address.js';
import type { ApprovalBroker } from './approvals.js';
import { SandboxCa } from './ca.js';
import type { EgressEvent, EgressRequestData, RecordedBody } from './events.js';
import { decide, normalizePath, Policy } from './policy.js';
import {
  ValueMask,
  checkBindings,
  compileSecret,
  mediaType,
  typeListed,
  type CompiledSecret,
  type Redactor,
  type ResolvedBinding,
  type SecretBinding,
  type UnusableSecret,
} from './secrets.js';
import { SecretScan, basicCredentials, maskText, substituteRequest, type Prepared } from './substitute.js';
import { endToEnd, errorReply, headerValues, pairsOf, rawHead, replyRawAndClose, type HeaderPairs } from './wire.js';

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

type Scheme = 'http' | 'https';

interface Dest {
  host: CanonicalHost;
  port: number;
  scheme: Scheme;
  /** Addresses vetted when the CONNECT tunnel opened; requests inside it go there. */
  pinned?: string[];
}

interface Sandbox {
  id: string;
  ca: SandboxCa;
  policy: Policy;
  secrets: SecretBinding[];
  sockets: Set<Duplex>;
  listeners: Set<net.Server>;
  httpAgent: http.Agent;
  httpsAgent: https.Agent;
  removed: boolean;
}

interface Conn {
  sb: Sandbox;
  tunnel?: { host: CanonicalHost; port: number; addresses: string[]; tls: boolean };
}

/** One request's account: what the egress.request event reports. */
interface Ex extends Omit<EgressRequestData, 'durationMs'> {
  sb: Sandbox;
  startedAtMs: number;
  reported: boolean;
}

interface PrepareResult {
  dest: Dest;
  addresses: string[];
  prep: Prepared;
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
// Codes by which the proxy refused a request (as opposed to an upstream failing it).
const REFUSALS = new Set<ErrorCode>(['egress_denied', 'egress_secret_scope', 'egress_approval_denied', 'payload_too_large', 'invalid_argument']);
const INVALID_HEADER_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const TLS_HANDSHAKE = 0x16;

class UpstreamTimeout extends Error {
  constructor(readonly phase: 'connect' | 'response' | 'idle') {
    super(phase);
  }
}

function defaultLookup(host: string): Promise<string[]> {
  return dnsLookup(host, { all: true, verbatim: true }).then((r) => r.map((a) => a.address));
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new UpstreamTimeout('connect')), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e) => (clearTimeout(t), reject(e)),
    );
  });
}

function destName(d: { host: CanonicalHost; port: number }): string {
  return `${hostForUrl(d.host)}:${d.port}`;
}

const CERT_ERRORS = /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ALTNAME|HOSTNAME/;

/** Why an upstream exchange failed, in words a developer can act on. */
function upstreamError(err: unknown, dest: Dest, ms: { connect: number; response: number; idle: number }, tlsStarted: boolean): SandglassError {
  const name = destName(dest);
  if (err instanceof SandglassError) return err;
  if (err instanceof UpstreamTimeout) {
    const msg = {
      connect: `The upstream ${name} did not complete a connection (${dest.scheme === 'https' ? 'TCP and TLS' : 'TCP'}) within ${ms.connect} ms.`,
      response: `The upstream ${name} did not answer within ${ms.response} ms.`,
      idle: `The upstream ${name} sent and received nothing for ${ms.idle} ms.`,
    }[err.phase];
    return new SandglassError('timeout', msg, { details: { host: dest.host.host, port: dest.port, phase: err.phase } });
  }
  const code = String((err as NodeJS.ErrnoException)?.code ?? 'unknown');
  const details = { host: dest.host.host, port: dest.port, cause: code };
  if (CERT_ERRORS.test(code)) {
    return new SandglassError('gateway_unavailable', `The upstream ${name} presented a certificate that is not trusted for ${dest.host.host} (${code}).`, {
      details,
    });
  }
  if (tlsStarted || code.startsWith('ERR_SSL') || code === 'EPROTO') {
    return new SandglassError('gateway_unavailable', `The TLS handshake with upstream ${name} failed (${code}); does the port speak TLS?`, { details });
  }
  if (code === 'ECONNREFUSED') return new SandglassError('gateway_unavailable', `The upstream ${name} refused the connection.`, { details });
  return new SandglassError('gateway_unavailable', `The connection to upstream ${name} failed (${code}).`, { details });
}

function recordedBody(buf: Buffer, sizeBytes: number, cap: number, redactor: Redactor | undefined): RecordedBody {
  // Redact before cutting, so a value straddling the cap is never half-kept.
  const clean = redactor ? redactor.buffer(buf) : buf;
  const data = clean.subarray(0, cap);
  const truncated = sizeBytes > cap || clean.length > cap;
  const text = data.toString('utf8');
  return Buffer.from(text, 'utf8').equals(data)
    ? { encoding: 'utf8', data: text, sizeBytes, truncated }
    : { encoding: 'base64', data: data.toString('base64'), sizeBytes, truncated };
}

/** Collects up to `cap` bytes of a stream that flows elsewhere. */
class Capture {
  readonly parts: Buffer[] = [];
  size = 0;
  #kept = 0;
  constructor(readonly cap: number) {}
  add(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.#kept >= this.cap) return;
    const part = chunk.subarray(0, this.cap - this.#kept);
    this.parts.push(Buffer.from(part));
    this.#kept += part.length;
  }
  get buffer(): Buffer {
    return Buffer.concat(this.parts);
  }
}

export class EgressProxy {
  readonly #opts: EgressProxyOptions;
  readonly #limits: Required<EgressLimits>;
  readonly #clock: Clock;
  readonly #lookup: (host: string) => Promise<string[]>;
  readonly #privateAllow: ReadonlySet<string>;
  readonly #nodeAddresses: () => ReadonlySet<string>;
  readonly #log: Logger;
  readonly #recordBytes: number | undefined;
  readonly #upstreamContext: tls.SecureContext | undefined;
  readonly #sandboxes = new Map<string, Sandbox>();
  readonly #conns = new WeakMap<Duplex, Conn>();
  /** Serves sandbox connections: absolute-form plain HTTP requests and CONNECT. */
  readonly #front: http.Server;
  /** Serves what runs inside CONNECT tunnels: decrypted TLS, or plain HTTP. */
  readonly #inner: http.Server;

  constructor(opts: EgressProxyOptions) {
    this.#opts = opts;
    this.#limits = { ...DEFAULTS, ...Object.fromEntries(Object.entries(opts.limits ?? {}).filter(([, v]) => v !== undefined)) };
    for (const [k, v] of Object.entries(this.#limits)) {
      if (!Number.isInteger(v) || v <= 0)
        throw new SandglassError('invalid_argument', `limits.${k}: must be a positive integer`, {
          details: { field: `limits.${k}`, rule: 'a positive integer' },
        });
    }
    this.#clock = opts.clock ?? systemClock;
    this.#lookup = opts.lookup ?? defaultLookup;
    this.#privateAllow = new Set(parsePrivateAllow((opts.privateAllow ?? []).join(',')));
    this.#nodeAddresses = opts.nodeAddresses ?? nodeAddresses;
    this.#log = opts.logger ?? createLogger('egress');
    this.#recordBytes = opts.recordExchanges
      ? typeof opts.recordExchanges === 'object'
        ? (opts.recordExchanges.maxBodyBytes ?? DEFAULT_RECORD_BYTES)
        : DEFAULT_RECORD_BYTES
      : undefined;
    this.#upstreamContext = opts.upstreamCAs?.length ? tls.createSecureContext({ ca: [...tls.rootCertificates, ...opts.upstreamCAs] }) : undefined;
    const serverOpts: http.ServerOptions = {
      maxHeaderSize: this.#limits.maxHeaderBytes,
      requestTimeout: 0,
      keepAliveTimeout: this.#limits.idleTimeoutMs,
      requireHostHeader: true,
    };
    this.#front = http.createServer(serverOpts);
    this.#front.on('request', (req: IncomingMessage, res: ServerResponse) => void this.#onRequest(req, res, false));
    this.#front.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.#onConnect(req, socket, head));
    this.#front.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.#onUpgrade(req, socket, head, false));
    this.#front.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => this.#onClientError(err, socket));
    this.#inner = http.createServer(serverOpts);
    this.#inner.on('request', (req: IncomingMessage, res: ServerResponse) => void this.#onRequest(req, res, true));
    this.#inner.on('connect', (req: IncomingMessage, socket: Duplex) =>
      this.#refuseRaw(
        req.socket,
        socket,
        new SandglassError('invalid_argument', 'CONNECT inside a CONNECT tunnel is not supported.', {
          details: { field: 'method', rule: 'not CONNECT inside a tunnel' },
        }),
      ),
    );
    this.#inner.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.#onUpgrade(req, socket, head, true));
    this.#inner.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => this.#onClientError(err, socket));
  }

  /** Starts serving a sandbox: a new CA (P-256, key only in this process) unless one is given, its policy and secrets. */
  async addSandbox(sandboxId: string, cfg: SandboxConfig): Promise<SandboxEgress> {
    if (this.#sandboxes.has(sandboxId)) throw new SandglassError('conflict', `Sandbox ${sandboxId} already has an egress proxy.`);
    if (!(cfg.policy instanceof Policy))
      throw new SandglassError('invalid_argument', 'policy: must come from parsePolicy', { details: { field: 'policy', rule: 'from parsePolicy' } });
    const secrets = checkBindings(cfg.secrets);
    const ca = cfg.ca ?? (await SandboxCa.generate({ name: sandboxId, clock: this.#clock }));
    if (this.#sandboxes.has(sandboxId)) throw new SandglassError('conflict', `Sandbox ${sandboxId} already has an egress proxy.`);
    const agentOpts = { keepAlive: true, maxFreeSockets: 16, timeout: this.#limits.idleTimeoutMs, scheduling: 'lifo' as const };
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

  #emit(e: EgressEvent): void {
    try {
      this.#opts.onEvent(e);
    } catch (err) {
      this.#log.error({ err, type: e.type }, 'egress event listener threw');
    }
  }

  #rejected(sb: Sandbox, data: { reason: string; status?: number; code?: ErrorCode; host?: string; port?: number }): void {
    this.#emit({ type: 'egress.rejected', sandboxId: sb.id, data });
  }

  #accept(sb: Sandbox, socket: Duplex): void {
    socket.on('error', () => socket.destroy());
    if (sb.removed) {
      socket.destroy();
      return;
    }
    const max = this.#limits.maxConnectionsPerSandbox;
    if (sb.sockets.size >= max) {
      const err = new SandglassError('capacity_exhausted', `The sandbox has ${max} egress connections open, its limit; close some and retry.`, {
        details: { limit: max },
      });
      this.#rejected(sb, { reason: 'connection limit', status: err.status, code: err.code });
      replyRawAndClose(socket, errorReply(err));
      return;
    }
    sb.sockets.add(socket);
    socket.once('close', () => sb.sockets.delete(socket));
    this.#conns.set(socket, { sb });
    this.#armIdle(socket);
    this.#front.emit('connection', socket);
  }

  // Until a request arrives a connection may idle for idleTimeoutMs; node's server then closes it (keep-alive timeout
  // between requests likewise). While a request is in flight, the upstream side's timers govern.
  #armIdle(socket: Duplex): void {
    (socket as Partial<net.Socket>).setTimeout?.(this.#limits.idleTimeoutMs);
  }

  #disarmIdle(socket: Duplex): void {
    (socket as Partial<net.Socket>).setTimeout?.(0);
  }

  #onClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
    const conn = this.#conns.get(socket);
    // A client that hangs up mid-request is gone, not wrong: nothing to answer or report.
    if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || !socket.writable || !conn) {
      socket.destroy();
      return;
    }
    const se =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? new SandglassError('invalid_argument', `The request's headers exceed ${this.#limits.maxHeaderBytes} bytes.`, {
            details: { field: 'headers', rule: `at most ${this.#limits.maxHeaderBytes} bytes` },
          })
        : new SandglassError('invalid_argument', `The request is not valid HTTP/1.1 (${err.code ?? err.message}).`, {
            details: { field: 'request', rule: 'valid HTTP/1.1' },
          });
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
    this.#rejected(conn.sb, { reason: se.message, status, code: se.code, ...(conn.tunnel ? { host: conn.tunnel.host.host, port: conn.tunnel.port } : {}) });
    replyRawAndClose(socket, errorReply(se, status));
  }

  #refuseRaw(owner: Duplex, socket: Duplex, err: SandglassError): void {
    const conn = this.#conns.get(owner) ?? this.#conns.get(socket);
    if (conn) this.#rejected(conn.sb, { reason: err.message, status: err.status, code: err.code });
    replyRawAndClose(socket, errorReply(err));
  }

  // ---- CONNECT ----------------------------------------------------------------------------------------------------

  async #onConnect(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const conn = this.#conns.get(socket);
    if (!conn) return void socket.destroy();
    const { sb } = conn;
    this.#disarmIdle(socket);
    const started = this.#clock.nowMs();
    const target = parseHostPort(req.url ?? '');
    if (!target) {
      const err = new SandglassError('invalid_argument', `CONNECT target '${(req.url ?? '').slice(0, 300)}' is not host:port with a port from 1 to 65535.`, {
        details: { field: 'target', rule: 'host:port, port 1-65535' },
      });
      this.#rejected(sb, { reason: err.message, status: 400, code: err.code });
      return replyRawAndClose(socket, errorReply(err));
    }
    const ex: Ex = this.#newEx(sb, started, { host: target.host.host, port: target.port, scheme: 'tunnel', method: 'CONNECT', path: '' });
    const refuse = (err: SandglassError) => {
      ex.status = err.status;
      ex.code = err.code;
      ex.allowed = ex.allowed && !REFUSALS.has(err.code);
      if (!REFUSALS.has(err.code)) ex.error = err.message;
      this.#report(ex);
      replyRawAndClose(socket, errorReply(err));
    };
    const d = decide(sb.policy, { host: target.host.host, port: target.port });
    ex.reason = d.reason;
    if (d.rule) ex.rule = d.rule;
    if (!d.allowed) {
      ex.allowed = false;
      return refuse(this.#denied(ex, d.reason, `The sandbox's policy does not allow ${destName(target)} (${d.reason}).`));
    }
    // The leaf is minted while DNS answers (cached per host afterwards).
    const leaf = sb.ca.leafContext(target.host.host);
    leaf.catch(() => undefined);
    let addresses: string[];
    try {
      addresses = await this.#resolve(ex, target);
    } catch (err) {
      return refuse(err instanceof SandglassError ? err : upstreamError(err, { ...target, scheme: 'https' }, this.#ms(), false));
    }
    if (socket.destroyed || sb.removed) return;
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length) socket.unshift(head);
    const first = await this.#firstByte(socket);
    if (first === undefined) return void socket.destroy();
    const tunnel = { host: target.host, port: target.port, addresses, tls: first === TLS_HANDSHAKE };
    if (!tunnel.tls) {
      // Plain HTTP through the tunnel (ws:// and http:// clients behind a proxy): same rules, no interception needed.
      this.#conns.set(socket, { sb, tunnel });
      this.#armIdle(socket);
      this.#inner.emit('connection', socket);
      return;
    }
    let context: tls.SecureContext;
    try {
      context = await leaf;
    } catch (err) {
      this.#log.error({ err, sandboxId: sb.id }, 'minting a leaf certificate failed');
      return void socket.destroy();
    }
    if (socket.destroyed || sb.removed) return;
    const tlsSocket = new tls.TLSSocket(socket as net.Socket, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    this.#conns.set(tlsSocket, { sb, tunnel });
    let secure = false;
    tlsSocket.on('error', (err: NodeJS.ErrnoException) => {
      if (!secure) this.#rejected(sb, { reason: `client TLS handshake failed (${err.code ?? err.message})`, host: target.host.host, port: target.port });
      tlsSocket.destroy();
      socket.destroy();
    });
    tlsSocket.once('secure', () => {
      secure = true;
      (socket as Partial<net.Socket>).setTimeout?.(0);
      this.#armIdle(tlsSocket);
      this.#inner.emit('connection', tlsSocket);
    });
    (socket as Partial<net.Socket>).setTimeout?.(this.#limits.idleTimeoutMs, () => {
      if (!secure) socket.destroy();
    });
  }

  #firstByte(socket: Duplex): Promise<number | undefined> {
    return new Promise((resolve) => {
      const done = (v: number | undefined) => {
        clearTimeout(timer);
        socket.off('readable', onReadable);
        socket.off('end', onEnd);
        socket.off('close', onEnd);
        resolve(v);
      };
      const onReadable = () => {
        const chunk = socket.read() as Buffer | null;
        if (chunk === null) return;
        socket.unshift(chunk);
        done(chunk[0]);
      };
      const onEnd = () => done(undefined);
      const timer = setTimeout(() => done(undefined), this.#limits.idleTimeoutMs);
      socket.on('readable', onReadable);
      socket.once('end', onEnd);
      socket.once('close', onEnd);
      onReadable();
    });
  }

  // ---- destinations -----------------------------------------------------------------------------------------------

  #ms(): { connect: number; response: number; idle: number } {
    return { connect: this.#limits.connectTimeoutMs, response: this.#limits.upstreamResponseTimeoutMs, idle: this.#limits.idleTimeoutMs };
  }

  #denied(ex: Ex, reason: string, message: string, extra: Record<string, unknown> = {}): SandglassError {
    ex.allowed = false;
    ex.reason = reason;
    return new SandglassError('egress_denied', message, { details: { host: ex.host, port: ex.port, ...(ex.rule ? { rule: ex.rule } : {}), reason, ...extra } });
  }

  /** Resolves once and vets every answer: one internal address without an explicit IP rule refuses the destination. */
  async #resolve(ex: Ex, dest: { host: CanonicalHost; port: number }): Promise<string[]> {
    let answers: string[];
    if (dest.host.kind !== 'name') answers = [dest.host.host];
    else {
      try {
        answers = await withTimeout(this.#lookup(dest.host.host), this.#limits.connectTimeoutMs);
      } catch (err) {
        if (err instanceof UpstreamTimeout)
          throw new SandglassError('timeout', `Resolving ${dest.host.host} took longer than ${this.#limits.connectTimeoutMs} ms.`, {
            details: { host: dest.host.host, port: dest.port, phase: 'dns' },
          });
        throw new SandglassError('gateway_unavailable', `${dest.host.host} could not be resolved.`, { details: { host: dest.host.host, port: dest.port } });
      }
      if (!Array.isArray(answers) || answers.length === 0)
        throw new SandglassError('gateway_unavailable', `${dest.host.host} resolves to no address.`, { details: { host: dest.host.host, port: dest.port } });
    }
    const vetted: string[] = [];
    for (const a of answers) {
      const ip = typeof a === 'string' ? canonicalIp(a) : undefined;
      if (ip === undefined)
        throw this.#denied(ex, 'resolver returned a non-address', `Resolving ${dest.host.host} returned something that is not an IP address.`);
      vetted.push(ip);
    }
    this.#vet(ex, dest, vetted);
    return vetted;
  }

  /** Refuses the destination when any of its addresses is internal or the node's own, unless the operator opened it. */
  #vet(ex: Ex, dest: { host: CanonicalHost; port: number }, addresses: string[]): void {
    let own: ReadonlySet<string>;
    try {
      own = this.#nodeAddresses();
    } catch {
      throw this.#denied(ex, 'internal address', "The node's own addresses could not be listed, so no destination can be vetted.");
    }
    for (const ip of addresses) {
      const range = vetAddress(ip, dest.port, { privateAllow: this.#privateAllow, nodeAddresses: own });
      if (range === undefined) continue;
      const via = dest.host.kind === 'name' ? `${dest.host.host} resolves to ${ip}` : `${ip} is`;
      throw this.#denied(
        ex,
        'internal address',
        `${via} in ${range} space, which sandboxes cannot reach; only the node's operator can open a specific private destination.`,
        { address: ip, range },
      );
    }
  }

  // ---- requests ---------------------------------------------------------------------------------------------------

  #newEx(sb: Sandbox, startedAtMs: number, f: { host: string; port: number; scheme: Ex['scheme']; method: string; path: string }): Ex {
    return { sb, startedAtMs, reported: false, ...f, allowed: true, reason: '', secrets: [], bytesUp: 0, bytesDown: 0 };
  }

  #report(ex: Ex): void {
    if (ex.reported) return;
    ex.reported = true;
    const { sb, startedAtMs, reported: _r, ...data } = ex;
    this.#emit({ type: 'egress.request', sandboxId: sb.id, data: { ...data, durationMs: Math.max(0, this.#clock.nowMs() - startedAtMs) } });
  }

  /** The destination of a request: the verified CONNECT target inside a tunnel, else its absolute-form URI. */
  #destOf(conn: Conn, url: string, ex: Ex): { dest: Dest; target: string } {
    const abs = /^(https?):\/\/([^/?#]*)(.*)$/is.exec(url);
    if (conn.tunnel) {
      const t = conn.tunnel;
      const dest: Dest = { host: t.host, port: t.port, scheme: t.tls ? 'https' : 'http', pinned: t.addresses };
      ex.host = t.host.host;
      ex.port = t.port;
      ex.scheme = dest.scheme;
      if (abs) {
        const hp = parseHostPort(abs[2]!, abs[1]!.toLowerCase() === 'https' ? 443 : 80);
        if (!hp || hp.host.host !== t.host.host || hp.port !== t.port) {
          throw this.#denied(ex, 'target does not match the CONNECT target', `The request names ${abs[2]}, but the tunnel was opened to ${destName(t)}.`);
        }
        return { dest, target: originForm(abs[3] ?? '') };
      }
      if (!url.startsWith('/'))
        throw new SandglassError('invalid_argument', 'The request target must be a path (origin-form).', { details: { field: 'target', rule: 'origin-form' } });
      return { dest, target: url };
    }
    if (!abs) {
      throw new SandglassError('invalid_argument', 'Send requests through this proxy in absolute form (GET http://host/path) or use CONNECT.', {
        details: { field: 'target', rule: 'absolute-form http:// URI or CONNECT' },
      });
    }
    if (abs[1]!.toLowerCase() !== 'http') {
      throw new SandglassError('invalid_argument', 'Use CONNECT for https:// destinations.', {
        details: { field: 'target', rule: 'http:// (https through CONNECT)' },
      });
    }
    if (abs[2]!.includes('@'))
      throw new SandglassError('invalid_argument', 'The request URI must not carry credentials (user@host).', {
        details: { field: 'target', rule: 'no userinfo' },
      });
    const hp = parseHostPort(abs[2]!, 80);
    if (!hp)
      throw new SandglassError('invalid_argument', `'${abs[2]!.slice(0, 300)}' is not a valid host and port.`, {
        details: { field: 'target', rule: 'host[:port], port 1-65535' },
      });
    ex.host = hp.host.host;
    ex.port = hp.port;
    ex.scheme = 'http';
    return { dest: { host: hp.host, port: hp.port, scheme: 'http' }, target: originForm(abs[3] ?? '') };
  }

  #checkHost(pairs: HeaderPairs, dest: Dest, ex: Ex): void {
    const hosts = headerValues(pairs, 'host');
    if (hosts.length !== 1)
      throw new SandglassError('invalid_argument', 'The request must carry exactly one Host header.', { details: { field: 'host', rule: 'exactly one' } });
    // No port in Host is accepted for any target port; a port, if given, must be the target's.
    const hp = parseHostPort(hosts[0]!.trim(), dest.port);
    if (!hp || hp.host.host !== dest.host.host || hp.port !== dest.port) {
      throw this.#denied(
        ex,
        'Host header does not match the target',
        `The Host header names '${hosts[0]!.slice(0, 300)}', but the request goes to ${destName(dest)}; requests go only where the connection was opened to.`,
      );
    }
  }

  /** Policy, destination, Host check, secret scope, approvals and substitution; what is sent upstream. */
  async #prepare(
    conn: Conn,
    req: IncomingMessage,
    ex: Ex,
    signal: AbortSignal,
    /** Absent for upgrades (no body; the Upgrade header is kept). */
    readBody: ((needed: boolean) => Promise<Buffer | undefined>) | undefined,
  ): Promise<PrepareResult> {
    const { sb } = conn;
    const { dest, target } = this.#destOf(conn, req.url ?? '', ex);
    const qi = target.indexOf('?');
    const rawPath = qi < 0 ? target : target.slice(0, qi);
    const query = qi < 0 ? '' : target.slice(qi);
    const path = normalizePath(rawPath);
    ex.path = path;
    // Servers resolve dot segments: what is judged and what is sent must be the same path.
    const forwardTarget = path === rawPath ? target : path + query;
    const pairs = pairsOf(req.rawHeaders);
    this.#checkHost(pairs, dest, ex);
    const d = decide(sb.policy, { host: dest.host.host, port: dest.port, method: ex.method, path: rawPath });
    ex.reason = d.reason;
    if (d.rule) ex.rule = d.rule;
    else delete ex.rule;
    if (!d.allowed) throw this.#denied(ex, d.reason, `The sandbox's policy does not allow ${ex.method} ${destName(dest)}${path} (${d.reason}).`);
    let addresses: string[];
    if (dest.pinned) {
      this.#vet(ex, dest, dest.pinned);
      addresses = dest.pinned;
    } else addresses = await this.#resolve(ex, dest);

    const headers = endToEnd(pairs, readBody ? [] : ['upgrade']).filter(([k]) => k.toLowerCase() !== 'expect');
    const secrets = await this.#currentSecrets(sb);
    const usable = secrets.filter((s): s is CompiledSecret => !('unusable' in s));
    const scan = new SecretScan(secrets, dest.host, dest.port, dest.scheme, readBody === undefined);
    for (const [k, v] of headers) {
      scan.text(k, 'header');
      scan.text(v, 'header');
      const basic = basicCredentials(k, v);
      if (basic !== undefined) scan.text(basic, 'header');
    }
    scan.text(forwardTarget, 'url');
    scan.injections();
    const media = mediaType(req.headers['content-type']);
    const scanTypes = usable.flatMap((s) => s.bodyTypes);
    let body: Buffer | undefined;
    if (readBody) {
      const scanned = typeListed(scanTypes, media);
      if (scanned) {
        const enc = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
        if (enc !== 'identity')
          throw this.#denied(
            ex,
            'compressed body cannot be scanned',
            `A ${media} body is searched for secret placeholders, which a ${enc}-encoded body hides; send it uncompressed.`,
          );
      }
      body = await readBody(scanned);
      if (body) scan.text(body.toString('latin1'), 'body', media);
    }
    const { used, strays } = scan;
    if (strays.size > 0) {
      for (const [s, { where, reason }] of strays) {
        this.#emit({
          type: 'egress.secret_scope',
          sandboxId: sb.id,
          data: { secret: s.binding.name, host: dest.host.host, port: dest.port, method: ex.method, path, where, reason },
        });
      }
      const [first, why] = [...strays.entries()][0]!;
      const names = [...strays.keys()].map((s) => s.binding.name);
      ex.allowed = false;
      ex.reason = 'secret placeholder outside its scope';
      throw new SandglassError(
        'egress_secret_scope',
        `The request to ${dest.scheme}://${destName(dest)} carries the placeholder of secret '${first.binding.name}', which cannot be used there (${why.reason}); it was blocked and nothing was substituted.`,
        {
          details: { host: dest.host.host, port: dest.port, secrets: names, reason: why.reason },
        },
      );
    }

    const values = new Map<CompiledSecret, string>();
    for (const u of used.values()) {
      const b = u.secret.binding;
      if (b.approval === 'required') await this.#approve(sb, ex, b.name, dest, path, signal);
    }
    for (const u of used.values()) {
      const v = await this.#valueOf(u.secret.binding);
      if (typeof v !== 'string' || v.length < 4)
        throw this.#denied(
          ex,
          'secret value too short',
          `Secret '${u.secret.binding.name}' has a value shorter than 4 characters, too short to keep out of responses and records.`,
        );
      if (INVALID_HEADER_VALUE.test(v) && u.inHead)
        throw this.#denied(
          ex,
          'secret value cannot be sent in a header',
          `Secret '${u.secret.binding.name}' has a value with control characters, which cannot go into a header or URL.`,
        );
      values.set(u.secret, v);
    }
    ex.secrets = [...used.keys()].map((s) => s.binding.name);

    const out = substituteRequest({
      values,
      used,
      headers,
      target: forwardTarget,
      body,
      media,
      placeholders: secrets.map((s) => s.binding.placeholder),
      record: this.#recordBytes !== undefined,
    });
    // An exchange that carries a secret asks for an uncompressed answer, so an echoed value can be found and masked.
    if (values.size > 0) out.headers = [...out.headers.filter(([k]) => k.toLowerCase() !== 'accept-encoding'), ['accept-encoding', 'identity']];
    return { dest, addresses, prep: out };
  }

  /** Every bound secret's configuration as it is now; one that cannot be read or is not valid is unusable (fail closed). */
  async #currentSecrets(sb: Sandbox): Promise<(CompiledSecret | UnusableSecret)[]> {
    return Promise.all(
      sb.secrets.map(async (b): Promise<CompiledSecret | UnusableSecret> => {
        const binding = { name: b.name, placeholder: b.placeholder };
        try {
          return compileSecret(binding, await b.current(), `secret ${b.name}`);
        } catch (err) {
          if (err instanceof SandglassError && err.code === 'secret_not_found') return { binding, unusable: 'the secret no longer exists' };
          if (err instanceof SandglassError && err.code === 'invalid_argument') return { binding, unusable: `its configuration is not valid: ${err.message}` };
          this.#log.error({ secret: b.name, sandboxId: sb.id, errorName: (err as Error)?.name }, 'reading a secret configuration failed');
          return { binding, unusable: 'its configuration could not be read' };
        }
      }),
    );
  }

  /** The value, decrypted now. A failure is reported without its message, which could quote what it failed on. */
  async #valueOf(b: ResolvedBinding): Promise<string> {
    try {
      return (await b.value()).reveal();
    } catch (err) {
      if (err instanceof SandglassError) throw err;
      this.#log.error({ secret: b.name, errorName: (err as Error)?.name, errorCode: (err as NodeJS.ErrnoException)?.code }, 'reading a secret value failed');
      throw new SandglassError('internal', `Secret '${b.name}' could not be read.`);
    }
  }

  async #approve(sb: Sandbox, ex: Ex, secret: string, dest: Dest, path: string, signal: AbortSignal): Promise<void> {
    let requestId: string | undefined;
    const input = { sandboxId: sb.id, secret, host: dest.host.host, port: dest.port, method: ex.method, path };
    const result = await this.#opts.approvals.request(input, {
      signal,
      onRequested: (r) => {
        requestId = r.requestId;
        this.#emit({
          type: 'secret.approval_requested',
          sandboxId: sb.id,
          data: { requestId: r.requestId, secret, host: input.host, port: input.port, method: input.method, path, expiresAtMs: r.expiresAtMs },
        });
      },
    });
    const grantUntilMs = this.#opts.approvals.grantUntil(sb.id, secret);
    const decision = signal.aborted && result === 'denied' ? 'cancelled' : result;
    this.#emit({
      type: 'secret.approval_decided',
      sandboxId: sb.id,
      data: { ...(requestId ? { requestId } : {}), secret, decision, ...(result === 'approved' && grantUntilMs !== undefined ? { grantUntilMs } : {}) },
    });
    if (result !== 'approved') {
      ex.allowed = false;
      ex.reason = result === 'timeout' ? 'approval timed out' : 'approval denied';
      throw new SandglassError(
        'egress_approval_denied',
        result === 'timeout'
          ? `Using secret '${secret}' needs approval, and none came in time.`
          : `Using secret '${secret}' for ${destName(dest)} was not approved.`,
        { details: { secret, host: dest.host.host, port: dest.port, decision: result, ...(requestId ? { requestId } : {}) } },
      );
    }
  }

  /** Reads a body to be scanned (up to the limit), or nothing when it streams through. */
  #bodyReader(req: IncomingMessage, ex: Ex): (needed: boolean) => Promise<Buffer | undefined> {
    return (needed) => {
      if (!needed || !hasBody(req)) return Promise.resolve(undefined);
      const max = this.#limits.maxScannedBodyBytes;
      const declared = Number(req.headers['content-length']);
      if (declared > max) return Promise.reject(this.#tooLarge(ex, max));
      return new Promise<Buffer>((resolve, reject) => {
        const parts: Buffer[] = [];
        let size = 0;
        const onData = (c: Buffer) => {
          size += c.length;
          if (size > max) {
            req.off('data', onData);
            req.pause();
            reject(this.#tooLarge(ex, max));
            return;
          }
          parts.push(c);
        };
        req.on('data', onData);
        req.once('end', () => resolve(Buffer.concat(parts)));
        req.once('error', reject);
        req.once('close', () => {
          if (!req.complete)
            reject(
              new SandglassError('invalid_argument', 'The client closed the request before its body ended.', { details: { field: 'body', rule: 'complete' } }),
            );
        });
      });
    };
  }

  #tooLarge(ex: Ex, max: number): SandglassError {
    ex.allowed = false;
    ex.reason = 'scanned body too large';
    return new SandglassError(
      'payload_too_large',
      `Bodies of this type are searched for secret placeholders and may be at most ${max} bytes; this one is larger.`,
      { details: { limit: max } },
    );
  }

  async #onRequest(req: IncomingMessage, res: ServerResponse, inner: boolean): Promise<void> {
    const conn = this.#conns.get(req.socket);
    if (!conn || conn.sb.removed) return void req.socket.destroy();
    this.#disarmIdle(req.socket);
    const ex = this.#newEx(conn.sb, this.#clock.nowMs(), {
      host: conn.tunnel?.host.host ?? '',
      port: conn.tunnel?.port ?? 0,
      scheme: inner && conn.tunnel?.tls ? 'https' : 'http',
      method: req.method ?? 'GET',
      path: '',
    });
    const abort = new AbortController();
    res.once('close', () => abort.abort());
    try {
      const { dest, addresses, prep } = await this.#prepare(conn, req, ex, abort.signal, this.#bodyReader(req, ex));
      if (abort.signal.aborted) {
        ex.reason = 'client closed';
        return this.#report(ex);
      }
      this.#forward(conn.sb, ex, req, res, dest, addresses, prep);
    } catch (err) {
      this.#fail(ex, req, res, err);
    }
  }

  /** Answers with the error (or cuts a response already under way) and reads away what is left of the request body. */
  #fail(ex: Ex, req: IncomingMessage, res: ServerResponse, err: unknown): void {
    const se = err instanceof SandglassError ? err : new SandglassError('internal', 'The egress proxy failed while handling this request.', { cause: err });
    if (se.code === 'internal') this.#log.error({ err, sandboxId: ex.sb.id, host: ex.host, port: ex.port }, 'egress request failed');
    if (REFUSALS.has(se.code)) ex.allowed = false;
    if (!ex.reason) ex.reason = se.message;
    if (!REFUSALS.has(se.code)) ex.error = res.destroyed && !res.writableFinished ? 'client closed' : se.message;
    ex.code = se.code;
    if (!res.headersSent && !res.destroyed) {
      const reply = errorReply(se);
      ex.status = reply.status;
      res.writeHead(reply.status, reply.headers);
      res.end(reply.body);
    } else res.destroy();
    if (!req.complete) {
      req.unpipe();
      req.resume();
    }
    this.#report(ex);
  }

  #upstreamRequest(sb: Sandbox, dest: Dest, address: string, method: string, prep: Prepared): http.ClientRequest {
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of prep.headers) {
      const cur = headers[k];
      headers[k] = cur === undefined ? v : Array.isArray(cur) ? [...cur, v] : [cur, v];
    }
    const common = { host: address, port: dest.port, method, path: prep.path, headers, setHost: false, maxHeaderSize: this.#limits.maxHeaderBytes };
    if (dest.scheme === 'https') {
      return https.request({ ...common, agent: sb.httpsAgent, ...(dest.host.kind === 'name' ? { servername: dest.host.host } : {}) });
    }
    return http.request({ ...common, agent: sb.httpAgent });
  }

  /** Arms the connect, response and idle timers of an upstream request; `onError` gets a mapped error once. */
  #watch(upReq: http.ClientRequest, dest: Dest, onError: (err: SandglassError) => void): { responded(): void } {
    let tlsStarted = false;
    let connectTimer: NodeJS.Timeout | undefined;
    let responseTimer: NodeJS.Timeout | undefined;
    let failed = false;
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      clearTimeout(connectTimer);
      clearTimeout(responseTimer);
      onError(upstreamError(err, dest, this.#ms(), tlsStarted));
    };
    upReq.on('socket', (s: net.Socket) => {
      if (upReq.reusedSocket) return;
      connectTimer = setTimeout(() => upReq.destroy(new UpstreamTimeout('connect')), this.#limits.connectTimeoutMs);
      if (dest.scheme === 'https') {
        s.once('connect', () => (tlsStarted = true));
        s.once('secureConnect', () => {
          tlsStarted = false;
          clearTimeout(connectTimer);
        });
      } else s.once('connect', () => clearTimeout(connectTimer));
    });
    upReq.setTimeout(this.#limits.idleTimeoutMs, () => upReq.destroy(new UpstreamTimeout('idle')));
    upReq.once('finish', () => {
      responseTimer = setTimeout(() => upReq.destroy(new UpstreamTimeout('response')), this.#limits.upstreamResponseTimeoutMs);
    });
    upReq.on('error', fail);
    return {
      responded: () => {
        clearTimeout(connectTimer);
        clearTimeout(responseTimer);
      },
    };
  }

  #forward(sb: Sandbox, ex: Ex, req: IncomingMessage, res: ServerResponse, dest: Dest, addresses: string[], prep: Prepared): void {
    const headers = prep.headers.filter(([k]) => !['content-length', 'transfer-encoding'].includes(k.toLowerCase()));
    const streamed = prep.body === undefined && hasBody(req);
    if (prep.body !== undefined) headers.push(['content-length', String(prep.body.length)]);
    else if (streamed) {
      if (req.headers['content-length'] !== undefined) headers.push(['content-length', req.headers['content-length']]);
      else headers.push(['transfer-encoding', 'chunked']);
    }
    const upReq = this.#upstreamRequest(sb, dest, addresses[0]!, ex.method, { ...prep, headers });
    const reqCapture = this.#recordBytes !== undefined && streamed ? new Capture(this.#recordBytes + (prep.redactor?.longestBytes ?? 0)) : undefined;
    const watch = this.#watch(upReq, dest, (err) => this.#fail(ex, req, res, err));
    res.once('close', () => {
      if (!res.writableFinished) upReq.destroy();
    });
    if (prep.body !== undefined) {
      ex.bytesUp = prep.body.length;
      upReq.end(prep.body);
    } else if (streamed) {
      req.on('data', (c: Buffer) => {
        ex.bytesUp += c.length;
        reqCapture?.add(c);
      });
      req.pipe(upReq);
    } else upReq.end();

    upReq.once('response', (upRes: IncomingMessage) => {
      watch.responded();
      const status = upRes.statusCode ?? 502;
      ex.status = status;
      let headers = endToEnd(pairsOf(upRes.rawHeaders));
      if (upRes.headers['transfer-encoding'] !== undefined || upRes.headers['content-length'] === undefined)
        headers = headers.filter(([k]) => k.toLowerCase() !== 'content-length');
      let guest: { headers: HeaderPairs; body: Readable };
      try {
        guest = this.#forGuest(upRes, prep, headers, () => res.destroy());
      } catch (err) {
        upRes.destroy();
        return this.#fail(ex, req, res, err);
      }
      const outHeaders = guest.headers;
      const resCapture = this.#recordBytes !== undefined ? new Capture(this.#recordBytes + (prep.redactor?.longestBytes ?? 0)) : undefined;
      res.writeHead(status, upRes.statusMessage, outHeaders.flat());
      upRes.on('data', (c: Buffer) => (ex.bytesDown += c.length));
      let body = guest.body;
      if (resCapture) {
        const tee = new PassThrough();
        tee.on('data', (c: Buffer) => resCapture.add(c));
        body = body.pipe(tee);
      }
      upRes.once('close', () => {
        if (!upRes.complete) res.destroy();
      });
      upRes.once('error', () => res.destroy());
      body.pipe(res);
      res.once('finish', () => {
        this.#report(ex);
        if (resCapture) {
          const reqBody = prep.recordBody ?? reqCapture?.buffer ?? Buffer.alloc(0);
          // What the guest got: decoded and masked when the exchange carried a secret, so the redactor can read it.
          this.#record(sb, ex, dest, prep, { buffer: reqBody, size: prep.recordBody?.length ?? reqCapture?.size ?? 0 }, status, outHeaders, resCapture);
        }
      });
      res.once('close', () => {
        if (!res.writableFinished) {
          ex.reason = ex.reason || 'client closed';
          this.#report(ex);
        }
      });
    });
  }

  #record(
    sb: Sandbox,
    ex: Ex,
    dest: Dest,
    prep: Prepared,
    reqBody: { buffer: Buffer; size: number },
    status: number,
    resHeaders: HeaderPairs,
    resBody: Capture,
  ): void {
    const cap = this.#recordBytes!;
    const redactor = prep.redactor;
    const r = (s: string) => (redactor ? redactor.text(s) : s);
    const origin = `${dest.scheme}://${hostForUrl(dest.host)}${dest.port === (dest.scheme === 'https' ? 443 : 80) ? '' : `:${dest.port}`}`;
    this.#emit({
      type: 'egress.exchange',
      sandboxId: sb.id,
      data: {
        scheme: dest.scheme,
        host: dest.host.host,
        port: dest.port,
        method: ex.method,
        url: origin + prep.recordUrl,
        requestHeaders: prep.recordHeaders.map(([k, v]) => [k, r(v)]),
        requestBody: recordedBody(reqBody.buffer, reqBody.size, cap, redactor),
        status,
        responseHeaders: resHeaders.map(([k, v]) => [k, r(v)]),
        responseBody: recordedBody(resBody.buffer, resBody.size, cap, redactor),
        startedAtMs: ex.startedAtMs,
        durationMs: Math.max(0, this.#clock.nowMs() - ex.startedAtMs),
      },
    });
  }

  /**
   * A response as the guest may see it. Untouched unless the exchange carried a secret; then every header is masked and
   * the body is decoded (gzip, deflate, br — at most maxDecodedBodyBytes, or it is cut) and masked, so an echoed value
   * reaches the guest in no encoding. A body in a coding the proxy cannot read is refused (gateway_unavailable).
   */
  #forGuest(upRes: IncomingMessage, prep: Prepared, headers: HeaderPairs, onBodyError: () => void): { headers: HeaderPairs; body: Readable } {
    if (prep.sensitive.length === 0) return { headers, body: upRes };
    let out: HeaderPairs = headers.map(([k, v]) => [k, maskText(v, prep.sensitive)]);
    const codings = (upRes.headers['content-encoding'] ?? '')
      .split(',')
      .map((c) => c.trim().toLowerCase())
      .filter((c) => c !== '' && c !== 'identity');
    const stages: Duplex[] = [];
    if (codings.length > 0) {
      // Codings are listed in the order they were applied: undo the last first.
      for (const c of [...codings].reverse()) stages.push(decoderFor(c, upRes));
      stages.push(new ByteCap(this.#limits.maxDecodedBodyBytes));
      out = out.filter(([k]) => !['content-encoding', 'content-length'].includes(k.toLowerCase()));
    }
    stages.push(new ValueMask(prep.sensitive));
    const body = pipeline([upRes, ...stages] as unknown as [Readable, ...Duplex[]], (err) => {
      if (err) onBodyError();
    }) as unknown as Readable;
    return { headers: out, body };
  }

  // ---- upgrades (WebSocket) ----------------------------------------------------------------------------------------

  async #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, inner: boolean): Promise<void> {
    const conn = this.#conns.get(req.socket) ?? this.#conns.get(socket);
    if (!conn || conn.sb.removed) return void socket.destroy();
    this.#disarmIdle(socket);
    const ex = this.#newEx(conn.sb, this.#clock.nowMs(), {
      host: conn.tunnel?.host.host ?? '',
      port: conn.tunnel?.port ?? 0,
      scheme: inner && conn.tunnel?.tls ? 'https' : 'http',
      method: req.method ?? 'GET',
      path: '',
    });
    const abort = new AbortController();
    socket.once('close', () => abort.abort());
    const refuse = (err: SandglassError) => {
      if (REFUSALS.has(err.code)) ex.allowed = false;
      ex.code = err.code;
      ex.status = err.status;
      if (!ex.reason) ex.reason = err.message;
      if (!REFUSALS.has(err.code)) ex.error = err.message;
      this.#report(ex);
      replyRawAndClose(socket, errorReply(err));
    };
    let prepared: PrepareResult;
    try {
      prepared = await this.#prepare(conn, req, ex, abort.signal, undefined);
    } catch (err) {
      return refuse(
        err instanceof SandglassError ? err : new SandglassError('internal', 'The egress proxy failed while handling this upgrade.', { cause: err }),
      );
    }
    if (socket.destroyed) return;
    const { dest, addresses, prep } = prepared;
    const headers = prep.headers.filter(([k]) => !['connection', 'content-length', 'transfer-encoding'].includes(k.toLowerCase()));
    headers.push(['connection', 'Upgrade']);
    const upReq = this.#upstreamRequest(conn.sb, dest, addresses[0]!, ex.method, { ...prep, headers });
    const watch = this.#watch(upReq, dest, refuse);
    socket.once('close', () => upReq.destroy());
    upReq.end();
    upReq.once('upgrade', (upRes: IncomingMessage, upSocket: Duplex, upHead: Buffer) => {
      watch.responded();
      ex.status = upRes.statusCode ?? 101;
      const outHeaders = prep.sensitive.length
        ? pairsOf(upRes.rawHeaders).map(([k, v]): [string, string] => [k, maskText(v, prep.sensitive)])
        : pairsOf(upRes.rawHeaders);
      socket.write(rawHead(ex.status, outHeaders, upRes.statusMessage));
      if (upHead.length) socket.write(upHead);
      if (head.length) upSocket.write(head);
      upSocket.on('data', (c: Buffer) => (ex.bytesDown += c.length));
      socket.on('data', (c: Buffer) => (ex.bytesUp += c.length));
      upSocket.pipe(socket);
      socket.pipe(upSocket);
      const close = () => {
        upSocket.destroy();
        socket.destroy();
        this.#report(ex);
      };
      upSocket.once('close', close);
      socket.once('close', close);
      upSocket.on('error', close);
      (upSocket as Partial<net.Socket>).setTimeout?.(this.#limits.idleTimeoutMs, close);
    });
    upReq.once('response', (upRes: IncomingMessage) => {
      // The upstream declined the upgrade: pass its answer on (checked like any response) and close.
      watch.responded();
      let guest: { headers: HeaderPairs; body: Readable };
      try {
        guest = this.#forGuest(
          upRes,
          prep,
          endToEnd(pairsOf(upRes.rawHeaders)).filter(([k]) => k.toLowerCase() !== 'content-length'),
          () => socket.destroy(),
        );
      } catch (err) {
        upRes.destroy();
        return refuse(err as SandglassError);
      }
      ex.status = upRes.statusCode ?? 502;
      socket.write(rawHead(ex.status, [...guest.headers, ['connection', 'close']], upRes.statusMessage));
      upRes.on('data', (c: Buffer) => (ex.bytesDown += c.length));
      guest.body.pipe(socket);
      guest.body.once('end', () => this.#report(ex));
    });
  }
}

const DECODERS: Record<string, () => Duplex> = {
  gzip: () => zlib.createGunzip(),
  'x-gzip': () => zlib.createGunzip(),
  deflate: () => zlib.createInflate(),
  br: () => zlib.createBrotliDecompress(),
};

function decoderFor(coding: string, upRes: IncomingMessage): Duplex {
  const make = DECODERS[coding];
  if (!make) {
    throw new SandglassError(
      'gateway_unavailable',
      `The upstream answered a request that carried a secret in the '${coding.slice(0, 40)}' content coding, which the proxy cannot read to keep the secret out of it; the response was withheld.`,
      {
        details: { contentEncoding: String(upRes.headers['content-encoding']).slice(0, 100) },
      },
    );
  }
  return make();
}

/** Fails the stream once more than `maxBytes` pass: a decompression bomb stops here. */
class ByteCap extends Transform {
  #seen = 0;
  constructor(readonly maxBytes: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.#seen += chunk.length;
    if (this.#seen > this.maxBytes) return cb(new Error(`decoded body larger than ${this.maxBytes} bytes`));
    cb(null, chunk);
  }
}

/** The path and query of an absolute URI's remainder ('' → '/', '?q' → '/?q'). */
function originForm(rest: string): string {
  return rest === '' ? '/' : rest.startsWith('/') ? rest : `/${rest}`;
}

function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}
