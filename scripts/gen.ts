// Generates the error catalogue (TypeScript, docs) from spec/errors.yaml and the TypeScript types of each OpenAPI spec;
// `--check` fails when a committed file drifts from what its spec gives.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import { parse } from 'yaml';

const root = fileURLToPath(new URL('..', import.meta.url));

interface Entry {
  status: number;
  retryable: boolean;
  message: string;
}

export function loadCatalogue(): Record<string, Entry> {
  return (parse(readFileSync(`${root}spec/errors.yaml`, 'utf8')) as { errors: Record<string, Entry> }).errors;
}

export function renderTs(cat: Record<string, Entry>): string {
  const rows = Object.entries(cat)
    .map(([code, e]) => `  ${code}: { status: ${e.status}, retryable: ${e.retryable}, message: ${JSON.stringify(e.message)} },`)
    .join('\n');
  return (
    `// GENERATED from spec/errors.yaml by scripts/gen.ts. Do not edit by hand: run \`npm run gen\`.\n` +
    `export const ERROR_CATALOGUE = {\n${rows}\n} as const;\n\n` +
    `export type ErrorCode = keyof typeof ERROR_CATALOGUE;\n`
  );
}

/**
 * The SDK's copy of the codes, as a type only: the SDK ships alone (an npm tarball), so it cannot import core's
 * catalogue, and it must not carry the server's messages at run time either.
 */
export function renderSdkCodes(cat: Record<string, Entry>): string {
  const codes = Object.keys(cat)
    .map((code) => `  | '${code}'`)
    .join('\n');
  return `// GENERATED from spec/errors.yaml by scripts/gen.ts. Do not edit by hand: run \`npm run gen\`.\nexport type ErrorCode =\n${codes};\n`;
}

export function renderDocs(cat: Record<string, Entry>): string {
  const rows = Object.entries(cat)
    .map(([code, e]) => `| \`${code}\` | ${e.status} | ${e.retryable ? 'yes' : 'no'} | ${e.message} |`)
    .join('\n');
  return (
    `# Error codes\n\n<!-- GENERATED from spec/errors.yaml by scripts/gen.ts: run \`npm run gen\`. -->\n\n` +
    `Every error response is \`{ "error": { "code", "message", "requestId", "details"? } }\` with the HTTP status below.\n` +
    `Codes are stable: they are never renamed once shipped.\n\n` +
    `| code | HTTP | retryable | meaning |\n|---|---|---|---|\n${rows}\n`
  );
}

/**
 * The OpenAPI specs whose types are generated, each into packages/core, whose index exports each file as one namespace.
 * The two a client speaks go into packages/sdk as well: the SDK is installed alone, outside this repository, so its
 * types cannot point into core (which would bring Fastify, ajv and pino along).
 */
export const API_SPECS: Array<{ spec: string; out: string[] }> = [
  { spec: 'spec/control-plane.yaml', out: ['packages/core/src/api/control-plane.generated.ts', 'packages/sdk/src/api/control-plane.generated.ts'] },
  { spec: 'spec/gateway.yaml', out: ['packages/core/src/api/gateway.generated.ts', 'packages/sdk/src/api/gateway.generated.ts'] },
  { spec: 'spec/node.yaml', out: ['packages/core/src/api/node.generated.ts'] },
  { spec: 'spec/e2b.yaml', out: ['packages/core/src/api/e2b.generated.ts'] },
];

/** The types of one spec: `paths`, `components`, `operations`. Reads only the local file: no $ref leaves it. */
export async function renderApiTypes(spec: string): Promise<string> {
  // Defaults make a property required only in component schemas, never in inline request bodies or parameters: a
  // component request schema (CreateSandboxRequest…) is the body as a handler sees it after validation filled them in.
  // A bare `type: object` (an event's data, an error's details) is any object, not the empty one.
  const ast = await openapiTS(new URL(spec, pathToFileURL(root)), { defaultNonNullable: true, emptyObjectsUnknown: true });
  return `// GENERATED from ${spec} by scripts/gen.ts (openapi-typescript). Do not edit by hand: run \`npm run gen\`.\n\n${astToString(ast)}`;
}

interface EventEntry {
  scope: 'sandbox' | 'tenant' | 'system';
  node: boolean;
  description: string;
  data: Record<string, unknown>;
  example: Record<string, unknown>;
}

/** spec/events.yaml: every event type and the schema of its data, with each `$ref` into its `$defs` inlined. */
export function loadEvents(): Record<string, EventEntry> {
  const doc = parse(readFileSync(`${root}spec/events.yaml`, 'utf8')) as { $defs: Record<string, unknown>; events: Record<string, EventEntry> };
  const inline = (v: unknown, seen: string[]): unknown => {
    if (Array.isArray(v)) return v.map((x) => inline(x, seen));
    if (typeof v !== 'object' || v === null) return v;
    const o = v as Record<string, unknown>;
    if (typeof o.$ref === 'string') {
      const name = /^#\/\$defs\/(\w+)$/.exec(o.$ref)?.[1];
      if (!name || !(name in doc.$defs)) throw new Error(`spec/events.yaml: unknown $ref ${o.$ref}`);
      if (seen.includes(name)) throw new Error(`spec/events.yaml: $defs/${name} refers to itself`);
      const { $ref: _ref, ...rest } = o;
      return { ...(inline(doc.$defs[name], [...seen, name]) as object), ...(inline(rest, seen) as object) };
    }
    return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, inline(x, seen)]));
  };
  return Object.fromEntries(Object.entries(doc.events).map(([type, e]) => [type, { ...e, data: inline(e.data, []) as Record<string, unknown> }]));
}

/**
 * The event types as TypeScript: EVENT_SPECS (scope, whether a node may send it, the schema of its data) for core's
 * validator, and EventDataMap from the same schemas through openapi-typescript, so a type and its check cannot differ.
 */
export async function renderEventTypes(events: Record<string, EventEntry>): Promise<string> {
  const schemas = Object.fromEntries(Object.entries(events).map(([type, e]) => [type, { ...e.data, description: e.description }]));
  const ast = await openapiTS({ openapi: '3.1.0', info: { title: 'events', version: '1' }, paths: {}, components: { schemas } } as never, {
    defaultNonNullable: true,
    emptyObjectsUnknown: true,
  });
  const types = astToString(ast)
    .replace(/^export type paths = .*$/m, '')
    .replace(/^export type webhooks = .*$/m, '')
    .replace(/^export type \$defs = .*$/m, '')
    .replace(/^export type operations = .*$/m, '')
    .replace(/^export interface components \{/m, 'interface components {')
    .replace(/\n{3,}/g, '\n\n');
  const specs = Object.entries(events)
    .map(([type, e]) => `  ${JSON.stringify(type)}: { scope: ${JSON.stringify(e.scope)}, node: ${e.node}, data: ${JSON.stringify(e.data)} },`)
    .join('\n');
  return (
    `// GENERATED from spec/events.yaml by scripts/gen.ts. Do not edit by hand: run \`npm run gen\`.\n\n` +
    `/** Each event type: what it is about, whether a node may send it, and the JSON Schema of its data. */\n` +
    `export const EVENT_SPECS = {\n${specs}\n} as const;\n\n` +
    `${types.trim()}\n\n` +
    `/** The data each event type carries. */\nexport type EventDataMap = components['schemas'];\n` +
    `export type EventType = keyof EventDataMap;\n` +
    `export type EventData<T extends EventType> = EventDataMap[T];\n`
  );
}

/** Every generated file, by path from the repository root, with the content the generator gives it. */
export async function generate(): Promise<Array<{ path: string; content: string }>> {
  const cat = loadCatalogue();
  const apis = await Promise.all(
    API_SPECS.map(async ({ spec, out }) => {
      const content = await renderApiTypes(spec);
      return out.map((path) => ({ path, content }));
    }),
  );
  return [
    { path: 'packages/core/src/errors.generated.ts', content: renderTs(cat) },
    { path: 'packages/sdk/src/api/error-codes.generated.ts', content: renderSdkCodes(cat) },
    { path: 'docs/errors.md', content: renderDocs(cat) },
    { path: 'packages/core/src/api/events.generated.ts', content: await renderEventTypes(loadEvents()) },
    ...apis.flat(),
  ];
}

function readOrUndefined(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  for (const a of args) {
    if (a !== '--check') {
      console.error(`unknown option ${a} (usage: tsx scripts/gen.ts [--check])`);
      process.exit(2);
    }
  }
  const files = await generate();
  if (args.includes('--check')) {
    // Writes nothing: CI must see the drift, not repair it behind the author's back.
    const stale = files.filter((f) => readOrUndefined(`${root}${f.path}`) !== f.content).map((f) => f.path);
    if (stale.length > 0) {
      console.error(`generated files out of date: ${stale.join(', ')}; run \`npm run gen\` and commit the result`);
      process.exit(1);
    }
    console.log(`generated files up to date (${files.map((f) => f.path).join(', ')})`);
  } else {
    for (const f of files) {
      mkdirSync(dirname(`${root}${f.path}`), { recursive: true });
      writeFileSync(`${root}${f.path}`, f.content);
    }
    console.log(`wrote ${files.map((f) => f.path).join(', ')}`);
  }
}
