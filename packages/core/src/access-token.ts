// Short-lived data-plane credentials: access tokens and traffic tokens (the control plane signs, the gateway
// verifies) and signed port URLs (the gateway signs, the gateway and the control plane verify), HMAC-SHA256 under the
// node's access-token key (derived from the node secret by deriveNodeKeys) or, for port URLs and traffic tokens, a key
// derived from it for that one purpose.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { SandglassError } from './errors.js';

export interface AccessClaims {
  /** Sandbox id the token opens. */
  sbx: string;
  /** Tenant id. */
  ten: string;
  /** Expiry, unix ms. */
  exp: number;
  /** Id of the API key the token was obtained with: a gateway refuses it once told that key was revoked. */
  kid?: string;
}

const b64 = (b: Buffer | string) => Buffer.from(b).toString('base64url');

/** An empty or short key makes the MAC forgeable: refuse it rather than sign or verify anything under it. */
function mac(key: Buffer, body: string): Buffer {
  if (key.length < 32) throw new Error(`access-token key of ${key.length} bytes refused; derive it with deriveNodeKeys`);
  return createHmac('sha256', key).update(body).digest();
}

export function signAccessToken(claims: AccessClaims, key: Buffer): string {
  const body = b64(JSON.stringify(claims));
  return `sgat_${body}.${b64(mac(key, body))}`;
}

export function verifyAccessToken(token: string, key: Buffer, nowMs: number): AccessClaims {
  const m = /^sgat_([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(token);
  if (!m) throw new SandglassError('unauthenticated', 'The access token is malformed.');
  const want = mac(key, m[1]!);
  const got = Buffer.from(m[2]!, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) {
    throw new SandglassError('unauthenticated', 'The access token is not valid.');
  }
  const claims = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8')) as AccessClaims;
  if (claims.exp <= nowMs) throw new SandglassError('unauthenticated', 'The access token has expired; ask the control plane for a new one.');
  return claims;
}

/** A signed port URL's claims (`sgpu_…`): one port of one sandbox. */
export interface PortUrlClaims {
  sbx: string;
  prt: number;
  /** Expiry, unix ms. */
  exp: number;
  /** Id of the API key behind the access token it was minted for. */
  kid?: string;
}

/** Its own key: a port URL never verifies as an access token, nor the other way round. */
export function portUrlKey(accessTokenKey: Buffer): Buffer {
  return createHmac('sha256', accessTokenKey).update('sandglass/v1/port-url').digest();
}

export function signPortUrlToken(claims: PortUrlClaims, urlKey: Buffer): string {
  const body = b64(JSON.stringify(claims));
  return `sgpu_${body}.${b64(mac(urlKey, body))}`;
}

/** Signature and expiry; which sandbox and port it opens, and whether its key was revoked, are the caller's to check. */
export function verifyPortUrlToken(token: string, urlKey: Buffer, nowMs: number): PortUrlClaims {
  const m = /^sgpu_([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(token);
  if (!m) throw new SandglassError('unauthenticated', 'The port URL token is malformed.');
  const got = Buffer.from(m[2]!, 'base64url');
  const want = mac(urlKey, m[1]!);
  if (got.length !== want.length || !timingSafeEqual(got, want)) throw new SandglassError('unauthenticated', 'The port URL token is not valid.');
  const claims = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8')) as PortUrlClaims;
  if (claims.exp <= nowMs) throw new SandglassError('unauthenticated', 'The port URL has expired; ask for a new one.');
  return claims;
}

/**
 * A traffic token's claims (`sgtt_…`, E2B's `trafficAccessToken`): every guest port of one sandbox, and nothing else —
 * not envd, not the sandbox's API. Signed by the control plane with the access token it goes with, under a key of its
 * own, so neither verifies as the other.
 */
export interface TrafficClaims {
  sbx: string;
  ten: string;
  exp: number;
  kid?: string;
}

export function trafficTokenKey(accessTokenKey: Buffer): Buffer {
  return createHmac('sha256', accessTokenKey).update('sandglass/v1/port-traffic').digest();
}

export function signTrafficToken(claims: TrafficClaims, trafficKey: Buffer): string {
  const body = b64(JSON.stringify(claims));
  return `sgtt_${body}.${b64(mac(trafficKey, body))}`;
}

/** Signature and expiry; which sandbox it opens, and whether its key was revoked, are the caller's to check. */
export function verifyTrafficToken(token: string, trafficKey: Buffer, nowMs: number): TrafficClaims {
  const m = /^sgtt_([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(token);
  if (!m) throw new SandglassError('unauthenticated', 'The traffic access token is malformed.');
  const got = Buffer.from(m[2]!, 'base64url');
  const want = mac(trafficKey, m[1]!);
  if (got.length !== want.length || !timingSafeEqual(got, want)) throw new SandglassError('unauthenticated', 'The traffic access token is not valid.');
  const claims = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8')) as TrafficClaims;
  if (claims.exp <= nowMs) throw new SandglassError('unauthenticated', 'The traffic access token has expired; connect again for a new one.');
  return claims;
}

/** What either credential of a sandbox's data plane proves: the sandbox, the API key behind it, and the tenant where it names one. */
export interface DataPlaneCredential {
  sbx: string;
  kid?: string;
  ten?: string;
}

/**
 * An access token (`sgat_…`), a signed port URL's token (`sgpu_…`, also as its cookie) or a traffic token (`sgtt_…`),
 * verified under the access-token key.
 */
export function verifyDataPlaneCredential(token: string, accessTokenKey: Buffer, nowMs: number): DataPlaneCredential {
  if (token.startsWith('sgtt_')) {
    const { sbx, ten, kid } = verifyTrafficToken(token, trafficTokenKey(accessTokenKey), nowMs);
    return { sbx, ten, ...(kid !== undefined ? { kid } : {}) };
  }
  if (token.startsWith('sgpu_')) {
    const { sbx, kid } = verifyPortUrlToken(token, portUrlKey(accessTokenKey), nowMs);
    return { sbx, ...(kid !== undefined ? { kid } : {}) };
  }
  const { sbx, kid, ten } = verifyAccessToken(token, accessTokenKey, nowMs);
  return { sbx, ten, ...(kid !== undefined ? { kid } : {}) };
}
