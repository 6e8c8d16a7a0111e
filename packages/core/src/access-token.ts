// Short-lived data-plane access tokens: the control plane signs, the gateway verifies (shared node secret, HMAC-SHA256).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { SandglassError } from './errors.js';

export interface AccessClaims {
  /** Sandbox id the token opens. */
  sbx: string;
  /** Tenant id. */
  ten: string;
  /** Expiry, unix ms. */
  exp: number;
}

const b64 = (b: Buffer | string) => Buffer.from(b).toString('base64url');

export function signAccessToken(claims: AccessClaims, secret: Buffer): string {
  const body = b64(JSON.stringify(claims));
  return `sgat_${body}.${b64(createHmac('sha256', secret).update(body).digest())}`;
}

export function verifyAccessToken(token: string, secret: Buffer, nowMs: number): AccessClaims {
  const m = /^sgat_([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(token);
  if (!m) throw new SandglassError('unauthenticated', 'The access token is malformed.');
  const want = createHmac('sha256', secret).update(m[1]!).digest();
  const got = Buffer.from(m[2]!, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) {
    throw new SandglassError('unauthenticated', 'The access token is not valid.');
  }
  const claims = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8')) as AccessClaims;
  if (claims.exp <= nowMs) throw new SandglassError('unauthenticated', 'The access token has expired; ask the control plane for a new one.');
  return claims;
}
