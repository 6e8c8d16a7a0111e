// `shell`: an interactive terminal in a sandbox, with raw keyboard input and the window size following ours.
import { constants as osConstants } from 'node:os';
import { Sandbox } from '@sandglass/sdk';
import { UsageError } from './args.js';

export async function shell(sandboxId: string): Promise<number> {
  const stdin = process.stdin;
  if (!stdin.isTTY) throw new UsageError('shell needs a terminal; use `sandglass exec` for scripts and pipes');
  const sbx = await Sandbox.connect(sandboxId);
  const size = () => ({ cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 });
  const term = await sbx.pty.create({ ...size(), onData: (d) => void process.stdout.write(d) });

  const onInput = (d: Buffer) => term.sendInput(d);
  const onResize = () => void term.resize(size()).catch(() => undefined);
  // However we leave (exit, signal, crash), the user's terminal must come back in cooked mode.
  const restore = () => {
    if (stdin.isRaw) stdin.setRawMode(false);
  };
  const onSignal = (signal: NodeJS.Signals) => {
    restore();
    process.exit(128 + osConstants.signals[signal]);
  };
  stdin.setRawMode(true);
  stdin.resume();
  stdin.on('data', onInput);
  process.stdout.on('resize', onResize);
  process.on('exit', restore);
  process.on('SIGHUP', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    return (await term.wait()).exitCode;
  } finally {
    restore();
    stdin.off('data', onInput);
    stdin.pause();
    process.stdout.off('resize', onResize);
    process.off('exit', restore);
    process.off('SIGHUP', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
