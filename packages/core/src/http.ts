// Shared HTTP edge for every Sandglass server: request validators taken from the OpenAPI spec, and one error mapping.
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyError, FastifySchema } from 'fastify';
import { parse } from 'yaml';
import { SandglassError, invalidArgument } from './errors.js';
import { newId } from './ids.js';

type Json = Record<string, unknown>;

export interface OpenApiDoc {
  paths: Record<string, Record<string, Json>>;
  components?: { schemas?: Record<string, Json>; parameters?: Record<string, Json> };
}

export function loadOpenApi(file: string): OpenApiDoc {
  return parse(readFileSync(file, 'utf8')) as OpenApiDoc;
}

/** Inlines local `#/components/schemas/X` references so a validator needs no shared registry. */
export function derefSchema(doc: OpenApiDoc, node: unknown, seen: string[] = []): unknown {
  if (Array.isArray(node)) return node.map((n) => derefSchema(doc, n, seen));
  if (!node || typeof node !== 'object') return node;
  const ref = (node as Json).$ref;
  if (typeof ref === 'string') {
    const name = ref.replace('#/components/schemas/', '');
    if (seen.includes(name)) throw new Error(`recursive schema ${name}`);
    const target = doc.components?.schemas?.[name];
    if (!target) throw new Error(`unknown schema ${ref}`);
    return derefSchema(doc, target, [...seen, name]);
  }
  const out: Json = {};
  for (const [k, v] of Object.entries(node as Json)) out[k] = derefSchema(doc, v, seen);
  return out;
}

/** The fastify schema (body, querystring, params) of one OpenAPI operation: the spec is the validator. */
export function routeSchema(doc: OpenApiDoc, method: string, path: string): FastifySchema {
  const op = doc.paths[path]?.[method.toLowerCase()] as Json | undefined;
  if (!op) throw new Error(`spec has no operation ${method} ${path}`);
  const schema: FastifySchema = {};
  const params = [...((doc.paths[path]!.parameters as unknown as Json[] | undefined) ?? []), ...((op.parameters as Json[]) ?? [])].map((p) =>
    typeof p.$ref === 'string' ? (doc.components?.parameters?.[p.$ref.replace('#/components/parameters/', '')] ?? p) : p,
  );
  for (const where of ['query', 'path'] as const) {
    const ps = params.filter((p) => p.in === where);
    if (ps.length === 0) continue;
    const obj = {
      type: 'object',
      properties: Object.fromEntries(ps.map((p) => [p.name, derefSchema(doc, p.schema)])),
      required: ps.filter((p) => p.required).map((p) => p.name),
    };
    if (where === 'query') schema.querystring = obj;
    else schema.params = obj;
  }
  const body = (op.requestBody as Json | undefined)?.content as Record<string, Json> | undefined;
  if (body?.['application/json']?.schema) schema.body = derefSchema(doc, body['application/json'].schema);
  return schema;
}

function fieldOf(err: FastifyError): { field: string; rule: string } {
  const v = err.validation?.[0];
  if (!v) return { field: 'body', rule: err.message };
  const where = err.validationContext ?? 'body';
  const missing = (v.params as Json | undefined)?.missingProperty as string | undefined;
  const extra = (v.params as Json | undefined)?.additionalProperty as string | undefined;
  const path = v.instancePath.replace(/^\//, '').replaceAll('/', '.');
  const field = [where === 'body' ? '' : where, path, missing ?? extra ?? ''].filter(Boolean).join('.') || where;
  const rule = extra ? 'is not a known field' : missing ? 'is required' : (v.message ?? 'is invalid');
  return { field, rule };
}

/** Turns every error into the wire format; anything unexpected becomes `internal`, its cause only in the log. */
export function toSandglassError(err: unknown): SandglassError {
  if (err instanceof SandglassError) return err;
  const e = err as FastifyError;
  if (e?.validation) {
    const { field, rule } = fieldOf(e);
    return invalidArgument(field, rule);
  }
  switch (e?.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new SandglassError('malformed_json', `The request body is not valid JSON: ${e.message}`);
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new SandglassError('payload_too_large');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return invalidArgument('content-type', 'must be application/json');
    default:
      if (e instanceof SyntaxError && (e as Partial<FastifyError>).statusCode === 400) {
        return new SandglassError('malformed_json', `The request body is not valid JSON: ${e.message}`);
      }
      return new SandglassError('internal', undefined, { cause: err });
  }
}

// A refused body up to this size is read and discarded before answering, so the client can read the 413:
// closing a socket with unread input sends a TCP reset that can destroy the response in flight.
const DRAIN_REFUSED_BODY_BYTES = 64 * 1024 * 1024;
const DRAIN_TIMEOUT_MS = 10_000;

function drainRequest(raw: NodeJS.ReadableStream & { readableEnded?: boolean }, declaredBytes: number): Promise<void> {
  if (raw.readableEnded || !(declaredBytes <= DRAIN_REFUSED_BODY_BYTES)) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, DRAIN_TIMEOUT_MS);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    raw.once('end', done);
    raw.once('error', done);
    raw.once('close', done);
    raw.resume();
  });
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler(async (err, req, reply) => {
    const se = toSandglassError(err);
    if (se.code === 'internal') req.log.error({ err }, 'internal error');
    if (se.code === 'payload_too_large') await drainRequest(req.raw, Number(req.headers['content-length'] ?? Number.NaN));
    return reply.status(se.status).send(se.toBody(req.id));
  });
  app.setNotFoundHandler((req, reply) => {
    void reply.status(404).send(new SandglassError('not_found', `No route ${req.method} ${req.url.split('?')[0]}`).toBody(req.id));
  });
}

export function genRequestId(): string {
  return newId('req');
}
