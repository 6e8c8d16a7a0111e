// The web console's server side: its built files under /console, the API-key → session-cookie exchange, the cookie as a
// second way to authenticate /v1 calls (only with the CSRF header), and server-sent event streams of the tenant's log.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { SandglassError, systemRandom, type Clock, type Logger } from '@sandglass/core';
import { fromIso, type Schema } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';
import { LogStreams } from './console-streams.js';
import type { GatewayDirectory } from './gateways.js';
import { authenticate, type Principal } from './keys.js';

/** Where scripts/setup.mjs puts the console's build (packages/console, vite build). */
export const CONSOLE_DIST = fileURLToPath(new URL('../../console/dist', import.meta.url));
export const SESSION_COOKIE = 'sg_session';
/**
 * Every cookie-authenticated request must carry this header. A page of another origin cannot set a custom header without
 * a CORS preflight, which this server never grants, so a forged cross-site request arrives without it and is refused.
 */
export const CSRF_HEADER = 'x-sandglass-console';
export const SESSION_TTL_MS = 8 * 60 * 60 * 1000;

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

interface Session {
  keyId: string;
  expiresAtMs: number;
}

/** How much of the console one key and one tenant may hold open at once (`SANDGLASS_CONSOLE_*`, README). */
export interface ConsoleLimits {
  /** Event streams one session may hold open: a console page holds one. */
  streamsPerSession: number;
  /** Event streams all sessions of one tenant may hold open together. */
  streamsPerTenant: number;
  /** Sessions one API key may have; signing in once more ends the oldest. */
  sessionsPerKey: number;
}
export const DEFAULT_CONSOLE_LIMITS: ConsoleLimits = { streamsPerSession: 8, streamsPerTenant: 64, sessionsPerKey: 8 };

/**
 * Server-side sessions: the cookie holds 256 random bits, this map only their SHA-256, so a dump of the process's memory
 * names no usable cookie. A session holds the key's id, never the key: each request re-reads that key's row, so revoking
 * or expiring the key ends the session at the next request. Sessions live in this process: a restart signs everyone out.
 */
export class ConsoleSessions {
  /** In the order they were opened, so a key's oldest session comes first. */
  readonly #byHash = new Map<string, Session>();
  constructor(
    private readonly db: Kysely<Schema>,
    private readonly clock: Clock,
    private readonly perKey = DEFAULT_CONSOLE_LIMITS.sessionsPerKey,
  ) {}

  /** Checks the API key exactly as a bearer header would be checked, then opens a session bound to it. */
  async open(apiKey: string): Promise<{ cookieValue: string; principal: Principal; expiresAtMs: number }> {
    const principal = await authenticate(this.db, `Bearer ${apiKey}`, this.clock);
    const nowMs = this.clock.nowMs();
    const expiresAtMs = Math.min(nowMs + SESSION_TTL_MS, principal.expiresAtMs ?? Number.POSITIVE_INFINITY);
    const cookieValue = systemRandom.bytes(32).toString('base64url');
    this.#prune(nowMs);
    // One key signing in again and again holds at most perKey sessions: the oldest go, and their streams end at their next round.
    const ofKey = [...this.#byHash].filter(([, s]) => s.keyId === principal.keyId);
    for (const [hash] of ofKey.slice(0, Math.max(0, ofKey.length - this.perKey + 1))) this.#byHash.delete(hash);
    this.#byHash.set(sessionIdOf(cookieValue), { keyId: principal.keyId, expiresAtMs });
    return { cookieValue, principal, expiresAtMs };
  }

  close(cookieValue: string): void {
    this.#byHash.delete(sessionIdOf(cookieValue));
  }

  /** The principal behind a session cookie; the key's row decides, as for a bearer key. */
  async principal(cookieValue: string): Promise<Principal> {
    const id = sessionIdOf(cookieValue);
    if (!this.#current(id)) throw new SandglassError('unauthenticated', 'The console session is not known or has expired: sign in again.');
    const principal = (await this.#withValidKeys([id])).get(id);
    if (!principal) throw new SandglassError('unauthenticated', 'The API key this console session was opened with is revoked or expired: sign in again.');
    return principal;
  }

  /** Which of these sessions (by id, sessionIdOf) are still signed in, with one read of their keys' rows. */
  async signedIn(ids: string[]): Promise<Set<string>> {
    return new Set((await this.#withValidKeys(ids.filter((id) => this.#current(id)))).keys());
  }

  /** Whether the session is known and unexpired; an expired one is forgotten. */
  #current(id: string): boolean {
    const session = this.#byHash.get(id);
    if (session && session.expiresAtMs > this.clock.nowMs()) return true;
    this.#byHash.delete(id);
    return false;
  }

  /** The principals of those sessions whose key is neither revoked nor expired; the others are closed. */
  async #withValidKeys(ids: string[]): Promise<Map<string, Principal>> {
    const out = new Map<string, Principal>();
    const keyIds = [...new Set(ids.flatMap((id) => this.#byHash.get(id)?.keyId ?? []))];
    if (keyIds.length === 0) return out;
    const rows = await this.db.selectFrom('api_keys').select(['id', 'tenant_id', 'role', 'expires_at', 'revoked_at']).where('id', 'in', keyIds).execute();
    const nowMs = this.clock.nowMs();
    const byKey = new Map(rows.map((row) => [row.id, row]));
    for (const id of ids) {
      const row = byKey.get(this.#byHash.get(id)?.keyId ?? '');
      if (!row || row.revoked_at !== null || (row.expires_at !== null && fromIso(row.expires_at) <= nowMs)) {
        this.#byHash.delete(id);
        continue;
      }
      out.set(id, { tenantId: row.tenant_id, keyId: row.id, role: row.role, ...(row.expires_at === null ? {} : { expiresAtMs: fromIso(row.expires_at) }) });
    }
    return out;
  }

  #prune(nowMs: number): void {
    for (const [hash, s] of this.#byHash) if (s.expiresAtMs <= nowMs) this.#byHash.delete(hash);
  }
}

/** A session's id: the SHA-256 of its cookie, what the server keeps instead of the cookie. */
export function sessionIdOf(cookieValue: string): string {
  return createHash('sha256').update(cookieValue).digest('hex');
}

export function sessionCookieOf(req: FastifyRequest): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === SESSION_COOKIE) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/**
 * The CSRF check for any cookie-authenticated request, safe methods included (reads carry data worth stealing too): the
 * custom header must be present, and an Origin header, where the browser sends one, must be this server's own.
 */
export function checkConsoleRequest(req: FastifyRequest): void {
  if (req.headers[CSRF_HEADER] !== '1') {
    throw new SandglassError('unauthenticated', `A console session is accepted only on requests with the ${CSRF_HEADER} header.`);
  }
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `${req.protocol}://${req.headers.host ?? ''}`) {
    throw new SandglassError('permission_denied', 'The request comes from a page of another origin.');
  }
}

/** Authenticates a request by its session cookie after the CSRF check; undefined when it carries no session cookie. */
export async function cookiePrincipal(sessions: ConsoleSessions, req: FastifyRequest): Promise<Principal | undefined> {
  const cookie = sessionCookieOf(req);
  if (cookie === undefined) return undefined;
  checkConsoleRequest(req);
  return sessions.principal(cookie);
}

function setCookie(reply: FastifyReply, req: FastifyRequest, value: string, maxAgeS: number): void {
  // Secure only over TLS: `sandglass up` serves plain HTTP on loopback, where a Secure cookie would never be sent back.
  const secure = req.protocol === 'https' ? '; Secure' : '';
  reply.header('set-cookie', `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure}`);
}

export interface ConsoleOptions {
  db: Kysely<Schema>;
  events: EventLog;
  sessions: ConsoleSessions;
  gateways: GatewayDirectory;
  publicGatewayUrl?: string;
  clock: Clock;
  logger: Logger;
  limits: ConsoleLimits;
  distDir?: string;
}

export function consoleApi(opts: ConsoleOptions): FastifyPluginAsync {
  const { sessions, clock } = opts;
  const streams = new LogStreams({
    events: opts.events,
    limits: { perSession: opts.limits.streamsPerSession, perTenant: opts.limits.streamsPerTenant },
    signedIn: (ids) => sessions.signedIn(ids),
    onError: (err, tenantId) =>
      opts.logger.warn({ tenantId, err: (err as Error).message }, "reading the log for a tenant's console streams failed; they were ended"),
  });
  const distDir = resolve(opts.distDir ?? CONSOLE_DIST);

  /** The page talks to this server and, for terminals and files, to the gateways' data planes: nothing else. */
  const contentSecurityPolicy = async (): Promise<string> => {
    const urls = [...(await opts.gateways.all()).map((g) => g.url), ...(opts.publicGatewayUrl ? [opts.publicGatewayUrl] : [])];
    const origins = new Set<string>();
    for (const u of urls) {
      const url = new URL(u);
      origins.add(url.origin);
      origins.add(`${url.protocol === 'https:' ? 'wss:' : 'ws:'}//${url.host}`);
    }
    // xterm.js positions its rows with style elements; scripts stay 'self' only, with nothing inline.
    return [
      "default-src 'self'",
      "script-src 'self'",
      "style-src 'self' 'unsafe-inline'",
      "img-src 'self' data:",
      `connect-src 'self' ${[...origins].join(' ')}`.trim(),
      "object-src 'none'",
      "base-uri 'none'",
      "form-action 'self'",
      "frame-ancestors 'none'",
    ].join('; ');
  };

  const sendFile = async (reply: FastifyReply, file: string) => {
    const type = CONTENT_TYPES[extname(file)] ?? 'application/octet-stream';
    return reply
      .header('content-type', type)
      .header('content-security-policy', await contentSecurityPolicy())
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('cache-control', file.endsWith('.html') ? 'no-store' : 'public, max-age=31536000, immutable')
      .send(readFileSync(file));
  };

  return async (scope) => {
    const staticFile = async (req: FastifyRequest<{ Params: { '*'?: string } }>, reply: FastifyReply) => {
      const rel = req.params['*'] ?? '';
      const file = resolve(distDir, rel === '' ? 'index.html' : rel);
      // Inside the build directory only: a `..` in the path resolves outside it and is not found.
      const inside = file.startsWith(distDir + sep);
      if (inside && existsSync(file) && statSync(file).isFile()) return sendFile(reply, file);
      const index = join(distDir, 'index.html');
      if (!existsSync(index)) {
        throw new SandglassError('not_found', 'The console is not built: run `npm run setup` (it builds packages/console).');
      }
      // Anything else under /console is a page of the app: its router reads the path.
      if (inside && extname(file) === '') return sendFile(reply, index);
      throw new SandglassError('not_found', `No console file ${rel}.`);
    };
    scope.get('/console', async (_req, reply) => reply.redirect('/console/'));
    scope.get('/console/*', staticFile);

    scope.post<{ Body: { apiKey?: unknown } }>('/console/api/session', async (req, reply) => {
      // The sign-in is a state change too: the same header, so no other page can sign a browser into its own tenant.
      checkConsoleRequest(req);
      const apiKey = req.body?.apiKey;
      if (typeof apiKey !== 'string') throw new SandglassError('invalid_argument', 'Send {"apiKey": "sg_…"}.');
      const { cookieValue, principal, expiresAtMs } = await sessions.open(apiKey);
      setCookie(reply, req, cookieValue, Math.max(1, Math.floor((expiresAtMs - clock.nowMs()) / 1000)));
      return reply
        .code(201)
        .send({ tenantId: principal.tenantId, keyId: principal.keyId, role: principal.role, expiresAt: new Date(expiresAtMs).toISOString() });
    });
    scope.get('/console/api/session', async (req) => {
      const p = await requireSession(req);
      return { tenantId: p.tenantId, keyId: p.keyId, role: p.role };
    });
    scope.delete('/console/api/session', async (req, reply) => {
      checkConsoleRequest(req);
      const cookie = sessionCookieOf(req);
      if (cookie !== undefined) sessions.close(cookie);
      setCookie(reply, req, '', 0);
      return reply.code(204).send();
    });

    // One stream per page: every event of the caller's tenant from `afterSeq` on, as server-sent events (`event: log`),
    // and one `event: ready` after the events that were already in the log when it opened.
    scope.get<{ Querystring: { afterSeq?: string; sandboxId?: string } }>('/console/api/stream', async (req, reply) => {
      const who = await requireSession(req);
      const afterSeq = Number(req.query.afterSeq ?? 0);
      if (!Number.isSafeInteger(afterSeq) || afterSeq < 0) throw new SandglassError('invalid_argument', 'afterSeq is a non-negative integer.');
      const sandboxId = req.query.sandboxId || undefined;
      const res = reply.raw;
      // Admitted, or refused rate_limited as an ordinary error answer, before a byte of the stream is written.
      let close: () => void;
      try {
        close = streams.open({ tenantId: who.tenantId, sessionId: sessionIdOf(sessionCookieOf(req) ?? ''), afterSeq, sandboxId, sink: res });
      } catch (err) {
        // A refused attempt gives its socket back at once rather than holding it idle until the keep-alive timeout.
        reply.header('connection', 'close');
        throw err;
      }
      reply.hijack();
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
      res.write(': stream open\n\n');
      res.on('close', close);
      // A client that left while its session was being checked sends no 'close' any more: its place is given back now.
      if (!res.socket || res.socket.destroyed) close();
    });
    scope.addHook('preClose', async () => streams.closeAll());

    const requireSession = async (req: FastifyRequest): Promise<Principal> => {
      const p = await cookiePrincipal(sessions, req);
      if (!p) throw new SandglassError('unauthenticated', 'Sign in to the console first.');
      return p;
    };
  };
}
