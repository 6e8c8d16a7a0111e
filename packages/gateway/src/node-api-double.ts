// For unit tests: a control plane's node API (spec/node.yaml) on loopback, holding its state in memory, that tests can take down, fence and make lie.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { SandglassError } from '@sandglass/core';
import { newNodeTransportKeys, sealForNode, type NodeTransportKeys } from '@sandglass/kms';
import type { HeartbeatReply, NodeEvent } from './node-api-client.js';

export interface DoubleSecret {
  hosts: string[];
  value: string;
}

/** The associated data the double seals with, per call kind; a test overrides it to seal for another node or tenant. */
export type AadFor = (nodeId: string, tenantId: string, what: string) => string;

/** A node's credential as enrolment leaves it: its key, and its transport key pair. */
export interface TestNodeCredential extends NodeTransportKeys {
  nodeKey: string;
}

export function testNodeCredential(): TestNodeCredential {
  return { nodeKey: `sgnk_${randomBytes(32).toString('base64url')}`, ...newNodeTransportKeys() };
}

export class NodeApiDouble {
  url = '';
  /** Unreachable: every connection is reset before an answer. */
  down = false;
  /** The next this many requests answer `internal` (a replica failing), each counted in `requests`. */
  failNext = 0;
  requests = 0;
  readonly events: NodeEvent[] = [];
  readonly batches: number[] = [];
  duplicates = 0;
  /** Calls per route kind, to see what a client cached. */
  readonly calls = { heartbeat: 0, events: 0, dataKey: 0, tenantKey: 0, verify: 0, secretInfo: 0, secretValue: 0, templates: 0 };
  readonly heartbeats: Array<{ epoch: number | null; sandboxes: string[]; freeMemoryMib: number; captureCapacityPerMin?: number | null }> = [];
  /** The node's key revoked: every request answers unauthenticated. */
  keyRevoked = false;
  /** Epoch of the node's current registration; a heartbeat with another is fenced. */
  epoch = 0;
  heartbeatIntervalS = 0.02;
  stop: string[] = [];
  revokedKeys = { keyIds: [] as string[], untilMs: 0 };
  /** Event types refused as invalid, and sandboxes whose events are dropped (placed elsewhere). */
  readonly refuseTypes = new Set<string>();
  readonly dropSandboxes = new Set<string>();
  /** `<tenant>/<purpose>` holds version 1, `<tenant>/<purpose>/v<n>` a later one. */
  readonly dataKeys = new Map<string, Buffer>();
  /** The data key version the double names current. */
  keyVersion = 1;
  /** Set: every key call is refused with this code (a revoked key, a provider that does not answer). */
  keyRefusal: 'key_revoked' | 'key_unavailable' | undefined;
  readonly secrets = new Map<string, DoubleSecret>();
  readonly templates = new Map<string, { tenantId: string; snapshotId: string }>();
  aad: AadFor = (nodeId, tenantId, what) => `${nodeId}/${tenantId}/${what}`;
  private server?: Server;
  private readonly bearer: string;
  private readonly publicKey: string;

  constructor(
    credential: TestNodeCredential,
    private readonly nodeId: string,
  ) {
    this.bearer = `Bearer ${credential.nodeKey}`;
    this.publicKey = credential.publicKey;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  /** Declares the node dead: its next heartbeat with the old epoch answers node_fenced. */
  fence(): void {
    this.epoch++;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.down) {
      req.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
    this.requests++;
    try {
      if (this.failNext > 0) {
        this.failNext--;
        throw new SandglassError('internal', 'failing as the test asked');
      }
      if (this.keyRevoked || req.headers.authorization !== this.bearer || req.headers['x-sandglass-node'] !== this.nodeId)
        throw new SandglassError('unauthenticated');
      send(res, 200, this.route(req.method ?? '', req.url ?? '', body));
    } catch (err) {
      const e = err instanceof SandglassError ? err : new SandglassError('internal', String(err));
      send(res, e.status, e.toBody());
    }
  }

  private route(method: string, url: string, raw: unknown): unknown {
    // Shaped as the spec says: the double trusts its own test's client.
    const body = raw as { epoch: number | null; sandboxes: string[]; freeMemoryMib: number; captureCapacityPerMin?: number | null; events: NodeEvent[] };
    let m: RegExpExecArray | null;
    if (method === 'POST' && url === '/node/v1/heartbeat') {
      this.calls.heartbeat++;
      this.heartbeats.push({
        epoch: body.epoch,
        sandboxes: body.sandboxes,
        freeMemoryMib: body.freeMemoryMib,
        captureCapacityPerMin: body.captureCapacityPerMin,
      });
      if (body.epoch === null) this.epoch++;
      else if (body.epoch !== this.epoch) throw new SandglassError('node_fenced');
      const reply: HeartbeatReply = {
        epoch: this.epoch,
        heartbeatIntervalS: this.heartbeatIntervalS,
        deadAfterS: 1,
        stop: this.stop.filter((id) => body.sandboxes.includes(id)),
        revokedKeys: this.revokedKeys,
      };
      return reply;
    }
    if (method === 'POST' && url === '/node/v1/events') {
      this.calls.events++;
      const events = body.events as NodeEvent[];
      if (events.length < 1 || events.length > 500) throw new SandglassError('invalid_argument', 'events: 1 to 500');
      if (events.some((e) => this.refuseTypes.has(e.type))) throw new SandglassError('invalid_argument', 'events.type: refused by the test');
      this.batches.push(events.length);
      let appended = 0;
      let duplicates = 0;
      const dropped: Array<{ id: string; reason: string }> = [];
      for (const e of events) {
        if (e.sandboxId && this.dropSandboxes.has(e.sandboxId)) dropped.push({ id: e.id, reason: 'sandbox_moved' });
        else if (this.events.some((x) => x.id === e.id)) duplicates++;
        else {
          this.events.push(e);
          appended++;
        }
      }
      this.duplicates += duplicates;
      return { appended, duplicates, dropped };
    }
    if (method === 'POST' && (m = /^\/node\/v1\/tenants\/([^/]+)\/data-keys\/([^/?]+)(?:\?version=(\d+))?$/.exec(url))) {
      this.calls.dataKey++;
      if (this.keyRefusal) throw new SandglassError(this.keyRefusal);
      const version = m[2] === 'chunk-id' ? 1 : Number(m[3] ?? this.keyVersion);
      const key = this.dataKeys.get(`${m[1]}/${m[2]}${version === 1 ? '' : `/v${version}`}`);
      if (!key) throw new SandglassError('key_unavailable');
      return { sealed: sealForNode(this.publicKey, key, Buffer.from(this.aad(this.nodeId, m[1]!, `${m[2]}/v${version}`))).toString('base64'), version };
    }
    if (method === 'GET' && (m = /^\/node\/v1\/tenants\/([^/]+)\/key\?verify=(true|false)$/.exec(url))) {
      this.calls.tenantKey++;
      if (m[2] === 'true') this.calls.verify++;
      if (this.keyRefusal) throw new SandglassError(this.keyRefusal);
      return { currentVersion: this.keyVersion };
    }
    if ((m = /^\/node\/v1\/tenants\/([^/]+)\/secrets\/([^/]+)(\/value)?$/.exec(url))) {
      const s = this.secrets.get(`${m[1]}/${m[2]}`);
      if (!s) throw new SandglassError('secret_not_found');
      if (m[3] && method === 'POST') {
        this.calls.secretValue++;
        return { sealed: sealForNode(this.publicKey, Buffer.from(s.value), Buffer.from(this.aad(this.nodeId, m[1]!, m[2]!))).toString('base64') };
      }
      this.calls.secretInfo++;
      return {
        name: m[2],
        hosts: s.hosts,
        header: null,
        format: null,
        bodyContentTypes: [],
        approval: 'none',
        allowPlaintext: false,
        allowUpgrade: false,
      };
    }
    if ((m = /^\/node\/v1\/templates\/([0-9a-f]{16})$/.exec(url))) {
      this.calls.templates++;
      const key = m[1]!;
      if (method === 'PUT' && !this.templates.has(key)) this.templates.set(key, raw as { tenantId: string; snapshotId: string });
      const rec = this.templates.get(key);
      if (!rec) throw new SandglassError('template_not_found');
      return rec;
    }
    throw new SandglassError('not_found');
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
