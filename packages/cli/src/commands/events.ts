// `events`: a sandbox's event log, all of it or what the egress gateway recorded.
import type { Command } from 'commander';
import { Sandbox } from '@sandglass/sdk';
import { printJson, shortTime } from '../output.js';
import type { Act } from './shared.js';

export function registerEventCommands(program: Command, act: Act): void {
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
}
