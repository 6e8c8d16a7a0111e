// Cluster mode: an envd request for a sandbox another gateway runs is proxied to that gateway, so E2B_SANDBOX_URL
// (one base URL for every sandbox) may name any gateway of the cluster, or a load balancer over all of them.
//
// Why this is safe: the envd hook verifies the request's access token for the sandbox before it asks where the
// sandbox runs, so a caller without a token learns nothing, not even whether the sandbox exists; the control plane
// answers only a location; and the gateway the request is sent to verifies the same token again (this gateway adds no
// credential of its own). A forwarded request is marked, and a marked request is never forwarded again, so a stale
// location or a load balancer in front of the gateways cannot make a loop.
import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { Clock } from '@sandglass/core';

/** Set on a forwarded request (the forwarding node's id); a request that carries it is never forwarded again. */
export const FORWARDED_HEADER = 'x-sandglass-forwarded';

export interface SandboxLocation {
  gatewayId: string;
  dataPlaneUrl: string;
}

export interface EnvdForwarderOptions {
  /** This gateway's node id: a location naming it means the sandbox is not running here, not "forward to self". */
  nodeId: string;
  /** The control plane's answer (node API), undefined when the sandbox runs nowhere. */
  locate(sandboxId: string): Promise<SandboxLocation | undefined>;
  clock: Clock;
  /** How long an answer (a miss too) is reused; default 3 s. A sandbox that moved is found again after it. */
  cacheMs?: number;
  /** Forwarded requests in flight at once; past it a request is answered 503. Default 256. */
  maxInFlight?: number;
}

const MAX_CACHED = 10_000;

/**
 * Hop-by-hop headers (RFC 9110 7.6.1), `expect` (this hop already answered it) and the ones this proxy sets itself:
 * never passed on, either way.
 */
const NOT_PASSED = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
  'host',
  FORWARDED_HEADER,
]);

/** The end-to-end headers of a message: without hop-by-hop ones, nor those its Connection header names. */
export function endToEndHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const named = new Set(
    String(headers.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || NOT_PASSED.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

export class EnvdForwarder {
  readonly nodeId: string;
  readonly #opts: EnvdForwarderOptions;
  readonly #cacheMs: number;
  readonly #maxInFlight: number;
  readonly #cache = new Map<string, { untilMs: number; location: Promise<SandboxLocation | undefined> }>();
  readonly #http: HttpAgent;
  readonly #https: HttpsAgent;
  #inFlight = 0;

  constructor(opts: EnvdForwarderOptions) {
    this.nodeId = opts.nodeId;
    this.#opts = opts;
    this.#cacheMs = opts.cacheMs ?? 3000;
    this.#maxInFlight = opts.maxInFlight ?? 256;
    this.#http = new HttpAgent({ keepAlive: true, maxSockets: this.#maxInFlight });
    this.#https = new HttpsAgent({ keepAlive: true, maxSockets: this.#maxInFlight });
  }

  /** The data-plane URL of the other gateway that runs the sandbox, or undefined (runs nowhere, or here). */
  async target(sandboxId: string): Promise<URL | undefined> {
    const nowMs = this.#opts.clock.nowMs();
    let hit = this.#cache.get(sandboxId);
    if (!hit || hit.untilMs <= nowMs) {
      this.#cache.delete(sandboxId);
      if (this.#cache.size >= MAX_CACHED) this.#cache.delete(this.#cache.keys().next().value!);
      const location = this.#opts.locate(sandboxId);
      const entry = { untilMs: nowMs + this.#cacheMs, location };
      // A failed lookup (control plane unreachable) is not an answer: the next request asks again.
      location.catch(() => this.#cache.get(sandboxId) === entry && this.#cache.delete(sandboxId));
      this.#cache.set(sandboxId, entry);
      hit = entry;
    }
    const loc = await hit.location;
    if (!loc || loc.gatewayId === this.nodeId) return undefined;
    const url = new URL(loc.dataPlaneUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
    return url;
  }

  /** Whether another request may be forwarded now. */
  hasRoom(): boolean {
    return this.#inFlight < this.#maxInFlight;
  }

  /**
   * Sends the request to `<target>/e2b<path>` and streams the answer back as it comes (a Connect server stream
   * frame by frame). `path` is sent as the client wrote it (no dot-segment resolution, so it stays under /e2b).
   * `headers` are added (the sandbox id and port, which the host form carried in the Host). A client that goes
   * away aborts the upstream request. Never rejects.
   */
  proxy(req: IncomingMessage, res: ServerResponse, target: URL, path: string, headers: Record<string, string>): Promise<void> {
    this.#inFlight++;
    const https = target.protocol === 'https:';
    const upstream = (https ? httpsRequest : httpRequest)({
      protocol: target.protocol,
      hostname: target.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: target.port || (https ? 443 : 80),
      method: req.method,
      path: `${target.pathname.replace(/\/+$/, '')}/e2b${path}`,
      headers: { ...endToEndHeaders(req.headers), ...headers, [FORWARDED_HEADER]: this.nodeId },
      agent: https ? this.#https : this.#http,
    });
    return new Promise((resolve) => {
      res.on('close', () => {
        if (!res.writableFinished) upstream.destroy();
        this.#inFlight--;
        resolve();
      });
      upstream.on('response', (up) => {
        res.writeHead(up.statusCode ?? 502, endToEndHeaders(up.headers));
        res.flushHeaders();
        up.on('error', () => res.destroy());
        up.pipe(res);
      });
      upstream.on('error', (err) => {
        if (res.headersSent) return res.destroy();
        const message = `The gateway that runs this sandbox (${target.origin}) cannot be reached: ${err.message}`;
        res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ code: 502, message }));
      });
      req.on('error', () => upstream.destroy());
      req.pipe(upstream);
    });
  }

  close(): void {
    this.#http.destroy();
    this.#https.destroy();
  }
}
