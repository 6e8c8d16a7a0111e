// Secret bindings: placeholders the sandbox sees, the hosts each secret may reach, substitution and redaction.
import { Transform, type TransformCallback } from 'node:stream';
import { SandglassError, systemRandom, type Random, type Redacted } from '@sandglass/core';
import { hostMatches, parseRule, type HostPattern } from './policy.js';
import type { HostKind } from './address.js';

/** A secret bound to a sandbox: fixed for the sandbox's life are only its name and the placeholder the guest holds. */
export interface SecretBinding {
  /** What events and approvals call the secret. */
  name: string;
  /** What the sandbox sees instead of the value: newPlaceholder(), unique per sandbox. */
  placeholder: string;
  /**
   * The secret's configuration as it is now, asked for on every request, so a narrowed scope, a new header or a switch
   * to approval applies to the next request of a sandbox already running. A throw (the secret was removed) leaves the
   * secret unusable: its placeholder is then blocked wherever it is sent.
   */
  current(): Promise<SecretConfig>;
}

export interface SecretConfig {
  /**
   * Where the value may go, in the policy's host grammar ('api.github.com', '*.example.com', 'host:8443'). No port
   * means 443 only.
   */
  hosts: string[];
  /** Adds (or replaces) this header on every request to a scoped host, with `format` ('Bearer {value}'; default '{value}'). */
  header?: string;
  format?: string;
  /** Media types ('application/json', 'text/*') whose request bodies are searched for the placeholder and substituted. */
  bodyContentTypes?: string[];
  approval: 'none' | 'required';
  /** Also substitute into requests that go upstream in clear text (http://, or plain HTTP in a CONNECT tunnel). */
  allowPlaintext?: boolean;
  /**
   * Also substitute into requests that ask to switch protocols (WebSocket). After a 101 the proxy only relays frames: an
   * upstream that echoes the value in a frame shows it to the guest.
   */
  allowUpgrade?: boolean;
  /** Decrypts the value at the moment of use; the proxy keeps it only for the length of the exchange. */
  value(): Promise<Redacted<string>>;
}

/** A binding with the configuration it had when a request was judged. */
export type ResolvedBinding = Pick<SecretBinding, 'name' | 'placeholder'> & SecretConfig;

export interface CompiledSecret {
  binding: ResolvedBinding;
  hosts: { pattern: HostPattern; ports?: readonly number[] }[];
  bodyTypes: string[];
}

/** A secret whose configuration could not be read or is not valid now: never substituted, its placeholder blocked. */
export interface UnusableSecret {
  binding: Pick<SecretBinding, 'name' | 'placeholder'>;
  unusable: string;
}

export const PLACEHOLDER_PREFIX = 'sg_placeholder_';
const PLACEHOLDER = /^sg_placeholder_[A-Za-z0-9]{24,128}$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;
const NAME = /^[A-Za-z0-9_.-]{1,128}$/;
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
// Headers the proxy owns; a secret may not set them.
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'upgrade', 'te', 'trailer', 'keep-alive', 'proxy-connection']);

/** A fresh placeholder: sg_placeholder_ and 32 random base32 characters (160 bits). */
export function newPlaceholder(random: Random = systemRandom): string {
  const bytes = random.bytes(32);
  let out = PLACEHOLDER_PREFIX;
  for (let i = 0; i < 32; i++) out += ALPHABET[bytes[i]! & 31];
  return out;
}

function bad(field: string, rule: string): SandglassError {
  return new SandglassError('invalid_argument', `${field}: ${rule}`, { details: { field, rule } });
}

/** Checks a sandbox's bindings (names and placeholders); throws invalid_argument naming the field (secrets[i].name …). */
export function checkBindings(bindings: SecretBinding[]): SecretBinding[] {
  if (!Array.isArray(bindings)) throw bad('secrets', 'must be a list');
  const names = new Set<string>();
  const placeholders = new Set<string>();
  bindings.forEach((b, i) => {
    const f = `secrets[${i}]`;
    if (typeof b?.name !== 'string' || !NAME.test(b.name)) throw bad(`${f}.name`, 'must be 1-128 letters, digits, _ . -');
    if (names.has(b.name)) throw bad(`${f}.name`, `is not unique (${b.name})`);
    names.add(b.name);
    if (typeof b.placeholder !== 'string' || !PLACEHOLDER.test(b.placeholder))
      throw bad(`${f}.placeholder`, 'must be sg_placeholder_ and 24-128 letters or digits');
    if ([...placeholders].some((p) => p.includes(b.placeholder) || b.placeholder.includes(p)))
      throw bad(`${f}.placeholder`, 'must be unique (and not contain another)');
    placeholders.add(b.placeholder);
    if (typeof b.current !== 'function') throw bad(`${f}.current`, 'must be a function');
  });
  return bindings;
}

/** Checks one secret's configuration as read now; throws invalid_argument naming the field (secrets[i].hosts[j] …). */
export function compileSecret(b: Pick<SecretBinding, 'name' | 'placeholder'>, c: SecretConfig, f = 'secret'): CompiledSecret {
  if (c === null || typeof c !== 'object') throw bad(f, 'must be an object');
  if (!Array.isArray(c.hosts) || c.hosts.length === 0) throw bad(`${f}.hosts`, 'must name at least one host');
  const hosts = c.hosts.map((h, j) => {
    // A bare host scopes the secret to the host on 443, where TLS is the norm; any other port is named.
    const r = typeof h === 'string' ? parseRule(h, { withRequest: false, defaultPorts: [443] }) : 'must be a string';
    if (typeof r === 'string') throw bad(`${f}.hosts[${j}]`, r);
    return { pattern: r.host, ports: r.ports };
  });
  if (c.header !== undefined) {
    if (typeof c.header !== 'string' || !HEADER_NAME.test(c.header)) throw bad(`${f}.header`, 'must be a header name');
    if (RESERVED_HEADERS.has(c.header.toLowerCase())) throw bad(`${f}.header`, 'is a header the proxy manages');
  }
  if (c.format !== undefined) {
    if (typeof c.format !== 'string' || !c.format.includes('{value}') || /[\r\n\0]/.test(c.format))
      throw bad(`${f}.format`, "must contain '{value}' and no line breaks");
    if (c.header === undefined) throw bad(`${f}.format`, 'needs header');
  }
  const bodyTypes = (c.bodyContentTypes ?? []).map((t, j) => {
    if (typeof t !== 'string' || !/^[a-z0-9!#$&^_.+-]+\/([a-z0-9!#$&^_.+-]+|\*)$/i.test(t.trim()))
      throw bad(`${f}.bodyContentTypes[${j}]`, "must be a media type such as 'application/json' or 'text/*'");
    return t.trim().toLowerCase();
  });
  if (c.approval !== 'none' && c.approval !== 'required') throw bad(`${f}.approval`, "must be 'none' or 'required'");
  for (const flag of ['allowPlaintext', 'allowUpgrade'] as const) {
    if (c[flag] !== undefined && typeof c[flag] !== 'boolean') throw bad(`${f}.${flag}`, 'must be a boolean');
  }
  if (typeof c.value !== 'function') throw bad(`${f}.value`, 'must be a function');
  return { binding: { ...c, name: b.name, placeholder: b.placeholder }, hosts, bodyTypes };
}

/**
 * Whether a secret may be substituted into a request to this destination: a scoped host and port, over verified TLS
 * (scheme https) unless the secret allows plaintext.
 */
export function inScope(s: CompiledSecret, host: { kind: HostKind; host: string }, port: number, scheme: 'http' | 'https'): boolean {
  if (scheme !== 'https' && s.binding.allowPlaintext !== true) return false;
  return s.hosts.some((h) => hostMatches(h.pattern, host) && (h.ports === undefined || h.ports.includes(port)));
}

/** The media type of a Content-Type header, lowercase, without parameters. */
export function mediaType(contentType: string | undefined): string | undefined {
  const t = contentType?.split(';')[0]?.trim().toLowerCase();
  return t ? t : undefined;
}

export function typeListed(types: readonly string[], media: string | undefined): boolean {
  if (media === undefined) return false;
  return types.some((t) => t === media || (t.endsWith('/*') && media.startsWith(t.slice(0, -1))));
}

/** How a value is written where a placeholder stood. */
export type Encoding = 'raw' | 'url' | 'json' | 'form';

export function encodeValue(value: string, enc: Encoding): string {
  switch (enc) {
    case 'raw':
      return value;
    case 'url':
      return encodeURIComponent(value);
    case 'form':
      return encodeURIComponent(value).replace(/%20/g, '+');
    case 'json':
      return JSON.stringify(value).slice(1, -1);
  }
}

export function replaceAll(text: string, from: string, to: string): string {
  return text.split(from).join(to);
}

export function bufferReplaceAll(buf: Buffer, from: Buffer, to: Buffer): Buffer {
  let i = buf.indexOf(from);
  if (i < 0) return buf;
  const parts: Buffer[] = [];
  let start = 0;
  while (i >= 0) {
    parts.push(buf.subarray(start, i), to);
    start = i + from.length;
    i = buf.indexOf(from, start);
  }
  parts.push(buf.subarray(start));
  return Buffer.concat(parts);
}

export const REDACTED = '«redacted»';

/** Replaces every given needle (and, for values, their URL, form, JSON and base64 encodings) with «redacted». */
export class Redactor {
  readonly #needles: string[];
  readonly #buffers: Buffer[];

  constructor(values: string[], placeholders: string[]) {
    const set = new Set<string>();
    for (const v of values) {
      if (v.length < 4) continue; // too short to find without redacting half the text; such values are refused earlier
      for (const e of [
        v,
        encodeURIComponent(v),
        encodeValue(v, 'form'),
        encodeValue(v, 'json'),
        Buffer.from(v).toString('base64'),
        Buffer.from(v).toString('base64url'),
      ])
        set.add(e);
      // base64 of a value at other alignments: the stable middle part is what appears inside a longer base64 text.
      for (const pad of [1, 2]) {
        const b64 = Buffer.concat([Buffer.alloc(pad), Buffer.from(v)]).toString('base64');
        const mid = b64.slice(4, b64.length - 4);
        if (mid.length >= 8) set.add(mid);
      }
      const plain = Buffer.from(v).toString('base64');
      if (plain.length > 8) set.add(plain.slice(0, plain.length - 4));
    }
    for (const p of placeholders) set.add(p);
    // Longest first, so a value is redacted whole before any of its parts.
    this.#needles = [...set].sort((a, b) => b.length - a.length);
    this.#buffers = this.#needles.map((n) => Buffer.from(n));
  }

  text(s: string): string {
    let out = s;
    for (const n of this.#needles) if (out.includes(n)) out = replaceAll(out, n, REDACTED);
    return out;
  }

  buffer(b: Buffer): Buffer {
    let out = b;
    const to = Buffer.from(REDACTED);
    for (const n of this.#buffers) out = bufferReplaceAll(out, n, to);
    return out;
  }

  get longestBytes(): number {
    return this.#buffers.reduce((m, b) => Math.max(m, b.length), 0);
  }
}

/**
 * Masks values in a byte stream with '*' of the same length (so Content-Length stays true). Holds back the last
 * (longest value − 1) bytes of each chunk, so a value split across chunks is still found and never passes half-masked.
 */
export class ValueMask extends Transform {
  readonly #values: Buffer[];
  readonly #keep: number;
  #tail = Buffer.alloc(0);
  masked = 0;

  constructor(values: string[]) {
    super();
    this.#values = values.filter((v) => v.length > 0).map((v) => Buffer.from(v));
    this.#keep = Math.max(0, ...this.#values.map((v) => v.length - 1));
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    const buf = this.#tail.length ? Buffer.concat([this.#tail, chunk]) : Buffer.from(chunk);
    this.#mask(buf);
    const cut = Math.max(0, buf.length - this.#keep);
    this.#tail = buf.subarray(cut);
    if (cut > 0) this.push(buf.subarray(0, cut));
    cb();
  }

  override _flush(cb: TransformCallback): void {
    if (this.#tail.length) this.push(this.#tail);
    cb();
  }

  #mask(buf: Buffer): void {
    for (const v of this.#values) {
      let i = buf.indexOf(v);
      while (i >= 0) {
        buf.fill(0x2a, i, i + v.length);
        this.masked++;
        i = buf.indexOf(v, i + v.length);
      }
    }
  }
}
