// The control plane's HTTP edge: auth, spec-driven validation and routes that turn requests into service calls.
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest, type RouteHandlerMethod } from 'fastify';
import type { Kysely } from 'kysely';
import {
  genRequestId,
  installErrorHandling,
  installValidation,
  loadOpenApi,
  routeSchema,
  SandglassError,
  type Clock,
  type ControlPlaneApi,
  type Logger,
  type MethodsAt,
  type OperationAt,
  type OperationHandler,
  type OperationRoute,
  type RequestBody,
} from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import { auditKeyId, type EventLog } from '@sandglass/events';
import type { AuditSigner, KeyProvider } from '@sandglass/kms';
import { toTenant } from './api.js';
import { Failover } from './failover.js';
import { GatewayClient, type GatewayDirectory } from './gateways.js';
import { nodeApi } from './node-api.js';
import { NodeCredentials } from './node-credentials.js';
import type { NodeDirectory } from './nodes.js';
import { ApiKeyService, authenticate, createTenant, type Principal } from './keys.js';
import { e2bApi } from './e2b.js';
import { ConsoleSessions, consoleApi, cookiePrincipal, DEFAULT_CONSOLE_LIMITS, type ConsoleLimits } from './console.js';
import { LONGEST_TOKEN_TTL_MS, SandboxService } from './sandboxes.js';
import { SecretStore } from './secrets.js';
import { TenantKeyService, type TenantKeyAdmin } from './tenant-keys.js';
import { CustomTemplates } from './custom-templates.js';
import { TemplatePools } from './template-pools.js';

export const CONTROL_PLANE_SPEC = fileURLToPath(new URL('../../../spec/control-plane.yaml', import.meta.url));
const VERSION = (JSON.parse(readFileSync(new URL('../../control-plane/package.json', import.meta.url), 'utf8')) as { version: string }).version;
const BODY_LIMIT_BYTES = 1024 * 1024;
// The audit public key is for auditors, who hold no API key of the deployment.
const PUBLIC_ROUTES = new Set(['/v1/health', '/v1/audit/public-key']);

type Paths = ControlPlaneApi.paths;
type Operation<P extends keyof Paths, M extends MethodsAt<Paths, P>> = OperationAt<Paths, P, M>;
/** The route generic of one operation; the preValidation hook gives a request without a body `{}`, so there always is one. */
type Route<P extends keyof Paths, M extends MethodsAt<Paths, P>> = Omit<OperationRoute<Operation<P, M>>, 'Body'> & {
  Body: NonNullable<RequestBody<Operation<P, M>>>;
};

export interface ControlPlaneOptions {
  db: Kysely<Schema>;
  events: EventLog;
  gateways: GatewayDirectory;
  /** Shared with the gateways: authenticates calls to their internal API and signs data-plane tokens. */
  nodeSecret: Buffer;
  clock: Clock;
  logger: Logger;
  publicGatewayUrl?: string;
  /** The gateways' guest-port domain (`<port>-<id>.<domain>`): E2B's `domain`, so its SDK's getHost reaches them. */
  portDomain?: string;
  /** Defaults to one built from nodeSecret. */
  gatewayClient?: GatewayClient;
  /** Seals tenant secrets (purpose 'secret'). Without one, storing a secret answers key_unavailable. */
  keys?: KeyProvider;
  /** Signs audit exports (the keyring's Ed25519 key). Without one, exporting answers key_unavailable. */
  auditSigner?: AuditSigner;
  /** Per-tenant key providers, rotation and revocation (kms TenantKeys). Without it the key routes answer key_unavailable. */
  keyAdmin?: TenantKeyAdmin;
  /**
   * Gateways as separate processes (`sandglass control-plane`): `gateways` is this directory, the node API
   * (spec/node.yaml) is served under /node/v1, and silent nodes' sandboxes move. Absent in `sandglass up`.
   */
  cluster?: { nodes: NodeDirectory; failoverIntervalMs: number };
  /** The console's caps on streams and sessions; DEFAULT_CONSOLE_LIMITS for any left out. */
  console?: Partial<ConsoleLimits>;
  /** Template build steps a tenant's step cache keeps; TEMPLATE_CACHE_ENTRIES when absent. */
  templateCacheEntries?: number;
}

/** Stands in for a deployment without a key provider: secrets can be named but never stored or read. */
const NO_KEYS: KeyProvider = {
  name: 'none',
  dataKey: async () => {
    throw new SandglassError('key_unavailable', 'This deployment has no key provider configured, so it cannot store or read secrets.');
  },
  revoke: async () => undefined,
};

const NO_KEY_ADMIN: TenantKeyAdmin = {
  use: () => noKeyAdmin(),
  status: () => noKeyAdmin(),
  rotate: () => noKeyAdmin(),
  revoke: () => noKeyAdmin(),
};
function noKeyAdmin(): never {
  throw new SandglassError('key_unavailable', "This deployment has no per-tenant key providers configured, so tenants' keys cannot be managed.");
}

const NO_AUDIT_KEY: AuditSigner = {
  signAudit: () => noAuditKey(),
  auditPublicKeyPem: () => noAuditKey(),
};
function noAuditKey(): never {
  throw new SandglassError('key_unavailable', 'This deployment has no key provider configured, so it has no key to sign audit exports with.');
}

export interface ControlPlane {
  app: FastifyInstance;
  /** A gateway's request to resume a paused sandbox for a request to it (SandboxService.wake); `sandglass up` wires it in. */
  wake(sandboxId: string, credential: string): Promise<{ gatewayId: string }>;
  /** Resolves to the URL it listens on. */
  listen(port: number, host?: string): Promise<string>;
  close(): Promise<void>;
}

export function createControlPlane(opts: ControlPlaneOptions): ControlPlane {
  const spec = loadOpenApi(CONTROL_PLANE_SPEC);
  // Typed as fastify's logger: pino's own type carries members (msgPrefix) fastify's helpers do not declare.
  const app = Fastify({ loggerInstance: opts.logger as FastifyBaseLogger, genReqId: genRequestId, bodyLimit: BODY_LIMIT_BYTES });
  installValidation(app);
  installErrorHandling(app);
  // Only JSON bodies: fastify's text/plain parser would let a wrong content type reach validation as a string.
  app.removeContentTypeParser('text/plain');

  const { db, events, clock } = opts;
  const secrets = new SecretStore({ db, events, clock, keys: opts.keys ?? NO_KEYS });
  const gatewayClient = opts.gatewayClient ?? new GatewayClient(opts.nodeSecret);
  // A gateway verifies access tokens on its own; a revoked key's tokens are refused there only once it is told.
  const tellGateways = async (keyIds: string[]): Promise<void> => {
    if (keyIds.length === 0) return;
    // Until the last token the key could have obtained expires: E2B envd tokens live longest.
    const untilMs = clock.nowMs() + LONGEST_TOKEN_TTL_MS;
    for (const gateway of await opts.gateways.all()) {
      await gatewayClient.revokeKeys(gateway, keyIds, untilMs).catch((err: unknown) => {
        opts.logger.warn(
          { gateway: gateway.id, err: (err as Error).message },
          'could not tell a gateway about revoked API keys; it is told again when the control plane restarts',
        );
      });
    }
  };
  const apiKeys = new ApiKeyService({ db, events, clock, onRevoked: tellGateways });
  const tenantKeys = new TenantKeyService({
    db,
    events,
    clock,
    logger: opts.logger,
    admin: opts.keyAdmin ?? NO_KEY_ADMIN,
    gateways: opts.gateways,
    gatewayClient,
  });
  const templatePools = new TemplatePools({ db, clock, logger: opts.logger, gateways: opts.gateways, gatewayClient });
  const sandboxes = new SandboxService({
    templatePools,
    secrets,
    db,
    events,
    clock,
    gateways: opts.gateways,
    gatewayClient,
    nodeSecret: opts.nodeSecret,
    publicGatewayUrl: opts.publicGatewayUrl,
    keys: opts.keys,
  });

  const consoleLimits = { ...DEFAULT_CONSOLE_LIMITS, ...opts.console };
  const consoleSessions = new ConsoleSessions(db, clock, consoleLimits.sessionsPerKey);
  // Authenticated before the body is even parsed, so an anonymous caller learns nothing from validation errors.
  const principals = new WeakMap<FastifyRequest, Principal>();
  app.addHook('onRequest', async (req) => {
    if (req.routeOptions.url !== undefined && PUBLIC_ROUTES.has(req.routeOptions.url)) return;
    // Node API routes want the node bearer instead, checked by their own plugin's hook.
    if (opts.cluster && req.routeOptions.url?.startsWith('/node/v1/')) return;
    // The E2B layer takes the key from X-API-Key and answers in E2B's error format: its own plugin's hook checks it.
    // An unmatched URL (no route) is judged by its path, so a 404 under /e2b is also answered in that format.
    if ((req.routeOptions.url ?? req.url).startsWith('/e2b/')) return;
    // The console's own routes check its session themselves; its files are public.
    if ((req.routeOptions.url ?? req.url).startsWith('/console')) return;
    // A bearer key wins; without one, the console's session cookie, accepted only with its CSRF header.
    const bySession = req.headers.authorization === undefined ? await cookiePrincipal(consoleSessions, req) : undefined;
    principals.set(req, bySession ?? (await authenticate(db, req.headers.authorization, clock)));
  });
  // A POST without a body means "all defaults"; validation then names any field that is required.
  app.addHook('preValidation', async (req) => {
    if (req.body === undefined && req.routeOptions.schema?.body) req.body = {};
  });
  const who = (req: FastifyRequest): Principal => principals.get(req)!;
  const operator = (req: FastifyRequest): Principal => {
    const p = who(req);
    if (p.role !== 'operator') throw new SandglassError('permission_denied', 'Only an operator API key may create tenants.');
    return p;
  };

  // Each route is one operation of the spec, by its path there: the request and what the handler answers are the spec's types.
  const route = <P extends keyof Paths, M extends MethodsAt<Paths, P>>(method: M, path: P, handler: OperationHandler<Operation<P, M>, Route<P, M>>) =>
    app.route({
      method,
      url: path.replace(/\{(\w+)\}/g, ':$1'),
      schema: routeSchema(spec, method, path),
      // Fastify's handler type admits no returned reply once replies are typed per status; the handler's type is the check.
      handler: handler as unknown as RouteHandlerMethod,
    });
  const idOf = (req: { params: { id: string } }) => req.params.id;

  route('GET', '/v1/health', async () => ({ status: 'ok' as const, version: VERSION }));

  const templates = new CustomTemplates({ db, events, clock, sandboxes, pools: templatePools, cacheEntries: opts.templateCacheEntries });
  // A restarted control plane (or gateway, in `sandglass up` both restart together) sets every pool again.
  app.addHook('onReady', async () => {
    void templatePools.pushAll();
  });
  route('GET', '/v1/templates', async (req) => ({ templates: await templates.list(who(req)) }));
  route('POST', '/v1/templates', async (req, reply) => reply.code(201).send(await templates.createVersion(who(req), req.body)));
  route('GET', '/v1/templates/{name}', async (req) => templates.get(who(req), req.params.name));
  route('PATCH', '/v1/templates/{name}', async (req) => templates.update(who(req), req.params.name, req.body));
  route('DELETE', '/v1/templates/{name}', async (req, reply) => {
    await templates.delete(who(req), req.params.name, req.query.version);
    return reply.code(204).send();
  });
  route('GET', '/v1/template-cache/{key}', async (req) => templates.cacheGet(who(req), req.params.key));
  route('PUT', '/v1/template-cache/{key}', async (req) => templates.cachePut(who(req), req.params.key, req.body.snapshotId));
  route('GET', '/v1/template-builds', async (req) => ({ builds: await templates.listBuilds(who(req), req.query.name) }));
  route('POST', '/v1/template-builds', async (req, reply) => reply.code(201).send(await templates.startBuild(who(req), req.body.name)));
  route('GET', '/v1/template-builds/{id}', async (req) => templates.getBuild(who(req), idOf(req)));
  route('GET', '/v1/template-builds/{id}/log', async (req) => templates.readLog(who(req), idOf(req), req.query.fromLine));
  route('POST', '/v1/template-builds/{id}/log', async (req, reply) => {
    await templates.report(who(req), idOf(req), req.body);
    return reply.code(204).send();
  });
  route('POST', '/v1/template-builds/{id}/fail', async (req) => templates.fail(who(req), idOf(req), req.body));

  route('POST', '/v1/sandboxes', async (req, reply) => reply.code(201).send(await sandboxes.create(who(req), req.body)));
  route('GET', '/v1/sandboxes', async (req) => ({ sandboxes: await sandboxes.list(who(req), req.query.state) }));
  route('GET', '/v1/sandboxes/{id}', async (req) => sandboxes.get(who(req), idOf(req)));
  route('DELETE', '/v1/sandboxes/{id}', async (req, reply) => {
    await sandboxes.kill(who(req), idOf(req));
    return reply.code(204).send();
  });
  route('POST', '/v1/sandboxes/{id}/timeout', async (req) => sandboxes.setTimeout(who(req), idOf(req), req.body.timeoutS));
  route('POST', '/v1/sandboxes/{id}/access', async (req) => sandboxes.access(who(req), idOf(req)));
  route('GET', '/v1/sandboxes/{id}/events', async (req) => ({ events: await sandboxes.events(who(req), idOf(req), req.query) }));
  const auditSigner = opts.auditSigner ?? NO_AUDIT_KEY;
  route('GET', '/v1/sandboxes/{id}/audit/export', async (req, reply) => {
    const lines = await sandboxes.auditExport(who(req), idOf(req), auditSigner);
    // An error once streaming has begun cuts the body: the export then lacks its trailer and fails verification.
    return reply.header('content-type', 'application/x-ndjson').code(200).send(Readable.from(lines));
  });
  route('GET', '/v1/audit/public-key', async () => {
    const publicKeyPem = await auditSigner.auditPublicKeyPem();
    return { algorithm: 'ed25519' as const, keyId: auditKeyId(publicKeyPem), publicKeyPem };
  });
  route('PUT', '/v1/sandboxes/{id}/network', async (req) => sandboxes.setNetwork(who(req), idOf(req), req.body));
  route('GET', '/v1/sandboxes/{id}/approvals', async (req) => ({ approvals: await sandboxes.approvals(who(req), idOf(req)) }));
  route('POST', '/v1/approvals/{requestId}', async (req, reply) => {
    await sandboxes.decideApproval(who(req), req.params.requestId, req.body);
    return reply.code(204).send();
  });

  route('GET', '/v1/secrets', async (req) => ({ secrets: await secrets.list(who(req).tenantId) }));
  route('PUT', '/v1/secrets/{name}', async (req, reply) => {
    const { secret, created } = await secrets.set(who(req).tenantId, { ...req.body, name: req.params.name });
    return reply.code(created ? 201 : 200).send(secret);
  });
  route('DELETE', '/v1/secrets/{name}', async (req, reply) => {
    await secrets.remove(who(req).tenantId, req.params.name);
    return reply.code(204).send();
  });
  route('POST', '/v1/sandboxes/{id}/snapshot-interval', async (req) =>
    sandboxes.setSnapshotInterval(who(req), idOf(req), req.body.snapshotIntervalS, { bestEffort: req.body.bestEffort }),
  );
  route('GET', '/v1/sandboxes/{id}/snapshots', async (req) => sandboxes.timeline(who(req), idOf(req)));
  route('POST', '/v1/sandboxes/{id}/snapshots', async (req, reply) =>
    reply.code(201).send(await sandboxes.takeSnapshot(who(req), idOf(req), req.body.name, { compact: req.body.compact })),
  );
  route('POST', '/v1/sandboxes/{id}/pause', async (req) => sandboxes.pause(who(req), idOf(req), { keepMemory: req.body?.keepMemory }));
  route('POST', '/v1/sandboxes/{id}/resume', async (req) => sandboxes.resume(who(req), idOf(req), req.body));
  route('GET', '/v1/snapshots/{id}', async (req) => sandboxes.getSnapshot(who(req), idOf(req)));
  route('PATCH', '/v1/snapshots/{id}', async (req) => sandboxes.nameSnapshot(who(req), idOf(req), req.body.name));
  route('DELETE', '/v1/snapshots/{id}', async (req, reply) => {
    await sandboxes.deleteSnapshot(who(req), idOf(req));
    return reply.code(204).send();
  });
  route('POST', '/v1/forks', async (req, reply) => reply.code(201).send(await sandboxes.fork(who(req), req.body)));

  const nodeCredentials = new NodeCredentials(db, clock);
  const nodeOperator = (req: FastifyRequest): Principal => {
    const p = who(req);
    if (p.role !== 'operator') throw new SandglassError('permission_denied', "Only an operator API key may manage the cluster's nodes.");
    return p;
  };
  route('GET', '/v1/nodes', async (req) => {
    nodeOperator(req);
    return { nodes: await nodeCredentials.list() };
  });
  route('POST', '/v1/nodes/enrolments', async (req, reply) => {
    nodeOperator(req);
    return reply.code(201).send(await nodeCredentials.issueEnrolment(req.body.nodeId, req.body.ttlS));
  });
  route('POST', '/v1/nodes/{id}/revoke', async (req) => {
    nodeOperator(req);
    return nodeCredentials.revoke(idOf(req));
  });

  route('POST', '/v1/tenants', async (req, reply) => {
    const by = operator(req);
    const tenant = await createTenant(db, events, req.body.name, { clock, createdByKeyId: by.keyId });
    return reply.code(201).send(toTenant(tenant));
  });
  route('POST', '/v1/tenants/{id}/api-keys', async (req, reply) => reply.code(201).send(await apiKeys.create(who(req), { ...req.body, tenantId: idOf(req) })));
  route('POST', '/v1/api-keys', async (req, reply) => reply.code(201).send(await apiKeys.create(who(req), req.body)));
  route('GET', '/v1/api-keys', async (req) => ({ apiKeys: await apiKeys.list(who(req), req.query.tenantId) }));
  route('DELETE', '/v1/api-keys/{id}', async (req) => apiKeys.revoke(who(req), idOf(req)));
  route('GET', '/v1/tenants/{id}/keys', async (req) => tenantKeys.status(who(req), idOf(req)));
  route('PUT', '/v1/tenants/{id}/keys', async (req) => tenantKeys.use(who(req), idOf(req), req.body));
  route('POST', '/v1/tenants/{id}/keys/rotate', async (req) => tenantKeys.rotate(who(req), idOf(req), req.body));
  route('POST', '/v1/tenants/{id}/keys/revoke', async (req) => tenantKeys.revoke(who(req), idOf(req)));

  app.register(e2bApi({ db, sandboxes, clock, controlPlaneSpec: spec, portDomain: opts.portDomain }), { prefix: '/e2b' });
  app.register(
    consoleApi({
      db,
      events,
      sessions: consoleSessions,
      gateways: opts.gateways,
      publicGatewayUrl: opts.publicGatewayUrl,
      clock,
      logger: opts.logger,
      limits: consoleLimits,
    }),
  );

  let failover: Failover | undefined;
  if (opts.cluster) {
    const { nodes, failoverIntervalMs } = opts.cluster;
    failover = new Failover({ db, nodes, sandboxes, clock, logger: opts.logger, intervalMs: failoverIntervalMs });
    const mover = failover;
    app.register(
      nodeApi({
        db,
        events,
        nodes,
        secrets,
        keys: opts.keys ?? NO_KEYS,
        credentials: nodeCredentials,
        clock,
        logger: opts.logger,
        revokedKeyIds: () => apiKeys.revokedSince(clock.nowMs() - LONGEST_TOKEN_TTL_MS),
        onOrphaned: (_nodeId, ids) => {
          for (const id of ids) void mover.move(id, 'node_restarted');
        },
        onRegistered: (nodeId) => void templatePools.pushAll(nodeId),
        wake: (sandboxId, credential) => sandboxes.wake(sandboxId, credential),
      }),
    );
  }

  return {
    app,
    wake: (sandboxId, credential) => sandboxes.wake(sandboxId, credential),
    listen: async (port, host = '127.0.0.1') => {
      // Gateways started afresh forget what they were told: keys revoked while their tokens may live are told again.
      await tellGateways(await apiKeys.revokedSince(clock.nowMs() - LONGEST_TOKEN_TTL_MS));
      const url = await app.listen({ port, host });
      failover?.start();
      return url;
    },
    close: async () => {
      await failover?.stop();
      await app.close();
    },
  };
}
