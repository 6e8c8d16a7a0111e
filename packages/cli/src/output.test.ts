// How the CLI reports an error: one line naming the code for every catalogued error, whichever package threw it.
import { ConflictError, SandglassError } from '@sandglass/sdk';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { UsageError } from './args.js';
import { reportError } from './output.js';

let stderr = '';
beforeEach(() => {
  stderr = '';
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
});
afterEach(() => vi.restoreAllMocks());

/**
 * What @sandglass/core throws (`up` and `doctor` reach it through @sandglass/server), built by shape: the CLI may import
 * only the SDK. Core's class sets exactly these: name 'SandglassError', a catalogued string code, status, retryable.
 */
function coreError(code: string, message: string): Error {
  return Object.assign(new Error(message), { name: 'SandglassError', code, status: 409, retryable: false });
}

const noDebug = {};
const debug = { SANDGLASS_DEBUG: '1' };

describe('reportError', () => {
  it("prints core's SandglassError (the home lock's refusal) as error: <code>: <message>, without a stack", () => {
    const err = coreError('conflict', 'Another Sandglass server is running on /h: pid 7 (node). Stop it first, or use another SANDGLASS_HOME.');
    expect(reportError(err, noDebug)).toBe(1);
    expect(stderr).toBe('error: conflict: Another Sandglass server is running on /h: pid 7 (node). Stop it first, or use another SANDGLASS_HOME.\n');
    // Not even under SANDGLASS_DEBUG: a catalogued error's code and message say what to do.
    stderr = '';
    expect(reportError(err, debug)).toBe(1);
    expect(stderr).not.toContain('    at ');
    expect(stderr).toMatch(/^error: conflict: /);
  });

  it("prints the SDK's errors, subclasses included, with the request id", () => {
    expect(reportError(new SandglassError('sandbox_not_found', 'no sandbox sbx_x', { status: 404, requestId: 'req_1' }), noDebug)).toBe(1);
    expect(reportError(new ConflictError('sandbox_running', 'it runs', { status: 409 }), debug)).toBe(1);
    expect(stderr).toBe('error: sandbox_not_found: no sandbox sbx_x (request req_1)\nerror: sandbox_running: it runs\n');
  });

  it('prints a usage error as it is, exit status 2', () => {
    expect(reportError(new UsageError('--count: must be a positive integer'), noDebug)).toBe(2);
    expect(stderr).toBe('error: --count: must be a positive integer\n');
  });

  it('treats an error that only borrows the name, without a string code, as unexpected', () => {
    expect(reportError(Object.assign(new Error('odd'), { name: 'SandglassError', code: 42 }), noDebug)).toBe(1);
    expect(stderr).toMatch(/^error: internal: SandglassError: odd\n/);
  });

  it('prints an unexpected error as internal, its stack only under SANDGLASS_DEBUG', () => {
    const err = new TypeError('x is not a function', { cause: new Error('the root') });
    expect(reportError(err, noDebug)).toBe(1);
    expect(stderr).toBe('error: internal: TypeError: x is not a function\n(SANDGLASS_DEBUG=1 prints its stack trace)\n');

    for (const off of [{ SANDGLASS_DEBUG: '' }, { SANDGLASS_DEBUG: '0' }]) {
      stderr = '';
      reportError(err, off);
      expect(stderr).not.toContain('    at ');
    }

    stderr = '';
    expect(reportError(err, debug)).toBe(1);
    expect(stderr).toMatch(/^error: internal: TypeError: x is not a function\n {4}at /);
    expect(stderr).toContain('[cause]: Error: the root');
  });

  it('prints a thrown value that is no Error', () => {
    expect(reportError('plain string', noDebug)).toBe(1);
    expect(stderr).toBe('error: internal: plain string\n(SANDGLASS_DEBUG=1 prints its stack trace)\n');
  });
});
