// The node API (spec/node.yaml): what gateways running as separate processes ask of the control plane.
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { loadOpenApi, routeSchema, SandglassError, type Clock, type Logger, type NodeApi } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';
import { checkPurpose, sealForNode, type KeyProvider } from '@sandglass/kms';
import type { NodeDirectory, Heartbeat } from './nodes.js';
import type { SecretStore } from './secrets.js';
import { dbTemplateRegistry, type TemplateSnapshotRef } from './templates.js';
import { GcGate } from './gc-gate.js';
import { NODE_ID, type NodeCredentials, type NodeIdentity } from './node-credentials.js';
import { nodeEventRefusal, TEMPLATE_TENANT, type NodeEventDrop } from './node-events.js';
import { LONGEST_TOKEN_TTL_MS } from './sandboxes.js';

export const NODE_SPEC = fileURLToPath(new URL('../../../spec/node.yaml', import.meta.url));

const LIVE_STATES = ['starting', 'running', 'paused'] as const;

export interface NodeApiOptions {
  db: Kysely<Schema>;
  events: EventLog;
  nodes: NodeDirectory;
  secrets: SecretStore;
  keys: KeyProvider;
  /** Each node's own key, bound to its id: the only credential the node API takes. */
  credentials: NodeCredentials;
  clock: Clock;
  logger: Logger;
  /** Keys revoked while their tokens may live, for a node that registers. */
  revokedKeyIds(): Promise<string[]>;
  /** A node registered again: the sandboxes its previous process ran must move (their VMs died with it). */
  onOrphaned(nodeId: string, sandboxIds: string[]): void;
  /** A node (re)registered: what it must keep (template warm pools) is sent to it again. */
  onRegistered?(nodeId: string): void;
  /** Verifies a request's credential for a sandbox and resumes it when it opted in (SandboxService.wake). */
  wake(sandboxId: string, credential: string): Promise<{ gatewayId: string }>;
}

type NodeEvent = NodeApi.components['schemas']['NodeEvent'];

/**
 * The routes as one encapsulated plugin whose onRequest hook wants a node's own key (node-credentials.ts) and the
 * node id that key is bound to in X-Sandglass-Node: a node speaks only as itself. What it may touch is bounded further
 * by the log: it is handed keys and secrets only of tenants with a sandbox placed on it, sealed to its own public key,
 * and its events count only for sandboxes placed on it (node-events.ts).
 */
export function nodeApi(opts: NodeApiOptions): FastifyPluginAsync {
  const spec = loadOpenApi(NODE_SPEC);
  const templates = dbTemplateRegistry(opts.db, { clock: opts.clock });
  const gate = new GcGate(opts.db, opts.clock);
  const { db, events, clock } = opts;

  return async (scope) => {
    const identities = new WeakMap<FastifyRequest, NodeIdentity>();
    scope.addHook('onRequest', async (req) => {
      const node = req.headers['x-sandglass-node'];
      if (typeof node !== 'string' || !NODE_ID.test(node)) {
        throw new SandglassError('invalid_argument', 'X-Sandglass-Node must name the node: lowercase letters, digits and -, at most 63.', {
          details: { field: 'x-sandglass-node' },
        });
      }
      // Enrolment is how a node gets its key: the one-time token in its body is checked instead.
      if (req.routeOptions.url === '/node/v1/enrol') return;
      const auth = req.headers.authorization ?? '';
      const identity = await opts.credentials.authenticate(auth.startsWith('Bearer ') ? auth.slice('Bearer '.length) : '');
      if (identity.nodeId !== node) {
        throw new SandglassError('permission_denied', `This key is node ${identity.nodeId}'s; a node may speak only as itself, not as ${node}.`, {
          details: { field: 'x-sandglass-node' },
        });
      }
      identities.set(req, identity);
    });
    const identityOf = (req: FastifyRequest) => identities.get(req)!;
    const nodeOf = (req: FastifyRequest) => identityOf(req).nodeId;

    type Handler = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
    const route = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, handler: Handler) => {
      const schema = routeSchema(spec, method, path);
      // The node header is checked by the hook above; the validator would only repeat it.
      delete (schema as { headers?: unknown }).headers;
      scope.route({ method, url: path.replace(/\{(\w+)\}/g, ':$1'), schema, handler });
    };

    /**
     * A tenant the node may hold keys of: one with a sandbox placed on it, the template tenant, or (keys, never
     * secrets) one whose template warm pool the control plane put on it, or whose published template a sandbox
     * placed on it was created from.
     */
    const mayServe = async (nodeId: string, tenantId: string, secret?: string): Promise<void> => {
      if (tenantId === TEMPLATE_TENANT && secret === undefined) return;
      if (secret === undefined) {
        const pool = await db
          .selectFrom('template_pools')
          .select('name')
          .where('tenant_id', '=', tenantId)
          .where('gateway_id', '=', nodeId)
          .where('size', '>', 0)
          .executeTakeFirst();
        if (pool) return;
        // A create from a template this tenant published for every tenant: the node reads its snapshot under this
        // tenant's key while the new sandbox (another tenant's) is placed on it. Only while published, and only while
        // such a sandbox is starting: once restored it needs nothing of the publisher's (its captures are its own).
        const fromPublished = await db
          .selectFrom('sandboxes as s')
          .innerJoin('template_versions as v', 'v.snapshot_id', 's.source_snapshot_id')
          .innerJoin('published_templates as p', (j) => j.onRef('p.tenant_id', '=', 'v.tenant_id').onRef('p.name', '=', 'v.name'))
          .select('s.id')
          .where('v.tenant_id', '=', tenantId)
          .where('s.gateway_id', '=', nodeId)
          .where('s.state', '=', 'starting')
          .executeTakeFirst();
        if (fromPublished) return;
      }
      const rows = await db
        .selectFrom('sandboxes')
        .select('secrets')
        .where('tenant_id', '=', tenantId)
        .where('gateway_id', '=', nodeId)
        .where('state', 'in', LIVE_STATES)
        .execute();
      const ok = secret === undefined ? rows.length > 0 : rows.some((r) => (JSON.parse(r.secrets) as string[]).includes(secret));
      if (!ok) {
        throw new SandglassError(
          'permission_denied',
          secret === undefined
            ? `Node ${nodeId} runs no sandbox of tenant ${tenantId}.`
            : `Node ${nodeId} runs no sandbox of tenant ${tenantId} that binds secret ${secret}.`,
        );
      }
    };

    route('POST', '/node/v1/enrol', async (req) => {
      const { token, publicKey } = req.body as { token: string; publicKey: string };
      const nodeId = req.headers['x-sandglass-node'] as string;
      const { nodeKey } = await opts.credentials.enrol(nodeId, token, publicKey);
      opts.logger.info({ nodeId }, 'node enrolled');
      return { nodeId, nodeKey };
    });

    route('POST', '/node/v1/heartbeat', async (req) => {
      const nodeId = nodeOf(req);
      const hb = req.body as Heartbeat;
      const result = await opts.nodes.heartbeat(nodeId, hb);
      if (result.orphaned.length > 0) opts.onOrphaned(nodeId, result.orphaned);
      if (hb.epoch === null) {
        opts.logger.info({ nodeId, epoch: result.epoch, url: hb.url }, 'node registered');
        opts.onRegistered?.(nodeId);
      }
      return {
        epoch: result.epoch,
        heartbeatIntervalS: opts.nodes.heartbeatIntervalMs / 1000,
        deadAfterS: opts.nodes.deadAfterMs / 1000,
        stop: result.stop,
        revokedKeys: hb.epoch === null ? { keyIds: await opts.revokedKeyIds(), untilMs: clock.nowMs() + LONGEST_TOKEN_TTL_MS } : { keyIds: [], untilMs: 0 },
      };
    });

    route('POST', '/node/v1/events', async (req) => {
      const nodeId = nodeOf(req);
      let appended = 0;
      let duplicates = 0;
      const dropped: Array<{ id: string } & NodeEventDrop> = [];
      for (const e of (req.body as { events: NodeEvent[] }).events) {
        // A redelivery first: what it asked for may be gone since (a deleted snapshot), and it changes nothing anyway.
        const before = await db.selectFrom('events').select('id').where('id', '=', e.id).executeTakeFirst();
        if (before) {
          duplicates++;
          continue;
        }
        // Dropped, not failed: the node's outbox moves past it and never sends it again.
        const drop = await nodeEventRefusal(db, opts.keys, nodeId, e);
        if (drop) {
          dropped.push({ id: e.id, ...drop });
          continue;
        }
        await events.append({ id: e.id, at: e.at, type: e.type, tenantId: e.tenantId, sandboxId: e.sandboxId, data: e.data }, { clock });
        appended++;
      }
      if (dropped.length > 0) opts.logger.warn({ nodeId, dropped }, 'node events dropped');
      return { appended, duplicates, dropped };
    });

    route('POST', '/node/v1/tenants/{tenantId}/data-keys/{purpose}', async (req) => {
      const nodeId = nodeOf(req);
      const { tenantId, purpose } = req.params as { tenantId: string; purpose: string };
      const asked = (req.query as { version?: number }).version;
      checkPurpose(purpose);
      await mayServe(nodeId, tenantId);
      // The version is named in the reply and sealed into it: a node seals new data under the version it was told.
      const version = purpose === 'chunk-id' ? 1 : (asked ?? (await opts.keys.keyVersion?.(tenantId)) ?? 1);
      // Our own copy, so wiping it after sealing cannot touch a provider's cache.
      const key = Buffer.from(await opts.keys.dataKey(tenantId, purpose, version));
      try {
        const aad = Buffer.from(`${nodeId}/${tenantId}/${purpose}/v${version}`);
        return { sealed: sealForNode(identityOf(req).publicKey, key, aad).toString('base64'), version };
      } finally {
        key.fill(0);
      }
    });

    route('GET', '/node/v1/tenants/{tenantId}/key', async (req) => {
      const { tenantId } = req.params as { tenantId: string };
      await mayServe(nodeOf(req), tenantId);
      // Past every cache: a boot or the node's poll must hear the provider itself (an HSM deleted key, a revocation).
      if ((req.query as { verify?: boolean }).verify === true) {
        if (opts.keys.verify) await opts.keys.verify(tenantId);
        else await opts.keys.dataKey(tenantId, 'chunk-data');
      }
      return { currentVersion: (await opts.keys.keyVersion?.(tenantId)) ?? 1 };
    });

    route('GET', '/node/v1/tenants/{tenantId}/secrets/{name}', async (req) => {
      const { tenantId, name } = req.params as { tenantId: string; name: string };
      await mayServe(nodeOf(req), tenantId, name);
      const { value: _value, ...rules } = await opts.secrets.resolve(tenantId, name);
      return rules;
    });

    route('POST', '/node/v1/tenants/{tenantId}/secrets/{name}/value', async (req) => {
      const nodeId = nodeOf(req);
      const { tenantId, name } = req.params as { tenantId: string; name: string };
      await mayServe(nodeId, tenantId, name);
      const value = await (await opts.secrets.resolve(tenantId, name)).value();
      const aad = Buffer.from(`${nodeId}/${tenantId}/${name}`);
      return { sealed: sealForNode(identityOf(req).publicKey, Buffer.from(value.reveal(), 'utf8'), aad).toString('base64') };
    });

    route('GET', '/node/v1/templates/{key}', async (req) => {
      const found = await templates.lookup((req.params as { key: string }).key);
      if (!found) throw new SandglassError('template_not_found', 'No node has published this template yet.');
      return found;
    });

    route('PUT', '/node/v1/templates/{key}', async (req) => {
      const rec = req.body as TemplateSnapshotRef;
      if (rec.tenantId !== TEMPLATE_TENANT) {
        throw new SandglassError('invalid_argument', `Templates are snapshots of tenant ${TEMPLATE_TENANT}.`, { details: { field: 'tenantId' } });
      }
      return templates.publish((req.params as { key: string }).key, { ...rec, nodeId: nodeOf(req) });
    });

    // Only the location, never the tenant or anything else: the asking gateway has already verified the request's
    // access token for this sandbox, and the gateway it forwards to verifies it again.
    route('GET', '/node/v1/sandboxes/{sandboxId}/location', async (req) => {
      const { sandboxId } = req.params as { sandboxId: string };
      const row = await db.selectFrom('sandboxes').select('gateway_id').where('id', '=', sandboxId).where('state', '=', 'running').executeTakeFirst();
      const node = row?.gateway_id ? await opts.nodes.get(row.gateway_id) : undefined;
      if (!node) throw new SandglassError('sandbox_not_found', `Sandbox ${sandboxId} is not running on any node.`);
      return { gatewayId: node.id, dataPlaneUrl: node.url };
    });

    // Any node may ask for any sandbox (a client may send its request to any gateway): what it must bring is the
    // credential itself, verified here as if no node had seen it (security.md 1e).
    route('POST', '/node/v1/sandboxes/{sandboxId}/wake', async (req) => {
      const { sandboxId } = req.params as { sandboxId: string };
      return opts.wake(sandboxId, (req.body as { credential: string }).credential);
    });

    // The lease is the node's: only it can release it, and a node that dies holding one blocks the sweep until it expires.
    route('POST', '/node/v1/capture-leases', async (req) => {
      const { expiresAt, ttlMs } = await gate.enterCapture((req.body as { snapshotId: string }).snapshotId, nodeOf(req));
      return { expiresAt, ttlMs };
    });

    route('DELETE', '/node/v1/capture-leases/{snapshotId}', async (req, reply) => {
      await gate.leaveCapture((req.params as { snapshotId: string }).snapshotId, nodeOf(req));
      return reply.code(204).send();
    });
  };
}
