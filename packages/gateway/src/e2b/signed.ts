// E2B's signed file URLs (sbx.downloadUrl, sbx.uploadUrl): the SDK signs `path:operation:user:token[:expiry]` with
// SHA-256 itself, so a URL names no sandbox and its secret is the envd token: it is checked against the tokens envd
// requests proved for each running sandbox of this gateway, and opens only the sandbox whose token made it.
import { createHash, timingSafeEqual } from 'node:crypto';
import { SandglassError } from '@sandglass/core';
import type { Sandbox } from '../sandbox.js';
import { envdState } from './state.js';

export interface SignedFileRequest {
  path: string;
  /** `username` as sent, "" when absent: it is part of what was signed. */
  user: string;
  operation: 'read' | 'write';
  signature: string;
  /** Unix seconds; absent, the URL lasts as long as the token it was made with. */
  expirationS?: number;
}

/** The SDK's signature: "v1_" + base64 SHA-256, padding removed. */
export function e2bSignature(req: Omit<SignedFileRequest, 'signature'>, token: string): string {
  const raw = `${req.path}:${req.operation}:${req.user}:${token}${req.expirationS === undefined ? '' : `:${req.expirationS}`}`;
  return `v1_${createHash('sha256').update(raw).digest('base64').replace(/=+$/, '')}`;
}

const one = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** A /files request's signed-URL parameters, or undefined when it carries no signature (then the token rules apply). */
export function signedFileRequest(method: string, query: Record<string, unknown>): SignedFileRequest | undefined {
  const signature = one(query.signature);
  if (signature === undefined) return undefined;
  if (!/^v1_[A-Za-z0-9+/]{43}$/.test(signature)) throw new SandglassError('unauthenticated', 'The signature of this file URL is malformed.');
  const exp = one(query.signature_expiration);
  if (exp !== undefined && !/^\d{1,12}$/.test(exp)) throw new SandglassError('unauthenticated', 'signature_expiration must be unix seconds.');
  return {
    path: one(query.path) ?? '',
    user: one(query.username) ?? '',
    operation: method === 'GET' || method === 'HEAD' ? 'read' : 'write',
    signature,
    ...(exp !== undefined ? { expirationS: Number(exp) } : {}),
  };
}

/**
 * The running sandbox, and the token, a signed URL was made with; unauthenticated when it is expired (checked before
 * any search) or matches no token this gateway knows. The caller still checks that token (expiry, revoked key).
 */
export function signedFileTarget(req: SignedFileRequest, sandboxes: Iterable<Sandbox>, nowMs: number): { sbx: Sandbox; token: string } {
  if (req.expirationS !== undefined && req.expirationS * 1000 <= nowMs)
    throw new SandglassError('unauthenticated', 'This file URL has expired; make a new one.');
  const got = Buffer.from(req.signature);
  for (const sbx of sandboxes) {
    if (sbx.state !== 'running') continue;
    for (const token of envdState(sbx).signingTokens) {
      const want = Buffer.from(e2bSignature(req, token));
      if (want.length === got.length && timingSafeEqual(want, got)) return { sbx, token };
    }
  }
  throw new SandglassError(
    'unauthenticated',
    "This file URL's signature matches no sandbox here: it was tampered with, or made with a token this gateway has not seen (make one envd call first).",
  );
}
