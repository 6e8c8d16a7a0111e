// The gateway's two HTTP listeners: the data plane (for SDKs, on a TCP port) and the internal node API (for the
// control plane, on a unix socket only the node's user can open). No route is served on both.
import { chmodSync, rmSync } from 'node:fs';
import Fastify, { type FastifyInstance } from 'fastify';
import websocket from '@fastify/websocket';
import { deriveNodeKeys, genRequestId, installErrorHandling, installValidation } from '@sandglass/core';
import type { Gateway } from './gateway.js';
import { dataPlaneApi } from './data-plane.js';
import { internalApi } from './internal-api.js';
import { envdApi } from './e2b/envd.js';
import type { EnvdForwarder } from './e2b/forward.js';
import { GuestPorts, portsApi } from './ports.js';

/** sockaddr_un's sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

function baseServer(): FastifyInstance {
  const app = Fastify({ logger: false, genReqId: genRequestId, bodyLimit: 1024 * 1024 });
  installValidation(app);
  installErrorHandling(app);
  // Raw bodies (file uploads, stdin) stay streams: the handler pipes them to the agent.
  app.addContentTypeParser('*', (_req, _payload, done) => done(null));
  return app;
}

/**
 * The data plane: /v1/health in the open, every other route inside the plugin that wants a sandbox's access token;
 * guest ports by `<port>-<sandbox id>.<port domain>` host and `/v1/sandboxes/{id}/ports/{port}/…` path (ports.ts);
 * E2B's envd under /e2b, and at the root for hosts named `<port>-<sandbox id>.<domain>`. `envdForward` (cluster
 * mode): envd requests for sandboxes other gateways run are proxied to them.
 */
export async function createDataPlaneServer(gw: Gateway, opts: { envdForward?: EnvdForwarder; portDomain?: string } = {}): Promise<FastifyInstance> {
  const keys = deriveNodeKeys(gw.opts.nodeSecret);
  const app = baseServer();
  await app.register(websocket, { options: { maxPayload: 4 * 1024 * 1024 } });
  // Guest ports by host name come first: every path of `<port>-<id>.<domain>` is the guest server's.
  const ports = new GuestPorts(gw, keys, { domain: opts.portDomain ?? process.env.SANDGLASS_PORT_DOMAIN });
  ports.install(app);
  app.get('/v1/health', async () => ({ status: 'ok', accel: gw.accel, sandboxes: gw.sandboxes.size, warm: gw.warmAvailable }));
  allowBrowserCalls(app);
  await app.register(dataPlaneApi(gw, keys));
  await app.register(portsApi(gw, keys, ports));
  await app.register(envdApi(gw, keys, { hostForm: false, forward: opts.envdForward }), { prefix: '/e2b' });
  await app.register(envdApi(gw, keys, { hostForm: true, forward: opts.envdForward }));
  return app;
}

/**
 * Lets the web console, a page of the control plane's origin, call the data plane. Any origin may: the data plane reads
 * no cookie and no ambient credential, only the sandbox's access token in Authorization, which a page of another origin
 * does not hold. Credentials are never allowed, so a browser attaches nothing on its own.
 */
function allowBrowserCalls(app: FastifyInstance): void {
  app.addHook('onRequest', async (req, reply) => {
    if (req.headers.origin !== undefined && req.url.startsWith('/v1/')) reply.header('access-control-allow-origin', '*');
  });
  app.options('/v1/sandboxes/*', async (_req, reply) =>
    reply
      .header('access-control-allow-methods', 'GET, POST, PUT, DELETE')
      .header('access-control-allow-headers', 'authorization, content-type')
      .header('access-control-max-age', '600')
      .code(204)
      .send(),
  );
}

/** The internal node API: every route inside the plugin that wants the node's internal bearer key. */
export async function createInternalServer(gw: Gateway): Promise<FastifyInstance> {
  const keys = deriveNodeKeys(gw.opts.nodeSecret);
  const app = baseServer();
  await app.register(internalApi(gw, keys));
  return app;
}

/**
 * Listens on a unix socket, mode 0600. The socket should sit in a directory no other user can traverse, so the
 * moment between bind and chmod opens nothing; a socket left by a dead gateway is replaced.
 */
export async function listenOnSocket(app: FastifyInstance, socketPath: string): Promise<void> {
  if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH_BYTES) {
    throw new Error(`the gateway's internal socket path ${socketPath} is longer than ${MAX_SOCKET_PATH_BYTES} bytes; use a shorter SANDGLASS_HOME`);
  }
  rmSync(socketPath, { force: true });
  await app.listen({ path: socketPath });
  chmodSync(socketPath, 0o600);
}
