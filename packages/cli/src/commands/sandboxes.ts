// `create`, `run`, `ls`, `kill` and `templates`: a sandbox's lifecycle, and what one can be created from.
import { constants as osConstants } from 'node:os';
import { type Command, Option } from 'commander';
import { Sandbox, SandglassError, type SandboxCreateOptions, type SandboxState } from '@sandglass/sdk';
import { collectMetadata, collectRepeated, parsePositiveInt } from '../args.js';
import { execStreaming } from '../exec.js';
import { printJson, printTable, shortTime } from '../output.js';
import { addExecOptions, type ExecFlags, execOptions } from './guest.js';
import { type Act, withoutAccess } from './shared.js';

interface CreateFlags {
  template?: string;
  memoryMib?: number;
  vcpus?: number;
  diskMib?: number;
  timeoutS?: number;
  onTimeout?: 'kill' | 'pause';
  onTimeoutDiskOnly?: boolean;
  autoResume?: boolean;
  metadata?: Record<string, string>;
  snapshotInterval?: number;
  snapshotBestEffort?: boolean;
  allow?: string[];
  deny?: string[];
  secret?: string[];
}

function addCreateOptions(cmd: Command): Command {
  return cmd
    .option('--template <name>', 'template name or id', 'base')
    .option('--memory-mib <n>', 'guest memory in MiB', parsePositiveInt)
    .option('--vcpus <n>', 'virtual CPUs', parsePositiveInt)
    .option('--disk-mib <n>', "grow the root disk to at least this many MiB (1024…65536; default: the template's)", parsePositiveInt)
    .option('--timeout-s <n>', 'end the sandbox this many seconds after it starts', parsePositiveInt)
    .addOption(
      new Option('--on-timeout <action>', 'what the timeout does: kill it, or pause it (keeps its snapshots, frees its RAM)').choices(['kill', 'pause']),
    )
    .option('--on-timeout-disk-only', 'with --on-timeout pause: keep the disk alone (the resume boots the guest; processes are gone)')
    .option('--auto-resume', 'while paused, a request to its ports with its access token or a signed URL resumes it')
    .option('--metadata <K=V>', 'a label (repeatable)', collectMetadata)
    .option('--snapshot-interval <s>', 'seconds between rolling snapshots (5…86400; default 60)', parsePositiveInt)
    .option('--snapshot-best-effort', 'keep --snapshot-interval even where the node measured it cannot (late snapshots are reported)')
    .option(
      '--allow <rule>',
      "let the sandbox reach this (host[:port] [METHOD] [/path], '*.domain'; repeatable); without --allow it has no network",
      collectRepeated,
    )
    .option('--deny <rule>', 'keep it from this even where an --allow rule matches (repeatable)', collectRepeated)
    .option('--secret <NAME>', 'bind this tenant secret: the sandbox sees $NAME holding a placeholder (repeatable)', collectRepeated);
}

const createOptions = (f: CreateFlags): SandboxCreateOptions => ({
  template: f.template,
  memoryMib: f.memoryMib,
  vcpus: f.vcpus,
  diskMib: f.diskMib,
  timeoutS: f.timeoutS,
  onTimeout: f.onTimeout,
  ...(f.onTimeoutDiskOnly === true ? { onTimeoutKeepMemory: false } : {}),
  autoResume: f.autoResume,
  metadata: f.metadata,
  snapshotIntervalS: f.snapshotInterval,
  snapshotBestEffort: f.snapshotBestEffort,
  network: f.allow === undefined && f.deny === undefined ? undefined : { allow: f.allow ?? [], deny: f.deny ?? [] },
  secrets: f.secret,
  // The first sandbox of a new size waits for its template build: say so on stderr instead of hanging silently.
  onProgress: (p) => process.stderr.write(`${p.message}\n`),
});

const SANDBOX_STATES: SandboxState[] = ['starting', 'running', 'paused', 'ended', 'failed'];

const signalExitCode = (signal: NodeJS.Signals) => 128 + osConstants.signals[signal];

/** `run`: a sandbox for one command. It is killed however the command ends: exit, error, Ctrl-C. */
async function runOnce(argv: string[], flags: CreateFlags & ExecFlags): Promise<number> {
  let sbx: Sandbox | undefined;
  let signalled: NodeJS.Signals | undefined;
  const killAndExit = async () => {
    await sbx?.kill().catch(() => undefined);
    process.exit(signalExitCode(signalled ?? 'SIGINT'));
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled) return;
    signalled = signal;
    // Still being created: the kill follows as soon as the id is known.
    if (sbx) void killAndExit();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    sbx = await Sandbox.create(createOptions(flags));
    if (signalled) await killAndExit();
    try {
      return await execStreaming(sbx, argv, { ...execOptions(flags), forwardSignals: false });
    } finally {
      await sbx.kill();
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

export function registerSandboxCommands(program: Command, act: Act): void {
  addCreateOptions(program.command('create').description('create a sandbox and print its id'))
    .option('--json', 'print the sandbox as JSON')
    .action(
      act(async (flags: CreateFlags & { json?: boolean }) => {
        const sbx = await Sandbox.create(createOptions(flags));
        if (!flags.json) return void process.stdout.write(`${sbx.id}\n`);
        printJson(withoutAccess(await sbx.getInfo()));
      }),
    );

  addExecOptions(addCreateOptions(program.command('run').description('create a sandbox, run one command in it, kill it')))
    .argument('<cmd...>', 'the command and its arguments; put -- before it when it has options')
    .action(act(async (argv: string[], flags: CreateFlags & ExecFlags) => runOnce(argv, flags)));

  program
    .command('ls')
    .description('list sandboxes')
    .addOption(new Option('--state <state>', 'only sandboxes in this state').choices(SANDBOX_STATES))
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { state?: SandboxState; json?: boolean }) => {
        const sandboxes = await Sandbox.list({ state: flags.state });
        if (flags.json) return printJson(sandboxes);
        await printTable(
          ['ID', 'TEMPLATE', 'STATE', 'MEMORY MIB', 'VCPUS', 'CREATED', 'EXPIRES'],
          sandboxes.map((s) => [s.id, s.template, s.state, s.memoryMib, s.vcpus, shortTime(s.createdAt), shortTime(s.expiresAt)]),
        );
      }),
    );

  program
    .command('kill')
    .description('kill a sandbox')
    .argument('<id>', 'sandbox id')
    .action(
      act(async (id: string) => {
        if (!(await Sandbox.kill(id))) throw new SandglassError('sandbox_not_found', `no sandbox ${id}`, { status: 404 });
      }),
    );

  program
    .command('templates')
    .description('templates a sandbox can be created from')
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { json?: boolean }) => {
        const templates = await Sandbox.listTemplates();
        if (flags.json) return printJson(templates);
        await printTable(
          ['NAME', 'ID', 'STATUS', 'MEMORY MIB', 'CREATED'],
          templates.map((t) => [t.name, t.id, t.status, t.memoryMib, shortTime(t.createdAt)]),
        );
      }),
    );
}
