// The reply of each API operation, by its operationId in the spec: the SDK's reads are typed by the spec, not by
// shapes written again here. Type-only, and not part of the SDK's exports.
import type { ControlPlaneApi, GatewayApi, SuccessBody } from '@sandglass/core';

export type ControlPlaneReply<Op extends keyof ControlPlaneApi.operations> = SuccessBody<ControlPlaneApi.operations[Op]>;
export type GatewayReply<Op extends keyof GatewayApi.operations> = SuccessBody<GatewayApi.operations[Op]>;
