// @sandglass/egress: the per-sandbox forward proxy (policy, TLS interception with a per-sandbox CA, secret placeholders, approvals).
export { parsePolicy, decide, Policy, DENY_ALL, type PolicyInput, type PolicyRule, type HostPattern, type DecideInput, type Decision } from './policy.js';
export { internalRange, canonicalHost } from './address.js';
export { SandboxCa } from './ca.js';
export {
  ApprovalBroker,
  type ApprovalBrokerOptions,
  type ApprovalRequest,
  type ApprovalInput,
  type ApprovalResult,
  type ApprovalDecided,
  type RequestOptions,
} from './approvals.js';
export { newPlaceholder, REDACTED, type SecretBinding } from './secrets.js';
export { EgressProxy, type EgressProxyOptions, type EgressLimits, type SandboxConfig, type SandboxEgress } from './proxy.js';
export type * from './events.js';
export type { RecordedAnswer, ReplaySource } from './context.js';
