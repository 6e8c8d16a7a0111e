// Egress policy: the rule grammar, a parser that refuses malformed or overly broad rules, and the fail-closed decision.
import { SandglassError } from '@sandglass/core';
import { canonicalHost, hostForUrl, internalRange, parsePort, type HostKind } from './address.js';

/*
 * Rule grammar (one string per rule; whitespace separates the parts):
 *
 *   rule     = target [ "/" path-rest ] [ SP method ] [ SP path ]     (at most one path)
 *   target   = host [ ":" ports ]
 *   host     = name                 exact host, e.g. api.github.com
 *            | "*." name            any subdomain of name (any depth), not name itself, e.g. *.pypi.org
 *            | IPv4 | "[" IPv6 "]" | IPv6 (bare, only without a port)
 *   ports    = 1-65535 | "*"        default: 80 and 443 in allow rules, every port in deny rules
 *   method   = token, e.g. GET or POST (case-insensitive), or "*"
 *   path     = "/" …               a prefix that ends at a segment boundary: /repos matches /repos, /repos/x and
 *                                   /repos?q, never /repository; requests are matched on a canonical path (dot
 *                                   segments resolved, escaped unreserved characters decoded), and a request whose path
 *                                   a server could read differently (an encoded / or \, a backslash, a dot segment,
 *                                   plain or encoded) is refused wherever a rule with a path applies to its host
 *
 *   examples: api.github.com   *.pypi.org   example.com:8443   api.github.com/repos/acme   api.github.com GET /repos
 *             203.0.113.7:5432   [2001:4860::8888]:443
 *
 * Names are matched case-insensitively without a trailing dot; a wildcard never matches an IP literal. An allow rule
 * may not name an internal IP (loopback, private, link-local, metadata … see internalRange): no tenant policy opens
 * those, and a name that resolves to one is refused when the proxy connects, unless the node operator opened that exact
 * address and port (SANDGLASS_EGRESS_PRIVATE_ALLOW). Allow rules must not be broader than one registrable domain: "*", "*.com", "*.co.uk"
 * and wildcards over shared hosting suffixes (*.github.io …) are refused. Deny rules may be as broad as they like.
 */

export interface PolicyInput {
  allow?: string[];
  deny?: string[];
}

/** any: only in deny rules ("*"). */
export type HostPattern = { kind: 'exact'; host: string; hostKind: HostKind } | { kind: 'suffix'; suffix: string } | { kind: 'any' };

export interface PolicyRule {
  /** The rule as written back in canonical form (what events name). */
  readonly text: string;
  readonly host: HostPattern;
  /** Undefined: any port. */
  readonly ports?: readonly number[];
  readonly method?: string;
  readonly pathPrefix?: string;
}

export interface DecideInput {
  host: string;
  port: number;
  /** Absent while only the destination is known (CONNECT): rules restricted to methods or paths then may still allow. */
  method?: string;
  path?: string;
}

export interface Decision {
  allowed: boolean;
  rule?: string;
  reason: string;
}

const DEFAULT_PORTS = [80, 443] as const;
const MAX_RULES = 1000;
const MAX_RULE_CHARS = 1024;

// Suffixes under which anyone can register or host a name. A wildcard directly over one of these would allow the whole
// internet (or every tenant of a hosting platform). Not the full Public Suffix List: every single-label suffix is
// refused anyway, and this covers the common two-label country suffixes and shared hosting domains.
const PUBLIC_SUFFIXES = new Set(
  [
    'co.uk org.uk me.uk ltd.uk plc.uk net.uk ac.uk gov.uk nhs.uk sch.uk',
    'com.au net.au org.au edu.au gov.au id.au asn.au co.nz net.nz org.nz govt.nz ac.nz',
    'co.jp ne.jp or.jp ac.jp go.jp ad.jp ed.jp gr.jp lg.jp co.kr or.kr ne.kr re.kr go.kr ac.kr',
    'com.cn net.cn org.cn gov.cn edu.cn ac.cn com.hk net.hk org.hk edu.hk gov.hk com.tw net.tw org.tw edu.tw gov.tw',
    'com.sg net.sg org.sg edu.sg gov.sg com.my net.my org.my edu.my gov.my co.id or.id ac.id go.id web.id',
    'co.in net.in org.in firm.in gen.in ind.in ac.in edu.in gov.in res.in com.pk net.pk org.pk edu.pk gov.pk',
    'com.ph net.ph org.ph edu.ph gov.ph com.vn net.vn org.vn edu.vn gov.vn co.th in.th ac.th go.th or.th',
    'com.br net.br org.br gov.br edu.br com.ar net.ar org.ar gob.ar com.mx net.mx org.mx gob.mx edu.mx',
    'com.co net.co org.co gov.co edu.co com.pe net.pe org.pe gob.pe com.ve com.uy com.ec com.bo com.py com.gt',
    'co.za org.za net.za gov.za ac.za web.za com.ng org.ng gov.ng co.ke or.ke ac.ke go.ke com.eg gov.eg edu.eg',
    'com.tr net.tr org.tr gov.tr edu.tr com.sa net.sa org.sa gov.sa edu.sa co.il org.il ac.il gov.il net.il',
    'com.ua net.ua org.ua gov.ua edu.ua com.pl net.pl org.pl gov.pl edu.pl com.ru net.ru org.ru msk.ru spb.ru',
    'com.es org.es gob.es edu.es com.pt gov.pt org.pt com.gr gov.gr edu.gr co.at or.at gv.at ac.at',
    'github.io githubusercontent.com gitlab.io herokuapp.com vercel.app netlify.app pages.dev workers.dev',
    'appspot.com web.app firebaseapp.com azurewebsites.net cloudapp.net blogspot.com cloudfront.net',
    'amazonaws.com s3.amazonaws.com elasticbeanstalk.com fly.dev onrender.com glitch.me repl.co replit.app',
    'ngrok.io ngrok.app ngrok-free.app trycloudflare.com r2.dev deno.dev railway.app surge.sh',
  ]
    .join(' ')
    .split(' '),
);

export class Policy {
  readonly allow: readonly PolicyRule[];
  readonly deny: readonly PolicyRule[];

  /** Use parsePolicy: rules built elsewhere have not been checked. */
  private constructor(allow: PolicyRule[], deny: PolicyRule[]) {
    this.allow = Object.freeze(allow);
    this.deny = Object.freeze(deny);
    Object.freeze(this);
  }

  /** @internal */
  static fromRules(allow: PolicyRule[], deny: PolicyRule[]): Policy {
    return new Policy(allow, deny);
  }

  /** The policy in canonical form: parsePolicy(p.toJSON()) is the same policy. */
  toJSON(): { allow: string[]; deny: string[] } {
    return { allow: this.allow.map((r) => r.text), deny: this.deny.map((r) => r.text) };
  }
}

/** No network: every destination is denied. */
export const DENY_ALL: Policy = Policy.fromRules([], []);

function invalid(field: string, rule: unknown, problem: string): SandglassError {
  const shown = typeof rule === 'string' ? `'${rule}'` : String(rule);
  return new SandglassError('policy_invalid', `${field}: ${shown} ${problem}`, { details: { field, rule, problem } });
}

function parseHostPattern(text: string, broadOk: boolean): HostPattern | string {
  if (text === '*' && broadOk) return { kind: 'any' };
  if (text === '*' || text === '*.') return 'is too broad: it allows every host; name the hosts instead';
  if (text.startsWith('*.')) {
    const rest = text.slice(2);
    if (rest.includes('*')) return 'may use "*" only as the whole first label ("*.example.com")';
    const c = canonicalHost(rest);
    if (!c) return 'is not a valid host name';
    if (c.kind !== 'name') return 'cannot put a wildcard over an IP address';
    return { kind: 'suffix', suffix: c.host };
  }
  if (text.includes('*')) return 'may use "*" only as the whole first label ("*.example.com")';
  const c = canonicalHost(text);
  if (!c) return 'is not a valid host name or IP address';
  return { kind: 'exact', host: c.host, hostKind: c.kind };
}

function tooBroad(p: HostPattern): string | undefined {
  if (p.kind !== 'suffix') return undefined;
  if (!p.suffix.includes('.') || PUBLIC_SUFFIXES.has(p.suffix)) {
    return `is too broad: *.${p.suffix} covers a public suffix anyone can register under; name a domain you trust`;
  }
  return undefined;
}

function splitTarget(target: string): { host: string; port?: string } {
  if (target.startsWith('[')) {
    const end = target.indexOf(']');
    if (end >= 0 && target[end + 1] === ':') return { host: target.slice(0, end + 1), port: target.slice(end + 2) };
    return { host: target };
  }
  const colons = (target.match(/:/g) ?? []).length;
  if (colons === 1) {
    const i = target.indexOf(':');
    return { host: target.slice(0, i), port: target.slice(i + 1) };
  }
  return { host: target };
}

function hostText(p: HostPattern): string {
  if (p.kind === 'any') return '*';
  return p.kind === 'suffix' ? `*.${p.suffix}` : hostForUrl({ kind: p.hostKind, host: p.host });
}

function ruleText(r: Omit<PolicyRule, 'text'>): string {
  let t = hostText(r.host);
  if (r.ports === undefined) t += ':*';
  else if (r.ports.length === 1) t += `:${r.ports[0]}`;
  if (r.method) t += ` ${r.method}`;
  if (r.pathPrefix) t += ` ${r.pathPrefix}`;
  return t;
}

/**
 * Parses one rule; a returned string says what is wrong with it. broadOk: for deny rules; withRequest false: host and
 * port only (secret scopes); anyPortByDefault: no port means any port (deny rules); defaultPorts: what no port means
 * otherwise (default 80 and 443; secret scopes: 443).
 */
export function parseRule(
  text: string,
  opts: { broadOk?: boolean; withRequest?: boolean; anyPortByDefault?: boolean; defaultPorts?: readonly number[] } = {},
): PolicyRule | string {
  const trimmed = text.trim();
  if (trimmed === '') return 'is empty';
  if (trimmed.length > MAX_RULE_CHARS) return `is longer than ${MAX_RULE_CHARS} characters`;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed)) return 'is a URL: give a host (and port or path), without the scheme';
  const parts = trimmed.split(/\s+/);
  let first = parts.shift()!;
  let pathPrefix: string | undefined;
  const slash = first.indexOf('/');
  if (slash >= 0) {
    pathPrefix = first.slice(slash);
    first = first.slice(0, slash);
  }
  let method: string | undefined;
  let sawMethod = false;
  for (const part of parts) {
    if (part.startsWith('/')) {
      if (pathPrefix !== undefined) return 'has more than one path';
      pathPrefix = part;
    } else if (!sawMethod && /^([A-Za-z]{1,20}|\*)$/.test(part)) {
      sawMethod = true;
      method = part === '*' ? undefined : part.toUpperCase();
    } else {
      return `has an unexpected part '${part}' (expected a method such as GET, then a path starting with /)`;
    }
  }
  if ((method !== undefined || pathPrefix !== undefined) && opts.withRequest === false) return 'may name only a host and port here';
  if (pathPrefix !== undefined) {
    if (/[?#\s]/.test(pathPrefix)) return 'has a path with a query, fragment or space; give a path prefix only';
    const inspected = inspectPath(pathPrefix);
    if (inspected.ambiguous) return `has a path with ${inspected.ambiguous}; give it resolved`;
    pathPrefix = inspected.path;
    if (pathPrefix.length > 1 && pathPrefix.endsWith('/')) pathPrefix = pathPrefix.replace(/\/+$/, '');
    if (pathPrefix === '/') pathPrefix = undefined;
  }
  const { host: hostPart, port: portPart } = splitTarget(first);
  const host = parseHostPattern(hostPart, opts.broadOk === true);
  if (typeof host === 'string') return host;
  if (!opts.broadOk) {
    const broad = tooBroad(host);
    if (broad) return broad;
    const range = host.kind === 'exact' && host.hostKind !== 'name' ? internalRange(host.host) : undefined;
    if (range)
      return `names an address in ${range} space, which no policy can open; the node operator opens specific private destinations (SANDGLASS_EGRESS_PRIVATE_ALLOW)`;
  }
  let ports: number[] | undefined = opts.anyPortByDefault ? undefined : [...(opts.defaultPorts ?? DEFAULT_PORTS)];
  if (portPart !== undefined) {
    if (portPart === '*') ports = undefined;
    else {
      const p = parsePort(portPart);
      if (p === undefined) return `has an invalid port '${portPart}' (1-65535 or *)`;
      ports = [p];
    }
  }
  const rule = { host, ports, method, pathPrefix };
  return { ...rule, text: ruleText(rule) };
}

function parseList(list: unknown, field: 'allow' | 'deny'): PolicyRule[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw invalid(field, list, 'must be a list of rules');
  if (list.length > MAX_RULES) throw invalid(field, `${list.length} rules`, `has more than ${MAX_RULES} rules`);
  return list.map((text: unknown, i) => {
    if (typeof text !== 'string') throw invalid(`${field}[${i}]`, text, 'must be a string');
    // A deny rule without a port covers every port: denying is never narrower than the author meant.
    const r = parseRule(text, field === 'deny' ? { broadOk: true, anyPortByDefault: true } : {});
    if (typeof r === 'string') throw invalid(`${field}[${i}]`, text, r);
    return r;
  });
}

/** Checks and compiles a policy; throws SandglassError('policy_invalid') naming the field and the rule. */
export function parsePolicy(input: PolicyInput): Policy {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) throw invalid('policy', input, 'must be an object with allow and deny lists');
  for (const key of Object.keys(input)) {
    if (key !== 'allow' && key !== 'deny') throw invalid(key, key, 'is not a known field (allow, deny)');
  }
  return Policy.fromRules(parseList(input.allow, 'allow'), parseList(input.deny, 'deny'));
}

/** Resolves dot segments (also percent-encoded ones) and backslashes the way servers do: /a/%2e%2e/b is /b. */
export function normalizePath(path: string): string {
  // Appended, not resolved against a base: '//x/y' is a path here, never a host.
  return new URL(`http://h${path.startsWith('/') ? '' : '/'}${path}`).pathname;
}

const UNRESERVED = /^[A-Za-z0-9._~-]$/;
const MAX_DECODE_ROUNDS = 8;

/**
 * A path as policy compares it — dot segments resolved, escaped unreserved characters decoded, other escapes in upper
 * case, so /%61dmin is /admin — and, when present, what makes it ambiguous: a backslash, an empty segment, or a segment that
 * decodes (once or repeatedly, as layered servers do) to one containing / or \, or to . or ... Servers differ on those, so no
 * prefix comparison can be trusted for them.
 */
export function inspectPath(raw: string): { path: string; ambiguous?: string } {
  const path = normalizePath(raw).replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => {
    const c = String.fromCharCode(parseInt(hex, 16));
    return UNRESERVED.test(c) ? c : `%${hex.toUpperCase()}`;
  });
  const ambiguous = pathAmbiguity(raw);
  return { path, ...(ambiguous ? { ambiguous } : {}) };
}

function pathAmbiguity(raw: string): string | undefined {
  if (raw.includes('\\')) return 'a backslash';
  const segments = raw.split('/');
  // Many servers merge slashes: //admin is /admin to them.
  if (segments.slice(1, -1).includes('')) return 'an empty segment (//)';
  for (const segment of segments) {
    let d = segment;
    for (let round = 0; d.includes('%'); round++) {
      if (round === MAX_DECODE_ROUNDS) return 'nested percent-encoding';
      let next: string;
      try {
        next = decodeURIComponent(d);
      } catch {
        return 'malformed percent-encoding';
      }
      if (next === d) break;
      d = next;
      if (d.includes('/')) return 'an encoded slash';
      if (d.includes('\\')) return 'an encoded backslash';
    }
    // Path parameters (Tomcat's '..;x') do not stop a server from reading the segment as a dot segment.
    const bare = d.split(';')[0];
    if (bare === '.' || bare === '..') return 'a dot segment';
  }
  return undefined;
}

export function hostMatches(p: HostPattern, host: { kind: HostKind; host: string }): boolean {
  if (p.kind === 'any') return true;
  if (p.kind === 'exact') return p.host === host.host;
  return host.kind === 'name' && host.host.endsWith(`.${p.suffix}`);
}

function pathMatches(prefix: string, path: string): boolean {
  return path === prefix || path.startsWith(`${prefix}/`) || path.startsWith(`${prefix}?`);
}

function matches(rule: PolicyRule, host: { kind: HostKind; host: string }, req: DecideInput, unknownMatches: boolean): boolean {
  if (!hostMatches(rule.host, host)) return false;
  if (rule.ports !== undefined && !rule.ports.includes(req.port)) return false;
  if (rule.method !== undefined && (req.method === undefined ? !unknownMatches : rule.method !== req.method.toUpperCase())) return false;
  if (rule.pathPrefix !== undefined && (req.path === undefined ? !unknownMatches : !pathMatches(rule.pathPrefix, req.path))) return false;
  return true;
}

/**
 * Whether the policy lets this request out. Deny rules win; nothing allowed means denied; anything unexpected (a host
 * that is not a valid name, a throw) denies. `path` is the request's path as sent (with or without the query): it is
 * matched in canonical form, and refused when ambiguous wherever a rule with a path applies to the host and port.
 */
export function decide(policy: Policy, req: DecideInput): Decision {
  try {
    const host = canonicalHost(req.host);
    if (!host) return { allowed: false, reason: 'not a valid host name or IP address' };
    if (!Number.isInteger(req.port) || req.port < 1 || req.port > 65535) return { allowed: false, reason: 'invalid port' };
    const inspected = req.path === undefined ? undefined : inspectPath(req.path.split('?')[0]!);
    if (inspected?.ambiguous) {
      const pathRule = [...policy.deny, ...policy.allow].find(
        (rule) => rule.pathPrefix !== undefined && hostMatches(rule.host, host) && (rule.ports === undefined || rule.ports.includes(req.port)),
      );
      if (pathRule) return { allowed: false, rule: pathRule.text, reason: `ambiguous path (${inspected.ambiguous})` };
    }
    const r = { ...req, path: inspected?.path };
    for (const rule of policy.deny) {
      if (matches(rule, host, r, false)) return { allowed: false, rule: rule.text, reason: 'denied by rule' };
    }
    for (const rule of policy.allow) {
      if (matches(rule, host, r, true)) return { allowed: true, rule: rule.text, reason: 'allowed by rule' };
    }
    return { allowed: false, reason: 'no rule allows' };
  } catch {
    return { allowed: false, reason: 'policy error' };
  }
}
