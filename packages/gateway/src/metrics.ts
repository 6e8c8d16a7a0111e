// A running sandbox's metrics over time: its guest's CPU, memory and disk, sampled through the agent every few
// seconds and kept in the gateway's memory for the last hour.
import type { GuestStats } from '@sandglass/agent-client';

/** One sample every 5 s, as E2B samples. */
export const METRICS_INTERVAL_MS = 5_000;
/** An hour of samples; older ones are dropped. */
export const METRICS_KEPT = 720;

export interface MetricSample {
  timestampMs: number;
  cpuCount: number;
  /** Of all the guest's CPUs together, since the sample before (since boot for the first), 0–100. */
  cpuUsedPct: number;
  memUsedBytes: number;
  memTotalBytes: number;
  memCacheBytes: number;
  diskUsedBytes: number;
  diskTotalBytes: number;
}

/** The samples of one sandbox, oldest first; the CPU figure is the change in the guest's ticks between two samples. */
export class MetricsSeries {
  readonly #samples: MetricSample[] = [];
  #prevTicks?: { total: number; idle: number };

  add(stats: GuestStats, timestampMs: number): MetricSample {
    let cpuUsedPct = 0;
    if (stats.cpuTotalTicks !== undefined && stats.cpuIdleTicks !== undefined) {
      const prev = this.#prevTicks ?? { total: 0, idle: 0 };
      const total = stats.cpuTotalTicks - prev.total;
      const busy = total - (stats.cpuIdleTicks - prev.idle);
      // A guest whose counters went backwards (a restore of an older snapshot) starts a new baseline.
      if (total > 0 && busy >= 0) cpuUsedPct = Math.min(100, Math.round((busy / total) * 10_000) / 100);
      this.#prevTicks = { total: stats.cpuTotalTicks, idle: stats.cpuIdleTicks };
    }
    const sample: MetricSample = {
      timestampMs,
      cpuCount: stats.cpuCount,
      cpuUsedPct,
      memUsedBytes: stats.memUsedBytes ?? 0,
      memTotalBytes: stats.memTotalBytes ?? 0,
      memCacheBytes: stats.memCacheBytes ?? 0,
      diskUsedBytes: stats.diskUsedBytes ?? 0,
      diskTotalBytes: stats.diskTotalBytes ?? 0,
    };
    this.#samples.push(sample);
    if (this.#samples.length > METRICS_KEPT) this.#samples.splice(0, this.#samples.length - METRICS_KEPT);
    return sample;
  }

  /** The samples taken at or after `startMs` and at or before `endMs` (both optional), oldest first. */
  between(startMs?: number, endMs?: number): MetricSample[] {
    return this.#samples.filter((s) => (startMs === undefined || s.timestampMs >= startMs) && (endMs === undefined || s.timestampMs <= endMs));
  }
}

/** The Metrics body of both routes (data plane and internal): the samples between `start` and `end` (RFC 3339). */
export function metricsView(series: MetricsSeries, query: { start?: string; end?: string }) {
  const at = (v: string | undefined) => (v === undefined ? undefined : Date.parse(v));
  return {
    intervalS: METRICS_INTERVAL_MS / 1000,
    metrics: series.between(at(query.start), at(query.end)).map(({ timestampMs, ...figures }) => ({
      timestamp: new Date(timestampMs).toISOString(),
      ...figures,
    })),
  };
}
