// One place that talks HTTP: builds URLs, applies the header timeout, and turns every non-2xx or network failure into a typed error.
import { channel } from 'node:diagnostics_channel';
import {
  Agent as HttpAgent,
  request as httpRequest,
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';
import { ConnectionError, ProtocolError, SandglassError, TimeoutError, errorFromResponse } from './errors.js';

export type Query = Record<string, string | number | boolean | undefined>;

/** A request body that is sent as it is read, never buffered whole. */
export type StreamBody = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

export interface HttpRequest {
  method: string;
  query?: Query;
  /** Sent as application/json. */
  json?: unknown;
  /** Raw bytes, sent as application/octet-stream unless contentType says otherwise. */
  body?: Uint8Array | StreamBody;
  contentType?: string;
  /** Abort when the response headers have not arrived in this time; the body itself is not limited. 0 = none. */
  timeoutMs: number;
  /** Hand over the response body as it arrives, for the caller to read or cancel; otherwise it is read whole first. */
  stream?: boolean;
}

/** What RESPONSE_CHANNEL carries: one answer the SDK read whole (every error, and every answer not asked as `stream`). */
export interface ObservedResponse {
  method: string;
  url: URL;
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * A `node:diagnostics_channel` name on which the SDK publishes each ObservedResponse, for instrumentation (the
 * integration suite checks every answer against the OpenAPI spec with it). Costs nothing without a subscriber.
 */
export const RESPONSE_CHANNEL = 'sandglass:sdk:response';
const responses = channel(RESPONSE_CHANNEL);

// One keep-alive agent per protocol for the whole process, as fetch shares one dispatcher: every Sandbox.connect opens a
// client of its own, so an agent per client would open a connection per call. Idle sockets are unref'd by the agent
// (a CLI exits with them open) and closed before the server's advertised keep-alive timeout.
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

/** A 2xx answer. Unless the request asked for `stream`, its body is already read and the connection free for reuse. */
export class HttpResponse {
  private whole?: Promise<Buffer>;

  /** @internal */
  constructor(
    readonly status: number,
    readonly headers: IncomingHttpHeaders,
    private readonly url: URL,
    private readonly message: IncomingMessage,
    private readonly buffered?: Buffer,
  ) {}

  header(name: string): string | undefined {
    const v = this.headers[name.toLowerCase()];
    return Array.isArray(v) ? v.join(', ') : v;
  }

  /** The body read whole; a connection that drops first rejects with ConnectionError. */
  bytes(): Promise<Buffer> {
    this.whole ??= this.buffered ? Promise.resolve(this.buffered) : readWhole(this.url, this.message);
    return this.whole;
  }

  async text(): Promise<string> {
    return (await this.bytes()).toString('utf8');
  }

  /** The body as it arrives (a `stream` request); destroying it closes the connection. */
  get body(): Readable {
    return this.buffered ? Readable.from([this.buffered]) : this.message;
  }

  /** The body as a web stream; cancelling it closes the connection. */
  webStream(): ReadableStream<Uint8Array> {
    return Readable.toWeb(this.body) as ReadableStream<Uint8Array>;
  }
}

export function buildUrl(base: string, path: string, query?: Query): URL {
  const url = new URL(base.replace(/\/+$/, '') + path);
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
  return url;
}

function isStreamBody(body: HttpRequest['body']): body is StreamBody {
  return body !== undefined && !(body instanceof Uint8Array);
}

/** Sends one request with a bearer token; resolves with the 2xx response. */
export async function send(url: URL, token: string, req: HttpRequest): Promise<HttpResponse> {
  const headers: OutgoingHttpHeaders = { authorization: `Bearer ${token}` };
  let body: Uint8Array | StreamBody | undefined;
  if (req.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = Buffer.from(JSON.stringify(req.json), 'utf8');
  } else if (req.body !== undefined) {
    headers['content-type'] = req.contentType ?? 'application/octet-stream';
    body = req.body;
  }
  // A timer that destroys the request in flight rather than an AbortSignal: cheaper, and this is the only abort there is.
  const flight: Flight = { timedOut: false };
  const timer =
    req.timeoutMs > 0
      ? setTimeout(() => {
          flight.timedOut = true;
          flight.request?.destroy();
        }, req.timeoutMs)
      : undefined;
  let res: IncomingMessage;
  try {
    // A GET has no body, so it may be sent again when its kept-alive connection turns out stale (see exchange).
    res = await exchange(url, { method: req.method, headers, agent: agent(url) }, body, flight, req.method === 'GET');
  } catch (err) {
    if (flight.timedOut) {
      throw new TimeoutError('timeout', `${req.method} ${url.origin}${url.pathname} got no response within ${req.timeoutMs} ms`, { cause: err });
    }
    if (err instanceof SandglassError || err instanceof SourceError) throw err instanceof SourceError ? err.cause : err;
    throw connectionError(url, err);
  } finally {
    clearTimeout(timer);
  }
  const status = res.statusCode ?? 0;
  const ok = status >= 200 && status < 300;
  if (ok && req.stream) return new HttpResponse(status, res.headers, url, res);
  // Read before returning, so that a caller that ignores the body does not hold the connection.
  const bytes = await readWhole(url, res);
  if (responses.hasSubscribers) responses.publish({ method: req.method, url, status, headers: res.headers, body: bytes } satisfies ObservedResponse);
  if (status >= 300 && status < 400) {
    // fetch followed redirects; the SDK does not: one would carry the bearer token to wherever it points.
    throw new ProtocolError(
      'protocol_error',
      `${req.method} ${url.origin}${url.pathname} answered HTTP ${status}, a redirect to ${res.headers.location ?? '(no location)'}; the SDK does not follow redirects: point apiUrl at the server itself`,
      { status },
    );
  }
  if (!ok) throw readError(status, res.headers, bytes);
  return new HttpResponse(status, res.headers, url, res, bytes);
}

function agent(url: URL): HttpAgent {
  return url.protocol === 'https:' ? agents.https : agents.http;
}

/** The request being sent, for the header timer to destroy. */
interface Flight {
  timedOut: boolean;
  request?: ClientRequest;
}

/** An error thrown by the caller's request body while it was being sent: the caller's own, passed on as it is. */
class SourceError extends Error {
  constructor(override readonly cause: unknown) {
    super('request body failed');
  }
}

/**
 * Sends the request and resolves with the response once its headers arrived. A connection the server closed as idle
 * just as it was reused fails before any answer: the request never reached the server's handler, so when `mayResend`
 * it goes once more, on a fresh connection.
 */
function exchange(
  url: URL,
  options: { method: string; headers: OutgoingHttpHeaders; agent: HttpAgent },
  body: Uint8Array | StreamBody | undefined,
  flight: Flight,
  mayResend: boolean,
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    let answered = false;
    const r = request(url, options, (res) => {
      answered = true;
      resolve(res);
    });
    flight.request = r;
    r.on('error', (err: NodeJS.ErrnoException) => {
      if (answered) return;
      const stale = r.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE');
      if (stale && mayResend && !flight.timedOut) resolve(exchange(url, options, body, flight, false));
      else reject(err);
    });
    if (body === undefined) r.end();
    else if (!isStreamBody(body)) r.end(body);
    else void pump(r, body);
  });
}

/** Writes a streamed body as it is read, waiting for the socket to drain: the source is read no faster than it is sent. */
async function pump(r: ClientRequest, body: StreamBody): Promise<void> {
  try {
    // Node's web ReadableStream is async-iterable; the DOM typing does not say so.
    for await (const chunk of body as AsyncIterable<Uint8Array>) {
      if (r.destroyed) return;
      if (!r.write(chunk)) await drained(r);
    }
    r.end();
  } catch (err) {
    r.destroy(new SourceError(err));
  }
}

function drained(r: ClientRequest): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      r.off('drain', done);
      r.off('close', done);
      resolve();
    };
    r.on('drain', done);
    r.on('close', done);
  });
}

async function readWhole(url: URL, res: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  try {
    for await (const c of res) chunks.push(c as Buffer);
  } catch (err) {
    throw connectionError(url, err);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

export function connectionError(url: URL, err: unknown): ConnectionError {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string }; errors?: { code?: string }[] };
  const why = e.code ?? e.errors?.[0]?.code ?? e.cause?.code ?? e.cause?.message ?? e.message;
  return new ConnectionError('connection_failed', `cannot reach ${url.origin} (${why}); is the server running (\`sandglass up\`)?`, {
    cause: err,
    retryable: true,
  });
}

/** A non-2xx answer as the typed error, whatever its body is. */
function readError(status: number, headers: IncomingHttpHeaders, bytes: Buffer): SandglassError {
  const text = bytes.toString('utf8');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: errorFromResponse reports the start of the text.
  }
  const requestId = headers['x-request-id'];
  return errorFromResponse(status, body, typeof requestId === 'string' ? requestId : undefined);
}

/** Reads a 2xx JSON body; an empty body (204) reads as undefined. */
export async function readJson<T>(res: HttpResponse): Promise<T> {
  const text = await res.text();
  return (text === '' ? undefined : JSON.parse(text)) as T;
}
