// The SDK's error mapping: wire bodies to typed families, and agreement with the server's catalogue.
import { ERROR_CATALOGUE, type ErrorCode } from '@sandglass/core';
import { describe, expect, it } from 'vitest';
import {
  AuthenticationError,
  ConflictError,
  InternalError,
  InvalidArgumentError,
  KNOWN_ERROR_CODES,
  NotFoundError,
  SandglassError,
  TimeoutError,
  UnavailableError,
  errorFromResponse,
} from './errors.js';

describe('errorFromResponse', () => {
  it('keeps code, message, requestId and details of a wire error', () => {
    const err = errorFromResponse(400, {
      error: { code: 'invalid_argument', message: 'memoryMib: must be >= 128', requestId: 'req_1', details: { field: 'memoryMib' } },
    });
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toBeInstanceOf(SandglassError);
    expect(err).toMatchObject({
      code: 'invalid_argument',
      status: 400,
      requestId: 'req_1',
      details: { field: 'memoryMib' },
      retryable: false,
      message: 'memoryMib: must be >= 128',
    });
    expect(err.name).toBe('InvalidArgumentError');
  });

  it.each([
    ['sandbox_not_found', 404, NotFoundError],
    ['unauthenticated', 401, AuthenticationError],
    ['command_exited', 409, ConflictError],
    ['capacity_exhausted', 503, UnavailableError],
    ['agent_timeout', 504, TimeoutError],
    ['vm_failed', 500, InternalError],
  ] as const)('maps %s to its family', (code, status, Cls) => {
    const err = errorFromResponse(status, { error: { code, message: 'm' } });
    expect(err).toBeInstanceOf(Cls);
    expect(err.retryable).toBe(ERROR_CATALOGUE[code].retryable);
  });

  it('places a code from a newer server by its status', () => {
    const err = errorFromResponse(404, { error: { code: 'snapshot_not_found', message: 'gone' } });
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err.code).toBe('snapshot_not_found');
  });

  it('reports a body that is not the wire format', () => {
    const err = errorFromResponse(502, '<html>Bad Gateway</html>', 'req_h');
    expect(err).toBeInstanceOf(UnavailableError);
    expect(err.code).toBe('gateway_unavailable');
    expect(err.message).toContain('HTTP 502');
    expect(err.message).toContain('Bad Gateway');
    expect(err.requestId).toBe('req_h');
  });
});

describe('KNOWN_ERROR_CODES', () => {
  it('agrees with the server catalogue on every code, its status and its retryability', () => {
    expect(Object.keys(KNOWN_ERROR_CODES).sort()).toEqual(Object.keys(ERROR_CATALOGUE).sort());
    for (const code of Object.keys(ERROR_CATALOGUE) as ErrorCode[]) {
      const { status, retryable } = KNOWN_ERROR_CODES[code];
      expect({ code, status, retryable }).toEqual({ code, status: ERROR_CATALOGUE[code].status, retryable: ERROR_CATALOGUE[code].retryable });
    }
  });

  it('gives a known code without a status (a WebSocket message) its catalogued status', () => {
    expect(errorFromResponse(0, { type: 'error', error: { code: 'sandbox_not_running', message: 'm' } })).toMatchObject({
      status: 409,
      code: 'sandbox_not_running',
    });
  });
});
