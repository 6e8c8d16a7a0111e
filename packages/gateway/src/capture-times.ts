// How long this node's captures take per guest memory size: the shortest snapshot interval each size can ever keep.
import { SandglassError } from '@sandglass/core';

/** Captures kept per size: enough to ride out one slow capture, few enough to follow a node whose load changed. */
const KEPT = 5;

export class CaptureTimes {
  private readonly msBySize = new Map<number, number[]>();

  constructor(private readonly minimumIntervalS: number) {}

  /** A committed capture of a `memoryMib` guest took `ms`, from entering the capture gate to its manifest. */
  record(memoryMib: number, ms: number): void {
    const list = this.msBySize.get(memoryMib) ?? [];
    list.push(ms);
    if (list.length > KEPT) list.shift();
    this.msBySize.set(memoryMib, list);
  }

  /**
   * Refuses an interval shorter than the quickest of the latest captures of that size: a sandbox's captures never
   * overlap, so no scheduling can keep it. Nothing is refused before a capture of that size has been measured, nor when
   * the caller takes the interval as best-effort.
   */
  check(memoryMib: number, intervalS: number, opts: { bestEffort?: boolean } = {}): void {
    const measured = this.msBySize.get(memoryMib);
    if (opts.bestEffort || !measured) return;
    const quickestMs = Math.min(...measured);
    if (intervalS * 1000 >= quickestMs) return;
    const minimumS = Math.max(this.minimumIntervalS, Math.ceil(quickestMs / 1000));
    throw new SandglassError(
      'snapshot_interval_unachievable',
      `A snapshot of a ${memoryMib} MiB sandbox takes ${(quickestMs / 1000).toFixed(1)} s on this node, so one every ${intervalS} s cannot be kept: ` +
        `ask for snapshotIntervalS of at least ${minimumS}, or take it as best-effort.`,
      { details: { field: 'snapshotIntervalS', minimumS, measuredCaptureMs: Math.round(quickestMs) } },
    );
  }
}
