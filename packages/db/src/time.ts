// The one timestamp format stored in the database: ISO-8601 UTC text with milliseconds.
import type { IsoTime } from './schema.js';

export function toIso(ms: number): IsoTime {
  return new Date(ms).toISOString();
}

export function fromIso(iso: IsoTime): number {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) throw new Error(`not an ISO-8601 timestamp: ${JSON.stringify(iso)}`);
  return ms;
}
