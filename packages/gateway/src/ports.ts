// Inbound access to guest ports: `<port>-<id>.<domain>` and `/v1/sandboxes/{id}/ports/{port}/…` relayed to guest loopback.
import http from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import {
  SandglassError,
  invalidArgument,
  portUrlKey,
  signPortUrlToken,
  toSandglassError,
  trafficTokenKey,
  verifyPortUrlToken,
  verifyTrafficToken,
  type NodeKeys,
  type PortUrlClaims,
} from '@sandglass/core';
import { AgentError, type NetConnection } from '@sandglass/agent-client';
import { accessTokenHook, checkAccessToken } from './auth.js';
import { specRoutes } from './spec.js';
import { ENVD_PORT } from './e2b/envd.js';
import { mapAgentError } from './agent-link.js';
import type { Gateway } from './gateway.js';
import type { Sandbox } from './sandbox.js';

/** The default domain of the host-name form: browsers resolve every `*.localhost` name to loopback without DNS. */
export const DEFAULT_PORT_DOMAIN = 'sandglass.localhost';
/** Where a browser sends the sandbox's access token (Authorization stays the guest application's). */
export const PORT_TOKEN_HEADER = 'x-sandglass-access-token';
/** E2B's header for its `trafficAccessToken`, which opens the guest ports of one sandbox and nothing else. */
export const TRAFFIC_TOKEN_HEADER = 'e2b-traffic-access-token';
/** The query parameter of a signed URL, and the cookie it is exchanged for. */
export const PORT_URL_PARAM = 'sandglass_url_token';
export const PORT_COOKIE = 'sandglass_port_access';
/** A signed URL lives at most this long. */
export const MAX_PORT_URL_TTL_S = 24 * 3600;
export const DEFAULT_PORT_URL_TTL_S = 600;
/** Guest connections open at once per sandbox through its ports; a client past it gets capacity_exhausted. */
export const MAX_PORT_CONNECTIONS = 256;
/** A relayed connection with no byte moving either way for this long is closed. */
const PORT_IDLE_MS = 5 * 60_000;

/** Hop-by-hop headers (RFC 9110 §7.6.1): each side of the relay has its own connection. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

interface Target {
  sandboxId: string;
  port: number;
  /** The path the guest sees: the request's own (host form) or what follows `/ports/{port}` (path form). */
  path: string;
  /** `tunnel`: raw TCP (port-forward), the gateway answers the upgrade itself and the guest sees only the bytes after it. */
  via: 'host' | 'path' | 'tunnel';
}

/** What a request's credential allows beyond relaying: a signed URL's first use is answered with its cookie. */
interface Admission {
  redirectCookie?: { value: string; maxAgeS: number };
  /** The credential it carried for the sandbox, as received (not just a public port): only such a request may resume it. */
  credential?: string;
}

/** The upgrade token of a raw TCP tunnel (`/v1/sandboxes/{id}/tunnel/{port}`). */
export const TUNNEL_PROTOCOL = 'sandglass-tcp';
const TUNNEL_FORM = /^\/v1\/sandboxes\/([A-Za-z0-9_]{1,64})\/tunnel\/([^/?]*)(\?.*)?$/;
const PATH_FORM = /^\/v1\/sandboxes\/([A-Za-z0-9_]{1,64})\/ports\/([^/?]*)(\/[^?]*)?(\?.*)?$/;

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A port from a URL, or NaN: it is checked only after the credential, so a stranger learns nothing from the answer. */
function parsePort(raw: string): number {
  return /^\d{1,5}$/.test(raw) && Number(raw) >= 1 && Number(raw) <= 65535 ? Number(raw) : Number.NaN;
}

/** Guest ports the gateway serves, who may open them, and the relay itself. One per data-plane server. */
export class GuestPorts {
  readonly domain: string;
  readonly #hostForm: RegExp;
  readonly #urlKey: Buffer;
  readonly #trafficKey: Buffer;
  /** The gateway's public ports, per sandbox: read once here, so deciding a port needs no credential touches nothing else. */
  readonly #public: Map<string, Set<number>>;
  readonly #open = new Map<string, number>();
  /** The bytes Node's parser read past an upgrade request's head, handed over with the socket. */
  readonly #upgradeHeads = new WeakMap<http.IncomingMessage, Buffer>();

  constructor(
    private readonly gw: Gateway,
    private readonly keys: NodeKeys,
    opts: { domain?: string } = {},
  ) {
    this.#public = gw.publicPorts;
    this.domain = (opts.domain ?? DEFAULT_PORT_DOMAIN).toLowerCase();
    if (!/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(this.domain)) throw new Error(`port domain ${opts.domain} is not a DNS name`);
    this.#hostForm = new RegExp(`^(\\d{1,5})-([A-Za-z0-9_]{1,64})\\.${this.domain.replaceAll('.', '\\.')}(?::\\d{1,5})?$`, 'i');
    this.#urlKey = portUrlKey(keys.accessToken);
    this.#trafficKey = trafficTokenKey(keys.accessToken);
  }

  /** Serves the host form at the root, before any route: every path of such a host is the guest's. */
  install(app: FastifyInstance): void {
    app.server.prependListener('upgrade', (req: http.IncomingMessage, _socket: Duplex, head: Buffer) => this.#upgradeHeads.set(req, head));
    app.addHook('onRequest', async (req, reply) => {
      const target = this.hostTarget(req.raw);
      if (target) return this.serve(req, reply, target);
    });
  }

  /** The `<port>-<id>.<domain>` target of a request, or undefined when its Host is another. */
  hostTarget(raw: http.IncomingMessage): Target | undefined {
    const m = this.#hostForm.exec(header(raw, 'host') ?? '');
    // envd's port is E2B's daemon, which the gateway itself serves (e2b/envd.ts), never a guest server.
    if (!m || Number(m[1]) === ENVD_PORT) return undefined;
    return { port: Number(m[1]), sandboxId: m[2]!, path: raw.url ?? '/', via: 'host' };
  }

  /** The path-form target: `/v1/sandboxes/{id}/ports/{port}/rest`. */
  pathTarget(raw: http.IncomingMessage): Target {
    const m = PATH_FORM.exec(raw.url ?? '');
    if (!m) throw new SandglassError('not_found', 'No route.');
    return { sandboxId: m[1]!, port: parsePort(m[2]!), path: `${m[3] ?? '/'}${m[4] ?? ''}`, via: 'path' };
  }

  /** The raw TCP form: only as an upgrade to TUNNEL_PROTOCOL. */
  tunnelTarget(raw: http.IncomingMessage): Target {
    const m = TUNNEL_FORM.exec(raw.url ?? '');
    if (!m) throw new SandglassError('not_found', 'No route.');
    if (header(raw, 'upgrade')?.toLowerCase() !== TUNNEL_PROTOCOL) throw invalidArgument('upgrade', `a tunnel is an HTTP/1.1 upgrade to ${TUNNEL_PROTOCOL}`);
    return { sandboxId: m[1]!, port: parsePort(m[2]!), path: m[3] ?? '', via: 'tunnel' };
  }

  isPublic(sandboxId: string, port: number): boolean {
    return this.#public.get(sandboxId)?.has(port) === true;
  }

  publicPorts(sandboxId: string): number[] {
    return [...(this.#public.get(sandboxId) ?? [])].sort((a, b) => a - b);
  }

  /** Opens or closes a port to requests without a credential; each change is an event of the sandbox. */
  async setPublic(sbx: Sandbox, port: number, open: boolean): Promise<void> {
    const set = this.#public.get(sbx.id) ?? new Set<number>();
    if (set.has(port) === open) return;
    if (open) set.add(port);
    else set.delete(port);
    if (set.size > 0) this.#public.set(sbx.id, set);
    else this.#public.delete(sbx.id);
    await sbx.record('port.visibility', { port, public: open });
  }

  /** A signed URL's credential for one port of one sandbox, minted for a holder of the sandbox's access token. */
  signUrl(accessToken: string, sandboxId: string, port: number, expiresInS: number): { token: string; expiresAtMs: number } {
    const nowMs = this.gw.opts.clock.nowMs();
    const { kid } = checkAccessToken(accessToken, sandboxId, this.keys, this.gw.opts.clock, this.gw.revokedKeys);
    const claims: PortUrlClaims = { sbx: sandboxId, prt: port, exp: nowMs + expiresInS * 1000, ...(kid !== undefined ? { kid } : {}) };
    return { token: signPortUrlToken(claims, this.#urlKey), expiresAtMs: claims.exp };
  }

  /** Verifies a signed URL's token (or the cookie it became) for exactly this sandbox and port. */
  #checkUrlToken(token: string, target: Target): PortUrlClaims {
    const nowMs = this.gw.opts.clock.nowMs();
    const claims = verifyPortUrlToken(token, this.#urlKey, nowMs);
    if (claims.kid !== undefined && this.gw.revokedKeys.has(claims.kid, nowMs))
      throw new SandglassError('api_key_revoked', 'The API key this port URL was obtained with was revoked.');
    if (claims.sbx !== target.sandboxId || claims.prt !== target.port)
      throw new SandglassError('permission_denied', 'This port URL is for another sandbox or port.');
    return claims;
  }

  /**
   * The browser attaches the port cookie to every request for the port's host, also to one a page of another sandbox
   * makes: all `<port>-<id>.<domain>` hosts are one site to it, so SameSite=Lax lets a WebSocket (which CORS does not
   * cover) or a form post from a hostile guest's page carry this port's cookie. Such a request names its page in
   * Origin: the cookie counts only for the port's own pages, those of the sandbox's other ports (a front end calling
   * its back end) and, in the path form, the gateway's origin. A request without Origin is a navigation or a
   * same-origin read, whose answer goes to a page of the port itself.
   */
  #checkCookieOrigin(raw: http.IncomingMessage, target: Target): void {
    const origin = header(raw, 'origin');
    if (origin === undefined) return;
    let host: string | undefined;
    try {
      host = new URL(origin).host;
    } catch {
      // `null` (a sandboxed frame, a privacy redirect): no page of this sandbox.
    }
    const ours = host !== undefined && (target.via === 'path' ? host === header(raw, 'host') : this.#hostForm.exec(host)?.[2] === target.sandboxId);
    if (!ours)
      throw new SandglassError(
        'permission_denied',
        `The port cookie opens this port only for pages of this sandbox; send ${PORT_TOKEN_HEADER} from elsewhere.`,
      );
  }

  /**
   * Who may open the port: the sandbox's access token (header), its traffic token (E2B's header), a signed URL or its
   * cookie, or nobody needed for a public port. Answers the signed URL's first use with a redirect that sets the cookie
   * (the URL token then leaves the address bar and the history). Runs before anything touches the guest.
   */
  #authenticate(raw: http.IncomingMessage, target: Target): Admission {
    const token = header(raw, PORT_TOKEN_HEADER);
    if (token !== undefined) {
      checkAccessToken(token, target.sandboxId, this.keys, this.gw.opts.clock, this.gw.revokedKeys);
      return { credential: token };
    }
    const traffic = header(raw, TRAFFIC_TOKEN_HEADER);
    if (traffic !== undefined) {
      const nowMs = this.gw.opts.clock.nowMs();
      const claims = verifyTrafficToken(traffic, this.#trafficKey, nowMs);
      if (claims.kid !== undefined && this.gw.revokedKeys.has(claims.kid, nowMs))
        throw new SandglassError('api_key_revoked', 'The API key this traffic access token was obtained with was revoked.');
      if (claims.sbx !== target.sandboxId) throw new SandglassError('permission_denied', 'This traffic access token is for another sandbox.');
      return { credential: traffic };
    }
    const q = new URL(target.path, 'http://x').searchParams.get(PORT_URL_PARAM);
    if (q !== null) {
      const claims = this.#checkUrlToken(q, target);
      const isPlainGet = (raw.method === 'GET' || raw.method === 'HEAD') && header(raw, 'upgrade') === undefined;
      const credential = q;
      return isPlainGet
        ? { credential, redirectCookie: { value: q, maxAgeS: Math.max(1, Math.floor((claims.exp - this.gw.opts.clock.nowMs()) / 1000)) } }
        : { credential };
    }
    const cookies = cookieValues(header(raw, 'cookie'), PORT_COOKIE);
    if (cookies.length > 0) {
      this.#checkCookieOrigin(raw, target);
      // A page of any host under the domain may set a cookie of this name for all of them, one the browser then sends
      // first: the cookie that verifies for this port counts, and the others are ignored rather than refusing the port.
      let refused: unknown;
      for (const cookie of cookies) {
        try {
          this.#checkUrlToken(cookie, target);
          return { credential: cookie };
        } catch (err) {
          refused = err;
        }
      }
      throw refused;
    }
    if (this.isPublic(target.sandboxId, target.port)) return {};
    throw new SandglassError('unauthenticated', `Send the sandbox's access token as ${PORT_TOKEN_HEADER}, or open a signed URL (sbx.ports.url).`);
  }

  /** Relays one request (or WebSocket upgrade) to the guest port, or answers why not. */
  async serve(req: FastifyRequest, reply: FastifyReply, target: Target): Promise<void> {
    reply.hijack();
    const raw = req.raw;
    const upgrade = header(raw, 'upgrade') !== undefined;
    const refuse = (err: unknown) => {
      const se = toSandglassError(err);
      const body = JSON.stringify(se.toBody(req.id));
      if (upgrade) {
        raw.socket.end(
          `HTTP/1.1 ${se.status} ${http.STATUS_CODES[se.status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
        );
        return;
      }
      if (!reply.raw.headersSent) reply.raw.writeHead(se.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
      else reply.raw.destroy();
      // The request's body, if any, is drained so a kept-alive connection can carry the next request.
      raw.resume();
    };
    let sbx: Sandbox;
    let auth: Admission;
    try {
      auth = this.#authenticate(raw, target);
      if (Number.isNaN(target.port)) throw invalidArgument('port', 'must be an integer from 1 to 65535');
      // Only a request that proved a credential for this sandbox is told it is paused, or resumes it (autoResume).
      sbx = auth.credential ? await this.gw.reach(target.sandboxId, auth.credential) : this.gw.get(target.sandboxId);
      if (sbx.state !== 'running') throw new SandglassError('sandbox_not_running', `Sandbox ${sbx.id} is ${sbx.state}; resume it to reach its ports.`);
    } catch (err) {
      return refuse(err);
    }
    const path = stripParam(target.path, PORT_URL_PARAM);
    if (auth.redirectCookie) {
      const cookiePath = target.via === 'path' ? `/v1/sandboxes/${target.sandboxId}/ports/${target.port}/` : '/';
      reply.raw
        .writeHead(302, {
          location: target.via === 'path' ? `/v1/sandboxes/${target.sandboxId}/ports/${target.port}${path}` : path,
          'set-cookie': `${PORT_COOKIE}=${auth.redirectCookie.value}; Max-Age=${auth.redirectCookie.maxAgeS}; Path=${cookiePath}; HttpOnly; SameSite=Lax`,
          'content-length': '0',
          'cache-control': 'no-store',
        })
        .end();
      raw.resume();
      return;
    }
    const open = this.#open.get(sbx.id) ?? 0;
    if (open >= MAX_PORT_CONNECTIONS) {
      return refuse(new SandglassError('capacity_exhausted', `Sandbox ${sbx.id} has ${MAX_PORT_CONNECTIONS} connections open through its ports; retry later.`));
    }
    this.#open.set(sbx.id, open + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const n = (this.#open.get(sbx.id) ?? 1) - 1;
      if (n > 0) this.#open.set(sbx.id, n);
      else this.#open.delete(sbx.id);
    };
    let conn: NetConnection;
    try {
      conn = await sbx.requireRunning().netDial(target.port);
    } catch (err) {
      release();
      return refuse(portError(err, target.port));
    }
    // From here on the guest (or the agent) may end the stream with an error at any moment, also after the HTTP client
    // let go of it: an error without a listener would take the whole gateway down.
    conn.on('error', () => conn.destroy());
    conn.setTimeout(PORT_IDLE_MS, () => conn.destroy(new AgentError('io', 'idle connection closed')));
    conn.once('close', release);
    const headers = forwardedHeaders(raw);
    const counts = { bytesIn: 0, bytesOut: 0 };
    const done = (status: number) =>
      void sbx
        .record('port.request', { port: target.port, via: target.via, method: raw.method, status, bytesIn: counts.bytesIn, bytesOut: counts.bytesOut })
        .catch(() => undefined);
    if (target.via === 'tunnel') {
      raw.socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${TUNNEL_PROTOCOL}\r\nconnection: Upgrade\r\n\r\n`);
      return this.#splice(raw, conn, undefined, counts, done, 101);
    }
    if (upgrade) return this.#splice(raw, conn, { path, headers }, counts, done);
    this.#proxy(raw, reply.raw, conn, path, headers, counts, done);
  }

  /** A plain request: one guest connection, the body streamed both ways, paced by each side's reader. */
  #proxy(
    raw: http.IncomingMessage,
    res: http.ServerResponse,
    conn: NetConnection,
    path: string,
    headers: [string, string][],
    counts: { bytesIn: number; bytesOut: number },
    done: (status: number) => void,
  ): void {
    const up = http.request({ method: raw.method, path, headers: Object.fromEntries(groupHeaders(headers)), createConnection: () => conn as never });
    let answered = false;
    const fail = () => {
      if (answered) return;
      answered = true;
      if (!res.headersSent) {
        const body = JSON.stringify(new SandglassError('port_not_listening', 'The guest server closed the connection without answering.').toBody());
        res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
        done(502);
      } else res.destroy();
      conn.destroy();
    };
    up.on('error', fail);
    raw.on('data', (c: Buffer) => (counts.bytesIn += c.length));
    raw.pipe(up);
    raw.on('aborted', () => up.destroy());
    up.on('response', (r) => {
      res.writeHead(r.statusCode ?? 502, r.statusMessage, responseHeaders(r.rawHeaders));
      // Server-sent events and other streamed answers reach the client as they are written.
      res.flushHeaders();
      r.on('data', (c: Buffer) => (counts.bytesOut += c.length));
      r.pipe(res);
      r.on('end', () => {
        answered = true;
        done(r.statusCode ?? 0);
      });
      r.on('error', fail);
    });
    res.on('close', () => {
      if (!answered) up.destroy();
    });
  }

  /**
   * An upgrade: a WebSocket's request head goes to the guest (`request`), a tunnel's does not; then bytes are piped
   * both ways until either side ends.
   */
  #splice(
    raw: http.IncomingMessage,
    conn: NetConnection,
    request: { path: string; headers: [string, string][] } | undefined,
    counts: { bytesIn: number; bytesOut: number },
    done: (status: number) => void,
    knownStatus = 0,
  ): void {
    const client = raw.socket;
    if (request) {
      const lines = [`${raw.method} ${request.path} HTTP/1.1`];
      for (const [k, v] of request.headers) lines.push(`${k}: ${v}`);
      for (const k of ['connection', 'upgrade']) {
        const v = header(raw, k);
        if (v !== undefined) lines.push(`${k}: ${v}`);
      }
      conn.write(`${lines.join('\r\n')}\r\n\r\n`);
    }
    const head = this.#upgradeHeads.get(raw);
    if (head && head.length > 0) {
      counts.bytesIn += head.length;
      conn.write(head);
    }
    let status = knownStatus;
    let firstLine = '';
    conn.on('data', (c: Buffer) => {
      counts.bytesOut += c.length;
      if (status === 0 && firstLine.length < 64) {
        firstLine += c.toString('latin1', 0, Math.min(c.length, 64));
        const m = /^HTTP\/1\.[01] (\d{3})/.exec(firstLine);
        if (m) status = Number(m[1]);
      }
    });
    client.on('data', (c: Buffer) => (counts.bytesIn += c.length));
    conn.pipe(client);
    client.pipe(conn);
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      client.destroy();
      conn.destroy();
      done(status);
    };
    client.on('error', close);
    conn.on('error', close);
    client.on('close', close);
    conn.on('close', close);
  }
}

/** The agent's answer to net.dial as the catalogue's code. */
function portError(err: unknown, port: number): SandglassError {
  if (err instanceof AgentError && err.code === 'not_found') {
    return new SandglassError('port_not_listening', `Nothing listens on port ${port} in the sandbox (on 127.0.0.1 or ::1).`, {
      details: { field: 'port', port },
    });
  }
  // A server is there, its accept queue full for the agent's whole connect (a small listen backlog under load): busy,
  // not closed, and worth a retry.
  if (err instanceof AgentError && err.code === 'timeout') {
    return new SandglassError('timeout', `Port ${port} in the sandbox accepted no connection in time: its server is busy (its accept queue is full); retry.`, {
      details: { field: 'port', port },
    });
  }
  if (err instanceof AgentError && err.code === 'permission_denied') {
    return new SandglassError('permission_denied', `Port ${port} is the sandbox's egress relay, not a guest server.`, { details: { field: 'port', port } });
  }
  return mapAgentError(err);
}

/** The request's end-to-end headers, less the credentials the guest must never see. */
function forwardedHeaders(raw: http.IncomingMessage): [string, string][] {
  const out: [string, string][] = [];
  const rh = raw.rawHeaders;
  for (let i = 0; i + 1 < rh.length; i += 2) {
    const name = rh[i]!;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || lower === PORT_TOKEN_HEADER || lower === TRAFFIC_TOKEN_HEADER) continue;
    if (lower === 'cookie') {
      const rest = withoutCookie(rh[i + 1]!, PORT_COOKIE);
      if (rest !== '') out.push([name, rest]);
      continue;
    }
    out.push([name, rh[i + 1]!]);
  }
  return out;
}

function groupHeaders(pairs: [string, string][]): Map<string, string | string[]> {
  const m = new Map<string, string | string[]>();
  for (const [k, v] of pairs) {
    const prev = m.get(k);
    m.set(k, prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v]);
  }
  return m;
}

/** The guest's response headers for the client, less hop-by-hop ones (Node frames the body itself). */
function responseHeaders(rawHeaders: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (!HOP_BY_HOP.has(rawHeaders[i]!.toLowerCase())) out.push([rawHeaders[i]!, rawHeaders[i + 1]!]);
  }
  return out;
}

/** Every value of the cookie `name` in a Cookie header: a browser sends one per path and domain it was set for. */
export function cookieValues(cookieHeader: string | undefined, name: string): string[] {
  const values: string[] = [];
  for (const part of (cookieHeader ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) values.push(part.slice(eq + 1).trim());
  }
  return values;
}

export function withoutCookie(cookieHeader: string, name: string): string {
  return cookieHeader
    .split(';')
    .filter((p) => p.slice(0, Math.max(0, p.indexOf('='))).trim() !== name)
    .map((p) => p.trim())
    .filter((p) => p !== '')
    .join('; ');
}

/** `path` without one query parameter (the signed URL's token), keeping the rest as sent. */
export function stripParam(path: string, name: string): string {
  const q = path.indexOf('?');
  if (q < 0) return path;
  const kept = path
    .slice(q + 1)
    .split('&')
    .filter((kv) => paramName(kv) !== name);
  return kept.length > 0 ? `${path.slice(0, q)}?${kept.join('&')}` : path.slice(0, q);
}

function paramName(kv: string): string {
  const raw = kv.split('=')[0]!.replace(/\+/g, ' ');
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/**
 * The path form of the relay (its own credential check, no route validation: every method and path is the guest's) and
 * the routes that manage ports (the sandbox's access token, like every data-plane route).
 */
export function portsApi(gw: Gateway, keys: NodeKeys, ports: GuestPorts): FastifyPluginAsync {
  return async (app) => {
    await app.register(async (scope) => {
      scope.addHook('onRequest', async (req, reply) => ports.serve(req, reply, ports.pathTarget(req.raw)));
      const unreachable = async () => {
        throw new SandglassError('internal', 'the port relay answers in its hook');
      };
      scope.all('/v1/sandboxes/:id/ports/:port', unreachable);
      scope.all('/v1/sandboxes/:id/ports/:port/*', unreachable);
    });
    await app.register(async (scope) => {
      scope.addHook('onRequest', async (req, reply) => ports.serve(req, reply, ports.tunnelTarget(req.raw)));
      scope.get('/v1/sandboxes/:id/tunnel/:port', async () => {
        throw new SandglassError('internal', 'the port relay answers in its hook');
      });
    });
    await app.register(async (scope) => {
      scope.addHook('onRequest', accessTokenHook(keys, gw.opts.clock, gw.revokedKeys));
      const route = specRoutes(scope);
      route('GET', '/v1/sandboxes/{id}/ports', async (req) => {
        const sbx = gw.get(req.params.id);
        const listening = await sbx
          .requireRunning()
          .netPorts()
          .catch((err: unknown) => {
            throw mapAgentError(err);
          });
        return {
          ports: listening.map((p) => ({ ...p, public: ports.isPublic(sbx.id, p.port) })),
          publicPorts: ports.publicPorts(sbx.id),
          domain: ports.domain,
        };
      });
      route('PUT', '/v1/sandboxes/{id}/public-ports/{port}', async (req) => {
        const sbx = gw.get(req.params.id);
        await ports.setPublic(sbx, req.params.port, req.body.public);
        return { port: req.params.port, public: req.body.public };
      });
      route('POST', '/v1/sandboxes/{id}/port-urls', async (req) => {
        const sbx = gw.get(req.params.id);
        const port = req.body.port;
        const auth = req.headers.authorization ?? '';
        const { token, expiresAtMs } = ports.signUrl(auth.slice('Bearer '.length).trim(), sbx.id, port, req.body.expiresInS ?? DEFAULT_PORT_URL_TTL_S);
        return {
          port,
          host: `${port}-${sbx.id}.${ports.domain}`,
          path: `/v1/sandboxes/${sbx.id}/ports/${port}/?${PORT_URL_PARAM}=${token}`,
          token,
          expiresAt: new Date(expiresAtMs).toISOString(),
        };
      });
    });
  };
}
