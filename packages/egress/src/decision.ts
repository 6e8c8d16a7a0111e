// The egress decision without sockets: from the facts of one request, whether it goes out, where, and with which secrets.
import { SandglassError } from '@sandglass/core';
import { canonicalIp, destName, parseHostPort, vetAddress, type CanonicalHost } from './address.js';
import type { ApprovalResult } from './approvals.js';
import { decide, normalizePath, type Policy } from './policy.js';
import { mediaType, typeListed, type CompiledSecret, type ResolvedBinding, type UnusableSecret } from './secrets.js';
import { SecretScan, basicCredentials, type SecretUse, type Where } from './substitute.js';
import { endToEnd, headerValues, type HeaderPairs } from './wire.js';

/*
 * Facts that cost I/O (DNS, the secret store, the request body, an approval, a secret's value) are not inputs up front:
 * the decision asks for the next one (verdict 'need') only once everything known so far lets the request through, and
 * the proxy calls it again with that fact added. So a refused request never causes a lookup, a secret read, an
 * approval request or a decryption, and the order of the checks — which decides the reason an event reports — is
 * this file's alone: target, Host, policy, addresses, secret scope, approvals, values.
 */

export type Scheme = 'http' | 'https';

export interface Dest {
  host: CanonicalHost;
  port: number;
  scheme: Scheme;
  /** Addresses vetted when the CONNECT tunnel opened; requests inside it go there. */
  pinned?: readonly string[];
}

/** A CONNECT tunnel whose target was judged when it opened. */
export interface TunnelFacts {
  host: CanonicalHost;
  port: number;
  /** The client spoke TLS inside (terminated with the sandbox's CA): requests go upstream over TLS. Else plain HTTP. */
  tls: boolean;
  addresses: readonly string[];
}

export interface AddressFacts {
  /** The resolver's answers for a name, the IP literal itself, or a tunnel's pinned addresses: each must be an IP. */
  answers: readonly unknown[];
  /** The node's own addresses at this vetting; undefined when they could not be listed (then nothing passes). */
  nodeAddresses: ReadonlySet<string> | undefined;
}

export interface ApprovalFact {
  result: ApprovalResult;
  /** The broker's request; absent when a running time-boxed grant approved without asking. */
  requestId?: string;
}

export interface RequestFacts {
  policy: Policy;
  /** `ip:port` destinations the node operator opened (addressKey form). */
  privateAllow: ReadonlySet<string>;
  /** The tunnel the request came through; absent for a request to the proxy itself (absolute-form URI). */
  tunnel?: TunnelFacts;
  /** The request target as received. */
  url: string;
  method: string;
  /** The request's headers as received, in order. */
  headers: HeaderPairs;
  contentType?: string;
  contentEncoding?: string;
  /** Content-Length above 0 or Transfer-Encoding. */
  hasBody: boolean;
  /** The request asks to switch protocols: its Upgrade header is kept, and no body is read. */
  upgrade: boolean;
  // Gathered when asked for, in this order.
  addresses?: AddressFacts;
  /** Every bound secret as configured now; unusable when its configuration could not be read or is not valid. */
  secrets?: readonly (CompiledSecret | UnusableSecret)[];
  /** The body, read because a secret searches bodies of its media type. */
  body?: Buffer;
  /** By secret name. */
  approvals?: ReadonlyMap<string, ApprovalFact>;
  /** By secret name: the value, decrypted for this request. */
  values?: ReadonlyMap<string, string>;
}

export type Need =
  /** Resolve the destination (unless pinned or an IP literal) and list the node's addresses. */
  | { fact: 'addresses'; dest: { host: CanonicalHost; port: number; pinned?: readonly string[] } }
  | { fact: 'secrets' }
  | { fact: 'body' }
  | { fact: 'approval'; secret: string }
  | { fact: 'value'; secret: ResolvedBinding };

/** What the request's egress.request event reports, as far as the decision got. */
export interface Account {
  host?: string;
  port?: number;
  scheme?: Scheme;
  /** Dot segments resolved, without the query. */
  path?: string;
  rule?: string;
  reason?: string;
  /** Names of the secrets substituted or injected. */
  secrets?: string[];
}

export type RefusalCode = 'invalid_argument' | 'egress_denied' | 'egress_secret_scope' | 'egress_approval_denied';

export interface Refusal {
  code: RefusalCode;
  /** The reason events report: a short fixed phrase ('internal address'), or the message for invalid requests. */
  reason: string;
  message: string;
  details: Record<string, unknown>;
  /** egress_secret_scope: every secret whose placeholder went where it may not, each an egress.secret_scope event. */
  strays?: { secret: string; where: Where; reason: string }[];
}

export interface Allowed {
  dest: Dest;
  /** Vetted and canonical; the connection goes to the first. */
  addresses: string[];
  /** The origin-form target to send: the judged path (dot segments resolved) and the query. */
  target: string;
  /** End-to-end headers to forward, before substitution (Upgrade kept for an upgrade, Expect dropped). */
  headers: HeaderPairs;
  media?: string;
  /** The secrets to substitute or inject, with where their placeholders are; their values are in the facts. */
  used: Map<CompiledSecret, SecretUse>;
}

export type RequestDecision =
  | { verdict: 'refuse'; refusal: Refusal; account: Account }
  | { verdict: 'need'; need: Need; account: Account }
  | { verdict: 'allow'; allowed: Allowed; account: Account };

export interface ConnectFacts {
  policy: Policy;
  privateAllow: ReadonlySet<string>;
  /** The CONNECT target, parsed. */
  target: { host: CanonicalHost; port: number };
  addresses?: AddressFacts;
}

export type ConnectDecision =
  | { verdict: 'refuse'; refusal: Refusal; account: Account }
  | { verdict: 'need'; need: Extract<Need, { fact: 'addresses' }>; account: Account }
  | { verdict: 'allow'; addresses: string[]; account: Account };

// Bytes a header or URL cannot carry.
const INVALID_HEADER_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

/** The error a refused request gets. */
export function refusalError(r: Refusal): SandglassError {
  return new SandglassError(r.code, r.message, { details: r.details });
}

/** The account so far, and refusals that carry it. */
class Judge {
  readonly account: Account = {};

  refuse(refusal: Refusal): { verdict: 'refuse'; refusal: Refusal; account: Account } {
    return { verdict: 'refuse', refusal, account: { ...this.account, reason: refusal.reason } };
  }

  denied(reason: string, message: string, extra: Record<string, unknown> = {}) {
    const a = this.account;
    return this.refuse({
      code: 'egress_denied',
      reason,
      message,
      details: { host: a.host, port: a.port, ...(a.rule ? { rule: a.rule } : {}), reason, ...extra },
    });
  }

  invalid(message: string, field: string, rule: string) {
    return this.refuse({ code: 'invalid_argument', reason: message, message, details: { field, rule } });
  }

  /** Policy for the destination (method and path too once a request is seen); undefined when it allows. */
  policy(policy: Policy, input: { host: string; port: number; method?: string; path?: string }, message: (reason: string) => string) {
    const d = decide(policy, input);
    this.account.reason = d.reason;
    if (d.rule) this.account.rule = d.rule;
    return d.allowed ? undefined : this.denied(d.reason, message(d.reason));
  }

  /** Every address vetted: one internal or node address, without the operator's opening, refuses the destination. */
  vet(dest: { host: CanonicalHost; port: number }, facts: AddressFacts, privateAllow: ReadonlySet<string>) {
    const vetted: string[] = [];
    for (const a of facts.answers) {
      const ip = typeof a === 'string' ? canonicalIp(a) : undefined;
      if (ip === undefined) return this.denied('resolver returned a non-address', `Resolving ${dest.host.host} returned something that is not an IP address.`);
      vetted.push(ip);
    }
    if (facts.nodeAddresses === undefined)
      return this.denied('internal address', "The node's own addresses could not be listed, so no destination can be vetted.");
    for (const ip of vetted) {
      const range = vetAddress(ip, dest.port, { privateAllow, nodeAddresses: facts.nodeAddresses });
      if (range === undefined) continue;
      const via = dest.host.kind === 'name' ? `${dest.host.host} resolves to ${ip}` : `${ip} is`;
      return this.denied(
        'internal address',
        `${via} in ${range} space, which sandboxes cannot reach; only the node's operator can open a specific private destination.`,
        { address: ip, range },
      );
    }
    return vetted;
  }
}

/** Whether a CONNECT tunnel may open: the policy for its target, then every address the target resolves to. */
export function decideConnect(f: ConnectFacts & { addresses: AddressFacts }): Exclude<ConnectDecision, { verdict: 'need' }>;
export function decideConnect(f: ConnectFacts): ConnectDecision;
export function decideConnect(f: ConnectFacts): ConnectDecision {
  const j = new Judge();
  const { target } = f;
  Object.assign(j.account, { host: target.host.host, port: target.port });
  const refused = j.policy(f.policy, { host: target.host.host, port: target.port }, (r) => `The sandbox's policy does not allow ${destName(target)} (${r}).`);
  if (refused) return refused;
  if (!f.addresses) return { verdict: 'need', need: { fact: 'addresses', dest: target }, account: j.account };
  const addresses = j.vet(target, f.addresses, f.privateAllow);
  if (!Array.isArray(addresses)) return addresses;
  return { verdict: 'allow', addresses, account: j.account };
}

/**
 * Whether a request goes out: its destination (the verified CONNECT target inside a tunnel, else its absolute-form URI)
 * and Host header, the policy on the path the upstream will see, every address, the scope of each secret whose
 * placeholder it carries (host and port, TLS unless the secret allows plaintext, no upgrade unless it allows one),
 * approvals, and whether each value can be sent.
 */
export function decideRequest(f: RequestFacts): RequestDecision {
  const j = new Judge();
  const a = j.account;
  const abs = /^(https?):\/\/([^/?#]*)(.*)$/is.exec(f.url);
  let dest: Dest;
  let target: string;
  if (f.tunnel) {
    const t = f.tunnel;
    dest = { host: t.host, port: t.port, scheme: t.tls ? 'https' : 'http', pinned: t.addresses };
    Object.assign(a, { host: t.host.host, port: t.port, scheme: dest.scheme });
    if (abs) {
      const hp = parseHostPort(abs[2]!, abs[1]!.toLowerCase() === 'https' ? 443 : 80);
      if (!hp || hp.host.host !== t.host.host || hp.port !== t.port)
        return j.denied('target does not match the CONNECT target', `The request names ${abs[2]}, but the tunnel was opened to ${destName(t)}.`);
      target = originForm(abs[3] ?? '');
    } else if (f.url.startsWith('/')) target = f.url;
    else return j.invalid('The request target must be a path (origin-form).', 'target', 'origin-form');
  } else {
    if (!abs)
      return j.invalid(
        'Send requests through this proxy in absolute form (GET http://host/path) or use CONNECT.',
        'target',
        'absolute-form http:// URI or CONNECT',
      );
    if (abs[1]!.toLowerCase() !== 'http') return j.invalid('Use CONNECT for https:// destinations.', 'target', 'http:// (https through CONNECT)');
    if (abs[2]!.includes('@')) return j.invalid('The request URI must not carry credentials (user@host).', 'target', 'no userinfo');
    const hp = parseHostPort(abs[2]!, 80);
    if (!hp) return j.invalid(`'${abs[2]!.slice(0, 300)}' is not a valid host and port.`, 'target', 'host[:port], port 1-65535');
    dest = { host: hp.host, port: hp.port, scheme: 'http' };
    Object.assign(a, { host: hp.host.host, port: hp.port, scheme: 'http' });
    target = originForm(abs[3] ?? '');
  }
  const qi = target.indexOf('?');
  const rawPath = qi < 0 ? target : target.slice(0, qi);
  const path = normalizePath(rawPath);
  a.path = path;
  // Servers resolve dot segments: what is judged and what is sent must be the same path.
  const forwardTarget = path === rawPath ? target : path + (qi < 0 ? '' : target.slice(qi));

  const hosts = headerValues(f.headers, 'host');
  if (hosts.length !== 1) return j.invalid('The request must carry exactly one Host header.', 'host', 'exactly one');
  // No port in Host is accepted for any target port; a port, if given, must be the target's.
  const hh = parseHostPort(hosts[0]!.trim(), dest.port);
  if (!hh || hh.host.host !== dest.host.host || hh.port !== dest.port) {
    return j.denied(
      'Host header does not match the target',
      `The Host header names '${hosts[0]!.slice(0, 300)}', but the request goes to ${destName(dest)}; requests go only where the connection was opened to.`,
    );
  }

  const refused = j.policy(
    f.policy,
    { host: dest.host.host, port: dest.port, method: f.method, path: rawPath },
    (r) => `The sandbox's policy does not allow ${f.method} ${destName(dest)}${path} (${r}).`,
  );
  if (refused) return refused;

  if (!f.addresses) return { verdict: 'need', need: { fact: 'addresses', dest }, account: a };
  const addresses = j.vet(dest, f.addresses, f.privateAllow);
  if (!Array.isArray(addresses)) return addresses;

  const headers = endToEnd(f.headers, f.upgrade ? ['upgrade'] : []).filter(([k]) => k.toLowerCase() !== 'expect');
  if (!f.secrets) return { verdict: 'need', need: { fact: 'secrets' }, account: a };
  const secrets = f.secrets;
  const scan = new SecretScan(secrets, dest.host, dest.port, dest.scheme, f.upgrade);
  for (const [k, v] of headers) {
    scan.text(k, 'header');
    scan.text(v, 'header');
    const basic = basicCredentials(k, v);
    if (basic !== undefined) scan.text(basic, 'header');
  }
  scan.text(forwardTarget, 'url');
  scan.injections();
  const media = mediaType(f.contentType);
  if (!f.upgrade) {
    const scanTypes = secrets.flatMap((s) => ('unusable' in s ? [] : s.bodyTypes));
    if (typeListed(scanTypes, media)) {
      const enc = (f.contentEncoding ?? 'identity').toLowerCase();
      if (enc !== 'identity')
        return j.denied(
          'compressed body cannot be scanned',
          `A ${media} body is searched for secret placeholders, which a ${enc}-encoded body hides; send it uncompressed.`,
        );
      if (f.hasBody && f.body === undefined) return { verdict: 'need', need: { fact: 'body' }, account: a };
    }
    if (f.body !== undefined) scan.text(f.body.toString('latin1'), 'body', media);
  }
  const { used, strays } = scan;
  if (strays.size > 0) {
    const [first, why] = [...strays.entries()][0]!;
    return j.refuse({
      code: 'egress_secret_scope',
      reason: 'secret placeholder outside its scope',
      message: `The request to ${dest.scheme}://${destName(dest)} carries the placeholder of secret '${first.binding.name}', which cannot be used there (${why.reason}); it was blocked and nothing was substituted.`,
      details: { host: dest.host.host, port: dest.port, secrets: [...strays.keys()].map((s) => s.binding.name), reason: why.reason },
      strays: [...strays].map(([s, { where, reason }]) => ({ secret: s.binding.name, where, reason })),
    });
  }

  for (const u of used.values()) {
    const b = u.secret.binding;
    if (b.approval !== 'required') continue;
    const approval = f.approvals?.get(b.name);
    if (approval === undefined) return { verdict: 'need', need: { fact: 'approval', secret: b.name }, account: a };
    if (approval.result === 'approved') continue;
    return j.refuse({
      code: 'egress_approval_denied',
      reason: approval.result === 'timeout' ? 'approval timed out' : 'approval denied',
      message:
        approval.result === 'timeout'
          ? `Using secret '${b.name}' needs approval, and none came in time.`
          : `Using secret '${b.name}' for ${destName(dest)} was not approved.`,
      details: {
        secret: b.name,
        host: dest.host.host,
        port: dest.port,
        decision: approval.result,
        ...(approval.requestId ? { requestId: approval.requestId } : {}),
      },
    });
  }
  for (const u of used.values()) {
    const b = u.secret.binding;
    if (!f.values?.has(b.name)) return { verdict: 'need', need: { fact: 'value', secret: b }, account: a };
    const v = f.values.get(b.name);
    if (typeof v !== 'string' || v.length < 4)
      return j.denied('secret value too short', `Secret '${b.name}' has a value shorter than 4 characters, too short to keep out of responses and records.`);
    if (INVALID_HEADER_VALUE.test(v) && u.inHead)
      return j.denied(
        'secret value cannot be sent in a header',
        `Secret '${b.name}' has a value with control characters, which cannot go into a header or URL.`,
      );
  }
  a.secrets = [...used.keys()].map((s) => s.binding.name);
  return { verdict: 'allow', allowed: { dest, addresses, target: forwardTarget, headers, media, used }, account: a };
}

/** The path and query of an absolute URI's remainder ('' → '/', '?q' → '/?q'). */
function originForm(rest: string): string {
  return rest === '' ? '/' : rest.startsWith('/') ? rest : `/${rest}`;
}
