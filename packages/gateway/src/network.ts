// A sandbox's network: no device at all; the agent relays guest connections to its loopback proxy port to the node's egress proxy.
import type { Redacted } from '@sandglass/core';
import { SandglassError, type Logger } from '@sandglass/core';
import type { AgentClient } from '@sandglass/agent-client';
import {
  ApprovalBroker,
  DENY_ALL,
  EgressProxy,
  newPlaceholder,
  parsePolicy,
  type PolicyInput,
  type ReplaySource,
  type SandboxEgress,
  type SecretBinding,
} from '@sandglass/egress';
import type { GatewayEvents } from './events.js';
import type { Recorder } from './recording.js';

/** Where guest programs find the proxy: the agent listens on guest loopback and relays each connection to the host. */
export const PROXY_PORT = 3128;
const PROXY_URL = `http://127.0.0.1:${PROXY_PORT}`;
const CA_DIR = '/etc/sandglass';
const CA_FILE = `${CA_DIR}/ca.crt`;
const CA_BUNDLE = `${CA_DIR}/ca-bundle.crt`;
const SYSTEM_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
const CA_MARK_BEGIN = '# --- Sandglass sandbox egress CA (begin) ---';
const CA_MARK_END = '# --- Sandglass sandbox egress CA (end) ---';
/** Debian's bundle is ~220 KB; a guest's bigger than this is not read (nor rewritten). */
export const MAX_SYSTEM_BUNDLE_BYTES = 2 * 1024 * 1024;

/** A tenant secret as the gateway may use it: metadata, and the value only through value() at the moment of use. */
export interface ResolvedSecret {
  name: string;
  hosts: string[];
  header?: string | null;
  format?: string | null;
  bodyContentTypes?: string[];
  approval: 'none' | 'required';
  allowPlaintext?: boolean;
  allowUpgrade?: boolean;
  value(): Promise<Redacted<string>>;
}

export interface SecretResolver {
  resolve(tenantId: string, name: string): Promise<ResolvedSecret>;
}

/** What a sandbox was created with; kept in its snapshots so resumes and forks come back with the same network. */
export interface NetworkSpec {
  /** Absent: no network at all (no listener in the guest). */
  policy?: PolicyInput;
  secrets: string[];
  /** Secret name → placeholder the guest sees; fixed for the sandbox's life (its processes hold them in their env). */
  placeholders: Record<string, string>;
  /**
   * A replay's fork (the source it replays): its egress connects nowhere, for its whole life. Kept in its snapshots
   * like the rest, so whatever is restored from them (a kept fork resumed, a fork of it) stays confined too.
   */
  replayOf?: string;
}

/** The answers of a sandbox restored from a replay's snapshot: none (the recording answered the replay itself). */
const NOTHING_RECORDED: ReplaySource = { answer: async () => undefined };

export interface NetworkOptions {
  events: GatewayEvents;
  secrets: SecretResolver;
  logger: Logger;
  tenantOf: (sandboxId: string) => string | undefined;
  /** Name resolution for upstreams; tests map names to loopback servers. */
  lookup?: (host: string) => Promise<string[]>;
  /** `ip:port` internal destinations the operator opens (SANDGLASS_EGRESS_PRIVATE_ALLOW); no policy can open others. */
  privateAllow?: string[];
  upstreamCAs?: string[];
  approvalTimeoutMs?: number;
  recordExchanges?: boolean | { maxBodyBytes?: number };
  /** A sandbox's recording: an exchange's bodies go there, and its event names them by content id. */
  recorderOf?: (sandboxId: string) => Recorder | undefined;
}

/**
 * An egress.exchange as the log keeps it when the sandbox records its inputs: each body (already redacted by the
 * proxy) moves to the tenant's chunk store, and the event keeps its content id, its size and whether it was cut.
 */
export function recordedExchange(data: Record<string, unknown>, recorder: Recorder): Record<string, unknown> {
  const body = (b: unknown) => {
    const rb = b as { encoding: 'utf8' | 'base64'; data: string; sizeBytes: number; truncated: boolean };
    const bytes = Buffer.from(rb.data, rb.encoding);
    const ref = recorder.content(bytes);
    return { contentId: ref.contentId, recordedBytes: bytes.length, sizeBytes: rb.sizeBytes, truncated: rb.truncated };
  };
  return { ...data, requestBody: body(data.requestBody), responseBody: body(data.responseBody) };
}

/** The node's egress proxy and approval broker, and the per-sandbox plumbing between them and the guest. */
export class NetworkManager {
  readonly proxy: EgressProxy;
  readonly approvals: ApprovalBroker;
  private readonly egress = new Map<string, SandboxEgress>();

  constructor(private readonly opts: NetworkOptions) {
    const record = (type: string, sandboxId: string, data: Record<string, unknown>) => {
      const tenantId = opts.tenantOf(sandboxId);
      if (!tenantId) return;
      const recorder = type === 'egress.exchange' ? opts.recorderOf?.(sandboxId) : undefined;
      if (recorder) data = recordedExchange(data, recorder);
      Promise.resolve(opts.events.append({ type, tenantId, sandboxId, data })).catch((err: unknown) =>
        opts.logger.warn({ sandboxId, type, err: (err as Error).message }, 'recording an egress event failed'),
      );
    };
    this.approvals = new ApprovalBroker({
      timeoutMs: opts.approvalTimeoutMs,
    });
    this.proxy = new EgressProxy({
      lookup: opts.lookup,
      privateAllow: opts.privateAllow,
      upstreamCAs: opts.upstreamCAs,
      approvals: this.approvals,
      recordExchanges: opts.recordExchanges,
      logger: opts.logger,
      onEvent: (e) => record(e.type, e.sandboxId, e.data as unknown as Record<string, unknown>),
    });
  }

  /** Checks a requested network before anything starts: a bad policy or an unknown secret changes nothing. */
  async validate(tenantId: string, policy: PolicyInput | undefined, secrets: string[]): Promise<void> {
    if (policy) parsePolicy(policy);
    for (const name of secrets) await this.opts.secrets.resolve(tenantId, name);
  }

  /** A new sandbox's spec: fresh placeholders for its secrets. */
  newSpec(policy: PolicyInput | undefined, secrets: string[]): NetworkSpec {
    return { policy, secrets, placeholders: Object.fromEntries(secrets.map((n) => [n, newPlaceholder()])) };
  }

  /**
   * Gives a running guest its network: the sandbox's own CA in the guest's trust store, proxy settings and secret
   * placeholders in every process's environment, and the relay listener. Runs after every start (create, resume,
   * fork): a restored guest gets a new CA (the CA's key never leaves this process) and keeps its placeholders.
   * `envs`, the sandbox's own variables, go into the same defaults under the egress ones: a sandbox cannot point its
   * programs past the proxy or shadow a secret's placeholder by naming a variable HTTPS_PROXY or after the secret.
   */
  async attach(
    sandboxId: string,
    tenantId: string,
    agent: AgentClient,
    spec: NetworkSpec,
    envs: Record<string, string> = {},
    replay?: ReplaySource,
  ): Promise<void> {
    if (!spec.policy && spec.secrets.length === 0) {
      if (Object.keys(envs).length > 0) await agent.envDefaults(envs);
      return;
    }
    const bindings: SecretBinding[] = spec.secrets.map((name) => ({
      name,
      placeholder: spec.placeholders[name] ?? newPlaceholder(),
      // Read on every request: a secret narrowed, switched to approval, rotated or removed applies to the next one.
      current: async () => {
        const s = await this.opts.secrets.resolve(tenantId, name);
        return {
          hosts: s.hosts,
          ...(s.header ? { header: s.header } : {}),
          ...(s.format ? { format: s.format } : {}),
          ...(s.bodyContentTypes?.length ? { bodyContentTypes: s.bodyContentTypes } : {}),
          approval: s.approval,
          allowPlaintext: s.allowPlaintext === true,
          allowUpgrade: s.allowUpgrade === true,
          value: () => s.value(),
        };
      },
    }));
    this.proxy.removeSandbox(sandboxId);
    const confined = replay ?? (spec.replayOf !== undefined ? NOTHING_RECORDED : undefined);
    const egress = await this.proxy.addSandbox(sandboxId, {
      policy: spec.policy ? parsePolicy(spec.policy) : DENY_ALL,
      secrets: bindings,
      ...(confined ? { replay: confined } : {}),
    });
    this.egress.set(sandboxId, egress);
    await this.installCa(agent, egress);
    const env: Record<string, string> = {
      ...envs,
      HTTP_PROXY: PROXY_URL,
      HTTPS_PROXY: PROXY_URL,
      http_proxy: PROXY_URL,
      https_proxy: PROXY_URL,
      NO_PROXY: 'localhost,127.0.0.1,::1',
      no_proxy: 'localhost,127.0.0.1,::1',
      SSL_CERT_FILE: CA_BUNDLE,
      REQUESTS_CA_BUNDLE: CA_BUNDLE,
      CURL_CA_BUNDLE: CA_BUNDLE,
      PIP_CERT: CA_BUNDLE,
      NODE_EXTRA_CA_CERTS: CA_FILE,
    };
    for (const b of bindings) env[b.name] = b.placeholder;
    await agent.envDefaults(env);
    agent.on('net.open', (conn) => egress.handle(conn));
    await agent.netListen(PROXY_PORT);
  }

  /** The CA in the guest: its own file, a bundle with the system roots (what the env points at), and the system bundle. */
  private async installCa(agent: AgentClient, egress: SandboxEgress): Promise<void> {
    const pem = egress.caCertPem.trim() + '\n';
    await agent.mkdir(CA_DIR, { parents: true }).catch(() => {});
    await agent.writeFile(CA_FILE, pem);
    await agent.writeFile('/usr/local/share/ca-certificates/sandglass-egress.crt', pem).catch(() => {});
    let system = '';
    let keepSystem = false;
    try {
      // The guest owns this file (root in the guest can make it any size): read on every start, so capped.
      system = (await agent.readFileCapped(SYSTEM_BUNDLE, MAX_SYSTEM_BUNDLE_BYTES)).toString('utf8');
    } catch (err) {
      // A guest image without ca-certificates: the bundle is then our CA alone; one past the cap is left as it is.
      keepSystem = (err as { code?: string }).code === 'too_large';
    }
    // A restored guest carries the previous CA's block: replace it rather than pile CAs up.
    const begin = system.indexOf(CA_MARK_BEGIN);
    const end = system.indexOf(CA_MARK_END);
    if (begin >= 0 && end > begin) system = system.slice(0, begin) + system.slice(end + CA_MARK_END.length + 1);
    // Not a /\n*$/ regex: on guest text with long runs of newlines that backtracks quadratically.
    let bodyEnd = system.length;
    while (bodyEnd > 0 && system.charCodeAt(bodyEnd - 1) === 10) bodyEnd--;
    const withOurs = `${system.slice(0, bodyEnd)}\n${CA_MARK_BEGIN}\n${pem}${CA_MARK_END}\n`;
    if (!keepSystem) await agent.writeFile(SYSTEM_BUNDLE, withOurs).catch(() => {});
    await agent.writeFile(CA_BUNDLE, withOurs);
  }

  /**
   * A new policy for a running sandbox: validated first, effective with its next request. The sandbox owns its
   * spec and records the change once this succeeded (Gateway.setNetwork).
   */
  setPolicy(sandboxId: string, policy: PolicyInput): void {
    const sb = this.egress.get(sandboxId);
    if (!sb) {
      throw new SandglassError('invalid_argument', `Sandbox ${sandboxId} was created without a network; create one with a policy.`, {
        details: { field: 'network' },
      });
    }
    sb.setPolicy(parsePolicy(policy));
  }

  detach(sandboxId: string): void {
    this.proxy.removeSandbox(sandboxId);
    this.approvals.revoke(sandboxId);
    this.egress.delete(sandboxId);
  }
}
