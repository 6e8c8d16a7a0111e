// Test peers for the gateway's HTTP edge: every spelling of a route a router might still match, and raw requests that
// send a path exactly as written (fetch and WHATWG URLs would resolve dot segments and backslashes first).
import { Agent, request } from 'node:http';
import { loadOpenApi } from '@sandglass/core';

export interface SpecOperation {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** As written in the spec: `/v1/sandboxes/{id}`. */
  path: string;
  /** Schemes of the operation's `security` (the document's default when absent); empty: public. */
  security: string[];
  /** The operation is a WebSocket upgrade (its spec answers 101). */
  websocket: boolean;
}

/** Every operation of an OpenAPI file, with the security it declares. */
export function specOperations(file: string): SpecOperation[] {
  const doc = loadOpenApi(file) as unknown as {
    security?: Record<string, unknown>[];
    paths: Record<string, Record<string, { security?: Record<string, unknown>[]; responses?: Record<string, unknown> }>>;
  };
  const out: SpecOperation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'post', 'put', 'delete'].includes(method)) continue;
      const security = (op.security ?? doc.security ?? []).flatMap((s) => Object.keys(s));
      out.push({ method: method.toUpperCase() as SpecOperation['method'], path, security, websocket: '101' in (op.responses ?? {}) });
    }
  }
  return out;
}

/** Fills `{name}` placeholders from `ids`; a placeholder without a value is an error in the test, not a guess. */
export function fillPath(path: string, ids: Record<string, string>): string {
  return path.replace(/\{(\w+)\}/g, (_m, name: string) => {
    const v = ids[name];
    if (v === undefined) throw new Error(`no id for {${name}} in ${path}`);
    return v;
  });
}

const pct = (ch: string, upper: boolean) => {
  const hex = ch.charCodeAt(0).toString(16).padStart(2, '0');
  return `%${upper ? hex.toUpperCase() : hex}`;
};
const encodeAll = (seg: string, upper = false) => [...seg].map((c) => pct(c, upper)).join('');

/**
 * Spellings of one concrete path that some router, proxy or normaliser may take for the same route: each segment
 * with a letter or all of it percent-encoded, upper-cased, with `;` parameters; `//`, `/./`, `/x/../` and their
 * encoded forms between segments; `%2f` for a slash; a trailing slash; backslashes. The path itself comes first.
 */
export function pathVariants(path: string): string[] {
  const segs = path.split('/').slice(1);
  const join = (s: string[]) => '/' + s.join('/');
  const out = new Set<string>([path]);
  segs.forEach((seg, i) => {
    const at = (v: string) => join(segs.map((s, j) => (j === i ? v : s)));
    const letter = [...seg].findIndex((c) => /[a-z]/i.test(c));
    if (letter >= 0) {
      for (const upper of [false, true]) out.add(at(seg.slice(0, letter) + pct(seg[letter]!, upper) + seg.slice(letter + 1)));
      const last = seg.length - 1;
      out.add(at(seg.slice(0, last) + pct(seg[last]!, false)));
    }
    out.add(at(encodeAll(seg)));
    out.add(at(encodeAll(seg, true)));
    out.add(at(seg.toUpperCase()));
    out.add(at(seg[0]!.toUpperCase() + seg.slice(1)));
    out.add(at(`${seg};x=1`));
    out.add(at(`${seg};`));
    // Before segment i: an empty segment, a dot segment, a detour through a parent, and the same encoded.
    const before = (insert: string) => '/' + [...segs.slice(0, i), insert, ...segs.slice(i)].join('/');
    out.add(before(''));
    out.add(before('.'));
    out.add(before('x/..'));
    out.add(before('%2e'));
    out.add(before('x/%2e%2e'));
    out.add(before('x/%2E%2E'));
    if (i > 0) {
      const glued = (sep: string) => '/' + segs.slice(0, i).join('/') + sep + segs.slice(i).join('/');
      out.add(glued('%2f'));
      out.add(glued('%2F'));
      out.add(glued('\\'));
      out.add(glued('%5c'));
    }
  });
  out.add(path.toUpperCase());
  out.add(path.toLowerCase());
  out.add(join(segs.map((s) => encodeAll(s))));
  out.add(`${path}/`);
  out.add(`${path}//`);
  out.add(`${path}/.`);
  out.add(`${path};`);
  out.add(`/${path}`);
  out.add(`${path}%00`);
  out.add(`${path}%20`);
  return [...out];
}

// Kept-alive connections: a probe sends thousands of small requests.
const agent = new Agent({ keepAlive: true, maxSockets: 4 });

export interface RawResponse {
  status: number;
  body: string;
}

/**
 * One HTTP/1.1 request with the path sent byte for byte as given, to a TCP port or a unix socket; `path` may carry a
 * query string.
 */
export function rawRequest(
  target: { port: number; host?: string } | { socketPath: string },
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: string | Buffer } = {},
): Promise<RawResponse> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.body !== undefined) headers['content-length'] = String(Buffer.byteLength(opts.body));
  return new Promise((resolve, reject) => {
    const req = request(
      { ...('socketPath' in target ? target : { host: target.host ?? '127.0.0.1', port: target.port }), method, path, headers, agent },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** The error code of a wire-format error body, or undefined for anything else. */
export function errorCodeOf(body: string): string | undefined {
  try {
    return (JSON.parse(body) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}
