// How the CLI prints: tables (plain when not on a terminal, so they pipe cleanly), JSON, and errors.
import { SandglassError } from '@sandglass/sdk';
import { UsageError } from './args.js';

export async function printTable(head: string[], rows: (string | number)[][]): Promise<void> {
  const Table = (await import('cli-table3')).default;
  const table = new Table(
    process.stdout.isTTY
      ? { head }
      : {
          head,
          style: { head: [], border: [] },
        },
  );
  table.push(...rows.map((r) => r.map(String)));
  process.stdout.write(`${table.toString()}\n`);
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** `error: <code>: <message>` on stderr; returns the exit status for it (2 for usage errors, 1 otherwise). */
export function reportError(err: unknown): number {
  if (err instanceof UsageError) {
    process.stderr.write(`error: ${err.message}\n`);
    return 2;
  }
  if (err instanceof SandglassError) {
    const request = err.requestId ? ` (request ${err.requestId})` : '';
    process.stderr.write(`error: ${err.code}: ${err.message}${request}\n`);
    return 1;
  }
  process.stderr.write(`error: internal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  return 1;
}

/** A timestamp as local "YYYY-MM-DD HH:MM:SS", short enough for a table. */
export function shortTime(iso: string | undefined | null): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Bytes in binary units, one decimal: 4096 → "4.0 KiB". */
export function formatBytes(n: number): string {
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  if (n < 1024) return `${n} B`;
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}
