#!/usr/bin/env node
// Checks that each workspace package declares exactly what its sources import, so a package can be lifted out of the
// monorepo (or installed alone) without a hidden dependency on what npm happened to hoist, and without dead entries.
// Plain Node without dependencies: it runs before anything is built. Usage: node scripts/check-deps.mjs
//
// Rules, per packages/<name>:
// - A file of src/ is runtime code when it is reachable through relative imports from an entry point: src/index.ts
//   (the package's export) or a file nothing imports (a program such as the CLI's main.ts). Every other file, that is
//   *.test.ts and the helpers only tests import, is test code. So is a build configuration beside src/ (vite.config.ts).
// - Every package that runtime code imports, type-only imports included, is in "dependencies": workspace packages
//   publish their TypeScript sources, so a consumer's type check reads these imports too.
// - A package that only test code imports is in the package's "devDependencies" or the root package.json (where the
//   test runner lives); workspace packages (@sandglass/*) are not in the root, so tests declare them in the package.
// - Nothing is declared that nothing imports: an unused "dependencies" entry, one that only tests use (it belongs in
//   "devDependencies"), or an unused "devDependencies" entry (`@types/x` counts as used when `x` is).
// - The root's own code (tests/, bench/, scripts/, deploy/, bin/, *.config.ts) imports only what the root declares or a workspace package.
// - One version of each external package across all package.json files.
// node: builtins (and bare builtin names) are not dependencies. Imports are found by the lexical scan of
// scripts/source-imports.mjs.
import { join, relative } from 'node:path';
import { buildConfigsOf, importsOf, listRootFiles, listWorkspaces, packageOf, readJson, repo, resolveRelative, walk } from './source-imports.mjs';

const root = readJson(join(repo, 'package.json'));
const workspaces = listWorkspaces();
const workspaceNames = new Set(workspaces.map((w) => w.manifest.name));
const rootFiles = listRootFiles();
const packageFiles = workspaces.flatMap((w) => [...walk(join(w.dir, 'src')), ...buildConfigsOf(w.dir)]);

// Who imports whom (relative imports only, across the whole repo): a file nobody imports is an entry point.
const importsByFile = new Map();
const imported = new Set();
for (const f of [...rootFiles, ...packageFiles]) {
  const specs = importsOf(f);
  importsByFile.set(f, specs);
  for (const s of specs) {
    if (!s.startsWith('.')) continue;
    const target = resolveRelative(f, s);
    if (target) imported.add(target);
  }
}

const problems = [];
const isTest = (f) => /\.test\.[cm]?[jt]s$/.test(f);

for (const { dir, manifest } of workspaces) {
  const name = manifest.name;
  const where = relative(repo, join(dir, 'package.json'));
  const sources = walk(join(dir, 'src'));
  const entries = sources.filter((f) => !isTest(f) && (f === join(dir, 'src', 'index.ts') || !imported.has(f)));
  const files = [...sources, ...buildConfigsOf(dir)];
  const runtime = new Set();
  const visit = (f) => {
    if (runtime.has(f) || !f.startsWith(dir + '/')) return;
    runtime.add(f);
    for (const s of importsByFile.get(f) ?? []) {
      if (!s.startsWith('.')) continue;
      const target = resolveRelative(f, s);
      if (target) visit(target);
    }
  };
  for (const e of entries) visit(e);

  /** package → the first file importing it, for the message. */
  const runtimeImports = new Map();
  const testImports = new Map();
  for (const f of files) {
    const into = runtime.has(f) ? runtimeImports : testImports;
    for (const s of importsByFile.get(f) ?? []) {
      const pkg = packageOf(s);
      if (pkg && pkg !== name && !into.has(pkg)) into.set(pkg, relative(repo, f));
    }
  }
  const deps = new Set(Object.keys(manifest.dependencies ?? {}));
  const devDeps = new Set(Object.keys(manifest.devDependencies ?? {}));
  const rootDeclared = new Set([...Object.keys(root.dependencies ?? {}), ...Object.keys(root.devDependencies ?? {})]);
  const used = (pkg, set) => set.has(pkg) || (pkg.startsWith('@types/') && set.has(pkg.slice('@types/'.length).replace(/^(.+?)__(.+)$/, '@$1/$2')));

  for (const [pkg, file] of runtimeImports) {
    if (!deps.has(pkg)) problems.push(`${where}: "${pkg}" is imported by ${file} but not in "dependencies"`);
  }
  for (const [pkg, file] of testImports) {
    if (runtimeImports.has(pkg) || deps.has(pkg) || devDeps.has(pkg)) continue;
    if (rootDeclared.has(pkg) && !workspaceNames.has(pkg)) continue;
    problems.push(`${where}: "${pkg}" is imported by ${file} (test code) but not in "devDependencies"`);
  }
  for (const pkg of deps) {
    if (used(pkg, runtimeImports)) continue;
    problems.push(
      testImports.has(pkg)
        ? `${where}: "${pkg}" is in "dependencies" but only test code imports it (${testImports.get(pkg)}): move it to "devDependencies"`
        : `${where}: "${pkg}" is in "dependencies" but nothing in src/ imports it`,
    );
  }
  for (const pkg of devDeps) {
    if (used(pkg, testImports) || used(pkg, runtimeImports)) continue;
    problems.push(`${where}: "${pkg}" is in "devDependencies" but nothing in src/ imports it`);
  }
}

// The root's own code: tests, benchmarks, scripts and the launcher.
const rootDeclared = new Set([...Object.keys(root.dependencies ?? {}), ...Object.keys(root.devDependencies ?? {})]);
for (const f of rootFiles) {
  for (const s of importsByFile.get(f) ?? []) {
    const pkg = packageOf(s);
    if (pkg && !rootDeclared.has(pkg) && !workspaceNames.has(pkg)) {
      problems.push(`package.json: "${pkg}" is imported by ${relative(repo, f)} but not in the root "dependencies" or "devDependencies"`);
    }
  }
}

// One version of each external package: two pins of one package would install two copies, or silently one.
const versions = new Map();
for (const [where, m] of [['package.json', root], ...workspaces.map((w) => [relative(repo, join(w.dir, 'package.json')), w.manifest])]) {
  for (const field of ['dependencies', 'devDependencies']) {
    for (const [pkg, version] of Object.entries(m[field] ?? {})) {
      if (workspaceNames.has(pkg)) continue;
      if (!versions.has(pkg)) versions.set(pkg, new Map());
      versions.get(pkg).set(version, [...(versions.get(pkg).get(version) ?? []), where]);
    }
  }
}
for (const [pkg, byVersion] of versions) {
  if (byVersion.size > 1) {
    problems.push(`"${pkg}" is pinned at different versions: ${[...byVersion].map(([v, where]) => `${v} (${where.join(', ')})`).join('; ')}`);
  }
}

const unique = [...new Set(problems)];
if (unique.length > 0) {
  for (const p of unique) console.error(p);
  console.error(
    `check-deps: ${unique.length} problem(s); fix the package.json files, then run \`npm install --no-audit --no-fund\` to update package-lock.json`,
  );
  process.exit(1);
}
console.log(`check-deps: ${workspaces.length} packages declare what they import`);
