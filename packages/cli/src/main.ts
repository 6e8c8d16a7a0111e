// Entry point of the `sandglass` CLI (bin/sandglass imports it): parse, run, exit with the action's status.
import { CommanderError } from 'commander';
import { buildProgram, type RunState } from './program.js';
import { reportError } from './output.js';

const flush = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.write('', () => resolve()));

async function main(argv: string[]): Promise<void> {
  const state: RunState = { exitCode: 0 };
  try {
    await buildProgram(state).parseAsync(argv);
  } catch (err) {
    // Commander has printed its message already; help and --version exit 0, usage mistakes 2.
    if (err instanceof CommanderError) state.exitCode = err.exitCode === 0 ? 0 : 2;
    else state.exitCode = reportError(err);
  }
  // Exit explicitly: an idle keep-alive socket or a paused stdin must not hold the CLI open, but queued output must still get out.
  await Promise.all([flush(process.stdout), flush(process.stderr)]);
  process.exit(state.exitCode);
}

await main(process.argv);
