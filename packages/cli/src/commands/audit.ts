// `audit`: a sandbox's session as a readable timeline (time, kind, summary), or JSON lines for tools.
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
    .action(
      act(async (id: string, flags: { type?: AuditKind[]; since?: string; until?: string; json?: boolean }) => {
        const entries = await (await Sandbox.connect(id)).audit({ kinds: flags.type, since: flags.since, until: flags.until });
        for (const x of entries) {
          process.stdout.write(flags.json ? `${JSON.stringify(x)}\n` : `${shortTime(x.at)}  ${x.kind.padEnd(KIND_WIDTH)}  ${x.summary}\n`);
        }
      }),
    );
}
