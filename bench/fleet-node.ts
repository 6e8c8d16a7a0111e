// A worker thread of the fleet bench: its share of the simulated gateways. Each speaks the real node API with the
// gateway's own client and membership (enrol, heartbeat, events, sealed keys) and answers the control plane's internal
// calls at once from a small HTTP server on a loopback address of its own, instead of booting VMs.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';
import { createLogger, newId } from '@sandglass/core';
import { Membership, NodeApiClient, type MemberNode, type NodeEvent } from '@sandglass/gateway';
import { newNodeTransportKeys } from '@sandglass/kms';

export interface FleetNodeSpec {
  nodeId: string;
  token: string;
  /** Loopback address its internal API (and nominal data plane) listens on. */
  host: string;
}

export interface FleetWorkerData {
  controlPlaneUrl: string;
  port: number;
  nodes: FleetNodeSpec[];
  capacityMib: number;
}

/** What the main thread asks: stats (and reset them), or lose these nodes at once (no heartbeat, no answer). */
export type FleetCommand = { op: 'stats' } | { op: 'kill'; nodeIds: string[] };

export interface FleetStats {
  heartbeatsMs: number[];
  eventBatchesMs: number[];
  keyFetchesMs: number[];
  failures: number;
}

const { controlPlaneUrl, port, nodes, capacityMib } = workerData as FleetWorkerData;
const logger = createLogger('fleet-node', 'warn');
const stats: FleetStats = { heartbeatsMs: [], eventBatchesMs: [], keyFetchesMs: [], failures: 0 };

interface SimNode {
  spec: FleetNodeSpec;
  client: NodeApiClient;
  membership: Membership;
  server: Server;
  /** Sandbox id → tenant and memory: what "runs" here. */
  running: Map<string, { tenantId: string; memoryMib: number }>;
  outbox: NodeEvent[];
  flushing: boolean;
}

const sims = new Map<string, SimNode>();
/** The one template every simulated node has cached (a template key is 16 hex digits). */
const FLEET_TEMPLATE_KEY = 'f1ee7f1ee7f1ee70';

async function timedCall<T>(into: number[], fn: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  try {
    return await fn();
  } finally {
    into.push(performance.now() - t0);
  }
}

/**
 * The events a real gateway records on a start (sandbox.started, or sandbox.resumed from the snapshot a move names),
 * then a committed snapshot: what a later move resumes from.
 */
function started(sim: SimNode, id: string, tenantId: string, memoryMib: number, resumedFrom?: string): void {
  const at = new Date().toISOString();
  sim.outbox.push(
    resumedFrom === undefined
      ? { id: newId('evt'), type: 'sandbox.started', tenantId, sandboxId: id, at, data: { pid: null, template: FLEET_TEMPLATE_KEY } }
      : { id: newId('evt'), type: 'sandbox.resumed', tenantId, sandboxId: id, at, data: { snapshotId: resumedFrom, pid: null } },
  );
  sim.outbox.push({
    id: newId('evt'),
    type: 'snapshot.taken',
    tenantId,
    sandboxId: id,
    at,
    data: {
      snapshotId: newId('snap'),
      parentId: null,
      reason: 'rolling',
      name: null,
      pinned: false,
      sizeAddedBytes: 0,
      memoryMib,
      vcpus: 1,
      template: 'base',
    },
  });
  // A start needs the tenant's data key, sealed to this node: fetched as a gateway does.
  void timedCall(stats.keyFetchesMs, () => sim.client.dataKey(tenantId, 'chunk-data')).catch(() => stats.failures++);
}

async function flush(sim: SimNode): Promise<void> {
  if (sim.flushing || sim.outbox.length === 0) return;
  sim.flushing = true;
  const batch = sim.outbox.splice(0, 500);
  try {
    await timedCall(stats.eventBatchesMs, () => sim.client.appendEvents(batch));
  } catch {
    stats.failures++;
    sim.outbox.unshift(...batch);
  } finally {
    sim.flushing = false;
  }
}

function reply(res: ServerResponse, status: number, body?: unknown): void {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, body === undefined ? {} : { 'content-type': 'application/json' });
  res.end(text);
}

function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const text = Buffer.concat(parts).toString('utf8');
      resolve(text === '' ? {} : (JSON.parse(text) as Record<string, unknown>));
    });
  });
}

/** The internal API calls a placement, a move and a kill make, answered as a gateway would once its VM ran. */
async function internal(sim: SimNode, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '').split('?')[0]!;
  const body = await readBody(req);
  const now = new Date();
  const nodeSandbox = (id: string, tenantId: string) => ({
    id,
    tenantId,
    state: 'running',
    pid: null,
    startedAt: now.toISOString(),
    expiresAt: new Date(now.getTime() + 3_600_000).toISOString(),
    restoreMs: 0,
  });
  if (req.method === 'POST' && path === '/internal/v1/templates/prepare') return reply(res, 200, { key: FLEET_TEMPLATE_KEY });
  if (req.method === 'POST' && path === '/internal/v1/sandboxes') {
    const id = body.id as string;
    const tenantId = body.tenantId as string;
    sim.running.set(id, { tenantId, memoryMib: body.memoryMib as number });
    started(sim, id, tenantId, body.memoryMib as number);
    return reply(res, 200, nodeSandbox(id, tenantId));
  }
  const resume = /^\/internal\/v1\/sandboxes\/([^/]+)\/resume$/.exec(path);
  if (req.method === 'POST' && resume) {
    const id = decodeURIComponent(resume[1]!);
    const tenantId = body.tenantId as string;
    const memoryMib = (body.memoryMib as number | undefined) ?? 256;
    sim.running.set(id, { tenantId, memoryMib });
    started(sim, id, tenantId, memoryMib, body.snapshotId as string);
    return reply(res, 200, nodeSandbox(id, tenantId));
  }
  const one = /^\/internal\/v1\/sandboxes\/([^/]+)$/.exec(path);
  if (req.method === 'DELETE' && one) {
    sim.running.delete(decodeURIComponent(one[1]!));
    return reply(res, 204);
  }
  if (req.method === 'POST' && path === '/internal/v1/revoked-keys') return reply(res, 204);
  reply(res, 404, { error: { code: 'not_found', message: `the fleet bench does not simulate ${req.method} ${path}`, requestId: 'req_fleet' } });
}

async function startNode(spec: FleetNodeSpec): Promise<SimNode> {
  const transport = newNodeTransportKeys();
  const anonymous = new NodeApiClient({ baseUrl: controlPlaneUrl, nodeId: spec.nodeId, retries: 0 });
  const { nodeKey } = await anonymous.enrol(spec.token, transport.publicKey);
  anonymous.close();
  const client = new NodeApiClient({ baseUrl: controlPlaneUrl, nodeId: spec.nodeId, nodeKey });
  const running = new Map<string, { tenantId: string; memoryMib: number }>();
  const node: MemberNode = {
    sandboxIds: () => [...running.keys()],
    memory: () => {
      let used = 0;
      for (const s of running.values()) used += s.memoryMib;
      return { capacityMib, freeMib: capacityMib - used };
    },
    templateKeys: () => [FLEET_TEMPLATE_KEY],
    // A simulated node takes no snapshots: it reports no capture capacity, as a node that has measured none.
    captureCapacityPerMin: () => null,
    evict: async (id) => {
      running.delete(id);
    },
    evictAll: async () => running.clear(),
    revokeKeys: () => {},
  };
  const url = `http://${spec.host}:${port}`;
  const beats = { heartbeat: (body: Parameters<NodeApiClient['heartbeat']>[0]) => timedCall(stats.heartbeatsMs, () => client.heartbeat(body)) };
  const membership = new Membership({ client: beats, node, url, internalUrl: url, logger, retryMinMs: 200, retryMaxMs: 2000 });
  const sim: SimNode = { spec, client, membership, server: createServer(), running, outbox: [], flushing: false };
  sim.server.on('request', (req, res) => {
    internal(sim, req, res).catch((err: unknown) => reply(res, 500, { error: { code: 'internal', message: String(err), requestId: 'req_fleet' } }));
  });
  await new Promise<void>((resolve, reject) => {
    sim.server.once('error', reject);
    sim.server.listen(port, spec.host, () => resolve());
  });
  await membership.start();
  sims.set(spec.nodeId, sim);
  return sim;
}

async function kill(nodeIds: string[]): Promise<string[]> {
  const lost: string[] = [];
  await Promise.all(
    nodeIds.map(async (id) => {
      const sim = sims.get(id);
      if (!sim) return;
      sims.delete(id);
      lost.push(...sim.running.keys());
      sim.server.closeAllConnections();
      sim.server.close();
      await sim.membership.stop();
      sim.client.close();
    }),
  );
  return lost;
}

const port_ = parentPort!;
// Registration in small waves, so a thousand enrolments do not all land on the control plane in the same instant.
for (let i = 0; i < nodes.length; i += 25) await Promise.all(nodes.slice(i, i + 25).map(startNode));
const flusher = setInterval(() => {
  for (const sim of sims.values()) void flush(sim);
}, 100);
flusher.unref();
port_.on('message', (cmd: FleetCommand) => {
  if (cmd.op === 'stats') {
    port_.postMessage({ stats: { ...stats } });
    stats.heartbeatsMs = [];
    stats.eventBatchesMs = [];
    stats.keyFetchesMs = [];
    stats.failures = 0;
    return;
  }
  kill(cmd.nodeIds).then((lost) => port_.postMessage({ lost }));
});
port_.postMessage({ ready: nodes.length });
