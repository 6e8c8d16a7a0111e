// The lexical import scan that scripts/check-deps.mjs and scripts/check-boundaries.mjs share, with the lists of files
// they scan. Plain Node without dependencies: it runs before anything is built.
// Imports are found with comments removed and string literals kept: `import … from`, `export … from`, side-effect
// `import '…'`, `import('…')` and `require('…')`.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE = /\.(ts|tsx|mts|cts|js|mjs|cjs)$/;
const builtins = new Set(builtinModules);

export function readJson(path) {
  return JSON.parse(readFileSync(path, 'utf8'));
}

export function walk(dir, out = []) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    if (e.name === 'node_modules' || e.name.startsWith('.')) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else if (SOURCE.test(e.name)) out.push(p);
  }
  return out;
}

/** Removes comments but keeps string contents, so `// import x from 'y'` in a comment is not an import. */
export function stripComments(text) {
  const pattern = String.raw`\/\*[\s\S]*?\*\/|(^|[^:\\\x22\x27\x60])\/\/[^\n]*|(\x27(?:[^\x27\\\n]|\\.)*\x27|\x22(?:[^\x22\\\n]|\\.)*\x22|\x60(?:[^\x60\\]|\\.)*\x60)`;
  // A block comment leaves its line breaks, so a line number in the result is the line in the file.
  return text.replace(new RegExp(pattern, 'g'), (m, pre, str) => (str !== undefined ? str : pre !== undefined ? pre : m.replace(/[^\n]/g, '')));
}

// Quotes are written \x22 and \x27 here so this file's own regular expressions do not read as strings to stripComments.
const Q = String.raw`[\x22\x27]`;
const SPEC = String.raw`(?<spec>[^\x22\x27\n]+)`;
const IMPORT_PATTERNS = [
  // import x from 'm'; import { a, type b } from 'm'; import type T from 'm'; export { a } from 'm'; export * from 'm'
  new RegExp(String.raw`(?:^|[\s;}])(?:import|export)\s+(?<clause>(?:type\s+)?[\w$*{}\s,]*?)\s*from\s*${Q}${SPEC}${Q}`, 'g'),
  // import 'm' (side effects only)
  new RegExp(String.raw`(?:^|[\s;}])import\s*${Q}${SPEC}${Q}`, 'g'),
  // import('m'), require('m')
  new RegExp(String.raw`(?:\bimport|\brequire)\s*\(\s*${Q}${SPEC}${Q}\s*\)`, 'g'),
];

/**
 * The imports of a file, pattern by pattern: each specifier and whether the statement imports types only
 * (`import type …`, `export type … from`, or `{ type a, type b }`), which TypeScript erases from the JavaScript.
 */
export function importStatementsOf(file) {
  const text = stripComments(readFileSync(file, 'utf8'));
  const found = [];
  for (const re of IMPORT_PATTERNS) for (const m of text.matchAll(re)) found.push({ spec: m.groups.spec, typeOnly: typeOnlyClause(m.groups.clause) });
  return found;
}

function typeOnlyClause(clause) {
  if (clause === undefined) return false;
  const c = clause.trim();
  if (/^type\s/.test(c)) return true;
  const named = /^\{([^}]*)\}$/.exec(c);
  const names = named
    ? named[1]
        .split(',')
        .map((n) => n.trim())
        .filter(Boolean)
    : [];
  return names.length > 0 && names.every((n) => /^type\s/.test(n));
}

/** Specifiers a file imports. */
export function importsOf(file) {
  return importStatementsOf(file).map((i) => i.spec);
}

/** `@scope/name/sub` → `@scope/name`; `name/sub` → `name`; undefined for relative paths and builtins. */
export function packageOf(spec) {
  if (spec.startsWith('.') || spec.startsWith('/') || spec.startsWith('node:')) return undefined;
  const parts = spec.split('/');
  const name = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
  return builtins.has(name) ? undefined : name;
}

/** The source file a relative specifier names (`./x.js` is `./x.ts` on disk), if it exists. */
export function resolveRelative(from, spec) {
  const base = resolve(dirname(from), spec);
  for (const candidate of [base, base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), `${base}.ts`, join(base, 'index.ts')]) {
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // try the next spelling
    }
  }
  return undefined;
}

/** The workspace packages: their directory and parsed package.json. */
export function listWorkspaces() {
  const packagesDir = join(repo, 'packages');
  return readdirSync(packagesDir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => ({ dir: join(packagesDir, e.name), manifest: readJson(join(packagesDir, e.name, 'package.json')) }));
}

/** The root's own code: tests, benchmarks, scripts, deployment, the launcher and the root configuration files. */
export function listRootFiles() {
  return [
    ...walk(join(repo, 'tests')),
    ...walk(join(repo, 'bench')),
    ...walk(join(repo, 'scripts')),
    ...walk(join(repo, 'deploy')),
    ...walk(join(repo, 'bin')).concat(readdirSync(join(repo, 'bin')).map((f) => join(repo, 'bin', f))),
    ...readdirSync(repo)
      .filter((f) => /\.config\.(ts|mts|js|mjs)$/.test(f))
      .map((f) => join(repo, f)),
  ].filter((f, i, all) => all.indexOf(f) === i && statSync(f).isFile());
}

/** A package's build configuration (packages/console's vite.config.ts): build-time code beside src/. */
export function buildConfigsOf(dir) {
  return readdirSync(dir)
    .filter((f) => /\.config\.(ts|mts|js|mjs)$/.test(f))
    .map((f) => join(dir, f));
}
