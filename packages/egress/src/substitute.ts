// Secrets in one request: which placeholders it carries (in scope or not), and the request with the values put in.
import type { HostKind } from './address.js';
import {
  PLACEHOLDER_PREFIX,
  REDACTED,
  Redactor,
  bufferReplaceAll,
  encodeValue,
  inScope,
  replaceAll,
  typeListed,
  type CompiledSecret,
  type Encoding,
  type UnusableSecret,
} from './secrets.js';
import type { HeaderPairs } from './wire.js';

export type Where = 'header' | 'url' | 'body';

export interface SecretUse {
  secret: CompiledSecret;
  inBody: boolean;
  /** In a header (also injected) or the URL, where control characters cannot go. */
  inHead: boolean;
}

export interface Stray {
  where: Where;
  reason: string;
}

/**
 * Collects the secrets a request uses (placeholder in scope, or an injected header) and those it carries where they
 * may not go: another host or port, clear text, or a secret that cannot be used now.
 */
export class SecretScan {
  readonly used = new Map<CompiledSecret, SecretUse>();
  readonly strays = new Map<CompiledSecret | UnusableSecret, Stray>();

  constructor(
    private readonly secrets: readonly (CompiledSecret | UnusableSecret)[],
    private readonly host: { kind: HostKind; host: string },
    private readonly port: number,
    private readonly scheme: 'http' | 'https',
    /** The request asks to switch protocols: what follows a 101 is relayed unread, so never masked. */
    private readonly upgrade: boolean,
  ) {}

  #why(s: CompiledSecret | UnusableSecret): string | undefined {
    if ('unusable' in s) return s.unusable;
    if (!inScope(s, this.host, this.port, this.scheme)) {
      if (this.scheme !== 'https' && inScope(s, this.host, this.port, 'https'))
        return 'the request goes upstream in clear text and the secret does not allow plaintext';
      return 'not scoped to this host and port';
    }
    if (this.upgrade && s.binding.allowUpgrade !== true) return 'the request asks for a protocol upgrade and the secret does not allow upgrades';
    return undefined;
  }

  /** A body counts for a secret only when its media type is one the secret declares; out of scope it always counts. */
  text(text: string, where: Where, bodyMedia?: string): void {
    if (!text.includes(PLACEHOLDER_PREFIX)) return;
    for (const s of this.secrets) {
      if (!text.includes(s.binding.placeholder)) continue;
      const why = this.#why(s);
      if (why !== undefined) {
        if (!this.strays.has(s)) this.strays.set(s, { where, reason: why });
      } else if (!('unusable' in s) && (where !== 'body' || typeListed(s.bodyTypes, bodyMedia))) {
        const u = this.used.get(s) ?? { secret: s, inBody: false, inHead: false };
        if (where === 'body') u.inBody = true;
        else u.inHead = true;
        this.used.set(s, u);
      }
    }
  }

  /** Secrets with a configured header go to every request for their hosts (over TLS unless they allow plaintext). */
  injections(): void {
    for (const s of this.secrets) {
      if ('unusable' in s || !s.binding.header || this.#why(s) !== undefined) continue;
      this.used.set(s, { secret: s, inBody: this.used.get(s)?.inBody ?? false, inHead: true });
    }
  }
}

export interface Prepared {
  /** Origin-form target as sent upstream. */
  path: string;
  headers: HeaderPairs;
  /** Secret values as a response could echo them (raw and encoded, whole Basic credentials), longest first. */
  sensitive: string[];
  redactor?: Redactor;
  /** The request as recorded: the client's view, placeholders and injected values shown as «redacted». */
  recordUrl: string;
  recordHeaders: HeaderPairs;
  body?: Buffer;
  /** The body as the client sent it (recorded through the redactor). */
  recordBody?: Buffer;
}

/** The decoded user:password of a Basic Authorization header (git sends tokens this way), else undefined. */
export function basicCredentials(name: string, value: string): string | undefined {
  if (name.toLowerCase() !== 'authorization') return undefined;
  const m = /^basic\s+([A-Za-z0-9+/=_-]+)\s*$/i.exec(value);
  return m ? Buffer.from(m[1]!, 'base64').toString('utf8') : undefined;
}

function sensitiveForms(values: string[], literals: string[]): string[] {
  const out = new Set<string>(literals);
  for (const v of values) {
    for (const enc of ['raw', 'url', 'form', 'json'] as const) out.add(encodeValue(v, enc));
    out.add(Buffer.from(v).toString('base64'));
  }
  return [...out].filter((x) => x.length >= 4).sort((a, b) => b.length - a.length);
}

export function maskText(text: string, sensitive: string[]): string {
  let out = text;
  for (const v of sensitive) if (out.includes(v)) out = replaceAll(out, v, REDACTED);
  return out;
}

/**
 * Puts the values in: headers and Basic credentials raw, the URL percent-encoded, bodies of declared types encoded for
 * their media type (JSON-escaped, form-encoded or raw); configured headers replace whatever the client sent.
 */
export function substituteRequest(r: {
  values: Map<CompiledSecret, string>;
  used: Map<CompiledSecret, SecretUse>;
  headers: HeaderPairs;
  target: string;
  body: Buffer | undefined;
  media: string | undefined;
  placeholders: string[];
  record: boolean;
}): Prepared {
  const { values } = r;
  const substitute = (text: string, enc: Encoding): string => {
    if (!text.includes(PLACEHOLDER_PREFIX)) return text;
    let out = text;
    for (const [s, v] of values) if (out.includes(s.binding.placeholder)) out = replaceAll(out, s.binding.placeholder, encodeValue(v, enc));
    return out;
  };
  const injected = [...values.keys()].filter((s) => s.binding.header);
  const injectedNames = new Set(injected.map((s) => s.binding.header!.toLowerCase()));
  // Substituted Basic credentials are sensitive as a whole: base64 of "user:value" does not contain base64 of value.
  const basicTokens: string[] = [];
  const headers: HeaderPairs = [];
  const clientView: HeaderPairs = [];
  for (const [k, v] of r.headers) {
    if (injectedNames.has(k.toLowerCase())) continue;
    const basic = basicCredentials(k, v);
    if (basic !== undefined && basic.includes(PLACEHOLDER_PREFIX) && values.size > 0) {
      const token = Buffer.from(substitute(basic, 'raw'), 'utf8').toString('base64');
      basicTokens.push(token);
      headers.push([k, `${v.split(/\s+/)[0]} ${token}`]);
      clientView.push([k, `${v.split(/\s+/)[0]} ${REDACTED}`]);
    } else {
      headers.push([k, substitute(v, 'raw')]);
      clientView.push([k, v]);
    }
  }
  for (const s of injected) {
    const fmt = s.binding.format ?? '{value}';
    headers.push([s.binding.header!, replaceAll(fmt, '{value}', values.get(s)!)]);
    clientView.push([s.binding.header!, replaceAll(fmt, '{value}', REDACTED)]);
  }
  const redactor = values.size > 0 || r.record ? new Redactor([...values.values()], [...basicTokens, ...r.placeholders]) : undefined;
  let body = r.body;
  if (body && [...r.used.values()].some((u) => u.inBody)) {
    const enc: Encoding = r.media === 'application/x-www-form-urlencoded' ? 'form' : r.media && /[/+]json$/.test(r.media) ? 'json' : 'raw';
    for (const u of r.used.values()) {
      if (u.inBody) body = bufferReplaceAll(body, Buffer.from(u.secret.binding.placeholder), Buffer.from(encodeValue(values.get(u.secret)!, enc)));
    }
  }
  return {
    path: substitute(r.target, 'url'),
    headers,
    sensitive: sensitiveForms([...values.values()], basicTokens),
    ...(redactor ? { redactor } : {}),
    recordUrl: redactor ? redactor.text(r.target) : r.target,
    recordHeaders: redactor ? clientView.map(([k, v]) => [k, redactor.text(v)]) : clientView,
    ...(body ? { body } : {}),
    ...(r.body ? { recordBody: r.body } : {}),
  };
}
