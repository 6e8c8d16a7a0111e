#!/usr/bin/env node
// Holds the boundaries that review would otherwise hold by discipline: which workspace package may import which (the
// table below; anything else fails), no import cycle among files or packages, nobody reaching into another package's
// files, no bare wall clock or timer in the code that must replay deterministically (it takes core's Clock), and
// no file named in docs/ARCHITECTURE.md that is not there.
// Plain Node without dependencies. Usage: node scripts/check-boundaries.mjs
import { existsSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { buildConfigsOf, importStatementsOf, listRootFiles, listWorkspaces, packageOf, repo, resolveRelative, stripComments, walk } from './source-imports.mjs';

/**
 * The workspace packages each package's runtime code may import: the graph as it stands, pointing one way (core at
 * the bottom, the server and the CLI at the top; the SDK and the console stand alone). A new edge is a design
 * decision: add it here in the same commit, and the check refuses it if it closes a cycle.
 */
const EDGES = {
  core: [],
  db: [],
  sdk: [],
  console: [],
  kms: ['core'],
  vmm: ['core'],
  images: ['core'],
  egress: ['core'],
  'agent-client': ['core'],
  chunkstore: ['core', 'kms'],
  events: ['core', 'db'],
  snapshots: ['core', 'chunkstore'],
  gateway: ['core', 'vmm', 'agent-client', 'images', 'snapshots', 'chunkstore', 'kms', 'egress'],
  'control-plane': ['core', 'db', 'chunkstore', 'egress', 'events', 'kms', 'snapshots'],
  server: ['core', 'db', 'events', 'images', 'vmm', 'gateway', 'control-plane', 'chunkstore', 'kms', 'snapshots'],
  cli: ['sdk', 'server'],
};

/** Further packages a package's tests may import: cross-checks against an independent implementation, and fixtures. */
const TEST_EDGES = {
  // The SDK's audit-export verifier checks the exports the event log writes.
  events: ['sdk'],
  // The SDK's error families against core's catalogue.
  sdk: ['core'],
  snapshots: ['kms'],
};

/**
 * Code that must replay deterministically: it reads time and sets timers only through the Clock it is given, so a
 * test (or a replay) drives it with a ManualClock. Paths relative to the repository; a directory covers its files.
 */
const CLOCKED = [
  'packages/events/src/',
  'packages/snapshots/src/',
  // The gateway's sandbox lifecycle: create, restore, fork, capture, the warm pool and the end of a sandbox.
  'packages/gateway/src/gateway.ts',
  'packages/gateway/src/sandbox.ts',
  'packages/gateway/src/restore.ts',
  'packages/gateway/src/snapshots.ts',
  'packages/gateway/src/pool.ts',
  'packages/gateway/src/capture-times.ts',
];

/** Calls that read the wall clock or set a timer behind the Clock's back; `clock.setTimeout(…)` is a method call and passes. */
const BARE_TIME = [
  { re: /\bDate\.now\s*\(/g, what: 'Date.now()', instead: 'clock.nowMs()' },
  { re: /\bnew\s+Date\s*\(\s*\)/g, what: 'new Date()', instead: 'new Date(clock.nowMs())' },
  { re: /(?<![\w$.])(?:setTimeout|setInterval)\s*\(/g, what: 'a bare timer', instead: 'clock.setTimeout / clock.setInterval (cancel the Timer it returns)' },
  { re: /(?<![\w$.])(?:clearTimeout|clearInterval)\s*\(/g, what: 'a bare timer', instead: "the cancel() of the Clock's Timer" },
  { re: /\bfrom\s*['"]node:timers(?:\/promises)?['"]/g, what: "Node's timers module", instead: 'the Clock' },
];

const short = (name) => name.replace(/^@sandglass\//, '');
const rel = (f) => relative(repo, f);
const isTest = (f) => /\.test\.[cm]?[jt]sx?$/.test(f);
const problems = [];

const workspaces = listWorkspaces().map((w) => ({ ...w, name: short(w.manifest.name) }));
const byName = new Map(workspaces.map((w) => [w.name, w]));
const packageDirOf = (file) => workspaces.find((w) => file.startsWith(w.dir + sep));

for (const w of workspaces) {
  if (!(w.name in EDGES))
    problems.push(
      `${rel(join(w.dir, 'package.json'))}: package ${w.name} is not in the EDGES table of scripts/check-boundaries.mjs: add it with what it may import`,
    );
}
for (const name of [...Object.keys(EDGES), ...Object.keys(TEST_EDGES)]) {
  if (!byName.has(name)) problems.push(`scripts/check-boundaries.mjs: the table names a package ${name} that packages/ does not hold`);
}

/** Whether `@sandglass/<target>/<sub>` is a subpath the target's package.json exports (never one of its src/ files). */
function exported(target, sub) {
  const exportsField = byName.get(target)?.manifest.exports;
  return !sub.startsWith('src/') && typeof exportsField === 'object' && exportsField !== null && `./${sub}` in exportsField;
}

/** One import of `file`; `from` is the importing package's short name, or undefined for the root's own code. */
function checkImport(file, from, spec, test) {
  if (spec.startsWith('.')) {
    const target = resolveRelative(file, spec);
    const into = target && packageDirOf(target);
    if (into && into.name !== from) {
      problems.push(
        `${rel(file)}: imports ${spec}, a file inside ${rel(into.dir)}: import @sandglass/${into.name} (its index, or a subpath its package.json exports)`,
      );
    }
    return;
  }
  const pkg = packageOf(spec);
  if (!pkg?.startsWith('@sandglass/')) return;
  const target = short(pkg);
  const sub = spec.slice(pkg.length + 1);
  if (sub !== '' && !exported(target, sub)) {
    problems.push(`${rel(file)}: imports ${spec}, a deep path of ${pkg}: import ${pkg} itself, or export the subpath from its package.json`);
  }
  if (from === undefined || target === from) return;
  const allowed = [...(EDGES[from] ?? []), ...(test ? (TEST_EDGES[from] ?? []) : [])];
  if (!allowed.includes(target)) {
    const who = test ? 'its tests may use' : 'it may use';
    problems.push(
      `${rel(file)}: ${from} may not import ${target} (${who} ${allowed.join(', ') || 'no workspace package'}); the edges are the table in scripts/check-boundaries.mjs`,
    );
  }
}

// Every import against the table and the package boundaries, and the value-import graph between files for the cycle check.
const valueImports = new Map();
const scan = (file, from) => {
  const edges = [];
  for (const { spec, typeOnly } of importStatementsOf(file)) {
    checkImport(file, from, spec, isTest(file));
    if (!spec.startsWith('.') || typeOnly) continue;
    const target = resolveRelative(file, spec);
    if (target) edges.push(target);
  }
  valueImports.set(file, edges);
};
for (const w of workspaces) for (const f of [...walk(join(w.dir, 'src')), ...buildConfigsOf(w.dir)]) scan(f, w.name);
for (const f of listRootFiles()) scan(f, undefined);

// What a package declares must be in the table as well: check-deps makes the declarations match the imports.
for (const w of workspaces) {
  const where = rel(join(w.dir, 'package.json'));
  for (const [field, allowed] of [
    ['dependencies', EDGES[w.name] ?? []],
    ['devDependencies', [...(EDGES[w.name] ?? []), ...(TEST_EDGES[w.name] ?? [])]],
  ]) {
    for (const dep of Object.keys(w.manifest[field] ?? {})) {
      if (dep.startsWith('@sandglass/') && !allowed.includes(short(dep))) {
        problems.push(`${where}: "${dep}" in "${field}" is not an edge of ${w.name} in scripts/check-boundaries.mjs`);
      }
    }
  }
}

/** The cycles of a graph (Map node → nodes), each as its nodes in order, the first repeated at the end. */
function cycles(graph) {
  const found = [];
  const state = new Map(); // undefined: unvisited, 1: on the current path, 2: done
  const path = [];
  const visit = (node) => {
    state.set(node, 1);
    path.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 1) found.push([...path.slice(path.indexOf(next)), next]);
      else if (state.get(next) === undefined) visit(next);
    }
    path.pop();
    state.set(node, 2);
  };
  for (const node of graph.keys()) if (state.get(node) === undefined) visit(node);
  return found;
}

const packageGraph = new Map(Object.keys(EDGES).map((p) => [p, [...EDGES[p], ...(TEST_EDGES[p] ?? [])]]));
for (const c of cycles(packageGraph)) problems.push(`scripts/check-boundaries.mjs: the package edges form a cycle: ${c.join(' → ')}`);
// Type-only imports are erased from the JavaScript, so only value imports can make a module see another half-initialised.
for (const c of cycles(valueImports)) problems.push(`import cycle: ${c.map(rel).join(' → ')}`);

/**
 * Whether the `(` just before `at` opens the parameters of a method being declared (`setInterval(key: string): void {`
 * on a line of its own), not a call (`x ? setTimeout(f, 1) : y` is one).
 */
function declaresMethod(text, at) {
  if (text[at - 1] !== '(') return false;
  const lineStart = text.lastIndexOf('\n', at - 1) + 1;
  const name = text.slice(lineStart, at).replace(/[\w$]+\s*\($/, '');
  if (!/^\s*(?:(?:public|private|protected|static|async|readonly|override)\s+)*$/.test(name)) return false;
  let depth = 1;
  let i = at;
  for (; i < text.length && depth > 0; i++) depth += text[i] === '(' ? 1 : text[i] === ')' ? -1 : 0;
  return /^\s*[:{]/.test(text.slice(i, i + 80));
}

for (const dir of CLOCKED) {
  const path = join(repo, dir);
  const files = dir.endsWith('/') ? walk(path) : [path];
  if (files.length === 0) problems.push(`scripts/check-boundaries.mjs: CLOCKED names ${dir}, which holds no source file`);
  for (const f of files.filter((f) => !isTest(f))) {
    let text;
    try {
      text = stripComments(readFileSync(f, 'utf8'));
    } catch {
      problems.push(`scripts/check-boundaries.mjs: CLOCKED names ${dir}, which does not exist`);
      continue;
    }
    for (const { re, what, instead } of BARE_TIME) {
      for (const m of text.matchAll(re)) {
        if (declaresMethod(text, m.index + m[0].length)) continue;
        const line = text.slice(0, m.index).split('\n').length;
        problems.push(`${rel(f)}:${line}: ${what} in code that takes a Clock: use ${instead}`);
      }
    }
  }
}

// docs/ARCHITECTURE.md is the map a newcomer reads first: each file it names must be where it says, also after a move.
const MAP = 'docs/ARCHITECTURE.md';
const mapText = readFileSync(join(repo, MAP), 'utf8');
for (const m of mapText.matchAll(/`((?:packages|agent|spec|docs|scripts|tests|deploy|bin|jailer|sdks)\/[^`\s]+)`/g)) {
  const path = m[1];
  // A pattern (`packages/<name>`, `*.generated.ts`) or a build output is not a file of the tree.
  if (/[<*{]/.test(path) || path.includes('/dist/')) continue;
  if (!existsSync(join(repo, path))) problems.push(`${MAP}:${mapText.slice(0, m.index).split('\n').length}: names ${path}, which does not exist`);
}

if (problems.length > 0) {
  for (const p of problems) console.error(p);
  console.error(`check-boundaries: ${problems.length} problem(s)`);
  process.exit(1);
}
console.log(`check-boundaries: ${workspaces.length} packages within their edges, no import cycle, clocked code on its Clock, ${MAP}'s files there`);
