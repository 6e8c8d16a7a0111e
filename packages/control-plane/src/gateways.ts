// Placement and the node gateway's internal API as seen from the control plane: it only ever talks to gateways over HTTP.
import { errorFromBody, SandglassError } from '@sandglass/core';
import type { ApprovalRequest, NetworkPolicy, Snapshot } from './api.js';

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
  snapshotIntervalS: number;
  /** The egress policy, already checked by parsePolicy; absent: no network at all. */
  network?: NetworkPolicy;
  /** Names of tenant secrets to bind (each exists); the gateway resolves them through its SecretStore. */
  secrets?: string[];
}

export interface GatewayCreateReply {
  id: string;
  state: string;
  startedAt: string;
  pid: number;
}

export interface GatewaySnapshotReply {
  snapshot: Snapshot;
}

export interface GatewayResumeRequest {
  snapshotId: string;
  tenantId: string;
  timeoutS: number;
  snapshotIntervalS: number;
  /** The policy and secrets the sandbox had when paused, so its new VM gets the same egress. */
  network?: NetworkPolicy;
  secrets?: string[];
}

export interface GatewayApprovalDecision {
  decision: 'approve' | 'deny';
  /** A time-boxed grant; absent: this request only. */
  ttlS?: number;
}

export interface GatewayForkRequest {
  snapshotId: string;
  tenantId: string;
  sandboxes: { id: string; timeoutS: number; snapshotIntervalS: number }[];
}

/** Per requested fork, in request order: it runs, or why it did not start. */
export type GatewayForkResult = GatewayCreateReply | { id: string; error: { code: string; message: string; details?: Record<string, unknown> } };

export interface GatewayForkReply {
  sandboxes: GatewayForkResult[];
}

export interface GatewayClientOptions {
  /** For calls that restore or snapshot a VM (create, resume, fork, snapshot, pause): seconds under TCG; the default leaves ample room. */
  createTimeoutMs?: number;
  requestTimeoutMs?: number;
}

const sandboxPath = (id: string) => `/internal/v1/sandboxes/${encodeURIComponent(id)}`;

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
    await this.#call(gateway, 'DELETE', sandboxPath(sandboxId), undefined, this.#requestTimeoutMs);
  }

  async setExpiry(gateway: GatewayEndpoint, sandboxId: string, expiresAt: string): Promise<void> {
    await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/timeout`, { expiresAt }, this.#requestTimeoutMs);
  }

  async takeSnapshot(gateway: GatewayEndpoint, sandboxId: string, req: { name?: string }): Promise<GatewaySnapshotReply> {
    return (await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/snapshots`, req, this.#createTimeoutMs)) as GatewaySnapshotReply;
  }

  async pauseSandbox(gateway: GatewayEndpoint, sandboxId: string): Promise<GatewaySnapshotReply> {
    return (await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/pause`, undefined, this.#createTimeoutMs)) as GatewaySnapshotReply;
  }

  async resumeSandbox(gateway: GatewayEndpoint, sandboxId: string, req: GatewayResumeRequest): Promise<GatewayCreateReply> {
    return (await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/resume`, req, this.#createTimeoutMs)) as GatewayCreateReply;
  }

  async forkSandboxes(gateway: GatewayEndpoint, req: GatewayForkRequest): Promise<GatewayForkReply> {
    return (await this.#call(gateway, 'POST', '/internal/v1/forks', req, this.#createTimeoutMs)) as GatewayForkReply;
  }

  async deleteSnapshot(gateway: GatewayEndpoint, snapshotId: string, tenantId: string): Promise<void> {
    const path = `/internal/v1/snapshots/${encodeURIComponent(snapshotId)}?tenantId=${encodeURIComponent(tenantId)}`;
    await this.#call(gateway, 'DELETE', path, undefined, this.#requestTimeoutMs);
  }

  async setSnapshotInterval(gateway: GatewayEndpoint, sandboxId: string, snapshotIntervalS: number): Promise<void> {
    await this.#call(gateway, 'PUT', `${sandboxPath(sandboxId)}/snapshot-interval`, { snapshotIntervalS }, this.#requestTimeoutMs);
  }

  async setNetwork(gateway: GatewayEndpoint, sandboxId: string, network: NetworkPolicy): Promise<void> {
    await this.#call(gateway, 'PUT', `${sandboxPath(sandboxId)}/network`, network, this.#requestTimeoutMs);
  }

  async listApprovals(gateway: GatewayEndpoint, sandboxId: string): Promise<ApprovalRequest[]> {
    return ((await this.#call(gateway, 'GET', `${sandboxPath(sandboxId)}/approvals`, undefined, this.#requestTimeoutMs)) as { approvals: ApprovalRequest[] }).approvals;
  }

  async decideApproval(gateway: GatewayEndpoint, sandboxId: string, requestId: string, decision: GatewayApprovalDecision): Promise<void> {
    await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/approvals/${encodeURIComponent(requestId)}`, decision, this.#requestTimeoutMs);
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
