// Placement and the node gateway's internal API as seen from the control plane: it only ever talks to gateways over HTTP.
import { deriveNodeKeys, errorFromBody, httpExchange, SandglassError, type GatewayApi, type RequestBody, type SuccessBody } from '@sandglass/core';
import type { ApprovalRequest, NetworkPolicy } from './api.js';

export interface GatewayEndpoint {
  id: string;
  /** Base URL of the gateway's data plane (/v1), which SDKs are handed. */
  url: string;
  /**
   * Where its internal API (/internal/v1) listens, never the data plane's port: `unix:/abs/path.sock` (the embedded
   * node's socket), or an `http://` base URL for a node reached over a private network.
   */
  internalUrl: string;
}

export interface PlacementRequest {
  tenantId: string;
  memoryMib: number;
  vcpus: number;
  /** Nodes not to use (the one a sandbox is moving away from). */
  exclude?: string[];
  /** The template's artifact key: a node that has it cached is preferred. */
  templateKey?: string;
  /** A node holding a warm pool of the template the sandbox is created from: preferred above all when it fits. */
  preferNode?: string;
  /** The sandbox's rolling-snapshot interval: a node whose capture capacity can take it is preferred. */
  snapshotIntervalS?: number;
}

/** Where sandboxes can run: one gateway in `sandglass up`, the nodes table (nodes.ts) in a cluster. */
export interface GatewayDirectory {
  /** The gateway a new sandbox goes to; throws `capacity_exhausted` when none has room. */
  pick(req: PlacementRequest): Promise<GatewayEndpoint>;
  get(id: string): Promise<GatewayEndpoint | undefined>;
  /** Every gateway: what the control plane tells all nodes (revoked API keys). */
  all(): Promise<GatewayEndpoint[]>;
}

export function singleGateway(gateway: GatewayEndpoint): GatewayDirectory {
  return {
    pick: async (req) => {
      if (req.exclude?.includes(gateway.id)) throw new SandglassError('capacity_exhausted', 'This deployment has one gateway, and it cannot be used.');
      return gateway;
    },
    get: async (id) => (id === gateway.id ? gateway : undefined),
    all: async () => [gateway],
  };
}

// The internal API's requests and replies, from spec/gateway.yaml: a field the gateway renames or adds fails this
// client's type check rather than a call at run time.
type GatewaySchemas = GatewayApi.components['schemas'];
type InternalBody<Op extends keyof GatewayApi.operations> = NonNullable<RequestBody<GatewayApi.operations[Op]>>;

/** The egress policy is already checked by parsePolicy; the secrets named exist, and the gateway resolves them. */
export type GatewayCreateRequest = InternalBody<'nodeCreateSandbox'>;
export type GatewayCreateReply = GatewaySchemas['NodeSandbox'];
export type GatewaySnapshotReply = GatewaySchemas['SnapshotReply'];
export type GatewayMetrics = GatewaySchemas['Metrics'];
/** The policy and secrets the sandbox had when paused, so its new VM gets the same egress. */
export type GatewayResumeRequest = InternalBody<'nodeResumeSandbox'>;
export type GatewayApprovalDecision = InternalBody<'nodeDecideApproval'>;
export type GatewayForkRequest = InternalBody<'nodeForkSandboxes'>;
/** Per requested fork, in request order: it runs, or why it did not start. */
export type GatewayForkResult = GatewayForkReply['sandboxes'][number];
export type GatewayForkReply = SuccessBody<GatewayApi.operations['nodeForkSandboxes']>;

export interface GatewayClientOptions {
  /** For calls that restore or snapshot a VM (create, resume, fork, snapshot, pause): seconds under TCG; the default leaves ample room. */
  createTimeoutMs?: number;
  /**
   * For resume and fork, which may cold-boot a disk-only snapshot: the node alone gives the booting guest's agent
   * 120 s to answer under TCG, so this is that and room to prepare the disk. Default 300 s.
   */
  bootTimeoutMs?: number;
  requestTimeoutMs?: number;
}

const sandboxPath = (id: string) => `/internal/v1/sandboxes/${encodeURIComponent(id)}`;

/** Calls a gateway's internal API with the key derived from the node secret; its errors come back as the same SandglassError. */
export class GatewayClient {
  readonly #authorization: string;
  readonly #createTimeoutMs: number;
  readonly #bootTimeoutMs: number;
  readonly #requestTimeoutMs: number;

  constructor(nodeSecret: Buffer, opts: GatewayClientOptions = {}) {
    this.#authorization = `Bearer ${deriveNodeKeys(nodeSecret).internalBearer.toString('hex')}`;
    this.#createTimeoutMs = opts.createTimeoutMs ?? 120_000;
    this.#bootTimeoutMs = opts.bootTimeoutMs ?? Math.max(300_000, this.#createTimeoutMs);
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? 30_000;
  }

  /**
   * Asks the gateway for the template in the sandbox's VM shape before the sandbox is recorded: ready, or
   * `template_not_ready` once the gateway's bounded wait ends with its build still running (it goes on there).
   */
  async prepareTemplate(gateway: GatewayEndpoint, req: InternalBody<'nodePrepareTemplate'>): Promise<void> {
    await this.#call(gateway, 'POST', '/internal/v1/templates/prepare', req, this.#createTimeoutMs);
  }

  async createSandbox(gateway: GatewayEndpoint, req: GatewayCreateRequest): Promise<GatewayCreateReply> {
    return (await this.#call(gateway, 'POST', '/internal/v1/sandboxes', req, this.#createTimeoutMs)) as GatewayCreateReply;
  }

  /** Tells a gateway to refuse access tokens obtained with these keys until `untilMs`, when the last one expires. */
  async revokeKeys(gateway: GatewayEndpoint, keyIds: string[], untilMs: number): Promise<void> {
    await this.#call(gateway, 'POST', '/internal/v1/revoked-keys', { keyIds, untilMs }, this.#requestTimeoutMs);
  }

  /** Tells a gateway that a tenant's key was revoked: it stops the tenant's sandboxes and wipes its plaintext. */
  async tenantKeyRevoked(gateway: GatewayEndpoint, tenantId: string): Promise<{ stoppedSandboxes: string[]; wipedFiles: number }> {
    const path = `/internal/v1/tenants/${encodeURIComponent(tenantId)}/key-revoked`;
    return (await this.#call(gateway, 'POST', path, undefined, this.#requestTimeoutMs)) as { stoppedSandboxes: string[]; wipedFiles: number };
  }

  /** Tells a gateway which warm pool of a tenant template to keep (size 0: none). */
  async setTemplatePool(gateway: GatewayEndpoint, req: InternalBody<'nodeSetTemplatePool'>): Promise<void> {
    await this.#call(gateway, 'PUT', '/internal/v1/template-pools', req, this.#requestTimeoutMs);
  }

  /** The template warm pools a gateway keeps, with how many warmed VMs each holds now. */
  async listTemplatePools(gateway: GatewayEndpoint): Promise<GatewaySchemas['NodeTemplatePool'][]> {
    return (
      (await this.#call(gateway, 'GET', '/internal/v1/template-pools', undefined, this.#requestTimeoutMs)) as {
        pools: GatewaySchemas['NodeTemplatePool'][];
      }
    ).pools;
  }

  async killSandbox(gateway: GatewayEndpoint, sandboxId: string): Promise<void> {
    await this.#call(gateway, 'DELETE', sandboxPath(sandboxId), undefined, this.#requestTimeoutMs);
  }

  async setExpiry(gateway: GatewayEndpoint, sandboxId: string, expiresAt: string): Promise<void> {
    await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/timeout`, { expiresAt }, this.#requestTimeoutMs);
  }

  async takeSnapshot(gateway: GatewayEndpoint, sandboxId: string, req: { name?: string; compact?: boolean }): Promise<GatewaySnapshotReply> {
    return (await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/snapshots`, req, this.#createTimeoutMs)) as GatewaySnapshotReply;
  }

  async pauseSandbox(gateway: GatewayEndpoint, sandboxId: string, req: { keepMemory?: boolean } = {}): Promise<GatewaySnapshotReply> {
    return (await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/pause`, req, this.#createTimeoutMs)) as GatewaySnapshotReply;
  }

  async resumeSandbox(gateway: GatewayEndpoint, sandboxId: string, req: GatewayResumeRequest): Promise<GatewayCreateReply> {
    return (await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/resume`, req, this.#bootTimeoutMs)) as GatewayCreateReply;
  }

  async forkSandboxes(gateway: GatewayEndpoint, req: GatewayForkRequest): Promise<GatewayForkReply> {
    return (await this.#call(gateway, 'POST', '/internal/v1/forks', req, this.#bootTimeoutMs)) as GatewayForkReply;
  }

  async deleteSnapshot(gateway: GatewayEndpoint, snapshotId: string, tenantId: string): Promise<void> {
    const path = `/internal/v1/snapshots/${encodeURIComponent(snapshotId)}?tenantId=${encodeURIComponent(tenantId)}`;
    await this.#call(gateway, 'DELETE', path, undefined, this.#requestTimeoutMs);
  }

  async setSnapshotInterval(gateway: GatewayEndpoint, sandboxId: string, snapshotIntervalS: number, bestEffort: boolean): Promise<void> {
    await this.#call(gateway, 'PUT', `${sandboxPath(sandboxId)}/snapshot-interval`, { snapshotIntervalS, bestEffort }, this.#requestTimeoutMs);
  }

  async setNetwork(gateway: GatewayEndpoint, sandboxId: string, network: NetworkPolicy): Promise<void> {
    await this.#call(gateway, 'PUT', `${sandboxPath(sandboxId)}/network`, network, this.#requestTimeoutMs);
  }

  async rememberEnvdToken(gateway: GatewayEndpoint, sandboxId: string, token: string): Promise<void> {
    await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/envd-tokens`, { token }, this.#requestTimeoutMs);
  }

  async metrics(gateway: GatewayEndpoint, sandboxId: string, query: { start?: string; end?: string }): Promise<GatewayMetrics> {
    const qs = new URLSearchParams(Object.entries(query).filter((e): e is [string, string] => e[1] !== undefined)).toString();
    return (await this.#call(gateway, 'GET', `${sandboxPath(sandboxId)}/metrics${qs ? `?${qs}` : ''}`, undefined, this.#requestTimeoutMs)) as GatewayMetrics;
  }

  async listApprovals(gateway: GatewayEndpoint, sandboxId: string): Promise<ApprovalRequest[]> {
    return ((await this.#call(gateway, 'GET', `${sandboxPath(sandboxId)}/approvals`, undefined, this.#requestTimeoutMs)) as { approvals: ApprovalRequest[] })
      .approvals;
  }

  async decideApproval(gateway: GatewayEndpoint, sandboxId: string, requestId: string, decision: GatewayApprovalDecision): Promise<void> {
    await this.#call(gateway, 'POST', `${sandboxPath(sandboxId)}/approvals/${encodeURIComponent(requestId)}`, decision, this.#requestTimeoutMs);
  }

  async #call(gateway: GatewayEndpoint, method: string, path: string, body: unknown, timeoutMs: number): Promise<unknown> {
    let res: { status: number; text: string };
    try {
      res = await send(gateway.internalUrl, method, path, {
        authorization: this.#authorization,
        body: body === undefined ? undefined : JSON.stringify(body),
        timeoutMs,
      });
    } catch (err) {
      const timedOut = (err as Error).name === 'TimeoutError';
      const why = timedOut ? `did not answer within ${timeoutMs / 1000} s` : 'cannot be reached';
      throw new SandglassError('gateway_unavailable', `Gateway ${gateway.id} ${why}; retry later.`, { cause: err });
    }
    const { text } = res;
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (res.status >= 200 && res.status < 300) return parsed;
    const err = errorFromBody(res.status, parsed);
    // The caller's credentials are fine; a gateway refusing ours is a deployment fault, not the caller's.
    if (err.code === 'unauthenticated' || err.code === 'permission_denied') {
      throw new SandglassError('internal', undefined, { cause: new Error(`gateway ${gateway.id} refused the node secret: ${err.message}`) });
    }
    throw err;
  }
}

/** One HTTP request to `unix:/path.sock` or an `http://` base URL; the whole exchange is bounded by timeoutMs. */
function send(
  base: string,
  method: string,
  path: string,
  opts: { authorization: string; body?: string; timeoutMs: number },
): Promise<{ status: number; text: string }> {
  const target = base.startsWith('unix:') ? { socketPath: base.slice('unix:'.length), path, tls: false } : urlTarget(base, path);
  const headers: Record<string, string> = { authorization: opts.authorization };
  if (opts.body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(opts.body));
  }
  const { tls, ...where } = target;
  // A gateway's certificate is checked against the system's CAs (and NODE_EXTRA_CA_CERTS for a private CA).
  return httpExchange({ options: { ...where, method, headers }, https: tls, body: opts.body, timeoutMs: opts.timeoutMs });
}

function urlTarget(base: string, path: string): { host: string; port: number; path: string; tls: boolean } {
  const url = new URL(path, base);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`a gateway's internal URL must be unix:/path, http:// or https://, got ${base}`);
  const tls = url.protocol === 'https:';
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || (tls ? 443 : 80)), path: `${url.pathname}${url.search}`, tls };
}
