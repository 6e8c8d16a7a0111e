// `network`, `secrets`, `approvals`, `approve` and `deny`: what a sandbox may reach, with which credentials, and held uses.
import { type Command, Option } from 'commander';
import { type NetworkPolicy, Sandbox, SandglassError, Secrets } from '@sandglass/sdk';
import { collectList, collectRepeated, parseDurationS, secretValueFromStdin, UsageError } from '../args.js';
import { printJson, printTable, shortTime } from '../output.js';
import type { Act } from './shared.js';

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

export function registerNetworkCommands(program: Command, act: Act): void {
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
}

export function registerSecretCommands(program: Command, act: Act): void {
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
}

export function registerApprovalCommands(program: Command, act: Act): void {
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
}
