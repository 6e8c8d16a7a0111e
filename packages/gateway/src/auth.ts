// Who may call a gateway route: the onRequest hooks its two plugins attach to their own routes.
import { timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { SandglassError, verifyAccessToken, type AccessClaims, type Clock, type NodeKeys } from '@sandglass/core';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route accepts its access token as `?access_token=` (WebSocket: a browser cannot set headers there). */
    tokenInQuery?: boolean;
  }
}

/** The bearer credential of a request: the Authorization header, or the query string where the route allows it. */
function bearerOf(req: FastifyRequest, queryAllowed: boolean): string | undefined {
  const h = req.headers.authorization;
  if (h?.startsWith('Bearer ')) return h.slice(7).trim();
  if (!queryAllowed) return undefined;
  const q = (req.query as Record<string, unknown> | undefined)?.access_token;
  return typeof q === 'string' ? q : undefined;
}

/**
 * API keys the control plane revoked, each kept until the last access token it could have obtained expires: a
 * signed, unexpired token is still refused once the key behind it is gone.
 */
export class RevokedKeys {
  readonly #until = new Map<string, number>();

  add(keyIds: readonly string[], untilMs: number): void {
    for (const id of keyIds) this.#until.set(id, Math.max(untilMs, this.#until.get(id) ?? 0));
  }

  has(keyId: string, nowMs: number): boolean {
    const until = this.#until.get(keyId);
    if (until === undefined) return false;
    if (until > nowMs) return true;
    this.#until.delete(keyId);
    return false;
  }
}

/**
 * A data-plane route: a valid access token for the sandbox the route matched (`:id`, as the router decoded it), not
 * obtained with a revoked key. A route without an `:id` has no sandbox a token could open, so it is refused too.
 */
export function accessTokenHook(keys: NodeKeys, clock: Clock, revoked: RevokedKeys): (req: FastifyRequest) => Promise<void> {
  return async (req) => {
    const token = bearerOf(req, req.routeOptions.config.tokenInQuery === true);
    if (!token) throw new SandglassError('unauthenticated', 'Send the access token from POST /v1/sandboxes/{id}/access as Authorization: Bearer.');
    checkAccessToken(token, (req.params as { id?: string } | undefined)?.id, keys, clock, revoked);
  };
}

/**
 * The one check of a data-plane token (native routes and E2B's envd alike): signed and unexpired, not obtained with
 * a revoked key, and for `sandboxId` (undefined: a route naming no sandbox, which no token opens).
 */
export function checkAccessToken(token: string, sandboxId: string | undefined, keys: NodeKeys, clock: Clock, revoked: RevokedKeys): AccessClaims {
  const nowMs = clock.nowMs();
  const claims = verifyAccessToken(token, keys.accessToken, nowMs);
  if (claims.kid !== undefined && revoked.has(claims.kid, nowMs))
    throw new SandglassError('api_key_revoked', 'The API key this access token was obtained with was revoked.');
  if (sandboxId === undefined || claims.sbx !== sandboxId) throw new SandglassError('permission_denied', 'This access token is for another sandbox.');
  return claims;
}

/** An internal route: the node's internal bearer key (hex), compared in constant time; never from a query string. */
export function internalBearerHook(keys: NodeKeys): (req: FastifyRequest) => Promise<void> {
  const want = Buffer.from(keys.internalBearer.toString('hex'));
  return async (req) => {
    const got = Buffer.from(bearerOf(req, false) ?? '');
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw new SandglassError('unauthenticated', 'The internal node API needs the node secret.');
  };
}
