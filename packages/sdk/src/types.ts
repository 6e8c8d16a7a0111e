// Wire types of the control-plane and gateway APIs, generated from spec/control-plane.yaml and spec/gateway.yaml
// (`npm run gen`) into the SDK's own api/ folder, so the SDK installs alone, without any server package.
import type * as ControlPlaneApi from './api/control-plane.generated.js';
import type * as GatewayApi from './api/gateway.generated.js';

type ControlPlaneSchemas = ControlPlaneApi.components['schemas'];
type GatewaySchemas = GatewayApi.components['schemas'];

/** A short-lived data-plane grant for one sandbox. */
export type Access = ControlPlaneSchemas['Access'];

export type SandboxState = ControlPlaneSchemas['SandboxState'];

/** A sandbox as the control plane reports it; `access` only in the answers that start one (create, resume, fork). */
export type SandboxInfo = ControlPlaneSchemas['Sandbox'];

/**
 * Egress rules, `host[:port] [METHOD] [/path-prefix]`: an exact host, `*.domain` (its subdomains) or an IP; no port
 * means 80 and 443 in allow rules, every port in deny rules. Deny wins; a destination no allow rule names is denied.
 */
export type NetworkPolicy = ControlPlaneSchemas['NetworkPolicy'];

/** A tenant secret as the API shows it: never its value. */
export type SecretInfo = ControlPlaneSchemas['SecretInfo'];

/** A request the sandbox's egress holds until someone approves using a secret in it. */
export type ApprovalRequest = ControlPlaneSchemas['ApprovalRequest'];

/** One retained point of a sandbox's timeline; resume or fork from it. */
export type SnapshotInfo = ControlPlaneSchemas['Snapshot'];

/** How often the sandbox's snapshots are taken: the interval asked for and the one achieved over the last window. */
export type SnapshotCadence = ControlPlaneSchemas['SnapshotCadence'];

export type TemplateInfo = ControlPlaneSchemas['Template'];

/** One immutable version of a custom template (`tpl_…`): the snapshot its sandboxes fork, and what they start with. */
export type TemplateVersionInfo = ControlPlaneSchemas['TemplateVersion'];

/** A template with its versions, newest first. */
export type TemplateDetail = ControlPlaneSchemas['TemplateDetail'];

/** A build of a template name as the control plane records it: status, step progress, the version it published. */
export type TemplateBuildInfo = ControlPlaneSchemas['TemplateBuild'];

export type TemplateBuildStepInfo = ControlPlaneSchemas['TemplateBuildStep'];

/** One line of a build's log. */
export type TemplateBuildLine = ControlPlaneSchemas['TemplateBuildLine'];

export type SandboxEvent = ControlPlaneSchemas['Event'];
/** The deployment's public key for audit exports, as GET /v1/audit/public-key serves it. */
export type AuditPublicKey = ControlPlaneSchemas['AuditPublicKey'];

/** A process in the sandbox, as the gateway reports it. */
export type CommandInfo = GatewaySchemas['Command'];

/** One sample of a running sandbox's CPU, memory and disk (the guest's own figures), taken every few seconds. */
export type SandboxMetric = GatewaySchemas['Metrics']['metrics'][number];

/** The signals the gateway forwards to a command's process group. */
export type SignalName = GatewaySchemas['Signal']['signal'];

export type FileInfo = GatewaySchemas['FileInfo'];

/** The body of POST …/commands. */
export type StartCommandRequest = GatewaySchemas['StartCommand'];

/**
 * Text messages of a command's output WebSocket (server → client), which OpenAPI cannot describe; a startOffset past
 * the requested fromOffset means older bytes left the bounded buffer.
 */
export type StreamMessage =
  | { type: 'start'; startOffset: number; command: CommandInfo }
  | { type: 'exit'; exitCode: number | null; signal: string | null; timedOut: boolean; endOffset: number };
