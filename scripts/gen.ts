// Generates the error catalogue (TypeScript, docs) from spec/errors.yaml; the contract test fails when they drift.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const root = fileURLToPath(new URL('..', import.meta.url));

interface Entry { status: number; retryable: boolean; message: string }

export function loadCatalogue(): Record<string, Entry> {
  return (parse(readFileSync(`${root}spec/errors.yaml`, 'utf8')) as { errors: Record<string, Entry> }).errors;
}

export function renderTs(cat: Record<string, Entry>): string {
  const rows = Object.entries(cat)
    .map(([code, e]) => `  ${code}: { status: ${e.status}, retryable: ${e.retryable}, message: ${JSON.stringify(e.message)} },`)
    .join('\n');
  return `// GENERATED from spec/errors.yaml by scripts/gen.ts. Do not edit by hand: run \`npm run gen\`.\n` +
    `export const ERROR_CATALOGUE = {\n${rows}\n} as const;\n\n` +
    `export type ErrorCode = keyof typeof ERROR_CATALOGUE;\n`;
}

export function renderDocs(cat: Record<string, Entry>): string {
  const rows = Object.entries(cat)
    .map(([code, e]) => `| \`${code}\` | ${e.status} | ${e.retryable ? 'yes' : 'no'} | ${e.message} |`)
    .join('\n');
  return `# Error codes\n\n<!-- GENERATED from spec/errors.yaml by scripts/gen.ts: run \`npm run gen\`. -->\n\n` +
    `Every error response is \`{ "error": { "code", "message", "requestId", "details"? } }\` with the HTTP status below.\n` +
    `Codes are stable: they are never renamed once shipped.\n\n` +
    `| code | HTTP | retryable | meaning |\n|---|---|---|---|\n${rows}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const cat = loadCatalogue();
  writeFileSync(`${root}packages/core/src/errors.generated.ts`, renderTs(cat));
  writeFileSync(`${root}docs/errors.md`, renderDocs(cat));
  console.log(`wrote ${Object.keys(cat).length} error codes`);
}
