// The shortest interval a guest size can keep: refused only once measured, per size, unless best-effort.
import { describe, expect, it } from 'vitest';
import { SandglassError } from '@sandglass/core';
import { CaptureTimes } from './capture-times.js';

const refusal = (fn: () => void): SandglassError | undefined => {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err as SandglassError;
  }
};

describe('CaptureTimes', () => {
  it('refuses an interval shorter than the quickest recent capture of that size, naming the field and the minimum', () => {
    const t = new CaptureTimes(5);
    // Nothing measured yet: nothing refused.
    expect(refusal(() => t.check(4096, 5))).toBeUndefined();
    for (const ms of [9200, 8100, 12_000]) t.record(4096, ms);
    const e = refusal(() => t.check(4096, 5));
    expect(e).toBeInstanceOf(SandglassError);
    expect(e).toMatchObject({
      code: 'snapshot_interval_unachievable',
      status: 400,
      details: { field: 'snapshotIntervalS', minimumS: 9, measuredCaptureMs: 8100 },
    });
    expect(e!.message).toMatch(/at least 9/);
    expect(refusal(() => t.check(4096, 8))).toMatchObject({ details: { minimumS: 9 } });
    expect(refusal(() => t.check(4096, 9))).toBeUndefined();
    expect(refusal(() => t.check(4096, 5, { bestEffort: true }))).toBeUndefined();
    // Another size has its own measure.
    expect(refusal(() => t.check(256, 5))).toBeUndefined();
  });

  it('follows the latest five captures, and never names a minimum below the API’s', () => {
    const t = new CaptureTimes(5);
    t.record(256, 1200);
    expect(refusal(() => t.check(256, 5))).toBeUndefined();
    for (let i = 0; i < 5; i++) t.record(256, 7000);
    // The quick one has aged out: the node got slower for this size.
    expect(refusal(() => t.check(256, 5))).toMatchObject({ details: { minimumS: 7 } });
    const small = new CaptureTimes(5);
    small.record(128, 5500);
    expect(refusal(() => small.check(128, 5))).toMatchObject({ details: { minimumS: 6 } });
  });
});
