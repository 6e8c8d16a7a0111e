// Unit tests of a sandbox's metrics series: CPU from tick deltas, the hour kept, and the start/end window.
import { describe, expect, it } from 'vitest';
import { METRICS_KEPT, MetricsSeries, metricsView } from './metrics.js';

const stats = (total: number, idle: number) => ({
  cpuCount: 2,
  cpuTotalTicks: total,
  cpuIdleTicks: idle,
  memTotalBytes: 1000,
  memUsedBytes: 400,
  memCacheBytes: 100,
  diskTotalBytes: 9000,
  diskUsedBytes: 3000,
});

describe('MetricsSeries', () => {
  it('takes CPU use from the change in ticks since the sample before', () => {
    const s = new MetricsSeries();
    expect(s.add(stats(1000, 750), 0).cpuUsedPct).toBe(25);
    expect(s.add(stats(1100, 760), 5000).cpuUsedPct).toBe(90);
    expect(s.add(stats(1100, 760), 10_000).cpuUsedPct).toBe(0);
    // Counters that went backwards (an older snapshot restored) start a new baseline rather than a negative figure.
    expect(s.add(stats(500, 400), 15_000).cpuUsedPct).toBe(0);
    expect(s.add(stats(600, 450), 20_000).cpuUsedPct).toBe(50);
  });

  it('fills what the guest did not say with 0 and keeps the last hour', () => {
    const s = new MetricsSeries();
    expect(s.add({ cpuCount: 1 }, 0)).toEqual({
      timestampMs: 0,
      cpuCount: 1,
      cpuUsedPct: 0,
      memUsedBytes: 0,
      memTotalBytes: 0,
      memCacheBytes: 0,
      diskUsedBytes: 0,
      diskTotalBytes: 0,
    });
    for (let i = 1; i <= METRICS_KEPT; i++) s.add({ cpuCount: 1 }, i * 5000);
    const all = s.between();
    expect(all).toHaveLength(METRICS_KEPT);
    expect(all[0]!.timestampMs).toBe(5000);
  });

  it('answers the samples at or after start and at or before end, in the API shape', () => {
    const s = new MetricsSeries();
    for (let i = 0; i < 4; i++) s.add(stats(1000 * (i + 1), 500 * (i + 1)), Date.UTC(2026, 0, 1, 0, 0, 5 * i));
    const view = metricsView(s, { start: '2026-01-01T00:00:05.000Z', end: '2026-01-01T00:00:10.000Z' });
    expect(view.intervalS).toBe(5);
    expect(view.metrics.map((m) => m.timestamp)).toEqual(['2026-01-01T00:00:05.000Z', '2026-01-01T00:00:10.000Z']);
    expect(view.metrics[0]).toEqual({
      timestamp: '2026-01-01T00:00:05.000Z',
      cpuCount: 2,
      cpuUsedPct: 50,
      memUsedBytes: 400,
      memTotalBytes: 1000,
      memCacheBytes: 100,
      diskUsedBytes: 3000,
      diskTotalBytes: 9000,
    });
    expect(metricsView(s, {}).metrics).toHaveLength(4);
  });
});
