// `exec`, `attach` and `run`: a command's output streamed to this process's stdout/stderr as bytes, its exit code as ours.
import { fstatSync } from 'node:fs';
import { CommandExitError, CommandTimeoutError, type CommandHandle, type CommandResult, type Sandbox } from '@sandglass/sdk';

export interface ExecOptions {
  cwd?: string;
  envs?: Record<string, string>;
  user?: string;
  timeoutMs: number;
  /** Forward this process's stdin: true/false, or undefined to decide by what stdin is. */
  stdin?: boolean;
  /** Pass Ctrl-C and SIGTERM on to the command (default true); off when the caller handles them itself. */
  forwardSignals?: boolean;
}

// Exit status of timeout(1) for a command that ran out of time, so scripts can tell it from the command's own failures.
const TIMED_OUT_EXIT_CODE = 124;

const outputCallbacks = {
  onStdoutBytes: (b: Uint8Array) => void process.stdout.write(b),
  onStderrBytes: (b: Uint8Array) => void process.stderr.write(b),
  // The bytes go straight to our stdout/stderr; holding a copy would only grow with the output.
  retainOutput: false,
};

/** Whether stdin carries data to forward: a pipe, socket or non-empty file, never a terminal or /dev/null. */
export function stdinHasData(fd = 0): boolean {
  try {
    const st = fstatSync(fd);
    return st.isFIFO() || st.isSocket() || (st.isFile() && st.size > 0);
  } catch {
    return false;
  }
}

/**
 * Starts argv in the background; with `live`, its output is written to ours as it comes (else nothing is printed, and
 * output that arrives before a disconnect is left for `attach`). The caller decides whether to wait.
 */
export function startExec(sbx: Sandbox, argv: string[], opts: ExecOptions, live = false): Promise<CommandHandle> {
  return sbx.commands.exec(argv, {
    background: true,
    cwd: opts.cwd,
    envs: opts.envs,
    user: opts.user,
    timeoutMs: opts.timeoutMs,
    stdin: opts.stdin ?? stdinHasData(),
    ...(live ? outputCallbacks : { retainOutput: false }),
  });
}

/** Runs argv with live output and stdin forwarding; resolves with the exit code to exit with. */
export async function execStreaming(sbx: Sandbox, argv: string[], opts: ExecOptions): Promise<number> {
  const forwardStdin = opts.stdin ?? stdinHasData();
  const handle = await startExec(sbx, argv, { ...opts, stdin: forwardStdin }, true);
  // Ctrl-C interrupts the command, not only us; a second one kills it outright.
  let interrupts = 0;
  const onInt = () => void handle.kill(interrupts++ === 0 ? 'SIGINT' : 'SIGKILL').catch(() => undefined);
  const onTerm = () => void handle.kill('SIGTERM').catch(() => undefined);
  const forwardSignals = opts.forwardSignals !== false;
  if (forwardSignals) {
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
  }
  const pump = forwardStdin ? pumpStdin(handle) : undefined;
  try {
    return await exitCodeOf(handle);
  } finally {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    if (pump) process.stdin.destroy();
  }
}

/** Reattaches to a running command's output; Ctrl-C detaches and leaves the command running. */
export async function attach(sbx: Sandbox, commandId: string, fromOffset: number | undefined): Promise<number> {
  const handle = await sbx.commands.connect(commandId, { fromOffset, ...outputCallbacks });
  return exitCodeOf(handle);
}

async function exitCodeOf(handle: CommandHandle): Promise<number> {
  let result: CommandResult;
  try {
    result = await handle.wait();
  } catch (err) {
    if (err instanceof CommandTimeoutError) {
      process.stderr.write(`error: timeout: ${err.message}\n`);
      return TIMED_OUT_EXIT_CODE;
    }
    if (!(err instanceof CommandExitError)) throw err;
    result = err.result;
  }
  if (result.droppedBytes) process.stderr.write(`warning: the first ${result.droppedBytes} bytes of output were no longer held by the gateway\n`);
  return result.exitCode;
}

async function pumpStdin(handle: CommandHandle): Promise<void> {
  try {
    // One write at a time: the next chunk is read only once the gateway took the last, so a fast producer is held back.
    for await (const chunk of process.stdin) await handle.sendStdin(chunk as Buffer);
    await handle.closeStdin();
  } catch {
    // The command exited (or the stream broke) while we were still feeding it: its exit status is what counts.
  }
}
