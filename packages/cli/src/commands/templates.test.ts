// `template build` finds its spec file: -f as given, else sandglass.template.yaml, e2b.Dockerfile, Dockerfile in the context.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { UsageError } from '../args.js';
import { findSpecFile } from './templates.js';

let ctx: string;
beforeEach(() => {
  ctx = mkdtempSync(join(tmpdir(), 'sg-spec-'));
});
afterEach(() => rmSync(ctx, { recursive: true, force: true }));

describe('findSpecFile', () => {
  it('takes the first spec file of the context, in order', () => {
    expect(() => findSpecFile(ctx, undefined)).toThrow(UsageError);
    writeFileSync(join(ctx, 'Dockerfile'), 'FROM base\n');
    expect(findSpecFile(ctx, undefined)).toBe(join(ctx, 'Dockerfile'));
    writeFileSync(join(ctx, 'e2b.Dockerfile'), 'FROM base\n');
    expect(findSpecFile(ctx, undefined)).toBe(join(ctx, 'e2b.Dockerfile'));
    writeFileSync(join(ctx, 'sandglass.template.yaml'), 'from: base\n');
    expect(findSpecFile(ctx, undefined)).toBe(join(ctx, 'sandglass.template.yaml'));
  });

  it('takes -f relative to the working directory, not the context', () => {
    expect(findSpecFile(ctx, 'other/spec.yaml')).toBe(resolve('other/spec.yaml'));
  });
});
