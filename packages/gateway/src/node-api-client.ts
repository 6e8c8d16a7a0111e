// The gateway's client of the control plane's node API (spec/node.yaml): authenticated calls, bounded in time, retried when safe.
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { errorFromBody, httpExchange, SandglassError, type NodeApi, type RequestBody, type SuccessBody } from '@sandglass/core';

type Ops = NodeApi.operations;
export type Heartbeat = RequestBody<Ops['nodeHeartbeat']>;
export type HeartbeatReply = SuccessBody<Ops['nodeHeartbeat']>;
export type NodeEvent = NodeApi.components['schemas']['NodeEvent'];
export type AppendEventsReply = SuccessBody<Ops['nodeAppendEvents']>;
export type SecretInfo = SuccessBody<Ops['nodeSecretInfo']>;
export type NodeTemplateRecord = NodeApi.components['schemas']['TemplateRecord'];
export type CaptureLeaseGrant = SuccessBody<Ops['nodeCaptureLeaseTake']>;
export type SandboxLocation = SuccessBody<Ops['nodeSandboxLocation']>;
export type SandboxWakeReply = SuccessBody<Ops['nodeSandboxWake']>;
export type NodeDataKey = SuccessBody<Ops['nodeDataKey']>;
export type NodeTenantKey = SuccessBody<Ops['nodeTenantKey']>;
export type NodeEnrolment = SuccessBody<Ops['nodeEnrol']>;

/** The spec's cap on one delivery. */
export const MAX_EVENTS_PER_BATCH = 500;

export interface NodeApiClientOptions {
  /** The control plane's API base URL, http:// or https:// (the node API is served under /node/v1 on it). */
  baseUrl: string;
  nodeId: string;
  /** This node's own key from enrolment (sgnk_…), bound to nodeId; absent only to enrol. */
  nodeKey?: string;
  /** Bound on one whole exchange (connect, send, read); default 10 s. */
  timeoutMs?: number;
  /** Further attempts of an idempotent call after a transport failure or a retryable error; default 2. */
  retries?: number;
  /** First backoff between attempts, doubled each time; default 200 ms. */
  retryBaseMs?: number;
  /** PEM CAs trusted for an https:// control plane signed by a private CA (Node's roots otherwise). */
  ca?: string[];
}

interface CallOptions {
  body?: unknown;
  /** Safe to send again when the first answer was lost: every node API call but registration. */
  idempotent: boolean;
  timeoutMs?: number;
}

/**
 * Every call carries `Authorization: Bearer <the node's key>` and `X-Sandglass-Node`. A control-plane error comes back
 * as the same SandglassError (`node_fenced`, `key_unavailable`, …); one that cannot be reached or does not answer in
 * time is `internal` (retryable), naming the URL, so callers that must fail closed do.
 */
export class NodeApiClient {
  readonly nodeId: string;
  readonly #base: URL;
  readonly #authorization?: string;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #retryBaseMs: number;
  readonly #agent: HttpAgent | HttpsAgent;
  readonly #ca?: string[];

  constructor(opts: NodeApiClientOptions) {
    const base = new URL(opts.baseUrl);
    if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new Error(`the control plane URL must be http:// or https://, got ${opts.baseUrl}`);
    if (base.username || base.password || base.search || base.hash) throw new Error('the control plane URL must not carry credentials, a query or a fragment');
    this.#base = base;
    this.nodeId = opts.nodeId;
    this.#authorization = opts.nodeKey === undefined ? undefined : `Bearer ${opts.nodeKey}`;
    this.#timeoutMs = opts.timeoutMs ?? 10_000;
    this.#retries = opts.retries ?? 2;
    this.#retryBaseMs = opts.retryBaseMs ?? 200;
    this.#ca = opts.ca;
    this.#agent = base.protocol === 'https:' ? new HttpsAgent({ keepAlive: true, ca: opts.ca }) : new HttpAgent({ keepAlive: true });
  }

  /** Spends the operator's one-time token for this node id: the answer's key is shown this once. Never retried. */
  enrol(token: string, publicKey: string): Promise<NodeEnrolment> {
    return this.#call('POST', '/node/v1/enrol', { body: { token, publicKey }, idempotent: false }) as Promise<NodeEnrolment>;
  }

  /** Registration (epoch null) is not retried here: a lost reply's epoch is superseded by the next registration anyway. */
  heartbeat(body: Heartbeat): Promise<HeartbeatReply> {
    return this.#call('POST', '/node/v1/heartbeat', { body, idempotent: body.epoch !== null }) as Promise<HeartbeatReply>;
  }

  /** Idempotent by event id: a batch sent twice is appended once. */
  appendEvents(events: NodeEvent[], opts: { timeoutMs?: number } = {}): Promise<AppendEventsReply> {
    return this.#call('POST', '/node/v1/events', { body: { events }, idempotent: true, timeoutMs: opts.timeoutMs }) as Promise<AppendEventsReply>;
  }

  /** Base64 of the purpose key of one data key version (absent: the current one) sealed to this node's public key. */
  dataKey(tenantId: string, purpose: string, version?: number): Promise<NodeDataKey> {
    const path = `/node/v1/tenants/${encodeURIComponent(tenantId)}/data-keys/${encodeURIComponent(purpose)}${version === undefined ? '' : `?version=${version}`}`;
    return this.#call('POST', path, { idempotent: true }) as Promise<NodeDataKey>;
  }

  /** The tenant's current data key version; `verify` has the control plane ask the key provider first, past every cache. */
  tenantKey(tenantId: string, opts: { verify: boolean }): Promise<NodeTenantKey> {
    return this.#call('GET', `/node/v1/tenants/${encodeURIComponent(tenantId)}/key?verify=${opts.verify}`, { idempotent: true }) as Promise<NodeTenantKey>;
  }

  secretInfo(tenantId: string, name: string): Promise<SecretInfo> {
    return this.#call('GET', secretPath(tenantId, name), { idempotent: true }) as Promise<SecretInfo>;
  }

  /** Base64 of the value sealed to this node's public key. */
  async secretValue(tenantId: string, name: string): Promise<string> {
    return ((await this.#call('POST', `${secretPath(tenantId, name)}/value`, { idempotent: true })) as { sealed: string }).sealed;
  }

  /** The published snapshot of a template, or undefined when none is. */
  async templateLookup(key: string): Promise<NodeTemplateRecord | undefined> {
    try {
      return (await this.#call('GET', templatePath(key), { idempotent: true })) as NodeTemplateRecord;
    } catch (err) {
      if (err instanceof SandglassError && (err.code === 'template_not_found' || err.code === 'not_found')) return undefined;
      throw err;
    }
  }

  /** First publisher wins; every caller gets the winner. Idempotent: publishing the same record twice yields the same winner. */
  templatePublish(key: string, rec: NodeTemplateRecord): Promise<NodeTemplateRecord> {
    return this.#call('PUT', templatePath(key), { body: rec, idempotent: true }) as Promise<NodeTemplateRecord>;
  }

  /** The node a sandbox runs on and its data-plane URL, or undefined when it runs nowhere. */
  async sandboxLocation(sandboxId: string, opts: { timeoutMs?: number } = {}): Promise<SandboxLocation | undefined> {
    try {
      const path = `/node/v1/sandboxes/${encodeURIComponent(sandboxId)}/location`;
      return (await this.#call('GET', path, { idempotent: true, timeoutMs: opts.timeoutMs })) as SandboxLocation;
    } catch (err) {
      if (err instanceof SandglassError && err.code === 'sandbox_not_found') return undefined;
      throw err;
    }
  }

  /**
   * Asks the control plane to verify a request's credential for a sandbox this node does not run and to resume it when
   * it opted in; the node it runs on now. Idempotent (a second ask finds it running); bounded like a resume, not like
   * a lookup.
   */
  sandboxWake(sandboxId: string, credential: string, opts: { timeoutMs?: number } = {}): Promise<SandboxWakeReply> {
    const path = `/node/v1/sandboxes/${encodeURIComponent(sandboxId)}/wake`;
    return this.#call('POST', path, { body: { credential }, idempotent: true, timeoutMs: opts.timeoutMs }) as Promise<SandboxWakeReply>;
  }

  /** Refused with `conflict` while a GC sweep runs (not retried here: the caller decides how long to wait). Taking it twice is harmless. */
  captureLeaseTake(snapshotId: string): Promise<CaptureLeaseGrant> {
    return this.#call('POST', '/node/v1/capture-leases', { body: { snapshotId }, idempotent: true }) as Promise<CaptureLeaseGrant>;
  }

  async captureLeaseRelease(snapshotId: string): Promise<void> {
    await this.#call('DELETE', `/node/v1/capture-leases/${encodeURIComponent(snapshotId)}`, { idempotent: true });
  }

  close(): void {
    this.#agent.destroy();
  }

  async #call(method: string, path: string, opts: CallOptions): Promise<unknown> {
    const attempts = opts.idempotent ? this.#retries + 1 : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#once(method, path, opts);
      } catch (err) {
        const retryable = !(err instanceof SandglassError) || err.retryable;
        if (!retryable || attempt >= attempts) throw err;
        await new Promise((r) => setTimeout(r, this.#retryBaseMs * 2 ** (attempt - 1)));
      }
    }
  }

  async #once(method: string, path: string, opts: CallOptions): Promise<unknown> {
    const timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
    const url = new URL(this.#base.pathname.replace(/\/+$/, '') + path, this.#base);
    let res: { status: number; text: string };
    try {
      res = await this.#send(url, method, opts.body === undefined ? undefined : JSON.stringify(opts.body), timeoutMs);
    } catch (err) {
      const why = (err as Error).name === 'TimeoutError' ? `did not answer within ${timeoutMs / 1000} s` : `cannot be reached (${(err as Error).message})`;
      throw new SandglassError('internal', `The control plane at ${this.#base.origin} ${why}.`, { cause: err });
    }
    let parsed: unknown;
    try {
      parsed = res.text === '' ? undefined : JSON.parse(res.text);
    } catch {
      parsed = undefined;
    }
    if (res.status >= 200 && res.status < 300) return parsed;
    throw errorFromBody(res.status, parsed);
  }

  #send(url: URL, method: string, body: string | undefined, timeoutMs: number): Promise<{ status: number; text: string }> {
    const headers: Record<string, string> = { 'x-sandglass-node': this.nodeId, accept: 'application/json' };
    if (this.#authorization !== undefined) headers.authorization = this.#authorization;
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    return httpExchange({ url, options: { method, headers, agent: this.#agent, ...(this.#ca ? { ca: this.#ca } : {}) }, body, timeoutMs });
  }
}

function secretPath(tenantId: string, name: string): string {
  return `/node/v1/tenants/${encodeURIComponent(tenantId)}/secrets/${encodeURIComponent(name)}`;
}

function templatePath(key: string): string {
  return `/node/v1/templates/${encodeURIComponent(key)}`;
}
