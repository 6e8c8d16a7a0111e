// Where a replay starts: a named snapshot, the latest at or before a time, or the sandbox's creation when asked and
// when no snapshot precedes its first input.
import { describe, expect, it } from 'vitest';
import { SandglassError } from './errors.js';
import { chooseStart, deliveryOrder } from './replay.js';
import type { SandboxEvent } from './types.js';

let seq = 0;
const ev = (type: string, at: string, data: Record<string, unknown> = {}): SandboxEvent =>
  ({ seq: ++seq, id: `evt_${seq}`, type, at: `2026-12-01T10:00:${at}Z`, sandboxId: 'sbx_a', data }) as unknown as SandboxEvent;
const created = ev('sandbox.created', '00');
const snap = (at: string, id: string) => ev('snapshot.taken', at, { snapshotId: id, takenAt: `2026-12-01T10:00:${at}Z` });
const input = (at: string) => ev('command.started', at, { argv: ['true'] });
const creation = { snapshotId: null, takenAt: created.at };

describe('chooseStart', () => {
  it('starts from creation when no snapshot precedes the first input, or none was taken', () => {
    expect(chooseStart([created, input('01'), input('02')], {})).toEqual(creation);
    expect(chooseStart([created, input('01'), snap('05', 'snap_a'), input('06')], {})).toEqual(creation);
    expect(chooseStart([created], {})).toEqual(creation);
  });

  it('starts from the first snapshot when it precedes the first input', () => {
    expect(chooseStart([created, snap('01', 'snap_a'), input('02'), snap('03', 'snap_b')], {})).toEqual({
      snapshotId: 'snap_a',
      takenAt: '2026-12-01T10:00:01Z',
    });
  });

  it('starts where it is told: from creation, a named snapshot, the latest at or before a time', () => {
    const events = [created, snap('01', 'snap_a'), input('02'), snap('03', 'snap_b'), input('04')];
    expect(chooseStart(events, { from: 'creation' })).toEqual(creation);
    expect(chooseStart(events, { snapshotId: 'snap_b' })).toMatchObject({ snapshotId: 'snap_b' });
    expect(chooseStart(events, { at: '2026-12-01T10:00:03.5Z' })).toMatchObject({ snapshotId: 'snap_b' });
    for (const opts of [{ snapshotId: 'snap_other' }, { at: '2026-12-01T09:00:00Z' }]) {
      expect(() => chooseStart(events, opts)).toThrow(SandglassError);
    }
  });
});

describe('deliveryOrder', () => {
  const cmd = (type: string, id: string, at: string) => ev(type, at, { commandId: id });
  it('puts an input logged after the exit it caused back before that exit, and leaves the rest in log order', () => {
    const started = cmd('command.started', 'cmd_a', '01');
    const write = cmd('command.input', 'cmd_a', '02');
    const exited = cmd('command.exited', 'cmd_a', '03');
    const other = cmd('command.started', 'cmd_b', '03');
    const eof = cmd('command.input', 'cmd_a', '04');
    const later = cmd('command.input', 'cmd_b', '05');
    expect(deliveryOrder([started, write, exited, other, eof, later])).toEqual([started, write, eof, exited, other, later]);
    expect(deliveryOrder([started, write, eof, exited])).toEqual([started, write, eof, exited]);
  });
});
