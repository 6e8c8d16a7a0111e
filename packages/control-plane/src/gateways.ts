// Placement and the node gateway's internal API as seen from the control plane: it only ever talks to gateways over HTTP.
import { errorFromBody, SandglassError } from '@sandglass/core';

export interface GatewayEndpoint {
  id: string;
  /** Base URL of the gateway: its internal API lives under /internal/v1, its data plane under /v1. */
  url: string;
}

export interface PlacementRequest {
  tenantId: string;
  memoryMib: number;
  vcpus: number;
}

/** Where sandboxes can run. Today one gateway; later a nodes-table-backed directory with capacity-aware placement. */
export interface GatewayDirectory {
  /** The gateway a new sandbox goes to; throws `capacity_exhausted` when none has room. */
  pick(req: PlacementRequest): Promise<GatewayEndpoint>;
  get(id: string): Promise<GatewayEndpoint | undefined>;
}

export function singleGateway(gateway: GatewayEndpoint): GatewayDirectory {
  return {
    pick: async () => gateway,
    get: async (id) => (id === gateway.id ? gateway : undefined),
  };
}

export interface GatewayCreateRequest {
  id: string;
  tenantId: string;
  template: string;
  memoryMib: number;
  vcpus: number;
  timeoutS: number;
}

export interface GatewayCreateReply {
  id: string;
  state: string;
  startedAt: string;
  pid: number;
}

export interface GatewayClientOptions {
  /** Restoring a VM can take seconds under TCG; the default leaves ample room. */
  createTimeoutMs?: number;
  requestTimeoutMs?: number;
}

/** Calls a gateway's internal API with the node secret; its errors come back as the same SandglassError. */
export class GatewayClient {
  readonly #authorization: string;
  readonly #createTimeoutMs: number;
  readonly #requestTimeoutMs: number;

  constructor(nodeSecret: Buffer, opts: GatewayClientOptions = {}) {
    this.#authorization = `Bearer ${nodeSecret.toString('hex')}`;
    this.#createTimeoutMs = opts.createTimeoutMs ?? 120_000;
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? 30_000;
  }

  async createSandbox(gateway: GatewayEndpoint, req: GatewayCreateRequest): Promise<GatewayCreateReply> {
    return (await this.#call(gateway, 'POST', '/internal/v1/sandboxes', req, this.#createTimeoutMs)) as GatewayCreateReply;
  }

  async killSandbox(gateway: GatewayEndpoint, sandboxId: string): Promise<void> {
    await this.#call(gateway, 'DELETE', `/internal/v1/sandboxes/${encodeURIComponent(sandboxId)}`, undefined, this.#requestTimeoutMs);
  }

  async setExpiry(gateway: GatewayEndpoint, sandboxId: string, expiresAt: string): Promise<void> {
    await this.#call(gateway, 'POST', `/internal/v1/sandboxes/${encodeURIComponent(sandboxId)}/timeout`, { expiresAt }, this.#requestTimeoutMs);
  }

  async #call(gateway: GatewayEndpoint, method: string, path: string, body: unknown, timeoutMs: number): Promise<unknown> {
    let res: Response;
    try {
      res = await fetch(new URL(path, gateway.url), {
        method,
        headers: { authorization: this.#authorization, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const timedOut = (err as Error).name === 'TimeoutError';
      const why = timedOut ? `did not answer within ${timeoutMs / 1000} s` : 'cannot be reached';
      throw new SandglassError('gateway_unavailable', `Gateway ${gateway.id} (${gateway.url}) ${why}; retry later.`, { cause: err });
    }
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (res.ok) return parsed;
    const err = errorFromBody(res.status, parsed);
    // The caller's credentials are fine; a gateway refusing ours is a deployment fault, not the caller's.
    if (err.code === 'unauthenticated' || err.code === 'permission_denied') {
      throw new SandglassError('internal', undefined, { cause: new Error(`gateway ${gateway.id} refused the node secret: ${err.message}`) });
    }
    throw err;
  }
}
