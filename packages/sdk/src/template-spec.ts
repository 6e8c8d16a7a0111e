// A template's build spec: `sandglass.template.yaml` and the Dockerfile subset, both read into one normalized TemplateSpec.
import { createRequire } from 'node:module';
import { posix } from 'node:path';
import { checkEnvs, invalidField, isEnvName } from './envs.js';
import type { NetworkPolicy } from './types.js';

/** A command run in the build sandbox, with the user, directory and variables in effect at that point. */
export interface RunStep {
  kind: 'run';
  name: string;
  cmd: string;
  user: string;
  workdir: string;
  envs: Record<string, string>;
}

/** Files from the build context (paths relative to it) copied to `dest` (absolute), owned by `user` (root: as uploaded). */
export interface CopyStep {
  kind: 'copy';
  name: string;
  src: string[];
  dest: string;
  user: string;
}

export type TemplateStep = RunStep | CopyStep;

export interface ReadyCheck {
  /** Run until it exits 0: the start command is then ready and the template is snapshotted. */
  cmd: string;
  timeoutS: number;
  intervalMs: number;
}

export interface TemplateStartSpec {
  cmd: string;
  user: string;
  workdir: string;
  ready?: ReadyCheck;
}

export interface TemplateSpec {
  /** The template (name or `tpl_…` id) the build starts from. */
  from: string;
  memoryMib?: number;
  vcpus?: number;
  diskMib?: number;
  /** What sandboxes created from the template get. */
  envs: Record<string, string>;
  user: string;
  workdir: string;
  /** The build sandbox's egress policy; absent, it has no network. */
  network?: NetworkPolicy;
  secrets?: string[];
  steps: TemplateStep[];
  start?: TemplateStartSpec;
}

/** A spec as read from a file: the name it gives itself (YAML `name`), and what was read but ignored. */
export interface ParsedTemplateFile {
  spec: TemplateSpec;
  name?: string;
  notes: string[];
}

export const TEMPLATE_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const FROM_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const USER = /^[a-z_][a-z0-9_-]{0,63}$/;
const STEP_USER = /^(?:[a-z_][a-z0-9_-]{0,63}|[0-9]{1,10})$/;
const OWNER = /^(?:[a-z_][a-z0-9_-]{0,63}|[0-9]{1,10})(?::(?:[a-z_][a-z0-9_-]{0,63}|[0-9]{1,10}))?$/;
const SECRET_NAME = /^[A-Z_][A-Z0-9_]{0,63}$/;
const MAX_STEPS = 500;
const MAX_CMD = 262_144;
const MAX_STEP_NAME = 200;
const MAX_PATH = 4096;
export const READY_TIMEOUT_DEFAULT_S = 60;
export const READY_TIMEOUT_MAX_S = 600;
const READY_INTERVAL_DEFAULT_MS = 500;

/** A word the shell reads as itself; anything else is single-quoted. */
function shellQuote(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** An exec-form argv as the one shell command line that runs exactly it. */
export function shellJoin(argv: string[]): string {
  return argv.map(shellQuote).join(' ');
}

/** A step's name when none is given: the Dockerfile instruction that means it, so both forms name steps alike. */
function defaultName(step: { kind: 'run'; cmd: string } | { kind: 'copy'; src: string[]; dest: string }): string {
  const text = step.kind === 'run' ? `RUN ${step.cmd}` : `COPY ${[...step.src, step.dest].join(' ')}`;
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > MAX_STEP_NAME ? `${line.slice(0, MAX_STEP_NAME - 1)}…` : line;
}

function checkCmd(cmd: unknown, field: string): string {
  let text: string;
  if (Array.isArray(cmd)) {
    if (cmd.length === 0 || !cmd.every((a) => typeof a === 'string')) throw invalidField(field, 'an exec form must be a non-empty list of strings');
    text = shellJoin(cmd as string[]);
  } else if (typeof cmd === 'string') text = cmd;
  else throw invalidField(field, 'must be a command line (a string) or an exec form (a list of strings)');
  if (text.trim() === '') throw invalidField(field, 'must not be empty');
  if (text.length > MAX_CMD) throw invalidField(field, `is ${text.length} characters; at most ${MAX_CMD}`);
  if (text.includes('\0')) throw invalidField(field, 'must not contain NUL');
  return text;
}

function checkUser(user: unknown, field: string, rule: RegExp = STEP_USER): string {
  if (typeof user !== 'string' || !rule.test(user))
    throw invalidField(field, `must be a user name like [a-z_][a-z0-9_-]* (at most 64)${rule === USER ? '' : ' or a uid'}`);
  return user;
}

function checkAbsPath(path: unknown, field: string): string {
  if (typeof path !== 'string' || !path.startsWith('/')) throw invalidField(field, 'must be an absolute path');
  if (path.length > MAX_PATH || path.includes('\0')) throw invalidField(field, `must be at most ${MAX_PATH} characters without NUL`);
  return posix.normalize(path).replace(/(.)\/+$/, '$1');
}

/** A copy source: relative to the context and inside it (symlinks are checked where the context is read). */
function checkSrc(src: string, field: string): string {
  if (src === '' || src.includes('\0') || src.length > MAX_PATH) throw invalidField(field, `must be a path of 1…${MAX_PATH} characters without NUL`);
  if (src.startsWith('/')) throw invalidField(field, `'${src}' is absolute: a copy source is a path inside the build context`);
  const norm = posix.normalize(src);
  if (norm === '..' || norm.startsWith('../')) throw invalidField(field, `'${src}' leaves the build context`);
  if (/[*?[]/.test(src)) throw invalidField(field, `'${src}': wildcards are not supported; name the file or directory`);
  return norm.replace(/\/+$/, '') || '.';
}

function checkInt(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw invalidField(field, `must be an integer from ${min} to ${max}`);
  return value;
}

function checkNetwork(value: unknown, field: string): NetworkPolicy {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalidField(field, 'must be { allow: [...], deny: [...] }');
  const out: NetworkPolicy = { allow: [], deny: [] };
  for (const [key, rules] of Object.entries(value as Record<string, unknown>)) {
    if (key !== 'allow' && key !== 'deny') throw invalidField(`${field}.${key}`, 'is not a policy field; a policy has allow and deny');
    if (!Array.isArray(rules) || !rules.every((r) => typeof r === 'string')) throw invalidField(`${field}.${key}`, 'must be a list of rules (strings)');
    out[key] = rules as string[];
  }
  return out;
}

function checkSecrets(value: unknown, field: string): string[] {
  if (!Array.isArray(value)) throw invalidField(field, 'must be a list of secret names');
  value.forEach((s, i) => {
    if (typeof s !== 'string' || !SECRET_NAME.test(s)) throw invalidField(`${field}[${i}]`, 'must be a secret name like [A-Z_][A-Z0-9_]*');
  });
  return value as string[];
}

function checkFrom(from: unknown, field: string): string {
  if (typeof from !== 'string' || from === '') throw invalidField(field, 'must name the Sandglass template to build from (e.g. base)');
  // Registry hosts, repository paths, tags and digests are what an OCI reference has and a template name cannot.
  if (/[/:@]/.test(from))
    throw invalidField(
      field,
      `'${from}' is an OCI image: Sandglass builds from its own templates (snapshots of its VMs), not container images. ` +
        'It runs no container runtime and pulls nothing at build time; name a Sandglass template (base, or one you built) and install what the image held with RUN steps',
    );
  if (!FROM_NAME.test(from)) throw invalidField(field, `'${from}' is not a template name or id ([A-Za-z0-9._-], at most 64)`);
  return from;
}

function checkSteps(n: number, field: string): void {
  if (n > MAX_STEPS) throw invalidField(field, `has ${n} steps; at most ${MAX_STEPS}`);
}

function checkReady(value: unknown, field: string): ReadyCheck {
  const r = asMap(value, field, ['cmd', 'timeoutS', 'intervalMs']);
  return {
    cmd: checkCmd(r.cmd, `${field}.cmd`),
    timeoutS: r.timeoutS === undefined ? READY_TIMEOUT_DEFAULT_S : checkInt(r.timeoutS, `${field}.timeoutS`, 1, READY_TIMEOUT_MAX_S),
    intervalMs: r.intervalMs === undefined ? READY_INTERVAL_DEFAULT_MS : checkInt(r.intervalMs, `${field}.intervalMs`, 50, 60_000),
  };
}

function asMap(value: unknown, field: string, keys: readonly string[]): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalidField(field, 'must be a map');
  for (const key of Object.keys(value))
    if (!keys.includes(key)) throw invalidField(`${field}.${key}`, `is not a field here; expected one of ${keys.join(', ')}`);
  return value as Record<string, unknown>;
}

const TOP_KEYS = ['name', 'from', 'memoryMib', 'vcpus', 'diskMib', 'envs', 'user', 'workdir', 'network', 'secrets', 'steps', 'start'] as const;
const STEP_KINDS = ['run', 'copy'] as const;
const STEP_KEYS = ['name', ...STEP_KINDS, 'user', 'workdir', 'envs'] as const;

/** The part of the `yaml` package this file uses. */
interface YamlModule {
  LineCounter: new () => { linePos(offset: number): { line: number } };
  parseDocument(text: string, opts: object): { errors: Array<{ pos: [number, number]; message: string }>; toJS(opts: { maxAliasCount: number }): unknown };
}

const load = createRequire(import.meta.url);

/**
 * `yaml` is an optional peer of the SDK (an install pulls in only ws): loaded when a YAML spec is read, so Dockerfile
 * builds and `spec` objects need nothing more.
 */
function yamlModule(): YamlModule {
  try {
    return load('yaml') as YamlModule;
  } catch {
    throw invalidField('file', 'is YAML, which needs the `yaml` package (npm install yaml@2); or pass the spec as an object, or a Dockerfile');
  }
}

/** Reads `sandglass.template.yaml` (text) into a TemplateSpec; a bad field is invalid_argument naming it. */
export function parseTemplateYaml(text: string): ParsedTemplateFile {
  const { LineCounter, parseDocument } = yamlModule();
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true, lineCounter });
  const err = doc.errors[0];
  if (err) throw invalidField(`line ${lineCounter.linePos(err.pos[0]).line}`, `not valid YAML: ${err.message.split('\n')[0]}`);
  const top = asMap(doc.toJS({ maxAliasCount: 100 }) ?? {}, 'spec', TOP_KEYS);
  if (top.from === undefined) throw invalidField('from', 'is required: the template to build from (e.g. base)');
  const name = top.name === undefined ? undefined : checkName(top.name, 'name');
  const envs = top.envs === undefined ? {} : { ...checkEnvs(top.envs, 'envs') };
  const user = top.user === undefined ? 'root' : checkUser(top.user, 'user', USER);
  const workdir = top.workdir === undefined ? '/' : checkAbsPath(top.workdir, 'workdir');
  const rawSteps = top.steps ?? [];
  if (!Array.isArray(rawSteps)) throw invalidField('steps', 'must be a list of steps');
  checkSteps(rawSteps.length, 'steps');
  const steps = rawSteps.map((raw, i) => yamlStep(raw, `steps[${i}]`, envs));
  const spec: TemplateSpec = { from: checkFrom(top.from, 'from'), envs, user, workdir, steps };
  if (top.memoryMib !== undefined) spec.memoryMib = checkInt(top.memoryMib, 'memoryMib', 128, 1_048_576);
  if (top.vcpus !== undefined) spec.vcpus = checkInt(top.vcpus, 'vcpus', 1, 256);
  if (top.diskMib !== undefined) spec.diskMib = checkInt(top.diskMib, 'diskMib', 1024, 65_536);
  if (top.network !== undefined) spec.network = checkNetwork(top.network, 'network');
  if (top.secrets !== undefined) spec.secrets = checkSecrets(top.secrets, 'secrets');
  if (top.start !== undefined) {
    const s = asMap(top.start, 'start', ['cmd', 'user', 'workdir', 'ready']);
    spec.start = {
      cmd: checkCmd(s.cmd, 'start.cmd'),
      user: s.user === undefined ? user : checkUser(s.user, 'start.user'),
      workdir: s.workdir === undefined ? workdir : checkAbsPath(s.workdir, 'start.workdir'),
    };
    if (s.ready !== undefined) spec.start.ready = checkReady(s.ready, 'start.ready');
  }
  return { spec, ...(name === undefined ? {} : { name }), notes: [] };
}

export function checkName(name: unknown, field: string): string {
  if (typeof name !== 'string' || !TEMPLATE_NAME.test(name))
    throw invalidField(field, "must be 1–64 of lower-case letters, digits, '.', '_' and '-', starting with a letter or digit");
  return name;
}

function yamlStep(raw: unknown, field: string, envs: Record<string, string>): TemplateStep {
  if (raw !== null && typeof raw === 'object' && !Array.isArray(raw)) {
    const kinds = Object.keys(raw).filter((k) => !(STEP_KEYS as readonly string[]).includes(k));
    if (kinds.length > 0 && !STEP_KINDS.some((k) => k in raw))
      throw invalidField(`${field}.${kinds[0]}`, `unknown step kind '${kinds[0]}'; a step is one of ${STEP_KINDS.join(', ')}`);
  }
  const s = asMap(raw, field, STEP_KEYS);
  const present = STEP_KINDS.filter((k) => s[k] !== undefined);
  if (present.length !== 1)
    throw invalidField(field, `a step has exactly one of ${STEP_KINDS.join(', ')}${present.length ? `, not ${present.join(' and ')}` : ''}`);
  const user = s.user === undefined ? 'root' : checkUser(s.user, `${field}.user`, present[0] === 'copy' ? OWNER : STEP_USER);
  const explicitName = s.name === undefined ? undefined : checkStepName(s.name, `${field}.name`);
  if (present[0] === 'run') {
    const step = {
      kind: 'run' as const,
      cmd: checkCmd(s.run, `${field}.run`),
      user,
      workdir: s.workdir === undefined ? '/' : checkAbsPath(s.workdir, `${field}.workdir`),
      envs: s.envs === undefined ? { ...envs } : checkEnvs({ ...envs, ...checkEnvs(s.envs, `${field}.envs`) }, `${field}.envs`),
    };
    return { ...step, name: explicitName ?? defaultName(step) };
  }
  if (s.workdir !== undefined) throw invalidField(`${field}.workdir`, 'a copy step has no working directory: give an absolute dest');
  if (s.envs !== undefined) throw invalidField(`${field}.envs`, 'a copy step runs no command');
  const c = asMap(s.copy, `${field}.copy`, ['src', 'dest']);
  const rawSrc = typeof c.src === 'string' ? [c.src] : c.src;
  if (!Array.isArray(rawSrc) || rawSrc.length === 0 || !rawSrc.every((x) => typeof x === 'string'))
    throw invalidField(`${field}.copy.src`, 'must be a path in the build context, or a non-empty list of them');
  const src = rawSrc.map((x, i) => checkSrc(x as string, rawSrc.length === 1 && typeof c.src === 'string' ? `${field}.copy.src` : `${field}.copy.src[${i}]`));
  const dest = copyDest(c.dest, `${field}.copy.dest`, src);
  const step = { kind: 'copy' as const, src, dest, user };
  return { ...step, name: explicitName ?? defaultName(step) };
}

function copyDest(dest: unknown, field: string, src: string[]): string {
  const path = checkAbsPath(dest, field);
  // Several sources go into a directory, as in Docker; a trailing '/' says "into", so it is kept through normalizing.
  if (src.length > 1 && !(dest as string).endsWith('/')) throw invalidField(field, 'must end with / when several sources are copied into it');
  return (dest as string).endsWith('/') && path !== '/' ? `${path}/` : path;
}

function checkStepName(name: unknown, field: string): string {
  if (typeof name !== 'string' || name.trim() === '' || name.length > MAX_STEP_NAME) throw invalidField(field, `must be 1–${MAX_STEP_NAME} characters`);
  return name;
}

// ---- the Dockerfile subset ----

/** One instruction: its keyword, its arguments (continuations joined) and the line it starts on. */
interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

/** Splits a Dockerfile into instructions: comments dropped, `\` continuations joined (comment lines inside them skipped). */
function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const first = lines[i]!;
    if (/^\s*(#|$)/.test(first)) continue;
    const start = i + 1;
    let body = first;
    while (/\\\s*$/.test(body) && i + 1 < lines.length) {
      body = body.replace(/\\\s*$/, '');
      i++;
      const next = lines[i]!;
      if (/^\s*#/.test(next)) {
        body += '\\';
        continue;
      }
      body += next;
    }
    body = body.replace(/\\\s*$/, '');
    const m = /^\s*([A-Za-z]+)(?:\s+([\s\S]*))?$/.exec(body);
    if (!m) throw invalidField(`line ${start}`, `'${first.trim().slice(0, 60)}' is not an instruction`);
    out.push({ keyword: m[1]!.toUpperCase(), args: (m[2] ?? '').trim(), line: start });
  }
  return out;
}

/** An exec form (`["a", "b"]`) as its argv, or undefined for a shell form. */
function execForm(args: string, field: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined;
  let argv: unknown;
  try {
    argv = JSON.parse(args);
  } catch {
    // Docker reads a '[' that is not a JSON array as a shell form, and so does this.
    return undefined;
  }
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === 'string'))
    throw invalidField(field, 'an exec form must be a non-empty JSON list of strings');
  return argv as string[];
}

/** Docker's words: whitespace-separated, with '…', "…" and \ escapes, and $VAR / ${VAR} from `vars` outside single quotes. */
function words(args: string, vars: Record<string, string>, field: string): string[] {
  const out: string[] = [];
  let cur = '';
  let inWord = false;
  let quote: '' | "'" | '"' = '';
  for (let i = 0; i < args.length; i++) {
    const c = args[i]!;
    if (quote === "'") {
      if (c === "'") quote = '';
      else cur += c;
      continue;
    }
    if (c === '\\' && i + 1 < args.length) {
      cur += args[++i];
      inWord = true;
      continue;
    }
    if (c === '$') {
      const m = /^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))/.exec(args.slice(i));
      if (m) {
        // Own variables only: `$constructor` is an unset variable, not Object's.
        const name = m[1] ?? m[2]!;
        cur += Object.hasOwn(vars, name) ? vars[name] : '';
        i += m[0].length - 1;
        inWord = true;
        continue;
      }
    }
    if (quote === '"') {
      if (c === '"') quote = '';
      else cur += c;
      continue;
    }
    if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
      continue;
    }
    if (/\s/.test(c)) {
      if (inWord) out.push(cur);
      cur = '';
      inWord = false;
      continue;
    }
    cur += c;
    inWord = true;
  }
  if (quote) throw invalidField(field, `an unterminated ${quote} quote`);
  if (inWord) out.push(cur);
  return out;
}

/** `--flag=value` options at the front of an instruction's arguments, and what follows them. */
function flags(args: string): { flags: Array<[string, string]>; rest: string } {
  const found: Array<[string, string]> = [];
  let rest = args;
  for (;;) {
    const m = /^--([a-z-]+)(?:=(\S*))?\s*/.exec(rest);
    if (!m) return { flags: found, rest };
    found.push([m[1]!, m[2] ?? '']);
    rest = rest.slice(m[0].length);
  }
}

const IGNORED = new Set(['ARG', 'EXPOSE', 'LABEL', 'MAINTAINER', 'STOPSIGNAL', 'VOLUME']);
const REFUSED: Record<string, string> = {
  ADD: 'ADD fetches URLs and unpacks archives, which a build from a local context does not do: use COPY',
  ONBUILD: 'ONBUILD triggers are not supported',
  SHELL: 'SHELL is not supported: RUN steps run with /bin/bash -c',
};

/** A Docker duration such as 30s, 1m30s or 500ms, in milliseconds. */
function durationMs(text: string, field: string): number {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let ms = 0;
  let matched = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    ms += Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
    matched = re.lastIndex;
  }
  if (text === '' || matched !== text.length) throw invalidField(field, `'${text}' is not a duration like 30s or 1m30s`);
  return Math.round(ms);
}

/**
 * Reads the Dockerfile subset that maps onto a template: FROM (a Sandglass template), RUN, COPY [--chown], ENV,
 * WORKDIR, USER, CMD/ENTRYPOINT (the start command) and HEALTHCHECK CMD (its ready check). ARG, EXPOSE and LABEL
 * are ignored with a note; anything else is refused naming its line.
 */
export function parseDockerfile(text: string): ParsedTemplateFile {
  const notes: string[] = [];
  let from: string | undefined;
  const envs: Record<string, string> = {};
  let user = 'root';
  let workdir = '/';
  const steps: TemplateStep[] = [];
  let cmd: string[] | string | undefined;
  let entrypoint: string[] | string | undefined;
  let ready: ReadyCheck | undefined;
  for (const ins of instructions(text)) {
    const field = `line ${ins.line}`;
    const { keyword, args } = ins;
    if (from === undefined && keyword !== 'FROM' && keyword !== 'ARG')
      throw invalidField(field, `${keyword} before FROM: a Dockerfile starts with FROM <template>`);
    if (IGNORED.has(keyword)) {
      notes.push(
        `${field}: ${keyword} ignored (${keyword === 'EXPOSE' ? 'every guest port is reachable through the gateway' : 'it has no meaning for a template'})`,
      );
      continue;
    }
    if (REFUSED[keyword]) throw invalidField(field, REFUSED[keyword]!);
    if (args === '' && keyword !== 'RUN') throw invalidField(field, `${keyword} needs arguments`);
    switch (keyword) {
      case 'FROM': {
        if (from !== undefined) throw invalidField(field, 'a second FROM: multi-stage builds are not supported');
        const { flags: f, rest } = flags(args);
        if (f.length > 0) throw invalidField(field, `FROM --${f[0]![0]} is not supported`);
        const w = words(rest, {}, field);
        if (w.length !== 1 && !(w.length === 3 && w[1]!.toUpperCase() === 'AS'))
          throw invalidField(field, 'FROM takes one template name (and optionally AS <stage>)');
        from = checkFrom(w[0], field);
        break;
      }
      case 'RUN': {
        const { flags: f, rest } = flags(args);
        if (f.length > 0) throw invalidField(field, `RUN --${f[0]![0]} is not supported`);
        if (/^<<-?["']?[A-Za-z_]/.test(rest))
          throw invalidField(field, 'heredocs are not supported: put the script in a file and COPY it, or use one RUN line');
        const argv = execForm(rest, field);
        const run = { kind: 'run' as const, cmd: checkCmd(argv ?? rest, field), user, workdir, envs: { ...envs } };
        steps.push({ ...run, name: defaultName(run) });
        break;
      }
      case 'COPY': {
        const { flags: f, rest } = flags(args);
        let owner = 'root';
        for (const [flag, value] of f) {
          if (flag !== 'chown') throw invalidField(field, `COPY --${flag} is not supported${flag === 'from' ? ' (multi-stage builds are not)' : ''}`);
          owner = checkUser(words(value, envs, field)[0] ?? '', field, OWNER);
        }
        const parts = execForm(rest, field) ?? words(rest, envs, field);
        if (parts.length < 2) throw invalidField(field, 'COPY takes one or more sources and a destination');
        const src = parts.slice(0, -1).map((s) => checkSrc(s, field));
        const rawDest = parts[parts.length - 1]!;
        // A relative destination is under WORKDIR, as in Docker.
        const absolute = rawDest.startsWith('/') ? rawDest : `${posix.join(workdir, rawDest)}${rawDest.endsWith('/') ? '/' : ''}`;
        const copy = { kind: 'copy' as const, src, dest: copyDest(absolute, field, src), user: owner };
        steps.push({ ...copy, name: defaultName(copy) });
        break;
      }
      case 'ENV': {
        const w = words(args, envs, field);
        const pairs: Array<[string, string]> = w[0]!.includes('=')
          ? w.map((kv) => {
              const eq = kv.indexOf('=');
              if (eq <= 0) throw invalidField(field, `'${kv}' is not NAME=value`);
              return [kv.slice(0, eq), kv.slice(eq + 1)];
            })
          : // The legacy form: one name, then the rest of the line as its value.
            [[w[0]!, args.slice(args.indexOf(w[0]!) + w[0]!.length).trim()]];
        for (const [k, v] of pairs) {
          if (!isEnvName(k)) throw invalidField(field, `'${k}' is not a variable name`);
          envs[k] = v;
        }
        checkEnvs(envs, field);
        break;
      }
      case 'WORKDIR': {
        const w = words(args, envs, field);
        if (w.length !== 1) throw invalidField(field, 'WORKDIR takes one path');
        workdir = checkAbsPath(posix.resolve(workdir, w[0]!), field);
        break;
      }
      case 'USER': {
        const w = words(args, envs, field);
        if (w.length !== 1 || w[0]!.includes(':')) throw invalidField(field, 'USER takes one user name (a group is not supported)');
        user = checkUser(w[0], field, USER);
        break;
      }
      case 'CMD':
      case 'ENTRYPOINT': {
        const value = execForm(args, field) ?? args;
        if (keyword === 'CMD') cmd = value;
        else {
          entrypoint = value;
          // Docker resets CMD when ENTRYPOINT is set after it.
          cmd = undefined;
        }
        break;
      }
      case 'HEALTHCHECK': {
        const { flags: f, rest } = flags(args);
        if (/^NONE$/i.test(rest)) {
          ready = undefined;
          break;
        }
        const m = /^CMD\s+([\s\S]+)$/i.exec(rest);
        if (!m) throw invalidField(field, 'HEALTHCHECK takes CMD <command> or NONE');
        let intervalMs = READY_INTERVAL_DEFAULT_MS;
        let timeoutS = READY_TIMEOUT_DEFAULT_S;
        for (const [flag, value] of f) {
          if (flag === 'interval') intervalMs = checkInt(durationMs(value, field), field, 50, 60_000);
          else if (flag === 'start-period') timeoutS = checkInt(Math.ceil(durationMs(value, field) / 1000), field, 1, READY_TIMEOUT_MAX_S);
          else notes.push(`${field}: HEALTHCHECK --${flag} ignored (the ready check runs until it passes or the start period ends)`);
        }
        ready = { cmd: checkCmd(execForm(m[1]!, field) ?? m[1]!, field), timeoutS, intervalMs };
        break;
      }
      default:
        throw invalidField(field, `${keyword} is not in the supported subset (FROM, RUN, COPY, ENV, WORKDIR, USER, CMD, ENTRYPOINT, HEALTHCHECK)`);
    }
    checkSteps(steps.length, field);
  }
  if (from === undefined) throw invalidField('from', 'the Dockerfile has no FROM <template>');
  const spec: TemplateSpec = { from, envs, user, workdir, steps };
  const start = startCommand(entrypoint, cmd);
  if (start !== undefined) spec.start = { cmd: checkCmd(start, 'start.cmd'), user, workdir, ...(ready ? { ready } : {}) };
  else if (ready) throw invalidField('start.ready', 'HEALTHCHECK without CMD or ENTRYPOINT: there is nothing to check');
  return { spec, notes };
}

/** ENTRYPOINT and CMD as Docker combines them: exec forms concatenate; a shell-form ENTRYPOINT ignores CMD. */
function startCommand(entrypoint: string[] | string | undefined, cmd: string[] | string | undefined): string[] | string | undefined {
  if (entrypoint === undefined) return cmd;
  if (typeof entrypoint === 'string' || cmd === undefined) return entrypoint;
  return [...entrypoint, ...(typeof cmd === 'string' ? ['/bin/sh', '-c', cmd] : cmd)];
}

/** Reads a spec file by its name: a Dockerfile (`Dockerfile`, `e2b.Dockerfile`, `*.Dockerfile`) or YAML. */
export function parseTemplateFile(fileName: string, text: string): ParsedTemplateFile {
  const base = posix.basename(fileName.replaceAll('\\', '/'));
  return /(^|\.)Dockerfile$/i.test(base) || /^Dockerfile\./i.test(base) ? parseDockerfile(text) : parseTemplateYaml(text);
}
