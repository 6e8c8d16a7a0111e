// A template build, orchestrated here like `docker build` sends its context: a build sandbox runs the steps, each step's snapshot is cached by its key, and the last one is published.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { ControlPlane } from './client.js';
import { CommandExitError, InvalidArgumentError, NotFoundError, SandglassError, type CommandResult } from './errors.js';
import type { ControlPlaneReply } from './replies.js';
import { Sandbox } from './sandbox.js';
import type { ConnectionConfig } from './config.js';
import { invalidField } from './envs.js';
import { collectCopy, planCopy, tarStream, type CollectedCopy } from './template-context.js';
import { checkName, parseTemplateFile, type CopyStep, type RunStep, type TemplateSpec, type TemplateStartSpec } from './template-spec.js';
import type { TemplateBuildStepInfo, TemplateVersionInfo } from './types.js';

export interface BuildLogLine {
  stream: 'stdout' | 'stderr' | 'info';
  text: string;
  /** The step the line belongs to (the start command is the step after the last). */
  step?: number;
}

export interface TemplateBuildOptions extends ConnectionConfig {
  /** The template name the build publishes a version of. */
  name: string;
  /** The spec file (sandglass.template.yaml or a Dockerfile); or give `spec`. */
  file?: string;
  spec?: TemplateSpec;
  /** The directory copy sources are relative to; nothing outside it is read. */
  context: string;
  /** Every line of output and progress, as it happens. */
  onLog?: (line: BuildLogLine) => void;
  /** A run step still running after this long fails the build; default 30 minutes. */
  stepTimeoutMs?: number;
}

export interface BuiltStep {
  index: number;
  name: string;
  /** Its snapshot came from the step cache: the step did not run. */
  cached: boolean;
  durationMs: number;
}

export interface TemplateBuildResult {
  buildId: string;
  version: TemplateVersionInfo;
  /** The steps, then the start command (named `start`) when the spec has one. */
  steps: BuiltStep[];
  durationMs: number;
  /** What the spec file held that the build ignored (Dockerfile EXPOSE, LABEL …). */
  notes: string[];
}

const DEFAULT_STEP_TIMEOUT_MS = 30 * 60_000;
// The control plane ends a build not reported to for 60 s; report at least this often.
const HEARTBEAT_MS = 15_000;
const REPORT_INTERVAL_MS = 1000;
const MAX_LINE = 16_384;
const MAX_LINES_PER_REPORT = 1000;
const TAIL_CHARS = 8000;

/** JSON with object keys sorted at every level and undefined left out: the same value always gives the same text. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object')
    return `{${Object.keys(value)
      .sort()
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(value);
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** The key of the build's starting point: the template it starts from (as resolved) and the sandbox's resources and egress. */
export function baseKey(spec: TemplateSpec, fromId: string): string {
  const { from, memoryMib, vcpus, diskMib, network, secrets } = spec;
  return sha256(canonicalJson({ v: 1, from, fromId, memoryMib, vcpus, diskMib, network, secrets }));
}

/** A step's key: the key before it, the step as it runs (its display name left out) and the digest of what it copies. */
export function stepKey(previous: string, step: RunStep | CopyStep, digest: string): string {
  const { name: _, ...what } = step;
  return sha256(`${previous}\n${canonicalJson(what)}\n${digest}`);
}

/** The start command's key: the last step's key, the command and its ready check, and the envs it runs with. */
export function startKey(previous: string, start: TemplateStartSpec, envs: Record<string, string>): string {
  return sha256(`${previous}\n${canonicalJson({ start, envs })}`);
}

/** Batches a build's output to the control plane (at most one report a second) and keeps the build from going stale. */
class BuildReporter {
  private lines: Array<{ stream: BuildLogLine['stream']; text: string }> = [];
  private steps: TemplateBuildStepInfo[] = [];
  private flushing: Promise<void> = Promise.resolve();
  private timer?: NodeJS.Timeout;
  private heartbeat: NodeJS.Timeout;
  private lastSentMs = 0;
  private failure?: unknown;

  constructor(
    private readonly cp: ControlPlane,
    private readonly buildId: string,
  ) {
    this.heartbeat = setInterval(() => {
      if (Date.now() - this.lastSentMs >= HEARTBEAT_MS) this.schedule(0);
    }, HEARTBEAT_MS / 3);
  }

  line(stream: BuildLogLine['stream'], text: string): void {
    for (let i = 0; i < text.length || i === 0; i += MAX_LINE) this.lines.push({ stream, text: text.slice(i, i + MAX_LINE) });
    this.schedule(REPORT_INTERVAL_MS);
  }

  step(step: TemplateBuildStepInfo): void {
    this.steps.push(step);
    this.schedule(REPORT_INTERVAL_MS);
  }

  private schedule(delayMs: number): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flushing = this.flushing.then(() => this.send());
    }, delayMs);
  }

  private async send(): Promise<void> {
    try {
      // Lines first, then each step change in order: a step's report follows the output it produced.
      do {
        const lines = this.lines.splice(0, MAX_LINES_PER_REPORT);
        const step = this.lines.length === 0 ? this.steps.shift() : undefined;
        await this.cp.request('POST', `/v1/template-builds/${encodeURIComponent(this.buildId)}/log`, { json: { lines, ...(step ? { step } : {}) } });
        this.lastSentMs = Date.now();
      } while (this.lines.length > 0 || this.steps.length > 0);
    } catch (err) {
      this.failure ??= err;
    }
  }

  /** Throws what reporting failed with (the build went stale, the server went away): the build cannot go on. */
  check(): void {
    if (this.failure !== undefined) throw this.failure;
  }

  /** Sends what is pending and stops. */
  async close(): Promise<void> {
    clearInterval(this.heartbeat);
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.flushing;
    if (this.lines.length > 0 || this.steps.length > 0) await this.send();
  }
}

/** The last `TAIL_CHARS` of a step's output, kept as it streams. */
class Tail {
  text = '';
  add(s: string): void {
    this.text = (this.text + s).slice(-TAIL_CHARS);
  }
}

/** Splits streamed output into lines per stream, for the log; a line cut by a frame boundary waits for its end. */
class LineSplitter {
  private partial = { stdout: '', stderr: '' };
  constructor(private readonly emit: (stream: 'stdout' | 'stderr', text: string) => void) {}
  write(stream: 'stdout' | 'stderr', data: string): void {
    const parts = (this.partial[stream] + data).split('\n');
    this.partial[stream] = parts.pop()!;
    for (const p of parts) this.emit(stream, p.replace(/\r$/, ''));
  }
  end(): void {
    for (const stream of ['stdout', 'stderr'] as const) if (this.partial[stream] !== '') this.emit(stream, this.partial[stream]);
    this.partial = { stdout: '', stderr: '' };
  }
}

function buildFailed(message: string, details: Record<string, unknown>, cause?: unknown): SandglassError {
  return new InvalidArgumentError('template_build_failed', message, { status: 422, details, cause });
}

/** A cache hit's snapshot, or undefined when the key has none (or its snapshot is gone). */
async function cached(cp: ControlPlane, key: string): Promise<string | undefined> {
  try {
    return (await cp.json<ControlPlaneReply<'getTemplateCacheEntry'>>('GET', `/v1/template-cache/${key}`)).snapshotId;
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

/** The spec to build and what reading it noted: from `spec`, or read from `file`. */
async function loadSpec(opts: TemplateBuildOptions): Promise<{ spec: TemplateSpec; notes: string[] }> {
  if (opts.spec) return { spec: opts.spec, notes: [] };
  if (!opts.file)
    throw new InvalidArgumentError('invalid_argument', 'file: give a spec file (sandglass.template.yaml or a Dockerfile) or a spec', {
      details: { field: 'file' },
    });
  const text = await readFile(opts.file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw new InvalidArgumentError('invalid_argument', `file: cannot read ${opts.file} (${err.code})`, { details: { field: 'file' } });
  });
  return parseTemplateFile(opts.file, text);
}

/** Builds a template version from a spec; see Template.build. */
export async function buildTemplate(cp: ControlPlane, opts: TemplateBuildOptions): Promise<TemplateBuildResult> {
  const began = Date.now();
  const name = checkName(opts.name, 'name');
  const { spec, notes } = await loadSpec(opts);
  const config: ConnectionConfig = { apiUrl: cp.config.apiUrl, apiKey: cp.config.apiKey, requestTimeoutMs: cp.config.requestTimeoutMs };
  const stepTimeoutMs = opts.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  const log = (line: BuildLogLine) => opts.onLog?.(line);

  // Everything that can be refused is checked before the server is asked for anything: bad input changes nothing.
  const copies: Array<CollectedCopy | undefined> = [];
  for (const [i, step] of spec.steps.entries()) {
    if (step.kind !== 'run' && step.kind !== 'copy')
      throw invalidField(`steps[${i}].kind`, `unknown step kind '${String((step as { kind: unknown }).kind)}'; a step is run or copy`);
    copies.push(step.kind === 'copy' ? await collectCopy(opts.context, step, `steps[${i}].copy.src`) : undefined);
  }
  let fromId: string;
  try {
    fromId = (await cp.json<ControlPlaneReply<'getTemplate'>>('GET', `/v1/templates/${encodeURIComponent(spec.from)}`)).template.id;
  } catch (err) {
    if (err instanceof NotFoundError)
      throw new NotFoundError('template_not_found', `from: there is no template '${spec.from}' (see \`sandglass templates\`)`, {
        status: 404,
        details: { field: 'from' },
        cause: err,
      });
    throw err;
  }
  const keys: string[] = [];
  let key = baseKey(spec, fromId);
  for (const [i, step] of spec.steps.entries()) keys.push((key = stepKey(key, step, copies[i]?.digest ?? '')));
  const finalKey = spec.start ? startKey(key, spec.start, spec.envs) : undefined;

  const build = await cp.json<ControlPlaneReply<'startTemplateBuild'>>('POST', '/v1/template-builds', { json: { name } });
  const reporter = new BuildReporter(cp, build.id);
  const info = (text: string, step?: number) => {
    log({ stream: 'info', text, step });
    reporter.line('info', text);
  };
  const steps: BuiltStep[] = [];
  let sbx: Sandbox | undefined;
  let current: number | undefined;
  let failed = false;
  try {
    for (const n of notes) info(n);
    // The longest prefix of steps whose snapshots the cache still has.
    let snapshotId: string | undefined;
    let done = 0;
    for (; done < keys.length; done++) {
      const hit = await cached(cp, keys[done]!);
      if (hit === undefined) break;
      snapshotId = hit;
    }
    const startIndex = spec.steps.length;
    const startCached = done === keys.length && finalKey !== undefined ? await cached(cp, finalKey) : undefined;
    const markCached = (index: number, stepName: string) => {
      steps.push({ index, name: stepName, cached: true, durationMs: 0 });
      reporter.step({ index, name: stepName, status: 'cached' });
      info(`step ${index + 1}/${spec.steps.length} ${stepName}: cached`, index);
    };
    for (let i = 0; i < done; i++) markCached(i, spec.steps[i]!.name);
    if (startCached !== undefined) {
      markCached(startIndex, 'start');
      snapshotId = startCached;
    }

    const needsSandbox = done < keys.length || (spec.start !== undefined && startCached === undefined) || snapshotId === undefined;
    if (needsSandbox) {
      const timeoutS = Math.ceil(stepTimeoutMs / 1000) + 600;
      info(snapshotId ? `build sandbox: fork of ${snapshotId}` : `build sandbox: ${spec.from}`);
      sbx = snapshotId
        ? (await Sandbox.fork(snapshotId, { ...config, timeoutS }))[0]!
        : await Sandbox.create({
            ...config,
            template: fromId,
            memoryMib: spec.memoryMib,
            vcpus: spec.vcpus,
            diskMib: spec.diskMib,
            network: spec.network,
            secrets: spec.secrets,
            timeoutS,
          });
      const box = sbx;
      const snap = async (index: number, k: string) => {
        // Compact: a version's RAM holds only live pages, as a platform template's does, so forks of it copy less.
        const taken = await box.snapshot({ name: `tb-${name.slice(0, 32)}-${index}-${k.slice(0, 16)}`, compact: true });
        await cp.request('PUT', `/v1/template-cache/${k}`, { json: { snapshotId: taken.id } });
        return taken.id;
      };
      for (let i = done; i < keys.length; i++) {
        const step = spec.steps[i]!;
        current = i;
        reporter.check();
        await box.setTimeout(timeoutS);
        const t0 = Date.now();
        reporter.step({ index: i, name: step.name, status: 'running' });
        info(`step ${i + 1}/${spec.steps.length} ${step.name}`, i);
        await runStep(box, step, i, copies[i], { log, reporter, stepTimeoutMs });
        snapshotId = await snap(i, keys[i]!);
        const durationMs = Date.now() - t0;
        steps.push({ index: i, name: step.name, cached: false, durationMs });
        reporter.step({ index: i, name: step.name, status: 'done', durationMs });
        info(`step ${i + 1}/${spec.steps.length} done in ${(durationMs / 1000).toFixed(1)} s`, i);
      }
      if (spec.start && startCached === undefined) {
        current = startIndex;
        reporter.check();
        const t0 = Date.now();
        reporter.step({ index: startIndex, name: 'start', status: 'running' });
        info(`start: ${spec.start.cmd}`, startIndex);
        await startAndWait(box, spec.start, spec.envs, startIndex, { log, reporter });
        snapshotId = await snap(startIndex, finalKey!);
        const durationMs = Date.now() - t0;
        steps.push({ index: startIndex, name: 'start', cached: false, durationMs });
        reporter.step({ index: startIndex, name: 'start', status: 'done', durationMs });
      }
      if (snapshotId === undefined) snapshotId = (await box.snapshot({ name: `tb-${name.slice(0, 32)}-from` })).id;
    }
    current = undefined;
    reporter.check();
    await reporter.close();
    const version = await cp.json<ControlPlaneReply<'createTemplateVersion'>>('POST', '/v1/templates', {
      json: {
        name,
        snapshotId,
        envs: spec.envs,
        user: spec.user,
        workdir: spec.workdir,
        start: spec.start ?? null,
        buildId: build.id,
      },
    });
    log({ stream: 'info', text: `published ${name} version ${version.version} (${version.id})` });
    return { buildId: build.id, version, steps, durationMs: Date.now() - began, notes };
  } catch (err) {
    failed = true;
    // A step's failure names the build too; anything else (size_unsupported, policy_invalid from the build sandbox's
    // create, a lost connection) keeps its own code, and the build is failed with its message.
    const failure =
      err instanceof SandglassError && err.code === 'template_build_failed' ? buildFailed(err.message, { ...err.details, buildId: build.id }, err.cause) : err;
    const message = err instanceof Error ? err.message : String(err);
    await reporter.close().catch(() => undefined);
    await cp
      .json<ControlPlaneReply<'failTemplateBuild'>>('POST', `/v1/template-builds/${encodeURIComponent(build.id)}/fail`, {
        json: { message: (message || 'the build failed').slice(0, 16_384), ...(current === undefined ? {} : { step: current }) },
      })
      .catch(() => undefined);
    throw failure;
  } finally {
    if (!failed) await reporter.close().catch(() => undefined);
    if (sbx) await sbx.kill().catch(() => undefined);
  }
}

interface StepContext {
  log: (line: BuildLogLine) => void;
  reporter: BuildReporter;
  stepTimeoutMs?: number;
}

/** Output callbacks that feed the log, the build's report and the step's tail. */
function outputOf(ctx: StepContext, index: number, tail: Tail) {
  const lines = new LineSplitter((stream, text) => {
    ctx.log({ stream, text, step: index });
    ctx.reporter.line(stream, text);
  });
  return {
    lines,
    callbacks: {
      onStdout: (d: string) => {
        tail.add(d);
        lines.write('stdout', d);
      },
      onStderr: (d: string) => {
        tail.add(d);
        lines.write('stderr', d);
      },
      retainOutput: false,
    },
  };
}

async function runStep(sbx: Sandbox, step: RunStep | CopyStep, index: number, copy: CollectedCopy | undefined, ctx: StepContext): Promise<void> {
  const tail = new Tail();
  const { lines, callbacks } = outputOf(ctx, index, tail);
  const fail = (what: string, result?: CommandResult) =>
    buildFailed(`step ${index} (${step.name}) ${what}${tail.text ? `; its output ends:\n${tail.text}` : ''}`, {
      step: index,
      stepName: step.name,
      ...(result ? { exitCode: result.exitCode } : {}),
      outputTail: tail.text,
    });
  try {
    if (step.kind === 'run') {
      // WORKDIR creates its directory, as in Docker.
      if (step.workdir !== '/') await sbx.files.makeDir(step.workdir);
      await sbx.commands.run(step.cmd, { ...callbacks, user: step.user, cwd: step.workdir, envs: step.envs, timeoutMs: ctx.stepTimeoutMs });
      return;
    }
    const collected = copy!;
    const destIsDir = collected.singleFile && !step.dest.endsWith('/') ? await isDir(sbx, step.dest) : true;
    const plan = planCopy(collected, step.dest, destIsDir);
    const existed = await sbx.files.exists(plan.targetDir);
    const written = await sbx.files.writeTar(plan.targetDir, Readable.from(tarStream(plan.entries)));
    tail.add(`copied ${written.entries} entries (${written.sizeBytes} bytes) into ${plan.targetDir}\n`);
    lines.write('stdout', `copied ${written.entries} entries (${written.sizeBytes} bytes) into ${plan.targetDir}\n`);
    if (step.user !== 'root') {
      // Only what the copy wrote (and the directory it created) changes owner, as with Docker's --chown.
      const owner = step.user.includes(':') ? step.user : /^[0-9]+$/.test(step.user) ? `${step.user}:${step.user}` : `${step.user}:`;
      const paths = plan.roots.map((r) => (plan.targetDir === '/' ? `/${r}` : `${plan.targetDir}/${r}`));
      if (!existed && plan.targetDir !== '/') paths.push(plan.targetDir);
      await sbx.commands.exec(['chown', '-R', owner, '--', ...paths], { ...callbacks, timeoutMs: ctx.stepTimeoutMs });
    }
  } catch (err) {
    if (err instanceof CommandExitError) throw fail(`exited with code ${err.exitCode}`, err.result);
    if (err instanceof SandglassError && err.code === 'timeout' && 'result' in err)
      throw fail(`ran past its timeout of ${ctx.stepTimeoutMs} ms`, (err as { result: CommandResult }).result);
    throw fail(`failed: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    lines.end();
  }
}

async function isDir(sbx: Sandbox, path: string): Promise<boolean> {
  try {
    return (await sbx.files.stat(path)).type === 'dir';
  } catch (err) {
    if (err instanceof NotFoundError) return false;
    throw err;
  }
}

/** Starts the start command in the background and runs the ready check until it exits 0, the start command ends, or its time is up. */
async function startAndWait(sbx: Sandbox, start: TemplateStartSpec, envs: Record<string, string>, index: number, ctx: StepContext): Promise<void> {
  const tail = new Tail();
  const { lines, callbacks } = outputOf(ctx, index, tail);
  const fail = (what: string, field: string) =>
    buildFailed(`start: ${what}${tail.text ? `; its output ends:\n${tail.text}` : ''}`, { step: index, stepName: 'start', field, outputTail: tail.text });
  const handle = await sbx.commands.run(start.cmd, { ...callbacks, background: true, user: start.user, cwd: start.workdir, envs, timeoutMs: 0 });
  let ended: string | undefined;
  handle.wait().then(
    (r) => {
      ended = `the start command exited with code ${r.exitCode} before it was ready`;
    },
    (err: unknown) => {
      ended = `the start command ended before it was ready: ${err instanceof Error ? err.message : String(err)}`;
    },
  );
  try {
    if (!start.ready) return;
    const deadline = Date.now() + start.ready.timeoutS * 1000;
    let last = '';
    for (;;) {
      if (ended) throw fail(ended, 'start.cmd');
      try {
        await sbx.commands.run(start.ready.cmd, {
          user: start.user,
          cwd: start.workdir,
          envs,
          timeoutMs: Math.max(1000, Math.min(30_000, deadline - Date.now())),
        });
        ctx.reporter.line('info', 'start: ready');
        ctx.log({ stream: 'info', text: 'start: ready', step: index });
        return;
      } catch (err) {
        if (!(err instanceof CommandExitError) && !(err instanceof SandglassError && err.code === 'timeout')) throw err;
        last = err instanceof CommandExitError ? `exit ${err.exitCode}${err.stderr ? `: ${err.stderr.trim().slice(-500)}` : ''}` : 'timed out';
      }
      if (Date.now() + start.ready.intervalMs > deadline)
        throw fail(`the ready check did not pass within ${start.ready.timeoutS} s (last: ${last})`, 'start.ready');
      await new Promise((resolve) => setTimeout(resolve, start.ready!.intervalMs));
    }
  } finally {
    lines.end();
    // The process keeps running into the snapshot; only this handle's stream stops.
    if (!ended) await handle.disconnect().catch(() => undefined);
  }
}
