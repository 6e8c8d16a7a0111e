// One place that talks HTTP: builds URLs, applies the header timeout, and turns every non-2xx or network failure into a typed error.
import { ConnectionError, SandglassError, TimeoutError, errorFromResponse } from './errors.js';

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
}

export function buildUrl(base: string, path: string, query?: Query): URL {
  const url = new URL(base.replace(/\/+$/, '') + path);
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
  return url;
}

function isStreamBody(body: HttpRequest['body']): body is StreamBody {
  return body !== undefined && !(body instanceof Uint8Array);
}

/** Sends one request with a bearer token; resolves with the 2xx response, whose body the caller reads. */
export async function send(url: URL, token: string, req: HttpRequest): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  let body: RequestInit['body'];
  if (req.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(req.json);
  } else if (req.body !== undefined) {
    headers['content-type'] = req.contentType ?? 'application/octet-stream';
    // undici streams an async iterable or ReadableStream body with backpressure; the DOM types do not list iterables.
    body = req.body as RequestInit['body'];
  }
  const abort = new AbortController();
  const timer = req.timeoutMs > 0 ? setTimeout(() => abort.abort(), req.timeoutMs) : undefined;
  let res: Response;
  const attempt = () =>
    fetch(url, {
      method: req.method,
      headers,
      body,
      signal: abort.signal,
      ...(isStreamBody(req.body) ? { duplex: 'half' } : {}),
    } as RequestInit);
  try {
    try {
      res = await attempt();
    } catch (err) {
      // A kept-alive connection the server closed as idle just as it was reused: a GET never reached the server's
      // handler, so sending it again on a fresh connection is safe (other methods are not retried: they may have).
      if (req.method !== 'GET' || abort.signal.aborted || !isStaleConnection(err)) throw err;
      res = await attempt();
    }
  } catch (err) {
    if (abort.signal.aborted) {
      throw new TimeoutError('timeout', `${req.method} ${url.origin}${url.pathname} got no response within ${req.timeoutMs} ms`, { cause: err });
    }
    if (err instanceof SandglassError) throw err;
    throw connectionError(url, err);
  } finally {
    clearTimeout(timer);
  }
  if (!res.ok) throw await readError(res);
  return res;
}

function isStaleConnection(err: unknown): boolean {
  const code = (err as { cause?: { code?: string } }).cause?.code;
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET';
}

export function connectionError(url: URL, err: unknown): ConnectionError {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code ?? cause?.message ?? (err as Error).message;
  return new ConnectionError('connection_failed', `cannot reach ${url.origin} (${why}); is the server running (\`sandglass up\`)?`, {
    cause: err,
    retryable: true,
  });
}

/** Reads a non-2xx response into the typed error, whatever its body is. */
export async function readError(res: Response): Promise<SandglassError> {
  const text = await res.text().catch(() => '');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: errorFromResponse reports the start of the text.
  }
  return errorFromResponse(res.status, body, res.headers.get('x-request-id') ?? undefined);
}

/** Reads a 2xx JSON body; an empty body (204) reads as undefined. */
export async function readJson<T>(res: Response): Promise<T> {
  const text = await res.text();
  return (text === '' ? undefined : JSON.parse(text)) as T;
}
