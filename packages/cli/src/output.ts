// How the CLI prints: tables (plain when not on a terminal, so they pipe cleanly), JSON, and errors.
import { inspect } from 'node:util';
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

/** A catalogued error: the SDK's, or @sandglass/core's as `up` and `doctor` throw it (see asCataloguedError). */
interface CataloguedError {
  code: string;
  message: string;
  requestId?: string;
}

/**
 * The error as a catalogued one, or undefined when it is not. The SDK's is its own class; @sandglass/core's reaches the
 * CLI only through @sandglass/server, which `up` and `doctor` load on demand, and the CLI imports nothing but the SDK at
 * its top level, so core's is recognised by shape: core names every instance `SandglassError` and gives it a string code.
 */
export function asCataloguedError(err: unknown): CataloguedError | undefined {
  if (err instanceof SandglassError) return err;
  if (err instanceof Error && err.name === 'SandglassError' && typeof (err as { code?: unknown }).code === 'string') return err as Error & CataloguedError;
  return undefined;
}

/** SANDGLASS_DEBUG=1 (any value but empty or 0) adds the stack trace, and any cause, to an unexpected error. */
const debugging = (env: NodeJS.ProcessEnv) => env.SANDGLASS_DEBUG !== undefined && env.SANDGLASS_DEBUG !== '' && env.SANDGLASS_DEBUG !== '0';

/**
 * Prints an error on stderr and returns the exit status for it: 2 for usage errors, 1 otherwise. A catalogued error is
 * `error: <code>: <message>`, never with a stack: its code and message say what to do. Anything else is a defect,
 * printed as `error: internal: <name>: <message>`, with its stack only under SANDGLASS_DEBUG.
 */
export function reportError(err: unknown, env: NodeJS.ProcessEnv = process.env): number {
  if (err instanceof UsageError) {
    process.stderr.write(`error: ${err.message}\n`);
    return 2;
  }
  const catalogued = asCataloguedError(err);
  if (catalogued) {
    const request = catalogued.requestId ? ` (request ${catalogued.requestId})` : '';
    process.stderr.write(`error: ${catalogued.code}: ${catalogued.message}${request}\n`);
    return 1;
  }
  if (debugging(env)) process.stderr.write(`error: internal: ${inspect(err)}\n`);
  else process.stderr.write(`error: internal: ${String(err)}\n(SANDGLASS_DEBUG=1 prints its stack trace)\n`);
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

// One formatting of sizes for the whole CLI, shared with the SDK's audit timeline.
export { formatBytes } from '@sandglass/sdk';
