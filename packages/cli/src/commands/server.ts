// `up` and `doctor`: the commands that run or inspect the local server rather than talk to one.
import type { Command } from 'commander';
import { parsePositiveInt } from '../args.js';
import { printJson } from '../output.js';
import type { Act } from './shared.js';

export function registerServerCommands(program: Command, act: Act): void {
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
}
