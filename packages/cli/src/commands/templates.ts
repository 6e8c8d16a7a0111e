// `template build|ls|rm|logs|create|pool`: the tenant's custom templates, built from a spec and a context directory or promoted from a snapshot.
import { existsSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { parseTemplateFile, SandglassError, Template, type BuildLogLine } from '@sandglass/sdk';
import { collectEnv, parsePositiveInt, UsageError } from '../args.js';
import { printJson, printTable, shortTime } from '../output.js';
import type { Act } from './shared.js';

/** The spec files `template build` looks for in the context, in this order, when -f does not name one. */
export const SPEC_FILES = ['sandglass.template.yaml', 'e2b.Dockerfile', 'Dockerfile'];

/** The spec file of a build: -f as given (relative to the working directory), else the first of SPEC_FILES in the context. */
export function findSpecFile(context: string, file: string | undefined): string {
  if (file !== undefined) return resolve(file);
  const found = SPEC_FILES.map((f) => join(context, f)).find((p) => existsSync(p));
  if (!found) throw new UsageError(`no spec file in ${context}: write one of ${SPEC_FILES.join(', ')}, or name it with -f`);
  return found;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** A build's output on stderr: progress lines marked, step output indented under its step. */
function printLine(line: BuildLogLine): void {
  process.stderr.write(line.stream === 'info' ? `==> ${line.text}\n` : `    ${line.text}\n`);
}

export function registerTemplateCommands(program: Command, act: Act): void {
  const template = program.command('template').description("the tenant's custom templates: build, list, remove, read build logs, promote a snapshot");

  template
    .command('build')
    .description('build a new version of a template from a spec (sandglass.template.yaml or a Dockerfile) and a context directory')
    .argument('[context]', 'the directory COPY sources are read from (nothing outside it)', '.')
    .option('-f, --file <file>', `the spec file (default: the first of ${SPEC_FILES.join(', ')} in the context)`)
    .option('--name <name>', "the template's name (default: the spec's `name`)")
    .option('--json', 'print the result as JSON on stdout')
    .action(
      act(async (contextArg: string, flags: { file?: string; name?: string; json?: boolean }) => {
        const context = resolve(contextArg);
        const file = findSpecFile(context, flags.file);
        // Read here, not by the SDK: a YAML spec may give the name itself.
        const parsed = parseTemplateFile(basename(file), readFileSync(file, 'utf8'));
        const name = flags.name ?? parsed.name;
        if (name === undefined) throw new UsageError(`${basename(file)} names no template: give --name`);
        process.stderr.write(`==> building ${name} from ${file} (context ${context})\n`);
        for (const note of parsed.notes) process.stderr.write(`note: ${note}\n`);
        const result = await Template.build({ name, spec: parsed.spec, context, onLog: printLine });
        if (flags.json) return printJson(result);
        process.stderr.write(
          `${result.steps.map((s) => `    ${String(s.index).padStart(3)} ${s.cached ? 'cached ' : seconds(s.durationMs).padStart(7)} ${s.name}`).join('\n')}\n`,
        );
        process.stderr.write(`==> ${name} version ${result.version.version} in ${seconds(result.durationMs)} (build ${result.buildId})\n`);
        process.stdout.write(`${result.version.id}\n`);
      }),
    );

  template
    .command('ls')
    .description("templates a sandbox can be created from: the platform's and the tenant's")
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { json?: boolean }) => {
        const templates = await Template.list();
        if (flags.json) return printJson(templates);
        await printTable(
          ['NAME', 'ID', 'VERSION', 'STATUS', 'MEMORY MIB', 'CUSTOM', 'CREATED'],
          templates.map((t) => [
            t.name,
            t.id,
            t.version ?? '',
            t.status,
            t.memoryMib,
            // Another tenant's published template is the platform's to this tenant; its own published one says so.
            t.readOnly ? 'platform' : t.custom ? (t.public ? 'public' : 'yes') : '',
            shortTime(t.createdAt),
          ]),
        );
      }),
    );

  template
    .command('rm')
    .description("delete a custom template's versions (one with --version); sandboxes and snapshots made from them keep working")
    .argument('<name>', 'the template')
    .option('--version <n>', 'only this version', parsePositiveInt)
    .action(
      act(async (name: string, flags: { version?: number }) => {
        await Template.delete(name, { version: flags.version });
      }),
    );

  template
    .command('pool')
    .description("keep <size> VMs of a custom template's newest version warmed for instant creates (0 turns it off, at most 8)")
    .argument('<name>', 'the template')
    .argument('<size>', 'warmed VMs to keep')
    .option('--json', 'print JSON')
    .action(
      act(async (name: string, size: string, flags: { json?: boolean }) => {
        if (!/^\d+$/.test(size)) throw new UsageError(`size must be a whole number from 0 to 8, got '${size}'`);
        const t = await Template.setWarmPool(name, Number(size));
        if (flags.json) return printJson(t);
        process.stderr.write(`${name}: ${t.warmPoolSize ?? 0} warmed VM(s) of version ${t.version ?? ''}\n`);
      }),
    );

  template
    .command('publish')
    .description('make a custom template of your tenant usable by every tenant, or withdraw it with --off (operator key)')
    .argument('<name>', 'the template')
    .option('--off', 'withdraw it: other tenants can no longer create from it')
    .option('--json', 'print JSON')
    .action(
      act(async (name: string, flags: { off?: boolean; json?: boolean }) => {
        const t = await Template.setPublic(name, flags.off !== true);
        if (flags.json) return printJson(t);
        process.stderr.write(`${name}: ${t.public ? 'published for every tenant' : 'private to its tenant'}\n`);
      }),
    );

  template
    .command('logs')
    .description("a build's log: by build id (bld_…) or a template's newest build")
    .argument('<build>', 'bld_… or a template name')
    .option('-f, --follow', 'keep printing until the build ends')
    .action(
      act(async (build: string, flags: { follow?: boolean }) => {
        const { status } = await Template.logs(build, {
          follow: flags.follow,
          onLine: (l) => (l.stream === 'stderr' ? process.stderr : process.stdout).write(`${l.stream === 'info' ? '==> ' : ''}${l.text}\n`),
        });
        if (status === 'failed') {
          process.stderr.write('the build failed\n');
          return 1;
        }
        if (status === 'running') process.stderr.write('the build is still running (follow it with -f)\n');
      }),
    );

  template
    .command('create')
    .description('promote a snapshot to a new version of a template (the name is created on first use)')
    .argument('<name>', 'the template')
    .requiredOption('--from <snapshot>', 'the snapshot (snap_…)')
    .option('--env <K=V>', 'a variable of every sandbox made from it (repeatable)', collectEnv)
    .option('--user <user>', 'the user its commands run as by default')
    .option('--workdir <dir>', 'their working directory')
    .option('--json', 'print JSON')
    .action(
      act(async (name: string, flags: { from: string; env?: Record<string, string>; user?: string; workdir?: string; json?: boolean }) => {
        if (!flags.from.startsWith('snap_'))
          throw new SandglassError('invalid_argument', `--from: '${flags.from}' is not a snapshot id (snap_…)`, { details: { field: 'from' } });
        const version = await Template.fromSnapshot(name, flags.from, { envs: flags.env, user: flags.user, workdir: flags.workdir });
        if (flags.json) return printJson(version);
        process.stdout.write(`${version.id}\n`);
        process.stderr.write(`${name} version ${version.version} from ${version.snapshotId}\n`);
      }),
    );
}
