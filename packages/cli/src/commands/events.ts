// `events`: a sandbox's event log, all of it or what the egress gateway recorded; `events verify`: an audit export, offline.
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { formatAuditVerdict, Sandbox, verifyAuditExport } from '@sandglass/sdk';
import { printJson, shortTime } from '../output.js';
import type { Act } from './shared.js';

export function registerEventCommands(program: Command, act: Act): void {
  const events = program
    .command('events')
    .description("a sandbox's event log")
    // Its own options only before `verify` (the program enables the same), so `verify --json` is verify's.
    .enablePositionalOptions()
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

  events
    .command('verify')
    .description('check an audit export (`sandglass audit <id> --export`) without a server: hashes, links, count, signature')
    .argument('<file>', 'the export, or - for stdin')
    .option('--public-key <file>', 'the deployment’s public key (`sandglass keys audit-public`); without it the export cannot pass')
    .option('--json', 'print the verdict as JSON')
    .action(
      act(async (file: string, flags: { publicKey?: string; json?: boolean }) => {
        const text = readFileSync(file === '-' ? 0 : file, 'utf8');
        const publicKeyPem = flags.publicKey === undefined ? null : readFileSync(flags.publicKey, 'utf8');
        const verdict = verifyAuditExport(text, publicKeyPem);
        process.stdout.write(`${flags.json ? JSON.stringify(verdict) : formatAuditVerdict(verdict)}\n`);
        return verdict.ok ? 0 : 1;
      }),
    );
}
