// @sandglass/core: ids, the error type and catalogue, Clock/Random, logging, the home directory layout.
export * from './errors.js';
export * from './ids.js';
export * from './clock.js';
export * from './log.js';
export * from './home.js';
export * from './home-lock.js';
export * from './proc.js';
export * from './http.js';
export * from './http-exchange.js';
export * from './access-token.js';
export * from './node-secret.js';
export * from './validation.js';
export * from './failpoints.js';
export * from './event-schema.js';
// The wire types of each API, generated from spec/*.yaml (`npm run gen`), and the route generics read from them.
export type * as ControlPlaneApi from './api/control-plane.generated.js';
export type * as GatewayApi from './api/gateway.generated.js';
export type * as NodeApi from './api/node.generated.js';
export type * as E2bApi from './api/e2b.generated.js';
export type * from './api/route.js';
