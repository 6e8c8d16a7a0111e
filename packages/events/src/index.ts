// @sandglass/events: the append-only, hash-chained event log and the projections computed from it.
export * from './types.js';
export { canonicalJson, eventHash } from './hash.js';
export { project } from './project.js';
export { EventLog, type AppendOptions, type ListFilter, type ChainReport } from './log.js';
export { AUDIT_EXPORT_FORMAT, auditExport, auditKeyId, type AuditExportSigner } from './export.js';
