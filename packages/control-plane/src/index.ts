// @sandglass/control-plane: the public REST API (spec/control-plane.yaml), tenants and keys, templates, sandbox placement, tenant secrets.
export { createControlPlane, CONTROL_PLANE_SPEC, type ControlPlane, type ControlPlaneOptions } from './server.js';
export { SandboxService, ACCESS_TOKEN_TTL_MS, E2B_ENVD_TOKEN_TTL_MS, LONGEST_TOKEN_TTL_MS, checkEnvs, type SandboxServiceDeps } from './sandboxes.js';
export {
  SecretStore,
  SECRET_NAME,
  SECRET_VALUE_MAX_BYTES,
  type ResolvedSecret,
  type SecretInfo,
  type SecretInput,
  type SecretStoreDeps,
} from './secrets.js';
export {
  GatewayClient,
  singleGateway,
  type GatewayApprovalDecision,
  type GatewayClientOptions,
  type GatewayCreateReply,
  type GatewayCreateRequest,
  type GatewayDirectory,
  type GatewayEndpoint,
  type GatewayForkReply,
  type GatewayForkRequest,
  type GatewayForkResult,
  type GatewayResumeRequest,
  type GatewaySnapshotReply,
  type PlacementRequest,
} from './gateways.js';
export {
  ApiKeyService,
  authenticate,
  bootstrapLocal,
  createTenant,
  issueApiKey,
  generateApiKey,
  hashApiKey,
  toApiKeyInfo,
  DEFAULT_TENANT,
  type BootstrapOptions,
  type CreateApiKeyInput,
  type IssueKeyOptions,
  type Principal,
} from './keys.js';
export { DEFAULT_CONSOLE_LIMITS, type ConsoleLimits } from './console.js';
export { upsertTemplate, findTemplate, listTemplates, dbTemplateRegistry, type TemplateSnapshotRef, type TemplateUpsert } from './templates.js';
export { NodeDirectory, claimLease, releaseLease, type Heartbeat, type HeartbeatResult, type MembershipOptions } from './nodes.js';
export { Failover, type FailoverOptions } from './failover.js';
export { GcGate, GC_LEASE, DEFAULT_CAPTURE_LEASE_MS, type CaptureLeaseGrant } from './gc-gate.js';
export { Maintenance, MAINTENANCE_LEASE, type MaintenanceOptions, type MaintenanceResult } from './maintenance.js';
export { nodeApi, NODE_SPEC, type NodeApiOptions } from './node-api.js';
export * from './api.js';
