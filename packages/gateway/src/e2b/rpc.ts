// Serving Connect RPCs over Fastify's raw request and response: bounded bodies, error mapping, server streams.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Clock, ErrorCode, Timer } from '@sandglass/core';
import { mapAgentError } from '../agent-link.js';
import { ConnectError, EnvelopeReader, FLAG_COMPRESSED, endStreamEnvelope, messageEnvelope, type ConnectCode } from './connect.js';

/** The largest unary request (or stream request message) read; stdin writes are the big ones. */
export const MAX_MESSAGE_BYTES = 8 * 1024 * 1024;

const CODE_OF: Partial<Record<ErrorCode, ConnectCode>> = {
  invalid_argument: 'invalid_argument',
  malformed_json: 'invalid_argument',
  path_outside_sandbox: 'invalid_argument',
  not_a_directory: 'invalid_argument',
  is_a_directory: 'invalid_argument',
  payload_too_large: 'resource_exhausted',
  unauthenticated: 'unauthenticated',
  api_key_revoked: 'unauthenticated',
  api_key_expired: 'unauthenticated',
  permission_denied: 'permission_denied',
  not_found: 'not_found',
  file_not_found: 'not_found',
  command_not_found: 'not_found',
  command_exited: 'not_found',
  file_exists: 'already_exists',
  sandbox_not_running: 'unavailable',
  agent_timeout: 'unavailable',
  timeout: 'deadline_exceeded',
  storage_full: 'resource_exhausted',
  capacity_exhausted: 'resource_exhausted',
};

/** Any failure as a Connect error: agent errors through the catalogue first; the unexpected becomes `internal`. */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const se = mapAgentError(err);
  return new ConnectError(CODE_OF[se.code] ?? 'internal', se.message);
}

/**
 * Reads a whole body up to maxBytes. A bigger one is refused at once; the rest of it is read and dropped, so the
 * client still gets the answer (closing a socket with unread input resets it).
 */
export async function readBody(raw: IncomingMessage, maxBytes = MAX_MESSAGE_BYTES): Promise<Buffer> {
  const declared = Number(raw.headers['content-length']);
  if (declared > maxBytes) {
    raw.resume();
    throw new ConnectError('resource_exhausted', `the request body of ${declared} bytes is larger than the ${maxBytes} bytes accepted`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  // Left early without destroying the request, so the error can still be answered on its socket.
  for await (const c of raw.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > maxBytes) {
      raw.resume();
      throw new ConnectError('resource_exhausted', `the request body is larger than the ${maxBytes} bytes accepted`);
    }
    chunks.push(c);
  }
  return Buffer.concat(chunks, size);
}

export function parseJson(bytes: Buffer): unknown {
  if (bytes.length === 0) return {};
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch (e) {
    throw new ConnectError('invalid_argument', `the request message is not valid JSON: ${(e as Error).message}`);
  }
}

function mediaType(raw: IncomingMessage): string {
  return (raw.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
}

function refuseCompression(raw: IncomingMessage, header: string): void {
  const enc = raw.headers[header];
  if (enc !== undefined && enc !== 'identity')
    throw new ConnectError('unimplemented', `${header}: ${String(enc)} is not supported; send uncompressed messages`);
}

/** A unary request's message (`application/json`). */
export async function unaryRequest(raw: IncomingMessage): Promise<unknown> {
  if (mediaType(raw) !== 'application/json') throw new ConnectError('invalid_argument', 'unary requests must be Content-Type: application/json');
  refuseCompression(raw, 'content-encoding');
  return parseJson(await readBody(raw));
}

/** A server-streaming request's one message: a single envelope (`application/connect+json`). */
export async function streamRequest(raw: IncomingMessage): Promise<unknown> {
  if (mediaType(raw) !== 'application/connect+json')
    throw new ConnectError('invalid_argument', 'streaming requests must be Content-Type: application/connect+json');
  refuseCompression(raw, 'connect-content-encoding');
  const reader = new EnvelopeReader(MAX_MESSAGE_BYTES);
  const envelopes = reader.push(await readBody(raw, MAX_MESSAGE_BYTES + 5));
  if (envelopes.length !== 1 || reader.pendingBytes !== 0)
    throw new ConnectError('invalid_argument', 'a server-streaming request carries exactly one message envelope');
  if (envelopes[0]!.flags & FLAG_COMPRESSED) throw new ConnectError('unimplemented', 'compressed messages are not supported');
  return parseJson(envelopes[0]!.payload);
}

/**
 * The response of a server-streaming RPC: envelopes written in order with the sender's pace (a piece's `release`
 * runs once the socket took it), keepalive messages while idle, and exactly one end-of-stream frame. `closed`
 * resolves when the response is over, by our end or because the client went away.
 */
export class ServerStream {
  #ended = false;
  #lastWriteMs: number;
  #keepalive?: Timer;
  #waiting: Array<() => void> = [];
  readonly closed: Promise<void>;

  readonly #cutIf?: () => boolean;

  /**
   * `cutIf`: asked when the stream fails; true (the sandbox is gone) cuts the connection instead of sending the error
   * in-band, as E2B's edge does when a sandbox dies: the SDK then probes /health (502) and says the sandbox was killed.
   */
  constructor(
    private readonly res: ServerResponse,
    private readonly clock: Clock,
    opts: { keepaliveS?: number; keepaliveMessage: unknown; cutIf?: () => boolean },
  ) {
    this.#cutIf = opts.cutIf;
    res.writeHead(200, { 'content-type': 'application/connect+json', 'cache-control': 'no-store' });
    res.flushHeaders();
    this.#lastWriteMs = clock.nowMs();
    res.on('drain', () => this.#flushWaiting());
    this.closed = new Promise((resolve) => res.once('close', resolve));
    void this.closed.then(() => {
      this.#ended = true;
      this.#keepalive?.cancel();
      this.#flushWaiting();
    });
    if (opts.keepaliveS !== undefined) {
      const intervalMs = opts.keepaliveS * 1000;
      this.#keepalive = clock.setInterval(() => {
        if (this.clock.nowMs() - this.#lastWriteMs >= intervalMs - 50) this.send(opts.keepaliveMessage);
      }, intervalMs);
    }
  }

  get ended(): boolean {
    return this.#ended;
  }

  send(message: unknown, release?: () => void): void {
    if (this.#ended) {
      release?.();
      return;
    }
    const ok = this.res.write(messageEnvelope(message));
    this.#lastWriteMs = this.clock.nowMs();
    if (!release) return;
    if (ok) release();
    else this.#waiting.push(release);
  }

  /** Ends the stream, with the error when it failed; later calls do nothing. */
  end(err?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#keepalive?.cancel();
    if (err !== undefined && this.#cutIf?.()) {
      this.res.destroy();
      return;
    }
    this.res.end(endStreamEnvelope(err === undefined ? undefined : toConnectError(err)));
  }

  #flushWaiting(): void {
    for (const release of this.#waiting.splice(0)) release();
  }
}
