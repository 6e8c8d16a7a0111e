// The gateway's internal node API, for the control plane only: served on its own listener, never the data plane's.
import type { FastifyPluginAsync } from 'fastify';
import { armedFailpoints, armFailpoint, chaosEnabled, firedFailpoints, SandglassError, type GatewayApi, type NodeKeys } from '@sandglass/core';
import type { Gateway } from './gateway.js';
import { checkDefaults, type Sandbox } from './sandbox.js';
import { checkAccessToken, internalBearerHook } from './auth.js';
import { envdState } from './e2b/state.js';
import { specRoutes } from './spec.js';
import { metricsView } from './metrics.js';

function sandboxView(s: Sandbox): GatewayApi.components['schemas']['NodeSandbox'] {
  return {
    id: s.id,
    tenantId: s.tenantId,
    state: s.state,
    pid: s.pid ?? null,
    startedAt: s.startedAt,
    expiresAt: new Date(s.expiresAtMs).toISOString(),
    ...(s.failureReason ? { failureReason: s.failureReason } : {}),
  };
}

/**
 * The internal routes as one encapsulated plugin whose onRequest hook (run only for a matched route of this plugin)
 * wants the node's internal bearer key, derived from the node secret for this purpose alone.
 */
export function internalApi(gw: Gateway, keys: NodeKeys): FastifyPluginAsync {
  return async (scope) => {
    scope.addHook('onRequest', internalBearerHook(keys));

    const route = specRoutes(scope);

    route('POST', '/internal/v1/sandboxes', async (req, reply) => {
      const sbx = await gw.createSandbox(req.body);
      return reply.status(201).send(sandboxView(sbx));
    });
    route('GET', '/internal/v1/sandboxes', async () => ({
      sandboxes: [...gw.sandboxes.values()].map(sandboxView),
    }));
    route('DELETE', '/internal/v1/sandboxes/{id}', async (req, reply) => {
      await gw.killSandbox(req.params.id);
      return reply.status(204).send();
    });
    route('POST', '/internal/v1/sandboxes/{id}/timeout', async (req, reply) => {
      gw.get(req.params.id).setExpiry(Date.parse(req.body.expiresAt));
      return reply.status(204).send();
    });
    route('POST', '/internal/v1/revoked-keys', async (req, reply) => {
      gw.revokedKeys.add(req.body.keyIds, req.body.untilMs);
      return reply.status(204).send();
    });
    route('POST', '/internal/v1/tenants/{tenantId}/key-revoked', async (req) => gw.revocation.revoke(req.params.tenantId, 'api'));
    route('GET', '/internal/v1/template-pools', async () => ({ pools: gw.templatePools.list() }));
    route('PUT', '/internal/v1/template-pools', async (req) => gw.templatePools.set(req.body));
    route('GET', '/internal/v1/templates', async () => ({ templates: gw.listTemplates(), sizes: gw.sizes }));
    route('POST', '/internal/v1/templates/prepare', async (req) => {
      const { template, memoryMib, vcpus, snapshotIntervalS, bestEffort } = req.body;
      // Before anything is built or recorded: a create whose interval this node can never keep changes nothing.
      if (snapshotIntervalS !== undefined) gw.snapshots.checkInterval(memoryMib, snapshotIntervalS, { bestEffort });
      return { key: (await gw.templateFor(template, memoryMib, vcpus)).key };
    });

    // ---- snapshots: take, pause, resume, fork, delete, interval, maintenance ----
    route('POST', '/internal/v1/sandboxes/{id}/snapshots', async (req, reply) => {
      const name = req.body?.name ?? null;
      return reply.status(201).send({ snapshot: await gw.snapshotSandbox(req.params.id, name, { compact: req.body?.compact === true }) });
    });
    route('POST', '/internal/v1/sandboxes/{id}/envd-tokens', async (req, reply) => {
      const sbx = gw.get(req.params.id);
      checkAccessToken(req.body.token, sbx.id, keys, gw.opts.clock, gw.revokedKeys);
      envdState(sbx).rememberToken(req.body.token);
      return reply.status(204).send();
    });
    route('GET', '/internal/v1/sandboxes/{id}/metrics', async (req) => metricsView(gw.get(req.params.id).metrics, req.query));
    route('POST', '/internal/v1/sandboxes/{id}/pause', async (req) => ({
      snapshot: await gw.pauseSandbox(req.params.id, undefined, { keepMemory: req.body?.keepMemory }),
    }));
    route('POST', '/internal/v1/sandboxes/{id}/resume', async (req) => {
      return sandboxView(await gw.restoreSandbox({ id: req.params.id, ...req.body }, 'resume'));
    });
    route('POST', '/internal/v1/forks', async (req) => {
      const { snapshotId, tenantId, sourceTenantId, sandboxes, envs, replay, network, secrets, defaults } = req.body;
      const forks = await gw.forkSandboxes(snapshotId, tenantId, sandboxes, {
        envs,
        replay,
        sourceTenantId,
        egress: network === undefined ? undefined : { network, secrets: secrets ?? [] },
        defaults: defaults === undefined ? undefined : checkDefaults(defaults),
      });
      return { sandboxes: forks.map((f) => ('error' in f ? f : sandboxView(f))) };
    });
    route('DELETE', '/internal/v1/snapshots/{id}', async (req, reply) => {
      await gw.deleteSnapshot(req.query.tenantId, req.params.id);
      return reply.status(204).send();
    });
    route('PUT', '/internal/v1/sandboxes/{id}/snapshot-interval', async (req, reply) => {
      gw.setSnapshotInterval(req.params.id, req.body.snapshotIntervalS, { bestEffort: req.body.bestEffort });
      return reply.status(204).send();
    });
    // ---- network: policy changes and approvals of secret use ----
    route('PUT', '/internal/v1/sandboxes/{id}/network', async (req, reply) => {
      gw.setNetwork(req.params.id, req.body);
      return reply.status(204).send();
    });
    route('GET', '/internal/v1/sandboxes/{id}/approvals', async (req) => {
      const id = req.params.id;
      gw.get(id);
      return {
        approvals: gw.network.approvals.pending(id).map((a) => ({
          requestId: a.requestId,
          sandboxId: a.sandboxId,
          secret: a.secret,
          host: a.host,
          port: a.port,
          method: a.method,
          path: a.path,
          requestedAt: new Date(a.requestedAtMs).toISOString(),
          expiresAt: new Date(a.expiresAtMs).toISOString(),
        })),
      };
    });
    route('POST', '/internal/v1/sandboxes/{id}/approvals/{requestId}', async (req, reply) => {
      const { id, requestId } = req.params;
      const body = req.body;
      // Only this sandbox's pending requests: a request id of another sandbox is as unknown as a made-up one.
      if (!gw.network.approvals.pending(id).some((a) => a.requestId === requestId)) {
        throw new SandglassError('approval_not_found', `No pending approval request ${requestId} for sandbox ${id} (decided, timed out, or never made).`, {
          details: { field: 'requestId' },
        });
      }
      gw.network.approvals.decide(requestId, body.decision, body.ttlS ? { ttlMs: body.ttlS * 1000 } : {});
      return reply.status(204).send();
    });
    route('POST', '/internal/v1/maintenance', async (req) => {
      const graceMs = req.body?.gcGraceMs;
      return gw.snapshots.maintain({ graceMs });
    });
    // A way to make this process fail on purpose: registered only for a chaos run, so a production node has no such
    // route at all (404), whoever holds the node secret.
    if (chaosEnabled()) {
      route('GET', '/internal/v1/failpoints', async () => ({ armed: armedFailpoints(), fired: [...firedFailpoints()] }));
      route('POST', '/internal/v1/failpoints', async (req, reply) => {
        armFailpoint(req.body.name, req.body.spec);
        return reply.status(204).send();
      });
    }
  };
}
