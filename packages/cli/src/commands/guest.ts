// `exec`, `attach`, `shell` and `cp`: the commands that work inside a running sandbox's guest.
import type { Command } from 'commander';
import { Sandbox } from '@sandglass/sdk';
import { collectEnv, parseNonNegativeInt, planCp } from '../args.js';
import { copy } from '../cp.js';
import { attach, execStreaming, startExec, type ExecOptions } from '../exec.js';
import { shell } from '../shell.js';
import type { Act } from './shared.js';

export interface ExecFlags {
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
  timeoutMs: number;
  interactive?: boolean;
}

export function addExecOptions(cmd: Command): Command {
  return cmd
    .option('--cwd <dir>', 'working directory in the sandbox')
    .option('--env <K=V>', 'environment variable (repeatable)', collectEnv)
    .option('--user <user>', 'user to run as (default root)')
    .option('--timeout-ms <n>', 'kill the command after this many ms (0 = no limit)', parseNonNegativeInt, 0)
    .option('-i, --interactive', 'forward stdin even when it is a terminal');
}

export const execOptions = (f: ExecFlags): ExecOptions => ({
  cwd: f.cwd,
  envs: f.env,
  user: f.user,
  timeoutMs: f.timeoutMs,
  // -i forces forwarding; otherwise exec decides by whether stdin is a pipe or file with data.
  stdin: f.interactive ? true : undefined,
});

export function registerGuestCommands(program: Command, act: Act): void {
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
}
