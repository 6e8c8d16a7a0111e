// The E2B-shaped REST API (spec/e2b.yaml) under /e2b: E2B's key header, error format and shapes, translated onto SandboxService.
import { isIP } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyRequest, RouteHandlerMethod } from 'fastify';
import type { Kysely } from 'kysely';
import {
  invalidArgument,
  loadOpenApi,
  routeSchema,
  SandglassError,
  toSandglassError,
  type Clock,
  type E2bApi,
  type MethodsAt,
  type OpenApiDoc,
  type OperationAt,
  type OperationHandler,
  type OperationRoute,
  type RequestBody,
} from '@sandglass/core';
import { fromIso, type Schema, type TemplateRow, type TemplateVersionRow } from '@sandglass/db';
import { parsePolicy } from '@sandglass/egress';
import type { NetworkPolicy, Sandbox, Snapshot } from './api.js';
import type { GatewayMetrics } from './gateways.js';
import { authenticate, type Principal } from './keys.js';
import { checkEnvs, E2B_ENVD_TOKEN_TTL_MS, type SandboxService } from './sandboxes.js';
import { findTemplate, findUsableVersion, listPublishedVersions, listTemplates, publisherOf, templateVersions } from './templates.js';

export const E2B_SPEC = fileURLToPath(new URL('../../../spec/e2b.yaml', import.meta.url));

/**
 * The envd version the gateway's E2B layer speaks: ≥0.6.3 lets the SDK ask for watch events' entries, ≥0.6.2 send
 * file metadata, ≥0.5.7 upload raw octet-stream bodies, ≥0.5.2 close stdin, ≥0.4.0 send no default user. 0.6.4
 * (watches on network mounts) is not claimed: a guest has none. The gateway's ENVD_VERSION says the same.
 */
export const E2B_ENVD_VERSION = '0.6.3';
/** E2B's deprecated client id: one constant, there being no E2B cluster client behind it. */
const CLIENT_ID = 'sandglass';
/**
 * The control plane does not know the guest image's size: a sandbox created without `diskMib` has the image's content
 * plus 1 GiB free. 0 says "not known" rather than inventing a number; a sandbox that asked for a size reports it.
 */
const DISK_SIZE_MB = 0;
const SEE_DOCS = 'see docs/e2b.md';

type Paths = E2bApi.paths;
type Operation<P extends keyof Paths, M extends MethodsAt<Paths, P>> = OperationAt<Paths, P, M>;
/** As in server.ts: a POST without a body is given `{}` before validation, so a handler always has one. */
type Route<P extends keyof Paths, M extends MethodsAt<Paths, P>> = Omit<OperationRoute<Operation<P, M>>, 'Body'> & {
  Body: NonNullable<RequestBody<Operation<P, M>>>;
};
type Schemas = E2bApi.components['schemas'];
type E2bSandbox = Schemas['Sandbox'];
type ListedSandbox = Schemas['ListedSandbox'];
type NetworkInput = Schemas['SandboxNetworkConfig'] & { allow_internet_access?: boolean };

/** E2B routes the SDK calls for features Sandglass does not have: 501 with what, rather than a 404 the SDK would read as "sandbox not found". */
const UNSUPPORTED: ReadonlyArray<readonly [method: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH', path: string, what: string]> = [
  ['POST', '/sandboxes/{sandboxID}/refreshes', 'Sandbox refreshes'],
  ['GET', '/sandboxes/{sandboxID}/logs', 'Sandbox logs'],
  ['GET', '/v2/sandboxes/{sandboxID}/logs', 'Sandbox logs'],
  ['GET', '/secrets', "E2B's secrets API (Sandglass secrets are in its own API, /v1/secrets)"],
  ['POST', '/secrets', "E2B's secrets API"],
  ['GET', '/secrets/{secretID}', "E2B's secrets API"],
  ['POST', '/secrets/{secretID}', "E2B's secrets API"],
  ['DELETE', '/secrets/{secretID}', "E2B's secrets API"],
  ['GET', '/teams', 'Teams'],
  ['GET', '/teams/{teamID}/metrics', 'Team metrics'],
  ['GET', '/teams/{teamID}/metrics/max', 'Team metrics'],
  ['PATCH', '/templates/{templateID}', 'The templates API'],
  ['GET', '/templates/{templateID}/builds/{buildID}/logs', 'Template builds'],
  ['GET', '/templates/{templateID}/builds/{buildID}/status', 'Template builds'],
  ['GET', '/templates/{templateID}/files/{hash}', 'Template builds'],
  ['GET', '/templates/{templateID}/tags', 'Template tags'],
  ['POST', '/templates/tags', 'Template tags'],
  ['DELETE', '/templates/tags', 'Template tags'],
  ['GET', '/v2/templates', 'The templates API'],
  ['PATCH', '/v2/templates/{templateID}', 'The templates API'],
  ['POST', '/v2/templates/{templateID}/builds/{buildID}', 'Template builds'],
  ['POST', '/v3/templates', 'Template builds'],
  ['GET', '/volumes', 'Volumes'],
  ['POST', '/volumes', 'Volumes'],
  ['GET', '/volumes/{volumeID}', 'Volumes'],
  ['DELETE', '/volumes/{volumeID}', 'Volumes'],
];

export interface E2bApiOptions {
  db: Kysely<Schema>;
  sandboxes: SandboxService;
  clock: Clock;
  /** The control plane's own spec: a create takes the defaults of its CreateSandboxRequest for what E2B does not say. */
  controlPlaneSpec: OpenApiDoc;
  /** The gateways' guest-port domain; absent, `domain` is null and getHost names nothing that exists. */
  portDomain?: string;
}

/** A refusal of an option Sandglass cannot honour: 400 naming the field, never a silently different sandbox. */
function unsupported(field: string, why: string): SandglassError {
  return invalidArgument(field, `${why} (${SEE_DOCS})`);
}

/** One address an allowOut/denyOut entry names, with its rule text; undefined when the entry is not an address. */
function singleAddress(entry: string, field: string): { ip: string; rule: string } | undefined {
  const slash = entry.indexOf('/');
  const ip = slash < 0 ? entry : entry.slice(0, slash);
  const family = isIP(ip);
  if (family === 0) return undefined;
  if (slash >= 0) {
    const bits = entry.slice(slash + 1);
    const width = family === 4 ? '32' : '128';
    if (bits !== width) {
      throw unsupported(field, `is a CIDR block of more than one address; Sandglass's egress rules name hosts or single addresses (${ip}/${width} or ${ip})`);
    }
  }
  // Every port, as E2B's address rules mean; a bare IPv6 address takes no port in the rule grammar, so it is bracketed.
  return { ip, rule: family === 4 ? `${ip}:*` : `[${ip}]:*` };
}

/** One allow rule from an allowOut entry, checked by the egress grammar alone so its error names the E2B field. */
function allowRule(entry: string, field: string): string {
  const rule = singleAddress(entry, field)?.rule ?? entry;
  try {
    parsePolicy({ allow: [rule] });
  } catch (err) {
    const problem = err instanceof SandglassError ? String(err.details?.problem ?? err.message) : 'is not a valid rule';
    throw invalidArgument(field, problem);
  }
  return rule;
}

const EVERYWHERE = new Set(['0.0.0.0/0', '::/0']);

/**
 * E2B's network settings as a Sandglass egress policy. Sandglass denies by default, so allowOut entries are the allow
 * rules; E2B lets allowOut win over denyOut, so a denyOut address that allowOut also names adds no deny rule, and
 * "everything" in denyOut is what the default already does. Whatever cannot be expressed is refused, naming the field.
 */
function toPolicy(input: NetworkInput, prefix: string, internetField: string): NetworkPolicy {
  if (input.allow_internet_access === true) {
    throw unsupported(internetField, 'true would open every host, and Sandglass egress allows only named hosts and addresses; list them in network.allowOut');
  }
  if (input.egressProxy !== undefined && input.egressProxy !== null) throw unsupported(`${prefix}egressProxy`, 'an upstream SOCKS5 proxy is not supported');
  if (input.rules !== undefined && Object.keys(input.rules).length > 0)
    throw unsupported(`${prefix}rules`, 'header transforms are not supported; Sandglass secrets inject credentials (POST /v1/secrets)');
  // false is Sandglass's way anyway: every guest port needs a credential (the answer's trafficAccessToken opens them).
  if (input.allowPublicTraffic === true)
    throw unsupported(`${prefix}allowPublicTraffic`, 'ports are private here; make one public with PUT /v1/sandboxes/{id}/public-ports/{port}');
  if (input.maskRequestHost !== undefined) throw unsupported(`${prefix}maskRequestHost`, 'Sandglass sandboxes have no public URLs');
  if (input.httpsPorts !== undefined && input.httpsPorts.length > 0) throw unsupported(`${prefix}httpsPorts`, 'Sandglass sandboxes have no public URLs');

  const allowOut = input.allowOut ?? [];
  const allow = allowOut.map((entry, i) => allowRule(entry, `${prefix}allowOut[${i}]`));
  const allowedIps = new Set(allowOut.flatMap((entry, i) => singleAddress(entry, `${prefix}allowOut[${i}]`)?.ip ?? []));
  const deny: string[] = [];
  for (const [i, entry] of (input.denyOut ?? []).entries()) {
    const field = `${prefix}denyOut[${i}]`;
    if (EVERYWHERE.has(entry)) continue;
    const address = singleAddress(entry, field);
    if (!address) throw unsupported(field, 'must be an IP address or CIDR block, as in E2B (deny rules take no host names)');
    if (!allowedIps.has(address.ip)) deny.push(address.rule);
  }
  return { allow, deny };
}

const isFinal = (s: Sandbox) => s.state === 'ended' || s.state === 'failed';

/** One of the gateway's samples in E2B's shape (E2B's byte counts carry no unit in their names). */
function toE2bMetric(m: GatewayMetrics['metrics'][number]): Schemas['SandboxMetric'] {
  return {
    timestamp: m.timestamp,
    timestampUnix: Math.floor(Date.parse(m.timestamp) / 1000),
    cpuCount: m.cpuCount,
    cpuUsedPct: m.cpuUsedPct,
    memUsed: m.memUsedBytes,
    memTotal: m.memTotalBytes,
    memCache: m.memCacheBytes,
    diskUsed: m.diskUsedBytes,
    diskTotal: m.diskTotalBytes,
  };
}

/** Ended and failed sandboxes do not exist for E2B: it lists, connects to and kills only running and paused ones. */
function notFound(id: string): SandglassError {
  return new SandglassError('sandbox_not_found', `No running or paused sandbox ${id} exists for your tenant.`);
}

/** The page position after an item, in the list's order: base64url of [startedAt, id]. */
function encodeCursor(s: { startedAt: string; sandboxID: string }): string {
  return Buffer.from(JSON.stringify([s.startedAt, s.sandboxID])).toString('base64url');
}

function decodeCursor(token: string): { startedAt: string; id: string } {
  try {
    const v: unknown = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && typeof v[1] === 'string' && Number.isFinite(fromIso(v[0]))) {
      return { startedAt: v[0], id: v[1] };
    }
  } catch {
    // Falls through to the refusal below.
  }
  throw invalidArgument('nextToken', 'is not a token this API handed out; pass the X-Next-Token of the previous page unchanged');
}

/** The `metadata` query: `k=v&k2=v2`, keys and values percent-encoded once more by the SDK. */
function parseMetadataQuery(text: string): Array<[string, string]> {
  try {
    return [...new URLSearchParams(text)].map(([k, v]) => [decodeURIComponent(k), decodeURIComponent(v)]);
  } catch {
    throw invalidArgument('metadata', 'must be k=v pairs joined by &, each key and value percent-encoded');
  }
}

/**
 * The plugin, registered under /e2b: its onRequest hook wants a Sandglass API key as X-API-Key (as the E2B SDK sends
 * it) or as a bearer, checked exactly as the rest of the control plane checks keys; every error, its own 404 included,
 * is answered as `{ code: <HTTP status>, message, error_code }`, which the SDK reads.
 */
export function e2bApi(opts: E2bApiOptions): FastifyPluginAsync {
  const spec = loadOpenApi(E2B_SPEC);
  const createDefaults = opts.controlPlaneSpec.components?.schemas?.CreateSandboxRequest?.properties as Record<string, { default?: unknown }>;
  const { db, sandboxes, clock } = opts;

  return async (scope) => {
    scope.setErrorHandler(async (err, req, reply) => {
      const se = toSandglassError(err);
      if (se.code === 'internal') req.log.error({ err }, 'internal error');
      return reply.status(se.status).send({ code: se.status, message: se.message, error_code: se.code });
    });
    scope.setNotFoundHandler((req, reply) => {
      const message = `No route ${req.method} ${req.url.split('?')[0]} in Sandglass's E2B compatibility layer; ${SEE_DOCS}`;
      void reply.status(404).send({ code: 404, message, error_code: 'not_found' });
    });

    const principals = new WeakMap<FastifyRequest, Principal>();
    scope.addHook('onRequest', async (req) => {
      const apiKey = req.headers['x-api-key'];
      if (Array.isArray(apiKey)) throw new SandglassError('unauthenticated', 'Send one X-API-Key header.');
      // The same check as Authorization: Bearer on the rest of the API (revocation and expiry hold from the next request).
      principals.set(req, await authenticate(db, apiKey === undefined ? req.headers.authorization : `Bearer ${apiKey}`, clock));
    });
    // The SDK sends `state=running,paused` (form style, not exploded), as E2B's `sandbox_ids`: the validator wants arrays.
    scope.addHook('preValidation', async (req) => {
      const q = req.query as Record<string, unknown>;
      if (q.state !== undefined) q.state = [q.state].flat().flatMap((v) => String(v).split(','));
      if (q.sandbox_ids !== undefined) q.sandbox_ids = [q.sandbox_ids].flat().flatMap((v) => String(v).split(','));
    });
    const who = (req: FastifyRequest): Principal => principals.get(req)!;

    /** A named snapshot of the tenant by id or name (E2B creates from either), or undefined. */
    const namedSnapshot = async (req: FastifyRequest, idOrName: string): Promise<Snapshot | undefined> => {
      const [byName] = await sandboxes.namedSnapshots(who(req), { name: idOrName });
      if (byName !== undefined) return byName;
      if (!idOrName.startsWith('snap_')) return undefined;
      const byId = await sandboxes.getSnapshot(who(req), idOrName).catch((err: unknown) => {
        if (err instanceof SandglassError && err.code === 'snapshot_not_found') return undefined;
        throw err;
      });
      return byId?.name === null ? undefined : byId;
    };

    const route = <P extends keyof Paths, M extends MethodsAt<Paths, P>>(method: M, path: P, handler: OperationHandler<Operation<P, M>, Route<P, M>>) =>
      scope.route({
        method,
        url: path.replace(/\{(\w+)\}/g, ':$1'),
        schema: routeSchema(spec, method, path),
        handler: handler as unknown as RouteHandlerMethod,
      });

    for (const [method, path, what] of UNSUPPORTED) {
      scope.route({
        method,
        url: path.replace(/\{(\w+)\}/g, ':$1'),
        handler: async (_req, reply) =>
          reply.status(501).send({ code: 501, message: `${what} is not supported by Sandglass's E2B compatibility layer; ${SEE_DOCS}` }),
      });
    }

    /** A sandbox E2B may see: running (or starting) or paused. */
    const live = async (req: FastifyRequest, id: string): Promise<Sandbox> => {
      const s = await sandboxes.get(who(req), id).catch((err: unknown) => {
        throw err instanceof SandglassError && err.code === 'sandbox_not_found' ? notFound(id) : err;
      });
      if (isFinal(s)) throw notFound(id);
      return s;
    };
    const access = (req: FastifyRequest, id: string) => sandboxes.envdAccess(who(req), id, E2B_ENVD_TOKEN_TTL_MS);
    /**
     * What the SDK's getHost(port) appends to `<port>-<id>.`: the port domain with the sandbox's gateway's port, so the
     * name is the gateway's host-name form of that guest port (`sandglass up`: `sandglass.localhost:7071`).
     */
    const domainOf = (gatewayUrl: string): string | null => {
      if (opts.portDomain === undefined) return null;
      const { port } = new URL(gatewayUrl);
      return port === '' ? opts.portDomain : `${opts.portDomain}:${port}`;
    };
    const templateIdOf = async (name: string) => (await findTemplate(db, name))?.id ?? name;
    const toE2b = async (req: FastifyRequest, s: Sandbox): Promise<E2bSandbox> => {
      const granted = await access(req, s.id);
      return {
        sandboxID: s.id,
        templateID: await templateIdOf(s.template),
        alias: s.template,
        clientID: CLIENT_ID,
        envdVersion: E2B_ENVD_VERSION,
        envdAccessToken: granted.token,
        trafficAccessToken: granted.trafficToken,
        domain: domainOf(granted.gatewayUrl),
      };
    };
    const toListed = (s: Sandbox, templateId: string): ListedSandbox => ({
      sandboxID: s.id,
      templateID: templateId,
      alias: s.template,
      clientID: CLIENT_ID,
      startedAt: s.startedAt ?? s.createdAt,
      endAt: s.expiresAt,
      cpuCount: s.vcpus,
      memoryMB: s.memoryMib,
      diskSizeMB: s.diskMib ?? DISK_SIZE_MB,
      envdVersion: E2B_ENVD_VERSION,
      state: s.state === 'paused' ? 'paused' : 'running',
      metadata: s.metadata,
      volumeMounts: [],
    });

    /**
     * One create for both versions. The 2.x releases before 2.51 (v1, POST /sandboxes) always send their defaults
     * `allow_internet_access: true` and `secure: true`, so there true can only mean "the default policy": Sandglass's,
     * which denies all but what network.allowOut names. v2 sends the field only when the caller set it, so there true
     * is an explicit request for the whole internet, and stays refused.
     */
    const create =
      (version: 'v1' | 'v2'): OperationHandler<Operation<'/v2/sandboxes', 'POST'>, Route<'/v2/sandboxes', 'POST'>> =>
      async (req, reply) => {
        const b = version === 'v1' && req.body.allow_internet_access === true ? { ...req.body, allow_internet_access: undefined } : req.body;
        const lifecycle = {
          onTimeout: b.autoPause === true ? ('pause' as const) : ('kill' as const),
          autoResume: b.autoResume?.enabled === true,
          onTimeoutKeepMemory: b.autoPauseMemory !== false,
        };
        if (b.autoPauseMemory === false && !b.autoPause) throw invalidArgument('autoPauseMemory', 'false is only allowed with autoPause: true');
        // As E2B: traffic never cold-boots a sandbox, whose processes would be gone; a disk-only pause resumes by connect.
        if (!lifecycle.onTimeoutKeepMemory && lifecycle.autoResume)
          throw invalidArgument('autoResume.enabled', 'true is not allowed with autoPauseMemory: false; resume a disk-only pause with connect');
        if (b.mcp !== undefined && b.mcp !== null) throw unsupported('mcp', 'MCP gateways are not supported');
        if (b.iam !== undefined) throw unsupported('iam', 'workload identity tokens are not supported');
        if (b.volumeMounts !== undefined && b.volumeMounts.length > 0) throw unsupported('volumeMounts', 'volumes are not supported');
        // Neither given: no network at all, as Sandglass's own create without a policy.
        const network =
          b.network === undefined && b.allow_internet_access === undefined
            ? undefined
            : toPolicy({ ...b.network, allow_internet_access: b.allow_internet_access }, 'network.', 'allow_internet_access');
        const envs = b.envVars === undefined ? undefined : checkEnvs(b.envVars, 'envVars');
        // E2B sandboxes take their shape from the template; the rest are Sandglass's own create defaults.
        const template = await findTemplate(db, b.templateID);
        // A tenant template of that name wins over a snapshot named like it.
        const custom = template === undefined ? await findUsableVersion(db, who(req).tenantId, b.templateID) : undefined;
        const snapshot = template === undefined && custom === undefined ? await namedSnapshot(req, b.templateID) : undefined;
        if (snapshot !== undefined) {
          // A sandbox from a snapshot is a fork of it: the network and envs are those of the sandbox it was taken of.
          if (network !== undefined) throw unsupported('network', 'a sandbox created from a snapshot keeps the network of the sandbox it was taken of');
          if (envs !== undefined) throw unsupported('envVars', 'a sandbox created from a snapshot keeps the envs of the sandbox it was taken of');
          if (lifecycle.onTimeout === 'pause' || lifecycle.autoResume)
            throw unsupported(b.autoPause === true ? 'autoPause' : 'autoResume.enabled', 'a sandbox created from a snapshot is killed at its timeout');
          const forked = await sandboxes.fork(who(req), {
            snapshotId: snapshot.id,
            count: 1,
            timeoutS: b.timeout,
            ...(b.metadata === undefined ? {} : { metadata: b.metadata }),
          });
          const [started] = forked.sandboxes;
          if (started === undefined)
            throw new SandglassError('vm_failed', `The sandbox from snapshot ${snapshot.id} did not start; its sandbox.failed event says why.`);
          return reply.code(201).send(await toE2b(req, started));
        }
        const created = await sandboxes.create(who(req), {
          template: b.templateID,
          memoryMib: template?.memory_mib ?? (createDefaults.memoryMib?.default as number),
          vcpus: createDefaults.vcpus?.default as number,
          snapshotIntervalS: createDefaults.snapshotIntervalS?.default as number,
          snapshotBestEffort: createDefaults.snapshotBestEffort?.default as boolean,
          timeoutS: b.timeout,
          ...lifecycle,
          ...(b.metadata === undefined ? {} : { metadata: b.metadata }),
          ...(network === undefined ? {} : { network }),
          ...(envs === undefined ? {} : { envs }),
        });
        return reply.code(201).send(await toE2b(req, created));
      };
    route('POST', '/v2/sandboxes', create('v2'));
    route('POST', '/sandboxes', create('v1'));

    /** The tenant's sandboxes E2B lists, as v2's query (its defaults) asks, in its order; paging is the caller's. */
    const listed = async (req: FastifyRequest, q: Operation<'/v2/sandboxes', 'GET'>['parameters']['query'] & {}): Promise<ListedSandbox[]> => {
      const states = new Set(q.state ?? ['running', 'paused']);
      const wanted = [...(states.has('running') ? (['starting', 'running'] as const) : []), ...(states.has('paused') ? (['paused'] as const) : [])];
      const metadata = q.metadata === undefined ? [] : parseMetadataQuery(q.metadata);
      const afterMs = q.startedAfter === undefined ? undefined : Date.parse(q.startedAfter);
      const cursor = q.nextToken === undefined ? undefined : decodeCursor(q.nextToken);
      const templates = await listTemplates(db);
      const idOf = new Map(templates.map((t) => [t.name, t.id]));
      const templateName = q.template === undefined ? undefined : (templates.find((t) => t.id === q.template || t.name === q.template)?.name ?? null);

      const dir = q.order === 'asc' ? 1 : -1;
      const byStart = (a: ListedSandbox, b: { startedAt: string; sandboxID: string }) =>
        dir * (a.startedAt < b.startedAt ? -1 : a.startedAt > b.startedAt ? 1 : a.sandboxID < b.sandboxID ? -1 : a.sandboxID > b.sandboxID ? 1 : 0);
      return (await sandboxes.list(who(req), wanted))
        .filter((s) => templateName === undefined || s.template === templateName)
        .filter((s) => metadata.every(([k, v]) => s.metadata[k] === v))
        .map((s) => toListed(s, idOf.get(s.template) ?? s.template))
        .filter((s) => afterMs === undefined || fromIso(s.startedAt) >= afterMs)
        .filter((s) => cursor === undefined || byStart(s, { startedAt: cursor.startedAt, sandboxID: cursor.id }) > 0)
        .sort(byStart);
    };

    route('GET', '/v2/sandboxes', async (req, reply) => {
      const q = req.query;
      const matching = await listed(req, q);
      const page = matching.slice(0, q.limit);
      if (matching.length > page.length) void reply.header('x-next-token', encodeCursor(page[page.length - 1]!));
      return page;
    });

    /** E2B's deprecated v1 list: running sandboxes only, all of them, newest first. */
    route('GET', '/sandboxes', async (req) =>
      listed(req, { state: ['running'], ...(req.query.metadata === undefined ? {} : { metadata: req.query.metadata }) }),
    );

    route('GET', '/sandboxes/{sandboxID}', async (req) => {
      const s = await live(req, req.params.sandboxID);
      const granted = s.state === 'paused' ? undefined : await access(req, s.id);
      return {
        ...toListed(s, await templateIdOf(s.template)),
        ...(granted === undefined ? {} : { envdAccessToken: granted.token }),
        domain: granted === undefined ? null : domainOf(granted.gatewayUrl),
        ...(s.network === null ? {} : { network: { allowOut: s.network.allow, denyOut: s.network.deny } }),
        lifecycle: { onTimeout: s.onTimeout, autoResume: s.autoResume, keepMemory: s.onTimeoutKeepMemory },
      };
    });

    route('DELETE', '/sandboxes/{sandboxID}', async (req, reply) => {
      await live(req, req.params.sandboxID);
      await sandboxes.kill(who(req), req.params.sandboxID);
      return reply.code(204).send();
    });

    /** The gateway's series in E2B's shape; start and end are whole unix seconds there (end takes in all of its second). */
    route('GET', '/sandboxes/{sandboxID}/metrics', async (req) => {
      await live(req, req.params.sandboxID);
      const iso = (s: number | undefined, plusMs: number) => (s === undefined ? undefined : new Date(s * 1000 + plusMs).toISOString());
      const { metrics } = await sandboxes.metrics(who(req), req.params.sandboxID, { start: iso(req.query.start, 0), end: iso(req.query.end, 999) });
      return metrics.map(toE2bMetric);
    });

    /**
     * The newest sample of each named sandbox that is the tenant's and running, asked of their gateways at once. The
     * rest are left out rather than refused, as E2B lists only running sandboxes here: one paused or ended meanwhile,
     * or one with no sample yet, is simply not there.
     */
    route('GET', '/sandboxes/metrics', async (req) => {
      const ids = [...new Set(req.query.sandbox_ids)];
      const latest = await Promise.all(
        ids.map(async (id) => {
          try {
            return [id, (await sandboxes.metrics(who(req), id)).metrics.at(-1)] as const;
          } catch (err) {
            if (err instanceof SandglassError && (err.code === 'sandbox_not_found' || err.code === 'sandbox_not_running')) return [id, undefined] as const;
            throw err;
          }
        }),
      );
      const found: Record<string, Schemas['SandboxMetric']> = {};
      for (const [id, m] of latest) if (m !== undefined) found[id] = toE2bMetric(m);
      return { sandboxes: found };
    });

    route('POST', '/sandboxes/{sandboxID}/timeout', async (req, reply) => {
      await live(req, req.params.sandboxID);
      await sandboxes.setTimeout(who(req), req.params.sandboxID, req.body.timeout);
      return reply.code(204).send();
    });

    route('POST', '/sandboxes/{sandboxID}/pause', async (req, reply) => {
      await live(req, req.params.sandboxID);
      // memory: false is a disk-only pause: the next connect boots the sandbox over its files, its processes gone.
      await sandboxes.pause(who(req), req.params.sandboxID, { keepMemory: req.body.memory });
      return reply.code(204).send();
    });

    /**
     * Resumes from the latest snapshot (memory intact; `memory: false`, the SDK's onResume 'reboot': booted over its
     * disk), then gives the sandbox `timeoutS` from now.
     */
    const resume = async (req: FastifyRequest, id: string, timeoutS: number, memory: boolean | undefined): Promise<Sandbox> => {
      await sandboxes.resume(who(req), id, memory === false ? { coldBoot: true } : {});
      return sandboxes.setTimeout(who(req), id, timeoutS);
    };

    route('POST', '/sandboxes/{sandboxID}/resume', async (req, reply) => {
      if (req.body.autoPause === true) throw unsupported('autoPause', 'a resume keeps what the timeout does from the create (autoPause there)');
      await live(req, req.params.sandboxID);
      return reply.code(201).send(await toE2b(req, await resume(req, req.params.sandboxID, req.body.timeout, req.body.memory)));
    });

    /** The same connect under v1 (releases before 2.51) and v2: the two take and answer the same shapes. */
    const connect: OperationHandler<Operation<'/v2/sandboxes/{sandboxID}/connect', 'POST'>, Route<'/v2/sandboxes/{sandboxID}/connect', 'POST'>> = async (
      req,
      reply,
    ) => {
      const id = req.params.sandboxID;
      const { timeout, memory } = req.body;
      let s = await live(req, id);
      if (s.state === 'paused') {
        try {
          return reply.code(201).send(await toE2b(req, await resume(req, id, timeout, memory)));
        } catch (err) {
          // Another connect resumed it meanwhile: it runs, which is what this one wanted too.
          if (!(err instanceof SandglassError && err.code === 'sandbox_running')) throw err;
          s = await live(req, id);
        }
      }
      // E2B's connect only ever lengthens a running sandbox's life.
      if (clock.nowMs() + timeout * 1000 > fromIso(s.expiresAt)) s = await sandboxes.setTimeout(who(req), id, timeout);
      return reply.code(200).send(await toE2b(req, s));
    };
    route('POST', '/v2/sandboxes/{sandboxID}/connect', connect);
    route('POST', '/sandboxes/{sandboxID}/connect', connect);

    route('POST', '/sandboxes/{sandboxID}/fork', async (req, reply) => {
      const id = req.params.sandboxID;
      const { count, timeout } = req.body;
      const source = await live(req, id);
      // E2B forks the sandbox as it is now: a running one is snapshotted first; a paused one is its pause snapshot.
      const from = source.state === 'paused' ? { sandboxId: id } : { snapshotId: (await sandboxes.takeSnapshot(who(req), id)).id };
      const forked = await sandboxes.fork(who(req), { ...from, count, timeoutS: timeout, metadata: source.metadata });
      const results: Schemas['SandboxForkResult'][] = [];
      for (const s of forked.sandboxes) results.push({ sandbox: await toE2b(req, s) });
      // Forks that did not start were recorded as failed (sandbox.failed names why); the SDK wants one entry for each.
      for (let i = results.length; i < count; i++) {
        results.push({ error: { code: 500, message: `This fork did not start; the failed sandboxes' sandbox.failed events say why.` } });
      }
      return reply.code(201).send(results);
    });

    /**
     * `Template.exists(name)`: a platform template or one the operator published (every tenant sees them: E2B's
     * public), or one of the tenant's own (public when it is the one published).
     */
    route('GET', '/templates/aliases/{alias}', async (req) => {
      const template = await findTemplate(db, req.params.alias);
      if (template !== undefined && template.name === req.params.alias) return { templateID: template.id, public: true };
      const custom = await findUsableVersion(db, who(req).tenantId, req.params.alias);
      if (custom !== undefined && custom.name === req.params.alias) {
        return { templateID: custom.id, public: (await publisherOf(db, custom.name)) === custom.tenant_id };
      }
      throw new SandglassError('template_not_found', `No template named ${JSON.stringify(req.params.alias)} exists.`);
    });

    /** How often the tenant started each template (ended sandboxes included) and when last: E2B's spawn figures. */
    const spawnsOf = async (tenantId: string): Promise<Map<string, { count: number; last: string }>> => {
      const rows = await db
        .selectFrom('sandboxes')
        .select((eb) => ['template', eb.fn.countAll<number | string>().as('count'), eb.fn.max('created_at').as('last')])
        .where('tenant_id', '=', tenantId)
        .groupBy('template')
        .execute();
      return new Map(rows.map((r) => [r.template, { count: Number(r.count), last: r.last }]));
    };
    const platformBuild = (t: TemplateRow): Schemas['TemplateBuild'] => ({
      buildID: t.id,
      status: t.status === 'ready' ? 'ready' : t.status === 'failed' ? 'error' : 'building',
      createdAt: t.created_at,
      updatedAt: t.created_at,
      cpuCount: createDefaults.vcpus?.default as number,
      memoryMB: t.memory_mib,
      diskSizeMB: DISK_SIZE_MB,
      envdVersion: E2B_ENVD_VERSION,
    });
    const versionBuild = (v: TemplateVersionRow): Schemas['TemplateBuild'] => ({
      buildID: v.id,
      status: 'ready',
      createdAt: v.created_at,
      updatedAt: v.created_at,
      finishedAt: v.created_at,
      cpuCount: v.vcpus,
      memoryMB: v.memory_mib,
      diskSizeMB: v.disk_mib ?? DISK_SIZE_MB,
      envdVersion: E2B_ENVD_VERSION,
    });
    /**
     * One E2B template: a platform template (public, one build: itself) or the versions of one of the tenant's own
     * templates, newest first (its id the newest version's, as Template.exists answers; each version a build).
     */
    const toE2bTemplate = (name: string, builds: Schemas['TemplateBuild'][], isPublic: boolean, spawns: { count: number; last: string } | undefined) => {
      const newest = builds[0]!;
      return {
        templateID: newest.buildID,
        public: isPublic,
        aliases: [name],
        names: [name],
        createdAt: builds[builds.length - 1]!.createdAt,
        updatedAt: newest.updatedAt,
        lastSpawnedAt: spawns?.last ?? null,
        spawnCount: spawns?.count ?? 0,
        builds,
      };
    };
    /** Versions by template name, each name's newest first (the rows come ordered so). */
    const byName = (rows: TemplateVersionRow[]) => {
      const names = new Map<string, TemplateVersionRow[]>();
      for (const v of rows) {
        const list = names.get(v.name);
        if (list) list.push(v);
        else names.set(v.name, [v]);
      }
      return names;
    };

    route('GET', '/templates', async (req) => {
      const spawns = await spawnsOf(who(req).tenantId);
      const tenantId = who(req).tenantId;
      const own = byName(
        await db.selectFrom('template_versions').selectAll().where('tenant_id', '=', tenantId).orderBy('name').orderBy('version', 'desc').execute(),
      );
      // A tenant's own name wins over a published one, as a create resolves it.
      const published = byName((await listPublishedVersions(db)).filter((v) => v.tenant_id !== tenantId && !own.has(v.name)));
      const all = [
        ...(await listTemplates(db)).map((t) => toE2bTemplate(t.name, [platformBuild(t)], true, spawns.get(t.name))),
        ...[...own].map(([name, versions]) => toE2bTemplate(name, versions.map(versionBuild), false, spawns.get(name))),
        ...[...published].map(([name, versions]) => toE2bTemplate(name, versions.map(versionBuild), true, spawns.get(name))),
      ];
      return all.map(({ builds, ...t }) => ({
        ...t,
        buildID: builds[0]!.buildID,
        cpuCount: builds[0]!.cpuCount,
        memoryMB: builds[0]!.memoryMB,
        diskSizeMB: builds[0]!.diskSizeMB ?? DISK_SIZE_MB,
        createdBy: null,
        buildCount: builds.length,
        envdVersion: E2B_ENVD_VERSION,
        buildStatus: builds[0]!.status,
      }));
    });

    route('GET', '/templates/{templateID}', async (req, reply) => {
      const { templateID } = req.params;
      const spawns = await spawnsOf(who(req).tenantId);
      const platform = await findTemplate(db, templateID);
      let template: ReturnType<typeof toE2bTemplate>;
      if (platform !== undefined) template = toE2bTemplate(platform.name, [platformBuild(platform)], true, spawns.get(platform.name));
      else {
        // The tenant's own template, else one published for every tenant (public, as Template.exists says).
        const version = await findUsableVersion(db, who(req).tenantId, templateID);
        if (version === undefined) throw new SandglassError('template_not_found', `No template ${JSON.stringify(templateID)} exists for your tenant.`);
        const versions = await templateVersions(db, version.tenant_id, version.name);
        template = toE2bTemplate(version.name, versions.map(versionBuild), version.tenant_id !== who(req).tenantId, spawns.get(version.name));
      }
      // Newest first: past the cursor means older (or as old, with a smaller id), as the snapshot list pages.
      const cursor = req.query.nextToken === undefined ? undefined : decodeCursor(req.query.nextToken);
      const after =
        cursor === undefined
          ? template.builds
          : template.builds.filter((b) => b.createdAt < cursor.startedAt || (b.createdAt === cursor.startedAt && b.buildID < cursor.id));
      const page = after.slice(0, req.query.limit);
      const last = page[page.length - 1];
      if (after.length > page.length && last !== undefined)
        void reply.header('x-next-token', encodeCursor({ startedAt: last.createdAt, sandboxID: last.buildID }));
      return { ...template, builds: page };
    });

    /** E2B's snapshots are Sandglass's named ones: taken now and kept (named, so retention never thins them). */
    route('POST', '/sandboxes/{sandboxID}/snapshots', async (req, reply) => {
      const id = req.params.sandboxID;
      await live(req, id);
      const taken = await sandboxes.takeSnapshot(who(req), id, req.body.name);
      // Unnamed, it would be a rolling snapshot that retention thins: it is kept under its own id.
      const kept = taken.name === null ? await sandboxes.nameSnapshot(who(req), taken.id, taken.id) : taken;
      return reply.code(201).send({ snapshotID: kept.id, names: [kept.name!] });
    });

    route('GET', '/snapshots', async (req, reply) => {
      const q = req.query;
      const named = await sandboxes.namedSnapshots(who(req), {
        ...(q.sandboxID === undefined ? {} : { sandboxId: q.sandboxID }),
        ...(q.name === undefined ? {} : { name: q.name }),
      });
      const cursor = q.nextToken === undefined ? undefined : decodeCursor(q.nextToken);
      // Newest first, as namedSnapshots gives them: past the cursor means older (or as old, with a smaller id).
      const after = cursor === undefined ? named : named.filter((s) => s.takenAt < cursor.startedAt || (s.takenAt === cursor.startedAt && s.id < cursor.id));
      const page = after.slice(0, q.limit);
      const last = page[page.length - 1];
      if (after.length > page.length && last !== undefined) void reply.header('x-next-token', encodeCursor({ startedAt: last.takenAt, sandboxID: last.id }));
      return page.map((s) => ({ snapshotID: s.id, names: [s.name!] }));
    });

    /** What the SDK's deleteSnapshot calls: a named snapshot is deleted; a template is refused (400), not deleted. */
    route('DELETE', '/templates/{templateID}', async (req, reply) => {
      const snapshot = await namedSnapshot(req, req.params.templateID);
      if (snapshot === undefined) {
        if ((await findTemplate(db, req.params.templateID)) !== undefined) {
          throw unsupported('templateID', 'names a template; Sandglass builds and keeps its templates itself, they are not deleted here');
        }
        throw new SandglassError('snapshot_not_found', `No snapshot ${req.params.templateID} exists for your tenant.`);
      }
      await sandboxes.deleteSnapshot(who(req), snapshot.id);
      return reply.code(204).send();
    });

    route('PUT', '/sandboxes/{sandboxID}/network', async (req, reply) => {
      await live(req, req.params.sandboxID);
      await sandboxes.setNetwork(who(req), req.params.sandboxID, toPolicy(req.body, '', 'allow_internet_access'));
      return reply.code(204).send();
    });
  };
}
