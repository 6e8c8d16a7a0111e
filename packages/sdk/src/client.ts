// The two HTTP endpoints a sandbox talks to: the control plane (API key) and its node's gateway (short-lived access token, refreshed before it expires).
import { resolveConfig, type ConnectionConfig, type ResolvedConfig } from './config.js';
import { AuthenticationError, ConnectionError, NotFoundError, SandglassError } from './errors.js';
import { buildUrl, readJson, send, type HttpRequest, type HttpResponse, type Query, type StreamBody } from './http.js';
import type { ControlPlaneReply } from './replies.js';
import type { Access } from './types.js';

export interface RequestOptions {
  query?: Query;
  json?: unknown;
  body?: Uint8Array | StreamBody;
  /** The body's media type (application/octet-stream when not given). */
  contentType?: string;
  /** Overrides the configured header timeout; 0 = none (uploads, whose body may take long to send). */
  timeoutMs?: number;
  /** Hand over the response body as it arrives (the caller reads or cancels it); otherwise it is read whole. */
  stream?: boolean;
}

export class ControlPlane {
  constructor(readonly config: ResolvedConfig) {}

  static async open(config?: ConnectionConfig): Promise<ControlPlane> {
    return new ControlPlane(await resolveConfig(config));
  }

  async request(method: string, path: string, opts: RequestOptions = {}): Promise<HttpResponse> {
    return send(buildUrl(this.config.apiUrl, path, opts.query), this.config.apiKey, toRequest(method, opts, this.config.requestTimeoutMs));
  }

  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return readJson<T>(await this.request(method, path, opts));
  }
}

function toRequest(method: string, opts: RequestOptions, defaultTimeoutMs: number): HttpRequest {
  return {
    method,
    query: opts.query,
    json: opts.json,
    body: opts.body,
    contentType: opts.contentType,
    timeoutMs: opts.timeoutMs ?? defaultTimeoutMs,
    stream: opts.stream,
  };
}

// Refresh this long before expiry, or halfway through the token's life when it is shorter than twice this.
const REFRESH_MARGIN_MS = 60_000;

/** The gateway side of one sandbox; every call carries a valid access token. */
export class DataPlane {
  private current?: { access: Access; refreshAtMs: number };
  private refreshing?: Promise<Access>;

  constructor(
    readonly controlPlane: ControlPlane,
    readonly sandboxId: string,
    initial?: Access,
    private readonly nowMs: () => number = Date.now,
  ) {
    if (initial) this.adopt(initial);
  }

  private adopt(access: Access): Access {
    const now = this.nowMs();
    const expiresAtMs = Date.parse(access.expiresAt);
    if (!access.token || !access.gatewayUrl || Number.isNaN(expiresAtMs)) {
      throw new SandglassError('protocol_error', `the control plane returned an unusable access grant for ${this.sandboxId}`);
    }
    const margin = Math.min(REFRESH_MARGIN_MS, Math.max(0, (expiresAtMs - now) / 2));
    this.current = { access, refreshAtMs: expiresAtMs - margin };
    return access;
  }

  /** The gateway's URL as last granted, without asking: undefined before the first grant. */
  get knownGatewayUrl(): string | undefined {
    return this.current?.access.gatewayUrl;
  }

  /** A token valid for a while yet; asks the control plane for a new one when it is close to expiry. */
  async access(opts: { force?: boolean } = {}): Promise<Access> {
    if (!opts.force && this.current && this.nowMs() < this.current.refreshAtMs) return this.current.access;
    // Concurrent callers share one refresh instead of each asking the control plane.
    this.refreshing ??= this.controlPlane
      .json<ControlPlaneReply<'createSandboxAccess'>>('POST', `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/access`)
      .then((a) => this.adopt(a))
      .finally(() => {
        this.refreshing = undefined;
      });
    return this.refreshing;
  }

  private path(subpath: string): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}${subpath}`;
  }

  async request(method: string, subpath: string, opts: RequestOptions = {}): Promise<HttpResponse> {
    const attempt = async (access: Access) =>
      send(buildUrl(access.gatewayUrl, this.path(subpath), opts.query), access.token, toRequest(method, opts, this.controlPlane.config.requestTimeoutMs));
    const used = await this.access();
    try {
      return await attempt(used);
    } catch (err) {
      // Retried once, unless the body was a stream that is already consumed.
      const replayable = opts.body === undefined || opts.body instanceof Uint8Array;
      if (!replayable) throw err;
      // A token the gateway no longer accepts (clock skew, gateway restart): get a new one.
      if (err instanceof AuthenticationError && err.status === 401) return attempt(await this.access({ force: true }));
      // The sandbox moved to another node (its node died, or it was resumed elsewhere): the control plane says where.
      // Only when the request cannot have run: the old node refused the connection or does not have the sandbox.
      if (notDelivered(err, method)) {
        const fresh = await this.access({ force: true });
        if (fresh.gatewayUrl !== used.gatewayUrl) return attempt(fresh);
      }
      throw err;
    }
  }

  async json<T>(method: string, subpath: string, opts: RequestOptions = {}): Promise<T> {
    return readJson<T>(await this.request(method, subpath, opts));
  }

  /** URL and headers for a WebSocket on this sandbox; the token goes in a header, out of URLs and logs. */
  async webSocketTarget(subpath: string, query: Query, opts: { force?: boolean } = {}): Promise<{ url: string; headers: Record<string, string> }> {
    const access = await this.access(opts);
    const url = buildUrl(access.gatewayUrl, this.path(subpath), query);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    return { url: url.toString(), headers: { authorization: `Bearer ${access.token}` } };
  }
}

/** A gateway that refused the connection, or answered that it has no such sandbox, did not run the request. */
function notDelivered(err: unknown, method: string): boolean {
  if (err instanceof NotFoundError) return err.code === 'sandbox_not_found';
  if (!(err instanceof ConnectionError)) return false;
  const code = (err.cause as { code?: string } | undefined)?.code;
  return method === 'GET' || code === 'ECONNREFUSED' || code === 'EHOSTUNREACH';
}
