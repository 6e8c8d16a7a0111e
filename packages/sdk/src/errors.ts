// The SDK's error types: the server's wire errors ({error:{code,message,requestId,details}}) rebuilt as typed classes, plus the few failures only a client can see.
import type { ErrorCode } from './api/error-codes.generated.js';

/**
 * Failures that never come over the wire: the server could not be reached, the stream broke its
 * framing, a handle was detached, or a command ran and exited non-zero.
 */
export type ClientErrorCode = 'connection_failed' | 'protocol_error' | 'disconnected' | 'command_failed';

export type ErrorFamily = 'invalid_argument' | 'authentication' | 'permission_denied' | 'not_found' | 'conflict' | 'unavailable' | 'timeout' | 'internal';

// A Record over ErrorCode so that a code added to spec/errors.yaml fails the typecheck until it is placed here.
const CODES: Record<ErrorCode, { family: ErrorFamily; status: number; retryable: boolean }> = {
  invalid_argument: { family: 'invalid_argument', status: 400, retryable: false },
  malformed_json: { family: 'invalid_argument', status: 400, retryable: false },
  payload_too_large: { family: 'invalid_argument', status: 413, retryable: false },
  size_unsupported: { family: 'invalid_argument', status: 400, retryable: false },
  snapshot_interval_unachievable: { family: 'invalid_argument', status: 400, retryable: false },
  path_outside_sandbox: { family: 'invalid_argument', status: 400, retryable: false },
  unauthenticated: { family: 'authentication', status: 401, retryable: false },
  permission_denied: { family: 'permission_denied', status: 403, retryable: false },
  not_found: { family: 'not_found', status: 404, retryable: false },
  sandbox_not_found: { family: 'not_found', status: 404, retryable: false },
  template_not_found: { family: 'not_found', status: 404, retryable: false },
  tenant_not_found: { family: 'not_found', status: 404, retryable: false },
  command_not_found: { family: 'not_found', status: 404, retryable: false },
  file_not_found: { family: 'not_found', status: 404, retryable: false },
  // The requested bytes existed once and are gone for good: for a caller that is "not found".
  file_exists: { family: 'conflict', status: 409, retryable: false },
  not_a_directory: { family: 'conflict', status: 409, retryable: false },
  is_a_directory: { family: 'conflict', status: 409, retryable: false },
  sandbox_not_running: { family: 'conflict', status: 409, retryable: false },
  sandbox_paused: { family: 'conflict', status: 409, retryable: false },
  command_exited: { family: 'conflict', status: 409, retryable: false },
  conflict: { family: 'conflict', status: 409, retryable: false },
  template_build_in_progress: { family: 'conflict', status: 409, retryable: true },
  template_build_failed: { family: 'invalid_argument', status: 422, retryable: false },
  capacity_exhausted: { family: 'unavailable', status: 503, retryable: true },
  rate_limited: { family: 'unavailable', status: 429, retryable: true },
  port_not_listening: { family: 'unavailable', status: 502, retryable: true },
  template_not_ready: { family: 'unavailable', status: 503, retryable: true },
  gateway_unavailable: { family: 'unavailable', status: 502, retryable: true },
  agent_timeout: { family: 'timeout', status: 504, retryable: true },
  timeout: { family: 'timeout', status: 504, retryable: true },
  vm_failed: { family: 'internal', status: 500, retryable: false },
  vm_reply_refused: { family: 'internal', status: 502, retryable: false },
  snapshot_not_found: { family: 'not_found', status: 404, retryable: false },
  secret_not_found: { family: 'not_found', status: 404, retryable: false },
  approval_not_found: { family: 'not_found', status: 404, retryable: false },
  api_key_not_found: { family: 'not_found', status: 404, retryable: false },
  api_key_revoked: { family: 'authentication', status: 401, retryable: false },
  api_key_expired: { family: 'authentication', status: 401, retryable: false },
  snapshot_out_of_range: { family: 'invalid_argument', status: 400, retryable: false },
  policy_invalid: { family: 'invalid_argument', status: 400, retryable: false },
  sandbox_running: { family: 'conflict', status: 409, retryable: false },
  node_fenced: { family: 'conflict', status: 409, retryable: false },
  node_event_refused: { family: 'permission_denied', status: 403, retryable: false },
  node_event_invalid: { family: 'invalid_argument', status: 400, retryable: false },
  egress_denied: { family: 'permission_denied', status: 403, retryable: false },
  egress_secret_scope: { family: 'permission_denied', status: 403, retryable: false },
  egress_approval_denied: { family: 'permission_denied', status: 403, retryable: false },
  key_unavailable: { family: 'unavailable', status: 503, retryable: false },
  key_revoked: { family: 'permission_denied', status: 403, retryable: false },
  storage_full: { family: 'unavailable', status: 507, retryable: true },
  storage_unavailable: { family: 'unavailable', status: 503, retryable: true },
  snapshot_corrupt: { family: 'internal', status: 500, retryable: false },
  snapshot_failed: { family: 'internal', status: 500, retryable: true },
  internal: { family: 'internal', status: 500, retryable: true },
};

/** The codes this SDK knows; exported so tests can hold it against the server's catalogue. */
export const KNOWN_ERROR_CODES: Readonly<Record<ErrorCode, { family: ErrorFamily; status: number; retryable: boolean }>> = CODES;

export interface SandglassErrorInit {
  /** HTTP status of the response; 0 when the error did not come from a response. */
  status?: number;
  requestId?: string;
  details?: Record<string, unknown>;
  retryable?: boolean;
  cause?: unknown;
}

export class SandglassError extends Error {
  /** A catalogued server code, a client-side code, or (from a newer server) a code this SDK does not know yet. */
  readonly code: ErrorCode | ClientErrorCode | (string & {});
  readonly status: number;
  readonly requestId?: string;
  readonly details?: Record<string, unknown>;
  readonly retryable: boolean;

  constructor(code: ErrorCode | ClientErrorCode | (string & {}), message: string, init: SandglassErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = init.status ?? 0;
    this.requestId = init.requestId;
    this.details = init.details;
    this.retryable = init.retryable ?? (Object.hasOwn(CODES, code) ? CODES[code as ErrorCode].retryable : false);
  }
}

export class InvalidArgumentError extends SandglassError {}
export class AuthenticationError extends SandglassError {}
export class PermissionDeniedError extends SandglassError {}
export class NotFoundError extends SandglassError {}
export class ConflictError extends SandglassError {}
/** The server or node has no room or cannot be reached right now; worth retrying. */
export class UnavailableError extends SandglassError {}
export class TimeoutError extends SandglassError {}
export class InternalError extends SandglassError {}
/** The server (control plane or gateway) could not be reached at all. */
export class ConnectionError extends SandglassError {}
/** The server answered something that breaks the protocol (bad frame, lost bytes). */
export class ProtocolError extends SandglassError {}

/** What a finished command produced. */
export interface CommandResult {
  /** The process's exit code; 128 + signal number when a signal ended it (as a shell reports it). */
  exitCode: number;
  stdout: string;
  stderr: string;
  /** Why the command failed, in words, when it did not exit 0. */
  error?: string;
  /** Name of the signal that ended the process, e.g. "SIGKILL". */
  signal?: string;
  /** The server killed the command because it ran past its timeoutMs. */
  timedOut: boolean;
  /** Output bytes missing from stdout/stderr because the gateway's bounded buffer had dropped them before they were read. */
  droppedBytes?: number;
}

/** A command ran and exited non-zero (or was killed); the full result is on `result`. */
export class CommandExitError extends SandglassError {
  readonly result: CommandResult;

  constructor(result: CommandResult) {
    super('command_failed', result.error ?? `command exited with code ${result.exitCode}`);
    this.result = result;
  }

  get exitCode(): number {
    return this.result.exitCode;
  }
  get stdout(): string {
    return this.result.stdout;
  }
  get stderr(): string {
    return this.result.stderr;
  }
}

/** The server killed a command that ran past its timeoutMs; what it printed until then is on `result`. */
export class CommandTimeoutError extends TimeoutError {
  readonly result: CommandResult;

  constructor(result: CommandResult, timeoutMs: number | undefined) {
    super('timeout', `command ran past its timeout${timeoutMs ? ` of ${timeoutMs} ms` : ''} and was killed`);
    this.result = result;
  }
}

const FAMILY_CLASS: Record<ErrorFamily, typeof SandglassError> = {
  invalid_argument: InvalidArgumentError,
  authentication: AuthenticationError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  unavailable: UnavailableError,
  timeout: TimeoutError,
  internal: InternalError,
};

// A code this SDK does not know (a newer server) still gets the right family from its status.
function familyOfStatus(status: number): ErrorFamily {
  if (status === 400 || status === 413 || status === 422) return 'invalid_argument';
  if (status === 401) return 'authentication';
  if (status === 403) return 'permission_denied';
  if (status === 404 || status === 410) return 'not_found';
  if (status === 409) return 'conflict';
  if (status === 502 || status === 503) return 'unavailable';
  if (status === 504 || status === 408) return 'timeout';
  return 'internal';
}

function fallbackCode(status: number): ErrorCode {
  const byFamily: Record<ErrorFamily, ErrorCode> = {
    invalid_argument: 'invalid_argument',
    authentication: 'unauthenticated',
    permission_denied: 'permission_denied',
    not_found: 'not_found',
    conflict: 'conflict',
    unavailable: 'gateway_unavailable',
    timeout: 'timeout',
    internal: 'internal',
  };
  return byFamily[familyOfStatus(status)];
}

/**
 * Builds the typed error for a non-2xx response from its status and body (parsed JSON, or text when it was not JSON).
 * Status 0 stands for an error that came without one (a WebSocket message): a known code then gets its catalogued status.
 */
export function errorFromResponse(status: number, body: unknown, requestIdHeader?: string): SandglassError {
  const wire = (body as { error?: { code?: unknown; message?: unknown; requestId?: unknown; details?: unknown } } | undefined)?.error;
  if (wire && typeof wire.code === 'string') {
    const known = Object.hasOwn(CODES, wire.code);
    const family = known ? CODES[wire.code as ErrorCode].family : familyOfStatus(status);
    const Cls = FAMILY_CLASS[family];
    return new Cls(wire.code, typeof wire.message === 'string' ? wire.message : `HTTP ${status}`, {
      status: status === 0 && known ? CODES[wire.code as ErrorCode].status : status,
      requestId: typeof wire.requestId === 'string' ? wire.requestId : requestIdHeader,
      details: wire.details && typeof wire.details === 'object' ? (wire.details as Record<string, unknown>) : undefined,
      retryable: known ? undefined : status >= 500,
    });
  }
  // Not our wire format: a proxy, a crashed server or a different service on that port.
  const code = fallbackCode(status);
  const text = typeof body === 'string' ? body.trim().slice(0, 200) : '';
  return new FAMILY_CLASS[familyOfStatus(status)](code, `unexpected response (HTTP ${status})${text ? `: ${text}` : ''}`, {
    status,
    requestId: requestIdHeader,
  });
}
