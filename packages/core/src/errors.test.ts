// The error catalogue, the OpenAPI enums, the generated TypeScript and docs/errors.md must agree (codes are never renamed).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadCatalogue, renderDocs, renderTs } from '../../../scripts/gen.js';
import { ERROR_CATALOGUE, SandglassError } from './index.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const codes = Object.keys(loadCatalogue()).sort();

function enumOf(file: string): string[] {
  const doc = parse(readFileSync(`${root}spec/${file}`, 'utf8'));
  return [...doc.components.schemas.Error.properties.error.properties.code.enum].sort();
}

describe('error catalogue', () => {
  it('matches the OpenAPI enums of both APIs', () => {
    expect(enumOf('control-plane.yaml')).toEqual(codes);
    expect(enumOf('gateway.yaml')).toEqual(codes);
  });

  it('matches the generated TypeScript and docs (run `npm run gen` after editing spec/errors.yaml)', () => {
    const cat = loadCatalogue();
    expect(readFileSync(`${root}packages/core/src/errors.generated.ts`, 'utf8')).toBe(renderTs(cat));
    expect(readFileSync(`${root}docs/errors.md`, 'utf8')).toBe(renderDocs(cat));
    expect(Object.keys(ERROR_CATALOGUE).sort()).toEqual(codes);
  });

  it('gives every error a wire body with its code and status', () => {
    const e = new SandglassError('sandbox_not_found');
    expect(e.status).toBe(404);
    expect(e.toBody('req_x')).toEqual({ error: { code: 'sandbox_not_found', message: ERROR_CATALOGUE.sandbox_not_found.message, requestId: 'req_x' } });
  });
});
