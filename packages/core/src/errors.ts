// The one error type of Sandglass: a stable catalogued code, its HTTP status, retryability and the wire format.
import { ERROR_CATALOGUE, type ErrorCode } from './errors.generated.js';

export { ERROR_CATALOGUE, type ErrorCode };

export interface ErrorBody {
  error: { code: ErrorCode; message: string; requestId?: string; details?: Record<string, unknown> };
}

export class SandglassError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly retryable: boolean;
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message?: string, opts: { details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message ?? ERROR_CATALOGUE[code].message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'SandglassError';
    this.code = code;
    this.status = ERROR_CATALOGUE[code].status;
    this.retryable = ERROR_CATALOGUE[code].retryable;
    this.details = opts.details;
  }

  toBody(requestId?: string): ErrorBody {
    return { error: { code: this.code, message: this.message, requestId, ...(this.details ? { details: this.details } : {}) } };
  }
}

/** A field of the input broke a rule: the message names the field and the rule. */
export function invalidArgument(field: string, rule: string): SandglassError {
  return new SandglassError('invalid_argument', `${field}: ${rule}`, { details: { field, rule } });
}

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERROR_CATALOGUE, code);
}

/** Rebuilds a SandglassError from a wire body (SDK, control plane reading a gateway's answer). */
export function errorFromBody(status: number, body: unknown): SandglassError {
  const e = (body as Partial<ErrorBody> | undefined)?.error;
  if (e && isErrorCode(e.code)) {
    const err = new SandglassError(e.code, e.message, { details: e.details });
    (err as { requestId?: string }).requestId = e.requestId;
    return err;
  }
  return new SandglassError('internal', `unexpected response (HTTP ${status})`);
}
