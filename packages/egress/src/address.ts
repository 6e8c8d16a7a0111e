// Host names and IP literals: canonical forms, and which addresses are internal (loopback, private, link-local, metadata …).
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

export type HostKind = 'name' | 'ipv4' | 'ipv6';

export interface CanonicalHost {
  kind: HostKind;
  /** Lowercase name without a trailing dot, dotted-quad IPv4, or compressed lowercase IPv6 without brackets. */
  host: string;
}

const LABEL = /^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$/;
// WHATWG URL parsing (and inet_aton) read a name whose last label is a number as an IPv4 address: 127.1, 0x7f.1,
// 2130706433. Only the dotted-quad spelling is accepted, so a rule and a request can never disagree on what is an IP.
const NUMERIC_LABEL = /^(?:[0-9]+|0x[0-9a-f]*)$/;

function canonicalIpv6(ip: string): string {
  return new URL(`http://[${ip}]`).hostname.slice(1, -1);
}

/** The canonical form of a host name or IP literal (IPv6 with or without brackets), or undefined when it is neither. */
export function canonicalHost(raw: string): CanonicalHost | undefined {
  if (raw.length === 0 || raw.length > 255) return undefined;
  let h = raw.toLowerCase();
  if (h.startsWith('[')) {
    if (!h.endsWith(']')) return undefined;
    h = h.slice(1, -1);
    return isIP(h) === 6 && !h.includes('%') ? { kind: 'ipv6', host: canonicalIpv6(h) } : undefined;
  }
  const family = isIP(h);
  if (family === 4) return { kind: 'ipv4', host: h };
  if (family === 6) return h.includes('%') ? undefined : { kind: 'ipv6', host: canonicalIpv6(h) };
  if (h.endsWith('.')) h = h.slice(0, -1);
  if (h.length === 0 || h.length > 253) return undefined;
  const labels = h.split('.');
  if (!labels.every((l) => LABEL.test(l))) return undefined;
  if (NUMERIC_LABEL.test(labels[labels.length - 1]!)) return undefined;
  return { kind: 'name', host: h };
}

/** The canonical text of an IP address, or undefined when `ip` is not one. */
export function canonicalIp(ip: string): string | undefined {
  const c = canonicalHost(ip);
  return c && c.kind !== 'name' ? c.host : undefined;
}

function v4Bytes(ip: string): number[] {
  return ip.split('.').map(Number);
}

function v6Words(ip: string): number[] {
  // Expand an IPv6 literal (possibly with an embedded dotted quad) into eight 16-bit words.
  let text = ip;
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const b = v4Bytes(tail);
    text = `${text.slice(0, lastColon + 1)}${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((w) => parseInt(w, 16)));
  const a = parse(head);
  if (rest === undefined) return a;
  const b = parse(rest);
  return [...a, ...new Array<number>(8 - a.length - b.length).fill(0), ...b];
}

const METADATA = new Set(['169.254.169.254', '100.100.100.200', 'fd00:ec2::254']);

function v4Range(b: number[]): string | undefined {
  const [a, c, d] = [b[0]!, b[1]!, b[2]!];
  if (a === 0) return 'this-network (0.0.0.0/8)';
  if (a === 10) return 'private (10.0.0.0/8)';
  if (a === 100 && c >= 64 && c <= 127) return 'shared CGNAT (100.64.0.0/10)';
  if (a === 127) return 'loopback (127.0.0.0/8)';
  if (a === 169 && c === 254) return 'link-local (169.254.0.0/16)';
  if (a === 172 && c >= 16 && c <= 31) return 'private (172.16.0.0/12)';
  if (a === 192 && c === 0 && d === 0) return 'IETF protocol assignments (192.0.0.0/24)';
  if (a === 192 && c === 0 && d === 2) return 'documentation (192.0.2.0/24)';
  if (a === 192 && c === 88 && d === 99) return '6to4 relay anycast (192.88.99.0/24)';
  if (a === 192 && c === 168) return 'private (192.168.0.0/16)';
  if (a === 198 && (c === 18 || c === 19)) return 'benchmarking (198.18.0.0/15)';
  if (a === 198 && c === 51 && d === 100) return 'documentation (198.51.100.0/24)';
  if (a === 203 && c === 0 && d === 113) return 'documentation (203.0.113.0/24)';
  if (a >= 224 && a <= 239) return 'multicast (224.0.0.0/4)';
  if (b.every((x) => x === 255)) return 'broadcast (255.255.255.255)';
  if (a >= 240) return 'reserved (240.0.0.0/4)';
  return undefined;
}

/**
 * Why a destination address is not a public unicast one — loopback, private, link-local, CGNAT, multicast, broadcast,
 * documentation, benchmarking, reserved or a cloud metadata address — or undefined for a public one. IPv6 is judged
 * as an allow list: only global unicast (2000::/3) outside its special blocks passes; the IPv4-mapped and well-known
 * NAT64 forms are judged by the IPv4 address they carry, and the tunnelling forms that embed one (IPv4-compatible,
 * local-use NAT64, Teredo, 6to4) are refused whole, since what they reach depends on relays we do not control.
 */
export function internalRange(ip: string): string | undefined {
  const canon = canonicalIp(ip);
  if (canon === undefined) return 'not an IP address';
  if (METADATA.has(canon)) return `cloud metadata (${canon})`;
  if (isIP(canon) === 4) return v4Range(v4Bytes(canon));
  const w = v6Words(canon);
  const embedded = (hi: number, lo: number) => {
    const b = [hi >> 8, hi & 255, lo >> 8, lo & 255];
    return METADATA.has(b.join('.')) ? `cloud metadata (${b.join('.')})` : v4Range(b);
  };
  const zero = (from: number, to: number) => w.slice(from, to).every((x) => x === 0);
  if (zero(0, 7)) return w[7] === 1 ? 'loopback (::1)' : w[7] === 0 ? 'unspecified (::)' : 'IPv4-compatible (::/96)';
  if (zero(0, 6)) return 'IPv4-compatible (::/96)';
  if (zero(0, 5) && w[5] === 0xffff) {
    const r = embedded(w[6]!, w[7]!);
    return r && `IPv4-mapped (::ffff:0:0/96) of ${r}`;
  }
  if (w[0] === 0x64 && w[1] === 0xff9b) {
    if (zero(2, 6)) {
      const r = embedded(w[6]!, w[7]!);
      return r && `NAT64 (64:ff9b::/96) of ${r}`;
    }
    if (w[2] === 1) return 'local-use NAT64 (64:ff9b:1::/48)';
  }
  if (w[0] === 0x100 && zero(1, 4)) return 'discard (100::/64)';
  if ((w[0]! & 0xfe00) === 0xfc00) return 'unique-local (fc00::/7)';
  if ((w[0]! & 0xffc0) === 0xfe80) return 'link-local (fe80::/10)';
  if ((w[0]! & 0xffc0) === 0xfec0) return 'site-local (fec0::/10)';
  if ((w[0]! & 0xff00) === 0xff00) return 'multicast (ff00::/8)';
  if ((w[0]! & 0xe000) !== 0x2000) return 'not global unicast (outside 2000::/3)';
  if (w[0] === 0x2001 && w[1] === 0) return 'Teredo (2001::/32)';
  if (w[0] === 0x2001 && w[1] === 0xdb8) return 'documentation (2001:db8::/32)';
  if (w[0] === 0x2001 && w[1]! < 0x200) return 'IETF protocol assignments (2001::/23)';
  if (w[0] === 0x2002) return '6to4 (2002::/16)';
  if (w[0] === 0x3fff && w[1]! < 0x1000) return 'documentation (3fff::/20)';
  return undefined;
}

/** `ip:port` keys as the operator's private allow list holds them (IPv6 in brackets). */
export function addressKey(ip: string, port: number): string {
  return `${hostForUrl({ kind: ip.includes(':') ? 'ipv6' : 'ipv4', host: ip })}:${port}`;
}

/**
 * Parses SANDGLASS_EGRESS_PRIVATE_ALLOW: comma-separated `ip:port` or `[ipv6]:port`, each an IP literal with a port
 * (never a name, range or wildcard: the operator opens exact destinations). Throws an Error naming the bad entry.
 */
export function parsePrivateAllow(text: string | undefined): string[] {
  const out: string[] = [];
  for (const entry of (text ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const hp = parseHostPort(entry);
    if (!hp || hp.host.kind === 'name') throw new Error(`SANDGLASS_EGRESS_PRIVATE_ALLOW: ${JSON.stringify(entry)} is not ip:port (IPv6 as [ip]:port)`);
    out.push(addressKey(hp.host.host, hp.port));
  }
  return out;
}

export interface AddressVetting {
  /** `ip:port` destinations the node operator opened (addressKey form): reachable whatever their range. */
  privateAllow: ReadonlySet<string>;
  /** The node's own addresses (canonical), refused even when public: a sandbox must not reach the node's services. */
  nodeAddresses: ReadonlySet<string>;
}

/** Every address of this node's interfaces now, canonical (zone ids dropped). */
export function nodeAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      const ip = canonicalIp(a.address.split('%')[0]!);
      if (ip !== undefined) out.add(ip);
    }
  }
  return out;
}

/**
 * Whether a sandbox may connect to `ip:port`: undefined when it may, else the reason. Only the operator's list opens
 * an internal or node address; no tenant policy can.
 */
export function vetAddress(ip: string, port: number, v: AddressVetting): string | undefined {
  const canon = canonicalIp(ip);
  if (canon === undefined) return 'not an IP address';
  if (v.privateAllow.has(addressKey(canon, port))) return undefined;
  const range = internalRange(canon);
  if (range !== undefined) return range;
  if (v.nodeAddresses.has(canon)) return `this node's own address (${canon})`;
  return undefined;
}

/**
 * Splits `host:port`, `[v6]:port`, `host` or `[v6]` into a canonical host and a port; a bare IPv6 literal takes no
 * port. Undefined when the host is not valid or the port is not 1–65535 (or is missing while `defaultPort` is absent).
 */
export function parseHostPort(text: string, defaultPort?: number): { host: CanonicalHost; port: number } | undefined {
  let hostText = text;
  let portText: string | undefined;
  if (text.startsWith('[')) {
    const end = text.indexOf(']');
    if (end < 0) return undefined;
    hostText = text.slice(0, end + 1);
    const rest = text.slice(end + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return undefined;
      portText = rest.slice(1);
    }
  } else if ((text.match(/:/g) ?? []).length === 1) {
    const i = text.indexOf(':');
    hostText = text.slice(0, i);
    portText = text.slice(i + 1);
  }
  const host = canonicalHost(hostText);
  if (!host) return undefined;
  if (portText === undefined) return defaultPort === undefined ? undefined : { host, port: defaultPort };
  const port = parsePort(portText);
  return port === undefined ? undefined : { host, port };
}

export function parsePort(text: string): number | undefined {
  if (!/^[0-9]{1,5}$/.test(text)) return undefined;
  const port = Number(text);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/** How a host is written in a URL or Host header: IPv6 in brackets. */
export function hostForUrl(h: CanonicalHost | { kind: HostKind; host: string }): string {
  return h.kind === 'ipv6' ? `[${h.host}]` : h.host;
}

/** `host:port` as messages name a destination (IPv6 in brackets). */
export function destName(d: { host: CanonicalHost; port: number }): string {
  return `${hostForUrl(d.host)}:${d.port}`;
}
