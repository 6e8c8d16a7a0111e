// @sandglass/sdk: the TypeScript client of Sandglass, shaped like E2B's JS SDK.
export {
  Sandbox,
  parseForkSource,
  type ApprovalWatchOptions,
  type ApproveOptions,
  type DenyOptions,
  type EventsOptions,
  type ForkOptions,
  type ForkSource,
  type ReplayOptions,
  type ResumeOptions,
  type SandboxCreateOptions,
  type CreateProgress,
  type SandboxListOptions,
  type SnapshotOptions,
  type PauseOptions,
} from './sandbox.js';
export {
  Commands,
  CommandHandle,
  DEFAULT_COMMAND_TIMEOUT_MS,
  type CommandResult,
  type ConnectOptions,
  type OutputCallbacks,
  type OutputRead,
  type RunOptions,
} from './commands.js';
export { Template, type TemplateFromSnapshotOptions, type TemplateLogsOptions } from './template.js';
export { baseKey, stepKey, startKey, type BuildLogLine, type BuiltStep, type TemplateBuildOptions, type TemplateBuildResult } from './template-build.js';
export {
  parseDockerfile,
  parseTemplateFile,
  parseTemplateYaml,
  type CopyStep,
  type ParsedTemplateFile,
  type ReadyCheck,
  type RunStep,
  type TemplateSpec,
  type TemplateStartSpec,
  type TemplateStep,
} from './template-spec.js';
export { Secrets, type SecretSetOptions } from './secrets.js';
export type { ReplayRunOptions } from './replay.js';
export {
  compareCommand,
  formatReplayReport,
  type CommandOutcome,
  type OutputDigest,
  type ReplayInputResult,
  type ReplayReport,
  type Verdict,
} from './replay-report.js';
export { AUDIT_KINDS, auditTimeline, filterAudit, formatBytes, type AuditEntry, type AuditFilter, type AuditKind } from './audit.js';
export {
  AUDIT_EXPORT_FORMAT,
  auditKeyId,
  formatAuditVerdict,
  verifyAuditExport,
  type AuditExportCheck,
  type AuditExportVerdict,
} from './audit-export.js';
export { Nodes, type NodeEnrolment, type NodeInfo } from './nodes.js';
export { ApiKeys, type ApiKeyCreateOptions, type ApiKeyInfo, type ApiKeyListOptions, type ApiKeyRole, type CreatedApiKey } from './apikeys.js';
export { TenantKeys, type KeyProviderChoice, type TenantKeyStatus } from './tenant-keys.js';
export { Ports, DEFAULT_PORT_DOMAIN, type ListeningPort, type PortUrl, type PortUrlOptions } from './ports.js';
export { Files, type ReadFormat, type TarWriteResult, type WriteData, type WriteResult } from './files.js';
export { Pty, PtyHandle, type PtyConnectOptions, type PtyCreateOptions, type PtyExit, type PtySize } from './pty.js';
export { RESPONSE_CHANNEL, type ObservedResponse } from './http.js';
export { resolveConfig, DEFAULT_REQUEST_TIMEOUT_MS, type ConnectionConfig, type ResolvedConfig, type ServerFile } from './config.js';
export * from './errors.js';
export type * from './types.js';
