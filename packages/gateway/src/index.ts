// @sandglass/gateway: the node daemon that runs sandbox VMs and serves their data plane.
export { Gateway, BASE_TEMPLATE, DEFAULT_WARM_POOL, type GatewayOptions, type CreateSandboxRequest } from './gateway.js';
export { createDataPlaneServer, createInternalServer, listenOnSocket } from './server.js';
export { DEFAULT_PORT_DOMAIN } from './ports.js';
export { EnvdForwarder, type EnvdForwarderOptions, type SandboxLocation } from './e2b/forward.js';
export type { GatewayEvents, GatewayEvent } from './events.js';
export {
  bootGuest,
  bootAgentTimeoutMs,
  vmConfig,
  TEMPLATE_TENANT,
  TemplateStore,
  type TemplateRef,
  type TemplateRegistry,
  type TemplateSharing,
  type TemplateSnapshot,
} from './templates.js';
export { connectAgent } from './agent-link.js';
export { hostSizes, nodeSizes, type NodeSizes } from './sizes.js';
export { DEFAULT_HEALTH, type HealthPolicy } from './sandbox.js';
export { DEFAULT_RECORDING_CAP_BYTES, readContent, recordingManifestId, type ContentRef } from './recording.js';
export { kvmProbeAttempt } from './accel-probe.js';
export {
  NodeApiClient,
  MAX_EVENTS_PER_BATCH,
  type NodeApiClientOptions,
  type Heartbeat,
  type HeartbeatReply,
  type NodeEvent,
  type AppendEventsReply,
} from './node-api-client.js';
export { Outbox, type OutboxOptions, type OutboxSink } from './outbox.js';
export { RemoteKeys, RemoteSecrets, RemoteTemplateRegistry, type RemoteKeysOptions } from './remote.js';
export { Membership, type MemberNode, type MembershipOptions } from './membership.js';
export { inProcessGate, RemoteCaptureGate, type CaptureGate, type CapturePass, type RemoteCaptureGateOptions } from './capture-gate.js';
