// Content-keyed artifact directories: a key is a hash of everything that went into an artifact, and an artifact appears only once it is complete.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';

/** Bump when a recipe changes in a way its inputs do not show (new files, other mkfs options …). */
export const RECIPE_VERSION = 1;

export type KeyPart = string | number | boolean | null | readonly KeyPart[] | { readonly [k: string]: KeyPart };

/** Stable JSON: object keys sorted, so the same inputs always hash the same way. */
function canonical(value: KeyPart): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const obj = value as { readonly [k: string]: KeyPart };
    return `{${Object.keys(obj)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(obj[k] as KeyPart)}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The cache key of an artifact: first 16 hex digits of sha256 over its named inputs. */
export function cacheKey(name: string, inputs: { readonly [k: string]: KeyPart }): string {
  return createHash('sha256')
    .update(canonical({ artifact: name, recipe: RECIPE_VERSION, inputs }))
    .digest('hex')
    .slice(0, 16);
}

export function sha256Hex(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

export function artifactDir(artifactsDir: string, name: string, key: string): string {
  return join(artifactsDir, `${name}-${key}`);
}

export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Returns the artifact directory `<name>-<key>`, building it first when missing. `build` fills a
 * fresh temporary directory beside it, which is renamed into place only when `build` succeeds, so
 * a crash or an error never leaves a directory under the final name. When two builders race, the
 * first rename wins and the other's work is dropped.
 */
export async function ensureArtifact(
  artifactsDir: string,
  name: string,
  key: string,
  build: (tmpDir: string) => Promise<void>,
): Promise<{ dir: string; built: boolean }> {
  const dir = artifactDir(artifactsDir, name, key);
  if (await exists(dir)) return { dir, built: false };
  await mkdir(artifactsDir, { recursive: true });
  const tmp = join(artifactsDir, `.tmp-${name}-${key}-${randomBytes(4).toString('hex')}`);
  await mkdir(tmp);
  try {
    await build(tmp);
    try {
      await rename(tmp, dir);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if ((code === 'ENOTEMPTY' || code === 'EEXIST') && (await exists(dir))) return { dir, built: false };
      throw e;
    }
    return { dir, built: true };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
