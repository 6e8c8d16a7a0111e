// Routes of spec/gateway.yaml: each is written once, in the spec's form, and the spec is its validator.
import { fileURLToPath } from 'node:url';
import type { FastifySchema } from 'fastify';
import { loadOpenApi, routeSchema } from '@sandglass/core';

const spec = loadOpenApi(fileURLToPath(new URL('../../../spec/gateway.yaml', import.meta.url)));

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** The fastify URL and validator of one operation of the spec: `/v1/sandboxes/{id}` becomes `/v1/sandboxes/:id`. */
export function operation(method: Method, path: string): { url: string; schema: FastifySchema } {
  return { url: path.replace(/\{(\w+)\}/g, ':$1'), schema: routeSchema(spec, method, path) };
}
