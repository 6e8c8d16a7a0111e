// `timeline`, `snapshot`, `snapshot-rm`, `snapshot-name`, `pause`, `resume` and `fork`: a sandbox's snapshots and what starts from them.
import { type Command, Option } from 'commander';
import { Sandbox, type SnapshotCadence } from '@sandglass/sdk';
import { parseForkArg, parsePositiveInt, parseTime, UsageError } from '../args.js';
import { formatBytes, printJson, printTable, shortTime } from '../output.js';
import { type Act, withoutAccess } from './shared.js';

/** `cadence: every 5 s asked, one every 9.8 s over the last 50 s (behind)`: what a user can go back to. */
function cadenceLine(c: SnapshotCadence): string {
  let achieved: string;
  if (c.windowS === 0) achieved = 'not running';
  else if (c.achievedIntervalS !== null) achieved = `one every ${c.achievedIntervalS} s over the last ${c.windowS} s`;
  else achieved = c.windowS < c.intervalS ? 'not measured yet' : `none taken in the last ${c.windowS} s`;
  return `cadence: every ${c.intervalS} s asked, ${achieved}${c.behind ? ' (behind: see `sandglass events`)' : ''}`;
}

export function registerTimeTravelCommands(program: Command, act: Act): void {
  program
    .command('timeline')
    .description("a sandbox's retained snapshots, oldest first, and its snapshot cadence: asked for against achieved")
    .argument('<id>', 'sandbox id')
    .option('--json', 'print the snapshots as JSON')
    .action(
      act(async (id: string, flags: { json?: boolean }) => {
        const { snapshots, cadence } = await (await Sandbox.connect(id)).timelineWithCadence();
        if (flags.json) return printJson(snapshots);
        process.stdout.write(`${cadenceLine(cadence)}\n`);
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
    .command('snapshot-name')
    .description('name or rename a snapshot, which pins it; --clear removes the name and retention may thin it again')
    .argument('<snapshot-id>', 'snapshot id (snap_…)')
    .argument('[name]', '1–64 of A-Z a-z 0-9 . _ -')
    .option('--clear', 'remove the name instead')
    .option('--json', 'print the snapshot as JSON')
    .action(
      act(async (id: string, name: string | undefined, flags: { clear?: boolean; json?: boolean }) => {
        if ((name === undefined) === !flags.clear) throw new UsageError('snapshot-name: give a name, or --clear to remove it (not both)');
        const snapshot = await Sandbox.nameSnapshot(id, flags.clear ? null : name!);
        if (flags.json) return printJson(snapshot);
        process.stdout.write(`${snapshot.id} ${snapshot.name ?? '(unnamed)'}\n`);
      }),
    );

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
}
