// What the egress proxy reports: one event per decision, shaped like the gateway's events ({ type, sandboxId, data }).
import type { ErrorCode } from '@sandglass/core';

export interface EgressRequestData {
  host: string;
  port: number;
  /** tunnel: a CONNECT refused before any request inside it was seen. */
  scheme: 'http' | 'https' | 'tunnel';
  method: string;
  /** The path without the query, dot segments resolved ('' for CONNECT). */
  path: string;
  /** false when the proxy refused the request (policy, destination, secret scope, approval, limits). */
  allowed: boolean;
  reason: string;
  rule?: string;
  /** Names of the secrets substituted or injected (never values). */
  secrets: string[];
  /** Body bytes sent upstream and received from it. */
  bytesUp: number;
  bytesDown: number;
  /** The status the client got. */
  status?: number;
  /** The error code the client got, when the proxy answered instead of the upstream. */
  code?: ErrorCode;
  /** What went wrong after the request was allowed (upstream unreachable, timeout, client gone). */
  error?: string;
  durationMs: number;
}

export interface SecretScopeData {
  secret: string;
  host: string;
  port: number;
  method: string;
  path: string;
  where: 'header' | 'url' | 'body';
  /** Why the value could not go there: not a scoped host and port, clear text, or the secret is unusable now. */
  reason: string;
}

export interface ApprovalRequestedData {
  requestId: string;
  secret: string;
  host: string;
  port: number;
  method: string;
  path: string;
  expiresAtMs: number;
}

export interface ApprovalDecidedData {
  /** Absent when a running time-boxed grant approved without asking. */
  requestId?: string;
  secret: string;
  decision: 'approved' | 'denied' | 'timeout' | 'cancelled';
  grantUntilMs?: number;
}

export interface RecordedBody {
  encoding: 'utf8' | 'base64';
  data: string;
  /** The whole body's size; data holds at most the recording cap. */
  sizeBytes: number;
  truncated: boolean;
}

/** One allowed exchange as the upstream saw it, every secret value (and its encodings) replaced by «redacted». */
export interface ExchangeData {
  scheme: 'http' | 'https';
  host: string;
  port: number;
  method: string;
  url: string;
  requestHeaders: [string, string][];
  requestBody: RecordedBody;
  status: number;
  responseHeaders: [string, string][];
  responseBody: RecordedBody;
  startedAtMs: number;
  durationMs: number;
}

export interface RejectedData {
  reason: string;
  status?: number;
  code?: ErrorCode;
  host?: string;
  port?: number;
}

export type EgressEvent =
  | { type: 'egress.request'; sandboxId: string; data: EgressRequestData }
  | { type: 'egress.secret_scope'; sandboxId: string; data: SecretScopeData }
  | { type: 'secret.approval_requested'; sandboxId: string; data: ApprovalRequestedData }
  | { type: 'secret.approval_decided'; sandboxId: string; data: ApprovalDecidedData }
  | { type: 'egress.exchange'; sandboxId: string; data: ExchangeData }
  /** A replay's guest asked for an exchange its recording does not have: refused, and a divergence of the replay. */
  | { type: 'egress.replay_unrecorded'; sandboxId: string; data: { method: string; url: string; requestBytes: number } }
  | { type: 'egress.rejected'; sandboxId: string; data: RejectedData };
