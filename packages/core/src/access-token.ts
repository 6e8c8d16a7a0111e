// Short-lived data-plane access tokens: the control plane signs, the gateway verifies (HMAC-SHA256 under the node's
// access-token key, derived from the node secret by deriveNodeKeys).
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
