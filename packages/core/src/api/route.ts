// Fastify route generics from the generated OpenAPI operation types, so a handler's req.body, req.params, req.query and
// replies are the spec's types rather than casts: a field renamed in a spec fails the type check of every handler using it.
import type { FastifyReply, FastifyRequest, RouteGenericInterface } from 'fastify';

type Defined<T, Else> = [NonNullable<T>] extends [never] ? Else : NonNullable<T>;

/** The parts of an openapi-typescript operation this file reads. */
export interface Operation {
  parameters: { query?: unknown; path?: unknown };
  requestBody?: unknown;
  responses: object;
}

/**
 * The JSON request body of an operation as a handler sees it: validated, with the spec's defaults filled in; undefined
 * too where the spec lets the body be left out.
 */
export type RequestBody<Op extends Operation> = Op extends { requestBody: { content: { 'application/json': infer B } } }
  ? B
  : Op extends { requestBody?: { content: { 'application/json': infer B } } }
    ? B | undefined
    : undefined;

/** The JSON body of one response; unknown for other media (a byte stream), undefined for none (204). */
type ResponseBody<R> = R extends { content: { 'application/json': infer B } } ? B : R extends { content: object } ? unknown : undefined;

/** Each numeric status of an operation with its body ('default' left out: fastify keys replies by status code). */
export type Replies<Op extends Operation> = {
  [S in keyof Op['responses'] as S extends number ? S : never]: ResponseBody<Op['responses'][S]>;
};

/** The body of any 2xx response: what a handler may answer without choosing a status. */
export type SuccessBody<Op extends Operation> = {
  [S in keyof Op['responses']]: S extends 200 | 201 | 202 | 203 | 204 | 205 | 206 ? ResponseBody<Op['responses'][S]> : never;
}[keyof Op['responses']];

/** Fastify's RouteGenericInterface for one operation: `FastifyRequest<OperationRoute<Op>>`. */
export interface OperationRoute<Op extends Operation> {
  Body: RequestBody<Op>;
  Params: Defined<Op['parameters']['path'], unknown>;
  // Fastify hands every handler a query object, empty when the URL has none.
  Querystring: Defined<Op['parameters']['query'], unknown>;
  Reply: Replies<Op>;
}

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** The operation of a generated `paths` type at one path and method; never where the spec has none. */
export type OperationAt<Paths, P extends keyof Paths, M extends HttpMethod> =
  Lowercase<M> extends keyof Paths[P] ? Extract<Paths[P][Lowercase<M>], Operation> : never;

/** The methods the spec defines at a path. */
export type MethodsAt<Paths, P extends keyof Paths> = { [M in HttpMethod]: [OperationAt<Paths, P, M>] extends [never] ? never : M }[HttpMethod];

/** A handler answers a 2xx body of its operation, or the reply it sent itself (another status, a stream). */
export type OperationHandler<Op extends Operation, G extends RouteGenericInterface = OperationRoute<Op>> = (
  req: FastifyRequest<G>,
  reply: FastifyReply<G>,
) => Promise<SuccessBody<Op> | FastifyReply<G>>;
