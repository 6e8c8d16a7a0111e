// `replay`: re-run a sandbox's recorded inputs in a fork and report where it diverged; the SDK's Sandbox.replay.
import { type Command, InvalidArgumentError } from 'commander';
import { formatReplayReport, Sandbox } from '@sandglass/sdk';
import { collectList, parseTime } from '../args.js';
import type { Act } from './shared.js';

export function registerReplayCommand(program: Command, act: Act): void {
  program
    .command('replay')
    .description(
      'fork a sandbox at a snapshot in replay mode and re-issue its recorded inputs in order (clock, entropy and egress from the recording); print each input as same or different and the first divergence',
    )
    .argument('<id>', 'sandbox id')
    .option(
      '--from <snapshot>',
      "start from this snapshot, or 'creation': the moment the sandbox was created (default: its first snapshot, or its creation when no snapshot precedes its first input)",
    )
    .option('--at <time>', 'start from the latest snapshot at or before this time', parseTime)
    .option('--until <time>', 'replay inputs recorded up to this time', parseTime)
    .option('--nondeterministic <strings>', 'commands whose argv contains one of these (comma-separated) may print different output', collectList)
    .option('--keep', 'leave the fork running afterwards')
    .option('--json', 'print the report as JSON')
    .action(
      act(async (id: string, flags: { from?: string; at?: string; until?: string; nondeterministic?: string[]; keep?: boolean; json?: boolean }) => {
        if (flags.from !== undefined && flags.at !== undefined) throw new InvalidArgumentError('give --from or --at, not both');
        const report = await Sandbox.replay(id, {
          ...(flags.from === 'creation' ? { from: 'creation' as const } : { snapshotId: flags.from }),
          at: flags.at,
          until: flags.until,
          nondeterministic: flags.nondeterministic,
          keepFork: flags.keep,
        });
        process.stdout.write(flags.json ? `${JSON.stringify(report)}\n` : `${formatReplayReport(report)}\n`);
        // Like diff(1): a replay that diverged is not a success for scripts.
        if (report.firstDivergence) process.exitCode = 1;
      }),
    );
}
