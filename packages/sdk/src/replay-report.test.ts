// How a replay classifies what it saw: same, timing-only, nondeterministic (declared), different; and the report's summary.
import { describe, expect, it } from 'vitest';
import { compareCommand, digestOf, formatReplayReport, summarize, type CommandOutcome, type ReplayInputResult } from './replay-report.js';

const b = (s: string) => Buffer.from(s);
const outcome = (parts: Array<[1 | 2, string]>, end: Partial<CommandOutcome> = {}): CommandOutcome => {
  const stdout = parts.filter(([fd]) => fd === 1).map(([, s]) => b(s));
  const stderr = parts.filter(([fd]) => fd === 2).map(([, s]) => b(s));
  const all = parts.map(([, s]) => b(s));
  return {
    exitCode: 0,
    signal: null,
    timedOut: false,
    outputBytes: all.reduce((n, x) => n + x.length, 0),
    output: digestOf(stdout, stderr, all),
    ...end,
  };
};

describe('compareCommand', () => {
  it('same bytes in the same order are the same', () => {
    expect(
      compareCommand(
        outcome([
          [1, 'a\n'],
          [2, 'e\n'],
        ]),
        outcome([
          [1, 'a'],
          [1, '\n'],
          [2, 'e\n'],
        ]),
      ),
    ).toEqual({ verdict: 'same', differences: [] });
  });

  it('the same stdout and stderr in another interleaving are timing only', () => {
    const r = compareCommand(
      outcome([
        [1, 'out\n'],
        [2, 'err\n'],
      ]),
      outcome([
        [2, 'err\n'],
        [1, 'out\n'],
      ]),
    );
    expect(r.verdict).toBe('timing');
    expect(r.differences).toEqual(['stdout and stderr are the same, interleaved differently']);
  });

  it('other bytes are different, per stream, with both sizes', () => {
    const r = compareCommand(outcome([[1, 'mode=original\n']]), outcome([[1, 'mode=changed\n']]));
    expect(r).toEqual({ verdict: 'different', differences: ['stdout differs: 14 bytes in the original, 13 in the replay'] });
  });

  it('a different exit is different even for a declared nondeterministic command', () => {
    expect(compareCommand(outcome([[1, '0.1\n']]), outcome([[1, '0.2\n']], { exitCode: 1 }), { nondeterministic: true })).toEqual({
      verdict: 'different',
      differences: ['exit code 0 in the original, 1 in the replay', 'stdout differs: 4 bytes in the original, 4 in the replay'],
    });
  });

  it('other output of a declared nondeterministic command is classified, not hidden', () => {
    const r = compareCommand(outcome([[1, '0.1\n']]), outcome([[1, '0.7\n']]), { nondeterministic: true });
    expect(r.verdict).toBe('nondeterministic');
    expect(r.differences).toEqual(['stdout differs: 4 bytes in the original, 4 in the replay']);
  });

  it('an original without digests is compared by length only', () => {
    const { output: _o, ...plain } = outcome([[1, 'abc']]);
    expect(compareCommand(plain, outcome([[1, 'xyz']])).verdict).toBe('same');
    expect(compareCommand(plain, outcome([[1, 'xyzw']])).verdict).toBe('different');
  });

  it('signals and timeouts count', () => {
    expect(compareCommand(outcome([]), outcome([], { exitCode: null, signal: 'SIGKILL' })).differences).toEqual([
      'exit code 0 in the original, null in the replay',
      'signal none in the original, SIGKILL in the replay',
    ]);
    expect(compareCommand(outcome([]), outcome([], { timedOut: true })).verdict).toBe('different');
  });
});

describe('summarize', () => {
  const input = (seq: number, verdict: ReplayInputResult['verdict']): ReplayInputResult => ({
    seq,
    kind: 'command',
    summary: `cmd ${seq}`,
    verdict,
    differences: [],
  });
  const base = {
    sourceSandboxId: 'sbx_a',
    forkSandboxId: 'sbx_b',
    snapshotId: 'snap_x',
    fromSnapshotTakenAt: '2026-12-01T00:00:00.000Z',
    untilSeq: 9,
    notRecordedBeyondSeq: null,
    durationMs: 2000,
  };

  it('counts verdicts, names the first real divergence and the speed of what was replayed', () => {
    const r = summarize({
      ...base,
      inputs: [input(1, 'same'), input(2, 'timing'), input(3, 'nondeterministic'), input(4, 'different'), input(5, 'different'), input(6, 'not_recorded')],
    });
    expect(r.counts).toEqual({ same: 1, timing: 1, nondeterministic: 1, different: 2, not_recorded: 1 });
    expect(r.firstDivergence?.seq).toBe(4);
    expect(r.inputsPerSecond).toBe(2.5);
  });

  it('prints a line per input, the cap and the first divergence with both sides', () => {
    const diverged = { ...input(4, 'different'), differences: ['stdout differs'], original: { exitCode: 0 }, replay: { exitCode: 0, outputTail: 'x' } };
    const text = formatReplayReport(summarize({ ...base, notRecordedBeyondSeq: 7, inputs: [input(1, 'same'), diverged] }));
    expect(text.split('\n')).toEqual([
      'replay of sbx_a from snap_x (2026-12-01T00:00:00.000Z) in sbx_b',
      '  #1 same       command     cmd 1',
      '  #4 DIFF       command     cmd 4',
      '      stdout differs',
      '2 inputs: 1 same, 0 timing-only, 0 nondeterministic, 1 different, 0 not recorded (1 inputs/s)',
      'not recorded beyond seq 7 (the recording reached its cap)',
      'first divergence: #4 command cmd 4',
      '  stdout differs',
      '  original: {"exitCode":0}',
      '  replay:   {"exitCode":0,"outputTail":"x"}',
    ]);
    expect(formatReplayReport(summarize({ ...base, inputs: [input(1, 'same')] }))).toMatch(/\nno divergence$/);
  });
});
