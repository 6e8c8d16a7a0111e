// E2B's in-sandbox daemon (envd) served by the gateway: routing by E2b-Sandbox-Id or the `<port>-<id>.<domain>`
// Host, the sandbox's access token from X-Access-Token, then process.Process, filesystem.Filesystem, /files, /health.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { SandglassError, toSandglassError, verifyAccessToken, type NodeKeys } from '@sandglass/core';
import { checkAccessToken } from '../auth.js';
import type { Gateway } from '../gateway.js';
import type { Sandbox } from '../sandbox.js';
import { guestPath } from '../paths.js';
import { ConnectError, endStreamEnvelope, parseKeepaliveS, parseTimeoutMs } from './connect.js';
import { download, envdHttpError, upload } from './files-http.js';
import { FORWARDED_HEADER, type EnvdForwarder } from './forward.js';
import * as fsRpc from './filesystem.js';
import * as procRpc from './process.js';
import type { EnvdUser } from './process.js';
import { ServerStream, streamRequest, toConnectError, unaryRequest } from './rpc.js';
import { signedFileRequest, signedFileTarget } from './signed.js';
import { envdState } from './state.js';

/** The one guest port served: envd's. Sandglass exposes no other guest port to the network. */
export const ENVD_PORT = 49983;
/** The envd version reported to the SDK (by the control plane): what this translation implements. */
export const ENVD_VERSION = '0.6.3';
const DEFAULT_USER = 'user';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** How an envd route answers errors: Connect unary, Connect stream (end-of-stream frame), or envd HTTP JSON. */
    envd?: 'unary' | 'stream' | 'http';
  }
}

/** What E2B's edge answers itself: `{ code: <status>, message }`, whatever the route (502: no such running sandbox). */
class EdgeError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The root-form plugin saw a request whose Host is not `<port>-<id>.<domain>`: not an envd request at all. */
class NotEnvdHost extends Error {}

interface EnvdRequest {
  sbx: Sandbox;
  user: EnvdUser;
}

const contexts = new WeakMap<FastifyRequest, EnvdRequest>();

const HOST_FORM = /^(\d{1,5})-([A-Za-z0-9_]{1,64})\.[^:]+(?::\d{1,5})?$/;

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The sandbox and port a request is for: its E2b-Sandbox-* headers, else (or consistent with them) its Host, else the
 * sandbox its access token names once verified (`tokenSandbox`): the SDK releases before 2.36 send the headers on
 * Connect RPCs only, not on /files and /health.
 */
function targetOf(req: FastifyRequest, hostForm: boolean, tokenSandbox: () => string | undefined): { sandboxId: string; port: number } {
  const host = HOST_FORM.exec(header(req, 'host') ?? '');
  if (hostForm && !host) throw new NotEnvdHost();
  const idHeader = header(req, 'e2b-sandbox-id');
  const portHeader = header(req, 'e2b-sandbox-port');
  const sandboxId = idHeader ?? host?.[2] ?? tokenSandbox();
  if (!sandboxId) throw new EdgeError(400, 'Send the sandbox id as E2b-Sandbox-Id (or use the <port>-<sandbox id>.<domain> host).');
  if (host && idHeader !== undefined && idHeader !== host[2]) throw new EdgeError(400, 'E2b-Sandbox-Id and the Host name a different sandbox.');
  if (portHeader !== undefined && !/^\d{1,5}$/.test(portHeader)) throw new EdgeError(400, 'E2b-Sandbox-Port must be a port number.');
  const port = Number(portHeader ?? host?.[1] ?? ENVD_PORT);
  if (host && portHeader !== undefined && Number(host[1]) !== port) throw new EdgeError(400, 'E2b-Sandbox-Port and the Host name a different port.');
  return { sandboxId, port };
}

/**
 * `username` (query, /files) or `Authorization: Basic base64("name:")`; otherwise the sandbox's default (its template's
 * USER), else E2B's default user.
 */
function userOf(req: FastifyRequest, defaultUser: string = DEFAULT_USER): EnvdUser {
  const q = (req.query as Record<string, unknown> | undefined)?.username;
  let name = typeof q === 'string' && q !== '' ? q : undefined;
  const auth = header(req, 'authorization');
  if (name === undefined && auth !== undefined) {
    const m = /^Basic\s+([A-Za-z0-9+/]+={0,2})$/i.exec(auth.trim());
    if (!m) throw new SandglassError('unauthenticated', 'Authorization must be Basic base64("<user>:").');
    const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
    name = decoded.includes(':') ? decoded.slice(0, decoded.indexOf(':')) : decoded;
  }
  name ||= defaultUser;
  if (!/^[a-z_][a-z0-9_-]{0,31}$/.test(name)) throw new SandglassError('unauthenticated', `${JSON.stringify(name.slice(0, 40))} is not a valid user name.`);
  const home = name === 'root' ? '/root' : `/home/${name}`;
  return {
    name,
    home,
    resolve(path, field) {
      if (path === '') throw new SandglassError('invalid_argument', `${field}: must not be empty`, { details: { field } });
      const abs = path === '~' ? home : path.startsWith('~/') ? `${home}${path.slice(1)}` : path.startsWith('/') ? path : `${home}/${path}`;
      return guestPath(abs, field);
    },
  };
}

/**
 * The envd routes as one encapsulated plugin. `hostForm`: registered at the root, it serves only requests whose
 * Host is `<port>-<sandbox id>.<domain>` (others get the server's usual 404); under /e2b, any Host. `forward` (cluster
 * mode): a request for a sandbox another gateway runs is proxied there (see forward.ts).
 */
export function envdApi(gw: Gateway, keys: NodeKeys, opts: { hostForm: boolean; forward?: EnvdForwarder }): FastifyPluginAsync {
  const clock = gw.opts.clock;
  return async (scope) => {
    // Bodies are read here, bounded per route (messages, uploads streamed): none of the server's parsers apply.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null));

    scope.addHook('onRequest', async (req, reply) => {
      const token = header(req, 'x-access-token');
      // A signed file URL (downloadUrl, uploadUrl) carries no token and, as the SDK builds it, no sandbox id either: its
      // signature names the sandbox, and is checked before anything else is looked at.
      const bare = req.url.split('?')[0];
      const signed =
        token === undefined && bare === (opts.hostForm ? '/files' : '/e2b/files')
          ? signedFileRequest(req.method, (req.query ?? {}) as Record<string, unknown>)
          : undefined;
      if (signed !== undefined) {
        const { sbx, token: made } = signedFileTarget(signed, gw.sandboxes.values(), clock.nowMs());
        checkAccessToken(made, sbx.id, keys, clock, gw.revokedKeys);
        const named = header(req, 'e2b-sandbox-id') ?? HOST_FORM.exec(header(req, 'host') ?? '')?.[2];
        if (named !== undefined && named !== sbx.id) throw new SandglassError('permission_denied', 'This file URL was signed for another sandbox.');
        contexts.set(req, { sbx, user: userOf(req) });
        return;
      }
      const { sandboxId, port } = targetOf(req, opts.hostForm, () =>
        token === undefined ? undefined : verifyAccessToken(token, keys.accessToken, clock.nowMs()).sbx,
      );
      if (port !== ENVD_PORT) {
        throw new EdgeError(
          502,
          `Sandglass exposes no guest ports: only envd (port ${ENVD_PORT}) is served; port ${port} is not reachable from outside the sandbox.`,
        );
      }
      // The token first: whether a sandbox exists is told only to a holder of its token.
      if (!token) throw new SandglassError('unauthenticated', "Send the sandbox's envd access token as X-Access-Token.");
      checkAccessToken(token, sandboxId, keys, clock, gw.revokedKeys);
      // Where the control plane can say (a waker): a paused sandbox answers that it is paused, or (autoResume) is
      // resumed for this request; others are not here.
      const local = gw.sandboxes.get(sandboxId);
      const sbx =
        local !== undefined || gw.waker === undefined
          ? local
          : await gw.reach(sandboxId, token).catch((err: unknown) => {
              if (err instanceof SandglassError && err.code === 'sandbox_not_found') return undefined;
              throw new EdgeError(502, toSandglassError(err).message);
            });
      if (!sbx || sbx.state !== 'running') {
        // Only now, with the token verified for this sandbox, is its location asked for; never for a request another
        // gateway already forwarded (no loops), which gets the 502 below.
        if (opts.forward && header(req, FORWARDED_HEADER) === undefined) {
          const target = await opts.forward.target(sandboxId).catch((err: Error) => {
            throw new EdgeError(502, `Cannot tell where sandbox ${sandboxId} runs: ${err.message}`);
          });
          if (target) {
            if (!opts.forward.hasRoom()) throw new EdgeError(503, 'This gateway forwards as many requests to other gateways as it may; retry later.');
            reply.hijack();
            const path = opts.hostForm ? req.url : req.url.slice('/e2b'.length);
            void opts.forward.proxy(req.raw, reply.raw, target, path, { 'e2b-sandbox-id': sandboxId, 'e2b-sandbox-port': String(port) });
            return reply;
          }
        }
        throw new EdgeError(502, `Sandbox ${sandboxId} is not running (paused, killed or not on this node).`);
      }
      envdState(sbx).rememberToken(token);
      contexts.set(req, { sbx, user: userOf(req, sbx.defaults.user) });
    });

    scope.setErrorHandler(async (err, req, reply) => {
      if (err instanceof NotEnvdHost) {
        return reply.status(404).send(new SandglassError('not_found', `No route ${req.method} ${req.url.split('?')[0]}`).toBody(req.id));
      }
      if (err instanceof EdgeError) return reply.status(err.status).send({ code: err.status, message: err.message });
      const kind = req.routeOptions.config.envd ?? 'http';
      if (kind === 'http') {
        const e = envdHttpError(err);
        return reply.status(e.status).send({ code: e.status, message: e.message });
      }
      const ce = toConnectError(err);
      if (kind === 'unary') return reply.status(ce.status).header('content-type', 'application/json').send(JSON.stringify(ce.toJSON()));
      // A server stream reports every error in its end-of-stream frame, with HTTP 200 (Connect's rule for streams).
      return reply.status(200).header('content-type', 'application/connect+json').send(endStreamEnvelope(ce));
    });

    const ctxOf = (req: FastifyRequest): EnvdRequest => contexts.get(req)!;

    const unary = (path: string, run: (ctx: EnvdRequest, body: unknown) => Promise<unknown> | unknown) =>
      scope.post(path, { config: { envd: 'unary' } }, async (req, reply: FastifyReply) => {
        const body = await unaryRequest(req.raw);
        const out = await run(ctxOf(req), body);
        return reply.status(200).header('content-type', 'application/json').send(JSON.stringify(out));
      });

    const serverStream = (
      path: string,
      keepaliveMessage: unknown,
      run: (ctx: EnvdRequest, body: unknown, stream: ServerStream, o: { clock: typeof clock; timeoutMs?: number }) => Promise<void>,
    ) =>
      scope.post(path, { config: { envd: 'stream' } }, async (req, reply) => {
        const timeoutMs = parseTimeoutMs(req.headers['connect-timeout-ms']);
        const body = await streamRequest(req.raw);
        reply.hijack();
        const ctx = ctxOf(req);
        const stream = new ServerStream(reply.raw, clock, {
          keepaliveS: parseKeepaliveS(req.headers['keepalive-ping-interval']),
          keepaliveMessage,
          cutIf: () => ctx.sbx.state !== 'running',
        });
        try {
          await run(ctx, body, stream, { clock, timeoutMs });
        } catch (err) {
          stream.end(err);
        }
      });

    // ---- process.Process ----
    serverStream('/process.Process/Start', procRpc.PROCESS_KEEPALIVE, (c, b, s, o) => procRpc.startProcess(c.sbx, c.user, b, s, o));
    serverStream('/process.Process/Connect', procRpc.PROCESS_KEEPALIVE, (c, b, s, o) => procRpc.connectProcess(c.sbx, b, s, o));
    unary('/process.Process/List', (c) => procRpc.listProcesses(c.sbx));
    unary('/process.Process/SendInput', (c, b) => procRpc.sendInput(c.sbx, b));
    unary('/process.Process/CloseStdin', (c, b) => procRpc.closeStdin(c.sbx, b));
    unary('/process.Process/SendSignal', (c, b) => procRpc.sendSignal(c.sbx, b));
    unary('/process.Process/Update', (c, b) => procRpc.updateProcess(c.sbx, b));
    // Client streaming: no fetch-based client (the SDK's transport included) can send it, and SendInput does the same.
    scope.post('/process.Process/StreamInput', { config: { envd: 'stream' } }, async (req) => {
      req.raw.resume();
      throw new ConnectError('unimplemented', 'process.Process/StreamInput is not served by Sandglass; send input with process.Process/SendInput');
    });

    // ---- filesystem.Filesystem ----
    unary('/filesystem.Filesystem/Stat', (c, b) => fsRpc.statEntry(c.sbx, c.user, b));
    unary('/filesystem.Filesystem/ListDir', (c, b) => fsRpc.listDir(c.sbx, c.user, b));
    unary('/filesystem.Filesystem/MakeDir', (c, b) => fsRpc.makeDir(c.sbx, c.user, b));
    unary('/filesystem.Filesystem/Move', (c, b) => fsRpc.move(c.sbx, c.user, b));
    unary('/filesystem.Filesystem/Remove', (c, b) => fsRpc.remove(c.sbx, c.user, b));
    serverStream('/filesystem.Filesystem/WatchDir', fsRpc.WATCH_KEEPALIVE, (c, b, s, o) => fsRpc.watchDir(c.sbx, c.user, b, s, o));
    unary('/filesystem.Filesystem/CreateWatcher', (c, b) => fsRpc.createWatcher(c.sbx, c.user, b));
    unary('/filesystem.Filesystem/GetWatcherEvents', (c, b) => fsRpc.getWatcherEvents(c.sbx, b));
    unary('/filesystem.Filesystem/RemoveWatcher', (c, b) => fsRpc.removeWatcher(c.sbx, b));

    // Any other path: a guest port's request gets its 502 from the hook, an envd one its token check, then 404.
    scope.all('/*', { config: { envd: 'http' } }, async (req, reply) =>
      reply.status(404).send({ code: 404, message: `envd has no route ${req.method} ${req.url.split('?')[0]}` }),
    );

    // ---- envd HTTP ----
    scope.get('/health', { config: { envd: 'http' } }, async (_req, reply) => reply.status(204).send());

    scope.get('/files', { config: { envd: 'http' } }, async (req, reply) => {
      const { sbx, user } = ctxOf(req);
      const { sizeBytes, body } = await download(sbx, user, (req.query as Record<string, unknown>).path);
      return reply.status(200).header('content-type', 'application/octet-stream').header('content-length', String(sizeBytes)).send(body);
    });

    scope.post('/files', { config: { envd: 'http' } }, async (req, reply) => {
      const { sbx, user } = ctxOf(req);
      try {
        return reply.status(200).send(await upload(sbx, user, req.raw, (req.query as Record<string, unknown>).path));
      } catch (err) {
        // The answer goes out while what is left of the upload is read and dropped.
        req.raw.resume();
        throw err;
      }
    });
  };
}
