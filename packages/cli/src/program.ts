// The `sandglass` command line: every command, its options, and the exit status it leaves.
import { constants as osConstants } from 'node:os';
import { Command, Option } from 'commander';
import {
  ApiKeys,
  Sandbox,
  SandglassError,
  Secrets,
  type ApiKeyInfo,
  type ApiKeyRole,
  type NetworkPolicy,
  type SandboxCreateOptions,
  type SandboxInfo,
  type SandboxState,
} from '@sandglass/sdk';
import {
  collectEnv,
  collectList,
  collectMetadata,
  collectRepeated,
  parseDurationS,
  parseForkArg,
  parseKeyExpiryS,
  parseNonNegativeInt,
  parsePositiveInt,
  parseTime,
  planCp,
  secretValueFromStdin,
  UsageError,
} from './args.js';
import { copy } from './cp.js';
import { attach, execStreaming, startExec, type ExecOptions } from './exec.js';
import { formatBytes, printJson, printTable, shortTime } from './output.js';
import { shell } from './shell.js';

/** What the actions leave for main: the exit status. */
export interface RunState {
  exitCode: number;
}

interface CreateFlags {
  template?: string;
  memoryMib?: number;
  vcpus?: number;
  timeoutS?: number;
  metadata?: Record<string, string>;
  snapshotInterval?: number;
  allow?: string[];
  deny?: string[];
  secret?: string[];
}

interface ExecFlags {
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
  timeoutMs: number;
  interactive?: boolean;
}

function addCreateOptions(cmd: Command): Command {
  return cmd
    .option('--template <name>', 'template name or id', 'base')
    .option('--memory-mib <n>', 'guest memory in MiB', parsePositiveInt)
    .option('--vcpus <n>', 'virtual CPUs', parsePositiveInt)
    .option('--timeout-s <n>', 'end the sandbox this many seconds after it starts', parsePositiveInt)
    .option('--metadata <K=V>', 'a label (repeatable)', collectMetadata)
    .option('--snapshot-interval <s>', 'seconds between rolling snapshots (5…86400; default 60)', parsePositiveInt)
    .option(
      '--allow <rule>',
      "let the sandbox reach this (host[:port] [METHOD] [/path], '*.domain'; repeatable); without --allow it has no network",
      collectRepeated,
    )
    .option('--deny <rule>', 'keep it from this even where an --allow rule matches (repeatable)', collectRepeated)
    .option('--secret <NAME>', 'bind this tenant secret: the sandbox sees $NAME holding a placeholder (repeatable)', collectRepeated);
}

function addExecOptions(cmd: Command): Command {
  return cmd
    .option('--cwd <dir>', 'working directory in the sandbox')
    .option('--env <K=V>', 'environment variable (repeatable)', collectEnv)
    .option('--user <user>', 'user to run as (default root)')
    .option('--timeout-ms <n>', 'kill the command after this many ms (0 = no limit)', parseNonNegativeInt, 0)
    .option('-i, --interactive', 'forward stdin even when it is a terminal');
}

const createOptions = (f: CreateFlags): SandboxCreateOptions => ({
  template: f.template,
  memoryMib: f.memoryMib,
  vcpus: f.vcpus,
  timeoutS: f.timeoutS,
  metadata: f.metadata,
  snapshotIntervalS: f.snapshotInterval,
  network: f.allow === undefined && f.deny === undefined ? undefined : { allow: f.allow ?? [], deny: f.deny ?? [] },
  secrets: f.secret,
});

function printNetwork(network: NetworkPolicy | null): void {
  if (network === null) return void process.stdout.write('no network\n');
  const lines = [...network.allow.map((r) => `allow\t${r}`), ...network.deny.map((r) => `deny\t${r}`)];
  process.stdout.write(lines.length === 0 ? 'no rules: every destination is denied\n' : `${lines.join('\n')}\n`);
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

const execOptions = (f: ExecFlags): ExecOptions => ({
  cwd: f.cwd,
  envs: f.env,
  user: f.user,
  timeoutMs: f.timeoutMs,
  // -i forces forwarding; otherwise exec decides by whether stdin is a pipe or file with data.
  stdin: f.interactive ? true : undefined,
});

const SANDBOX_STATES: SandboxState[] = ['starting', 'running', 'paused', 'ended', 'failed'];

/** A sandbox without the access grant of the answers that start one: that is a credential and stays out of the output. */
const withoutAccess = ({ access: _, ...info }: SandboxInfo): Omit<SandboxInfo, 'access'> => info;

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

export function buildProgram(state: RunState): Command {
  const program = new Command('sandglass')
    .description('Sandglass: disposable Linux sandboxes for AI agents')
    .showHelpAfterError('(run with --help for usage)')
    // Usage errors exit 2 (main maps commander's errors); actions report their own exit status.
    .exitOverride();
  const act =
    <A extends unknown[]>(fn: (...args: A) => Promise<number | void>) =>
    async (...args: A) => {
      state.exitCode = (await fn(...args)) ?? 0;
    };

  program
    .command('up')
    .description('run the control plane and a gateway in this process (SQLite, local chunk store)')
    .option('--port <n>', 'control-plane port', parsePositiveInt, 7070)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .action(
      act(async (flags: { port: number; host: string }) => {
        // Loaded only here: every other command is a plain client and must start fast.
        const { up } = await import('@sandglass/server');
        // Resolves once the server has stopped (Ctrl-C).
        await up({ port: flags.port, host: flags.host });
      }),
    );

  program
    .command('doctor')
    .description('what this host offers (KVM and its probe, cgroups, namespaces, QEMU, memory) and what Sandglass will use')
    .option('--no-probe', 'report the cached accelerator verdict only (the probe boots the guest, building its image if missing)')
    .option('--json', 'print the report as JSON')
    .action(
      act(async (flags: { probe: boolean; json?: boolean }) => {
        const { doctor, formatDoctor } = await import('@sandglass/server');
        const report = await doctor({ probe: flags.probe });
        if (flags.json) printJson(report);
        else process.stdout.write(formatDoctor(report));
      }),
    );

  addCreateOptions(program.command('create').description('create a sandbox and print its id'))
    .option('--json', 'print the sandbox as JSON')
    .action(
      act(async (flags: CreateFlags & { json?: boolean }) => {
        const sbx = await Sandbox.create(createOptions(flags));
        if (!flags.json) return void process.stdout.write(`${sbx.id}\n`);
        printJson(withoutAccess(await sbx.getInfo()));
      }),
    );

  addExecOptions(program.command('exec').description('run a command (argv, no shell) and exit with its exit code'))
    .argument('<id>', 'sandbox id')
    .argument('<cmd...>', 'the command and its arguments; put -- before it when it has options')
    .option('--background', 'start it, print its command id and return')
    .action(
      act(async (id: string, argv: string[], flags: ExecFlags & { background?: boolean }) => {
        const sbx = await Sandbox.connect(id);
        if (!flags.background) return execStreaming(sbx, argv, execOptions(flags));
        const handle = await startExec(sbx, argv, { ...execOptions(flags), stdin: false });
        await handle.disconnect();
        process.stdout.write(`${handle.id}\n`);
      }),
    );

  program
    .command('attach')
    .description("stream a running command's output from an offset and exit with its exit code")
    .argument('<id>', 'sandbox id')
    .argument('<command-id>', 'command id (from exec --background)')
    .option('--from-offset <n>', 'output byte offset to resume at (default: the oldest the gateway holds)', parseNonNegativeInt)
    .action(act(async (id: string, commandId: string, flags: { fromOffset?: number }) => attach(await Sandbox.connect(id), commandId, flags.fromOffset)));

  addExecOptions(addCreateOptions(program.command('run').description('create a sandbox, run one command in it, kill it')))
    .argument('<cmd...>', 'the command and its arguments; put -- before it when it has options')
    .action(act(async (argv: string[], flags: CreateFlags & ExecFlags) => runOnce(argv, flags)));

  program
    .command('cp')
    .description('copy one file in or out of a sandbox (sbx_…:/path; - is stdin/stdout)')
    .argument('<source>')
    .argument('<target>')
    .action(act(async (source: string, target: string) => copy(planCp(source, target))));

  program
    .command('shell')
    .description('an interactive terminal in a sandbox')
    .argument('<id>', 'sandbox id')
    .action(act(async (id: string) => shell(id)));

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
    .command('events')
    .description("a sandbox's event log")
    .argument('<id>', 'sandbox id')
    .option('--egress', 'only what the egress gateway recorded (egress.* and secret.* events)')
    .option('--json', 'print JSON')
    .action(
      act(async (id: string, flags: { egress?: boolean; json?: boolean }) => {
        const events = await (await Sandbox.connect(id)).events(flags.egress ? { types: ['egress', 'secret'] } : {});
        if (flags.json) return printJson(events);
        for (const e of events) process.stdout.write(`${e.seq}\t${shortTime(e.at)}\t${e.type}\t${JSON.stringify(e.data)}\n`);
      }),
    );

  program
    .command('timeline')
    .description("a sandbox's retained snapshots, oldest first")
    .argument('<id>', 'sandbox id')
    .option('--json', 'print JSON')
    .action(
      act(async (id: string, flags: { json?: boolean }) => {
        const snapshots = await (await Sandbox.connect(id)).timeline();
        if (flags.json) return printJson(snapshots);
        await printTable(
          ['ID', 'TAKEN AT', 'REASON', 'NAME', 'SIZE ADDED', 'PARENT'],
          snapshots.map((s) => [
            s.id,
            shortTime(s.takenAt),
            s.reason,
            [s.name, s.pinned ? '(pinned)' : null].filter((x) => x !== null).join(' '),
            formatBytes(s.sizeAddedBytes),
            s.parentId ?? '',
          ]),
        );
      }),
    );

  program
    .command('snapshot')
    .description('take a snapshot of a running sandbox now and print its id')
    .argument('<id>', 'sandbox id')
    .option('--name <name>', 'name it (1–64 of A-Z a-z 0-9 . _ -); a named snapshot is pinned')
    .option('--json', 'print the snapshot as JSON')
    .action(
      act(async (id: string, flags: { name?: string; json?: boolean }) => {
        const snapshot = await (await Sandbox.connect(id)).snapshot({ name: flags.name });
        if (flags.json) return printJson(snapshot);
        process.stdout.write(`${snapshot.id}\n`);
      }),
    );

  program
    .command('snapshot-rm')
    .description('delete a snapshot')
    .argument('<snapshot-id>', 'snapshot id (snap_…)')
    .action(act(async (id: string) => Sandbox.deleteSnapshot(id)));

  program
    .command('pause')
    .description("snapshot a running sandbox and release its VM; prints the pause snapshot's id")
    .argument('<id>', 'sandbox id')
    .action(
      act(async (id: string) => {
        const snapshot = await (await Sandbox.connect(id)).pause();
        process.stdout.write(`${snapshot.id}\n`);
      }),
    );

  program
    .command('resume')
    .description('run a paused sandbox again from its latest snapshot, or one at or before --at, or --snapshot')
    .argument('<id>', 'sandbox id')
    .addOption(
      new Option('--at <time>', 'its latest snapshot at or before this time (ISO 8601, or local "YYYY-MM-DD HH:MM:SS")')
        .argParser(parseTime)
        .conflicts('snapshot'),
    )
    .option('--snapshot <snapshot-id>', 'this snapshot of the sandbox')
    .action(
      act(async (id: string, flags: { at?: string; snapshot?: string }) => {
        const sbx = await Sandbox.resume(id, { at: flags.at, snapshotId: flags.snapshot });
        process.stdout.write(`${sbx.id}\n`);
      }),
    );

  program
    .command('fork')
    .description('start new sandboxes from a snapshot and print their ids')
    .argument('<source>', 'snap_… (that snapshot), sbx_… (its latest snapshot) or sbx_…@TIME (its latest at or before TIME)', parseForkArg)
    .option('--count <n>', 'how many sandboxes (1…16)', parsePositiveInt, 1)
    .option('--timeout <s>', 'end each fork this many seconds after it starts (default 300)', parsePositiveInt)
    .option('--json', 'print the new sandboxes as JSON')
    .action(
      act(async (source: string, flags: { count: number; timeout?: number; json?: boolean }) => {
        const forks = await Sandbox.fork(source, { count: flags.count, timeoutS: flags.timeout });
        if (!flags.json) return void process.stdout.write(forks.map((f) => `${f.id}\n`).join(''));
        printJson((await Promise.all(forks.map((f) => f.getInfo()))).map(withoutAccess));
      }),
    );

  program
    .command('network')
    .description("show a sandbox's egress policy, or replace it with --allow and --deny rules (--deny '*' cuts it off)")
    .argument('<id>', 'sandbox id')
    .option('--allow <rule>', 'host[:port] [METHOD] [/path], or *.domain (repeatable)', collectRepeated)
    .option('--deny <rule>', 'denied even where an allow rule matches (repeatable)', collectRepeated)
    .option('--json', 'print the policy as JSON')
    .action(
      act(async (id: string, flags: { allow?: string[]; deny?: string[]; json?: boolean }) => {
        const sbx = await Sandbox.connect(id);
        const network =
          flags.allow === undefined && flags.deny === undefined
            ? (await sbx.getInfo()).network
            : await sbx.setNetwork({ allow: flags.allow ?? [], deny: flags.deny ?? [] });
        if (flags.json) return printJson(network);
        printNetwork(network);
      }),
    );

  const secrets = program.command('secrets').description("the tenant's secrets: values go in on stdin and never come back out");
  secrets
    .command('set')
    .description('create or replace a secret, reading its value from stdin (one trailing newline is dropped)')
    .argument('<NAME>', 'an environment variable name (A-Z, 0-9, _)')
    .requiredOption('--hosts <hosts>', 'where the value may be sent: host, *.domain, host:port; no port: 443 (comma-separated, repeatable)', collectList)
    .option('--header <name>', 'add this header to every request to those hosts')
    .option('--format <text>', "the header's value, with {value} for the secret (default '{value}'), e.g. 'Bearer {value}'")
    .option('--body-type <type>', 'search request bodies of this media type for the placeholder (repeatable)', collectRepeated)
    .addOption(new Option('--approval <mode>', 'required: every use waits for `sandglass approve`').choices(['none', 'required']))
    .option('--allow-plaintext', 'also send the value in clear text (http://); by default only over verified TLS')
    .option('--allow-upgrade', 'also send it on WebSocket upgrades, whose frames are not masked')
    .option('--json', 'print the stored configuration as JSON')
    .action(
      act(
        async (
          name: string,
          flags: {
            hosts: string[];
            header?: string;
            format?: string;
            bodyType?: string[];
            approval?: 'none' | 'required';
            allowPlaintext?: boolean;
            allowUpgrade?: boolean;
            json?: boolean;
          },
        ) => {
          // Never a prompt: a typed value would echo, and an empty one is never what was meant.
          if (process.stdin.isTTY)
            throw new UsageError(
              'secrets set reads the value from stdin; pipe it in, e.g. printf %s "$TOKEN" | sandglass secrets set NAME --hosts api.example.com',
            );
          const value = secretValueFromStdin(await readStdin());
          const info = await Secrets.set(name, value, {
            hosts: flags.hosts,
            header: flags.header,
            format: flags.format,
            bodyContentTypes: flags.bodyType,
            approval: flags.approval,
            ...(flags.allowPlaintext ? { allowPlaintext: true } : {}),
            ...(flags.allowUpgrade ? { allowUpgrade: true } : {}),
          });
          if (flags.json) printJson(info);
        },
      ),
    );
  secrets
    .command('ls')
    .description('list the secrets (names and scopes, never values)')
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { json?: boolean }) => {
        const list = await Secrets.list();
        if (flags.json) return printJson(list);
        await printTable(
          ['NAME', 'HOSTS', 'HEADER', 'APPROVAL', 'UPDATED'],
          list.map((x) => [x.name, x.hosts.join(','), x.header === null ? '' : `${x.header}: ${x.format}`, x.approval, shortTime(x.updatedAt)]),
        );
      }),
    );
  secrets
    .command('rm')
    .description('remove a secret')
    .argument('<NAME>')
    .action(
      act(async (name: string) => {
        if (!(await Secrets.remove(name))) throw new SandglassError('secret_not_found', `no secret ${name}`, { status: 404 });
      }),
    );

  // `api-keys`, not `keys`: that name is kept for the tenant's encryption keys (BYOK KMS).
  const apiKeys = program.command('api-keys').description("API keys: an admin key manages its own tenant's, the operator key (sandglass up's) every tenant's");
  apiKeys
    .command('create')
    .description('create an API key and print it; it is shown this once and never again')
    .addOption(
      new Option('--role <role>', 'member uses sandboxes; admin also manages keys; operator (operator key only) creates tenants')
        .choices(['member', 'admin', 'operator'])
        .default('member'),
    )
    .option('--tenant <id>', 'the tenant (default: your own; another tenant needs the operator key)')
    .option('--name <name>', 'a label to tell keys apart')
    .option('--expires <duration>', 'refuse the key after this long: 3600, 90m, 12h, 30d (default: never)', parseKeyExpiryS)
    .option('--json', 'print the key and its metadata as JSON')
    .action(
      act(async (flags: { role: ApiKeyRole; tenant?: string; name?: string; expires?: number; json?: boolean }) => {
        const created = await ApiKeys.create({ role: flags.role, tenantId: flags.tenant, name: flags.name, expiresInS: flags.expires });
        if (flags.json) return printJson(created);
        process.stdout.write(`${created.key}\n`);
        process.stderr.write(
          `${created.id} (${created.role}, tenant ${created.tenantId}${created.expiresAt ? `, expires ${created.expiresAt}` : ''}): store the key now, it is not shown again\n`,
        );
      }),
    );
  apiKeys
    .command('ls')
    .description("list a tenant's API keys (prefixes and metadata, never the keys)")
    .option('--tenant <id>', 'the tenant (default: your own)')
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { tenant?: string; json?: boolean }) => {
        const list = await ApiKeys.list({ tenantId: flags.tenant });
        if (flags.json) return printJson(list);
        const status = (k: ApiKeyInfo) => (k.revokedAt ? 'revoked' : k.expiresAt && Date.parse(k.expiresAt) <= Date.now() ? 'expired' : 'active');
        await printTable(
          ['ID', 'PREFIX', 'ROLE', 'NAME', 'STATUS', 'CREATED', 'EXPIRES', 'LAST USED'],
          list.map((k) => [k.id, `${k.prefix}…`, k.role, k.name ?? '', status(k), shortTime(k.createdAt), shortTime(k.expiresAt), shortTime(k.lastUsedAt)]),
        );
      }),
    );
  apiKeys
    .command('revoke')
    .description('revoke an API key: it is refused from the next request on')
    .argument('<id>', 'key id (key_…)')
    .action(
      act(async (id: string) => {
        await ApiKeys.revoke(id);
      }),
    );

  program
    .command('approvals')
    .description("requests a sandbox's egress holds until a secret's use is approved")
    .argument('<sandbox-id>')
    .option('--json', 'print JSON')
    .action(
      act(async (id: string, flags: { json?: boolean }) => {
        const pending = await (await Sandbox.connect(id)).approvals();
        if (flags.json) return printJson(pending);
        await printTable(
          ['REQUEST', 'SECRET', 'METHOD', 'DESTINATION', 'EXPIRES'],
          pending.map((a) => [a.requestId, a.secret, a.method, `${a.host}:${a.port}${a.path}`, shortTime(a.expiresAt)]),
        );
      }),
    );

  program
    .command('approve')
    .description('let a held request use its secret; --for also lets later uses by the sandbox pass for that long')
    .argument('<request-id>', 'apr_… (from `sandglass approvals`)')
    .requiredOption('--sandbox <id>', 'the sandbox that made the request')
    .option('--for <duration>', 'a time-boxed grant: 90, 30s, 10m, 2h or 1d', parseDurationS)
    .action(
      act(async (requestId: string, flags: { sandbox: string; for?: number }) => Sandbox.approve(requestId, { sandboxId: flags.sandbox, ttlS: flags.for })),
    );

  program
    .command('deny')
    .description('refuse a held request: the client in the sandbox gets egress_approval_denied')
    .argument('<request-id>', 'apr_… (from `sandglass approvals`)')
    .requiredOption('--sandbox <id>', 'the sandbox that made the request')
    .action(act(async (requestId: string, flags: { sandbox: string }) => Sandbox.deny(requestId, { sandboxId: flags.sandbox })));

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

  return program;
}
