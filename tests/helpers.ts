// Shared by the integration tests: how to reach the server, and a check of every HTTP response against the OpenAPI specs.
import { subscribe } from 'node:diagnostics_channel';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { inject, afterAll, expect } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { derefSchema, loadOpenApi, type OpenApiDoc } from '@sandglass/core';
import { RESPONSE_CHANNEL, type ConnectionConfig, type ObservedResponse } from '@sandglass/sdk';

const root = fileURLToPath(new URL('..', import.meta.url));

export const apiUrl = inject('sandglassUrl');
export const gatewayUrl = inject('sandglassGatewayUrl');
export const adminKey = inject('sandglassApiKey');
export const home = inject('sandglassHome');

export function config(apiKey = adminKey): ConnectionConfig {
  return { apiUrl, apiKey };
}

export async function api(
  method: string,
  path: string,
  opts: { key?: string | null; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key !== null) headers.authorization = `Bearer ${opts.key ?? adminKey}`;
  let body: string | undefined;
  if (opts.rawBody !== undefined) body = opts.rawBody;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(`${apiUrl}${path}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, any>) : undefined };
}

// ---- OpenAPI response validation ----
const specs: Array<{ base: string; doc: OpenApiDoc }> = [
  { base: apiUrl, doc: loadOpenApi(`${root}spec/control-plane.yaml`) },
  { base: gatewayUrl, doc: loadOpenApi(`${root}spec/gateway.yaml`) },
];
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
const violations: string[] = [];
let checked = 0;

function matchPath(doc: OpenApiDoc, pathname: string): string | undefined {
  for (const template of Object.keys(doc.paths)) {
    const re = new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`);
    if (re.test(pathname)) return template;
  }
  return undefined;
}

function validate(method: string, url: URL, status: number, contentType: string, body: string): void {
  // The E2B-shaped routes follow E2B's protocol, not ours (tests/e2b.test.ts drives them with E2B's own SDK).
  if (url.pathname.startsWith('/e2b/')) return;
  const spec = specs.find((s) => url.href.startsWith(s.base));
  if (!spec) return;
  const template = matchPath(spec.doc, url.pathname);
  const where = `${method} ${url.pathname} → ${status}`;
  if (!template) return void violations.push(`${where}: path not in spec`);
  const op = spec.doc.paths[template]![method.toLowerCase()] as Record<string, any> | undefined;
  if (!op) return void violations.push(`${where}: method not in spec`);
  const resp = op.responses[String(status)] ?? op.responses.default;
  if (!resp) return void violations.push(`${where}: status not in spec`);
  const resolved = (resp.$ref ? (spec.doc as any).components.responses[resp.$ref.split('/').pop()] : resp) as Record<string, any>;
  const schema = resolved.content?.['application/json']?.schema;
  checked++;
  if (!schema) {
    if (body.length > 0 && contentType.includes('application/json')) violations.push(`${where}: spec declares no JSON body`);
    return;
  }
  if (!contentType.includes('application/json')) return void violations.push(`${where}: expected JSON, got ${contentType}`);
  const ok = ajv.validate(derefSchema(spec.doc, schema) as object, JSON.parse(body));
  if (!ok) violations.push(`${where}: ${ajv.errorsText(ajv.errors)} in ${body.slice(0, 300)}`);
}

const realFetch = globalThis.fetch;
globalThis.fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
  const res = await realFetch(input, init);
  const url = new URL(typeof input === 'string' || input instanceof URL ? input.toString() : input.url);
  const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
  const ct = res.headers.get('content-type') ?? '';
  if (ct.includes('application/json') || res.status === 204 || res.status >= 400) {
    const body = await res.clone().text();
    validate(method, url, res.status, ct, body);
  }
  return res;
};

// The SDK talks node:http, and publishes every answer it read whole on its diagnostics channel.
subscribe(RESPONSE_CHANNEL, (message) => {
  const res = message as ObservedResponse;
  const ct = String(res.headers['content-type'] ?? '');
  if (ct.includes('application/json') || res.status === 204 || res.status >= 400) validate(res.method, res.url, res.status, ct, res.body.toString('utf8'));
});

/** Every test file ends by asserting that no response broke its spec. */
export function checkResponsesAgainstSpec(): void {
  afterAll(() => {
    expect(violations, violations.join('\n')).toEqual([]);
    expect(checked).toBeGreaterThan(0);
  });
}

/**
 * A request whose body the server may refuse before reading it all (413): the server answers and closes early,
 * so the client must read the response even though its own write then fails with EPIPE.
 */
export function sendOversized(url: string, headers: Record<string, string>, sizeBytes: number): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json', 'content-length': String(sizeBytes) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') return reject(err);
      // The server hung up while we wrote; its answer must already be on its way.
      setTimeout(() => reject(new Error(`connection ${err.code} and no response followed`)), 5000).unref();
    });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < sizeBytes) {
        const piece = chunk.subarray(0, Math.min(chunk.length, sizeBytes - sent));
        sent += piece.length;
        if (!req.write(piece)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}
