// The sandbox's CPU, memory and disk over the last hour: three small line charts of its gateway's metrics series.
import { useEffect, useState } from 'react';
import { gatewayJson } from './gateway.tsx';

interface Sample {
  timestamp: string;
  cpuCount: number;
  cpuUsedPct: number;
  memUsedBytes: number;
  memTotalBytes: number;
  memCacheBytes: number;
  diskUsedBytes: number;
  diskTotalBytes: number;
}

/** The gateway samples every 5 s; asking more often would only repeat the last sample. */
const POLL_MS = 5_000;
const WIDTH = 240;
const HEIGHT = 48;

const mib = (bytes: number) => `${Math.round(bytes / 2 ** 20)} MiB`;

/** A line of `values` scaled to 0…max, newest on the right; a single sample is a flat line across. */
function Chart({ label, values, max, now }: { label: string; values: number[]; max: number; now: string }) {
  const x = (i: number) => (values.length === 1 ? (i === 0 ? 0 : WIDTH) : (i / (values.length - 1)) * WIDTH);
  const y = (v: number) => HEIGHT - (max > 0 ? Math.min(Math.max(v / max, 0), 1) : 0) * HEIGHT;
  const points = (values.length === 1 ? [values[0]!, values[0]!] : values).map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
  return (
    <figure className="metric" data-testid="metric">
      <figcaption>
        {label}: <strong data-testid="metric-now">{now}</strong>
      </figcaption>
      <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} width={WIDTH} height={HEIGHT} role="img" aria-label={`${label} over the last hour`}>
        <polyline points={points} fill="none" stroke="currentColor" strokeWidth="1.5" />
      </svg>
    </figure>
  );
}

export function Metrics({ sandboxId }: { sandboxId: string }) {
  const [samples, setSamples] = useState<Sample[]>([]);
  useEffect(() => {
    let stopped = false;
    // A failed poll keeps the last chart: the next one, or the page's own error for the sandbox, says more.
    const load = () =>
      gatewayJson<{ metrics: Sample[] }>(sandboxId, '/metrics').then(
        (r) => !stopped && setSamples(r.metrics),
        () => undefined,
      );
    void load();
    const timer = setInterval(load, POLL_MS);
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }, [sandboxId]);
  const last = samples[samples.length - 1];
  return (
    <section aria-label="Metrics" className="metrics">
      <h2>Metrics</h2>
      {last === undefined ? (
        <p>The first sample comes within 5 s of the start.</p>
      ) : (
        <div className="metric-charts">
          <Chart label="CPU" values={samples.map((s) => s.cpuUsedPct)} max={100} now={`${last.cpuUsedPct.toFixed(0)} % of ${last.cpuCount} CPU`} />
          <Chart
            label="Memory"
            values={samples.map((s) => s.memUsedBytes)}
            max={last.memTotalBytes}
            now={`${mib(last.memUsedBytes)} of ${mib(last.memTotalBytes)}`}
          />
          <Chart
            label="Disk"
            values={samples.map((s) => s.diskUsedBytes)}
            max={last.diskTotalBytes}
            now={`${mib(last.diskUsedBytes)} of ${mib(last.diskTotalBytes)}`}
          />
        </div>
      )}
    </section>
  );
}
