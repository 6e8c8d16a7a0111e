// What a replay found per input, and the rules that classify a difference: pure functions, shared by the SDK and the CLI.
import { createHash } from 'node:crypto';

/** A command's whole output as the agent hashed it (command.exited `output`) or as the replay received it. */
export interface OutputDigest {
  sha256: string;
  stdoutSha256: string;
  stderrSha256: string;
  stdoutBytes: number;
  stderrBytes: number;
}

/** How a command ended. */
export interface CommandOutcome {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  outputBytes: number;
  /** Absent for an original recorded by a gateway whose agent did not hash output. */
  output?: OutputDigest;
}

/**
 * - `same`: nothing compared differs.
 * - `timing`: the same bytes on each stream, interleaved differently (stdout and stderr raced): scheduling, not a bug.
 * - `nondeterministic`: the output differs for a command the caller declared nondeterministic (it prints random
 *   numbers or the time: the guest's RNG cannot be made to repeat, see docs/design/replay.md); the exit still counts.
 * - `different`: a real divergence.
 * - `not_recorded`: the input's content was not recorded (the recording's cap was reached): not replayed.
 */
export type Verdict = 'same' | 'timing' | 'nondeterministic' | 'different' | 'not_recorded';

export interface ReplayInputResult {
  /** The source event's seq. */
  seq: number;
  kind: 'command' | 'stdin' | 'signal' | 'resize' | 'file.write' | 'file.writeTar' | 'file.remove' | 'file.rename' | 'file.mkdir';
  summary: string;
  verdict: Verdict;
  /** What differs, one line each. */
  differences: string[];
  /** Both sides as far as each is known: the original from its events, the replay from what it observed. */
  original?: Record<string, unknown>;
  replay?: Record<string, unknown>;
}

export interface ReplayReport {
  sourceSandboxId: string;
  forkSandboxId: string;
  /** The snapshot the replay started from; null: from the source's creation. */
  snapshotId: string | null;
  /**
   * Inputs replayed come after this snapshot (from creation: the source's creation time, and every input) and up to
   * `untilSeq` (the source's last event when no --until).
   */
  fromSnapshotTakenAt: string;
  untilSeq: number;
  inputs: ReplayInputResult[];
  counts: Record<Verdict, number>;
  /** The first input whose verdict is `different`: where the replay went another way. */
  firstDivergence: ReplayInputResult | null;
  /** Set when the recording stopped at its cap: inputs after this seq cannot be replayed. */
  notRecordedBeyondSeq: number | null;
  durationMs: number;
  inputsPerSecond: number;
}

export function digestOf(stdout: Buffer[], stderr: Buffer[], all: Buffer[]): OutputDigest {
  const h = (parts: Buffer[]) => parts.reduce((x, p) => x.update(p), createHash('sha256')).digest('hex');
  const n = (parts: Buffer[]) => parts.reduce((s, p) => s + p.length, 0);
  return { sha256: h(all), stdoutSha256: h(stdout), stderrSha256: h(stderr), stdoutBytes: n(stdout), stderrBytes: n(stderr) };
}

/** Compares a replayed command's end with the original's. */
export function compareCommand(
  original: CommandOutcome,
  replay: CommandOutcome,
  opts: { nondeterministic?: boolean } = {},
): { verdict: Verdict; differences: string[] } {
  const differences: string[] = [];
  if (original.exitCode !== replay.exitCode) differences.push(`exit code ${original.exitCode} in the original, ${replay.exitCode} in the replay`);
  if (original.signal !== replay.signal) differences.push(`signal ${original.signal ?? 'none'} in the original, ${replay.signal ?? 'none'} in the replay`);
  if (original.timedOut !== replay.timedOut) differences.push(`timed out: ${original.timedOut} in the original, ${replay.timedOut} in the replay`);
  const endDiffers = differences.length > 0;
  let outputVerdict: Verdict = 'same';
  const o = original.output;
  const r = replay.output;
  if (o && r) {
    if (o.sha256 !== r.sha256) {
      if (o.stdoutSha256 === r.stdoutSha256 && o.stderrSha256 === r.stderrSha256) {
        outputVerdict = 'timing';
        differences.push('stdout and stderr are the same, interleaved differently');
      } else {
        outputVerdict = 'different';
        if (o.stdoutSha256 !== r.stdoutSha256) differences.push(`stdout differs: ${o.stdoutBytes} bytes in the original, ${r.stdoutBytes} in the replay`);
        if (o.stderrSha256 !== r.stderrSha256) differences.push(`stderr differs: ${o.stderrBytes} bytes in the original, ${r.stderrBytes} in the replay`);
      }
    }
  } else if (original.outputBytes !== replay.outputBytes) {
    outputVerdict = 'different';
    differences.push(`output is ${original.outputBytes} bytes in the original, ${replay.outputBytes} in the replay (the original has no digest)`);
  }
  if (endDiffers) return { verdict: 'different', differences };
  if (outputVerdict === 'different' && opts.nondeterministic) return { verdict: 'nondeterministic', differences };
  return { verdict: outputVerdict, differences };
}

export function summarize(base: Omit<ReplayReport, 'counts' | 'firstDivergence' | 'inputsPerSecond'>): ReplayReport {
  const counts: Record<Verdict, number> = { same: 0, timing: 0, nondeterministic: 0, different: 0, not_recorded: 0 };
  for (const i of base.inputs) counts[i.verdict]++;
  const replayed = base.inputs.filter((i) => i.verdict !== 'not_recorded').length;
  return {
    ...base,
    counts,
    firstDivergence: base.inputs.find((i) => i.verdict === 'different') ?? null,
    inputsPerSecond: base.durationMs > 0 ? Math.round((replayed / (base.durationMs / 1000)) * 100) / 100 : 0,
  };
}

/** The report as people read it: one line per input, then the first divergence with both sides. */
export function formatReplayReport(r: ReplayReport): string {
  const mark: Record<Verdict, string> = { same: 'same', timing: 'timing', nondeterministic: 'nondet', different: 'DIFF', not_recorded: 'unrecorded' };
  const lines = [`replay of ${r.sourceSandboxId} from ${r.snapshotId ?? 'its creation'} (${r.fromSnapshotTakenAt}) in ${r.forkSandboxId}`];
  for (const i of r.inputs) {
    lines.push(`  #${i.seq} ${mark[i.verdict].padEnd(10)} ${i.kind.padEnd(11)} ${i.summary}`);
    for (const d of i.differences) lines.push(`      ${d}`);
  }
  const c = r.counts;
  lines.push(
    `${r.inputs.length} inputs: ${c.same} same, ${c.timing} timing-only, ${c.nondeterministic} nondeterministic, ${c.different} different, ${c.not_recorded} not recorded (${r.inputsPerSecond} inputs/s)`,
  );
  if (r.notRecordedBeyondSeq !== null) lines.push(`not recorded beyond seq ${r.notRecordedBeyondSeq} (the recording reached its cap)`);
  if (r.firstDivergence) {
    const f = r.firstDivergence;
    lines.push(`first divergence: #${f.seq} ${f.kind} ${f.summary}`);
    for (const d of f.differences) lines.push(`  ${d}`);
    if (f.original) lines.push(`  original: ${JSON.stringify(f.original)}`);
    if (f.replay) lines.push(`  replay:   ${JSON.stringify(f.replay)}`);
  } else lines.push('no divergence');
  return lines.join('\n');
}
