// `audit`: a sandbox's session as a readable timeline (time, kind, summary), JSON lines for tools, or a signed export;
// `keys audit-public`: the key exports are signed with.
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { type Command, InvalidArgumentError } from 'commander';
import { AUDIT_KINDS, type AuditKind, Sandbox } from '@sandglass/sdk';
import { collectList, parseTime } from '../args.js';
import { shortTime } from '../output.js';
import type { Act } from './shared.js';

/** Commander collector for `--type command,network …`: every item must be a kind the timeline has. */
export function collectAuditKinds(value: string, previous: AuditKind[] = []): AuditKind[] {
  const kinds = collectList(value);
  const unknown = kinds.filter((k) => !(AUDIT_KINDS as readonly string[]).includes(k));
  if (unknown.length > 0) throw new InvalidArgumentError(`'${unknown.join(',')}' is not a kind; use ${AUDIT_KINDS.join(', ')}`);
  return [...previous, ...(kinds as AuditKind[])];
}

const KIND_WIDTH = Math.max(...AUDIT_KINDS.map((k) => k.length));

export function registerAuditCommand(program: Command, act: Act): void {
  program
    .command('audit')
    .description("a sandbox's session as a timeline: lifecycle, commands, file changes, network, secret uses by name, approvals, snapshots")
    .argument('<id>', 'sandbox id')
    .option('--type <kinds>', `only these kinds, comma-separated (${AUDIT_KINDS.join(', ')})`, collectAuditKinds)
    .option('--since <time>', 'only entries at or after this time (ISO 8601, or local "YYYY-MM-DD HH:MM:SS")', parseTime)
    .option('--until <time>', 'only entries at or before this time', parseTime)
    .option('--json', 'print JSON lines, one entry each')
    .option('--export', 'print the signed audit export instead: every event, verifiable offline with `sandglass events verify`')
    .option('-o, --output <file>', 'with --export: write it to this file (mode 0600) rather than to stdout')
    .action(
      act(async (id: string, flags: { type?: AuditKind[]; since?: string; until?: string; json?: boolean; export?: boolean; output?: string }) => {
        if (flags.export) {
          // An export is the whole log or it would not verify: the timeline's filters do not apply to it.
          if (flags.type || flags.since || flags.until || flags.json) throw new InvalidArgumentError('--export takes no --type, --since, --until or --json');
          const bytes = await (await Sandbox.connect(id)).exportAudit({ stream: true });
          await pipeline(bytes, flags.output === undefined ? process.stdout : createWriteStream(flags.output, { mode: 0o600 }));
          return;
        }
        if (flags.output !== undefined) throw new InvalidArgumentError('-o/--output goes with --export');
        const entries = await (await Sandbox.connect(id)).audit({ kinds: flags.type, since: flags.since, until: flags.until });
        for (const x of entries) {
          process.stdout.write(flags.json ? `${JSON.stringify(x)}\n` : `${shortTime(x.at)}  ${x.kind.padEnd(KIND_WIDTH)}  ${x.summary}\n`);
        }
      }),
    );
}

/**
 * `keys audit-public`, joining the `keys` group when one is registered already: call it after every other group, so
 * whichever module made the group, the subcommand lands in it.
 */
export function registerAuditKeyCommand(program: Command, act: Act): void {
  const keys = program.commands.find((c) => c.name() === 'keys') ?? program.command('keys').description('keys of the deployment');
  keys
    .command('audit-public')
    .description('print the public key audit exports are signed with (PEM), for auditors; needs no API key')
    .option('--json', 'print the algorithm, key id and PEM as JSON')
    .action(
      act(async (flags: { json?: boolean }) => {
        const key = await Sandbox.auditPublicKey();
        process.stdout.write(flags.json ? `${JSON.stringify(key)}\n` : key.publicKeyPem);
      }),
    );
}
