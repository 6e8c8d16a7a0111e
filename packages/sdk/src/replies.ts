// The reply of each API operation, by its operationId in the spec: the SDK's reads are typed by the spec, not by
// shapes written again here. Type-only, and not part of the SDK's exports.
import type * as ControlPlaneApi from './api/control-plane.generated.js';
import type * as GatewayApi from './api/gateway.generated.js';

/** The JSON body of one response; unknown for other media (a byte stream), undefined for none (204). */
type ResponseBody<R> = R extends { content: { 'application/json': infer B } } ? B : R extends { content: object } ? unknown : undefined;

/** The body of any 2xx response (core's route generics say the same for the server, which the SDK cannot import). */
type SuccessBody<Op extends { responses: object }> = {
  [S in keyof Op['responses']]: S extends 200 | 201 | 202 | 203 | 204 | 205 | 206 ? ResponseBody<Op['responses'][S]> : never;
}[keyof Op['responses']];

export type ControlPlaneReply<Op extends keyof ControlPlaneApi.operations> = SuccessBody<ControlPlaneApi.operations[Op]>;
export type GatewayReply<Op extends keyof GatewayApi.operations> = SuccessBody<GatewayApi.operations[Op]>;
