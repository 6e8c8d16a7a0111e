// Routes of spec/gateway.yaml: each is written once, in the spec's form, and the spec is its validator and its types.
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifySchema, RouteHandlerMethod } from 'fastify';
import { loadOpenApi, routeSchema, type GatewayApi, type MethodsAt, type OperationAt, type OperationHandler } from '@sandglass/core';

const spec = loadOpenApi(fileURLToPath(new URL('../../../spec/gateway.yaml', import.meta.url)));

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

type Paths = GatewayApi.paths;
type Path = keyof Paths;

/** The fastify URL and validator of one operation of the spec: `/v1/sandboxes/{id}` becomes `/v1/sandboxes/:id`. */
export function operation(method: Method, path: string): { url: string; schema: FastifySchema } {
  return { url: path.replace(/\{(\w+)\}/g, ':$1'), schema: routeSchema(spec, method, path) };
}

/** `route(method, path, handler)` for a scope: the path must be one of the spec's, and the handler is typed by it. */
export function specRoutes(scope: FastifyInstance) {
  return <P extends Path, M extends MethodsAt<Paths, P>>(method: M, path: P, handler: OperationHandler<OperationAt<Paths, P, M>>) =>
    // Fastify's handler type admits no returned reply once replies are typed per status; the handler's own type above
    // is the check, this only hands it over.
    scope.route({ method, ...operation(method, path), handler: handler as unknown as RouteHandlerMethod });
}
