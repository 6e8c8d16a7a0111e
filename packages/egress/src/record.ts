// Exchange records (egress.exchange): the bodies kept up to a cap, every secret value and placeholder redacted.
import { hostForUrl } from './address.js';
import type { Dest } from './decision.js';
import type { ExchangeData, RecordedBody } from './events.js';
import type { Redactor } from './secrets.js';
import type { Prepared } from './substitute.js';
import type { HeaderPairs } from './wire.js';

/** Collects up to `cap` bytes of a stream that flows elsewhere. */
export class Capture {
  readonly parts: Buffer[] = [];
  size = 0;
  #kept = 0;
  constructor(readonly cap: number) {}
  add(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.#kept >= this.cap) return;
    const part = chunk.subarray(0, this.cap - this.#kept);
    this.parts.push(Buffer.from(part));
    this.#kept += part.length;
  }
  get buffer(): Buffer {
    return Buffer.concat(this.parts);
  }
}

function recordedBody(buf: Buffer, sizeBytes: number, cap: number, redactor: Redactor | undefined): RecordedBody {
  // Redact before cutting, so a value straddling the cap is never half-kept.
  const clean = redactor ? redactor.buffer(buf) : buf;
  const data = clean.subarray(0, cap);
  const truncated = sizeBytes > cap || clean.length > cap;
  const text = data.toString('utf8');
  return Buffer.from(text, 'utf8').equals(data)
    ? { encoding: 'utf8', data: text, sizeBytes, truncated }
    : { encoding: 'base64', data: data.toString('base64'), sizeBytes, truncated };
}

/** The URL an exchange is recorded under: origin plus the client's target, secrets and placeholders redacted. */
export function recordedUrl(dest: Dest, prep: Prepared): string {
  const origin = `${dest.scheme}://${hostForUrl(dest.host)}${dest.port === (dest.scheme === 'https' ? 443 : 80) ? '' : `:${dest.port}`}`;
  return origin + prep.recordUrl;
}

/** A request body as the recording keeps it (redacted, then cut at the cap): what a replay matches on. */
export function recordedRequestBody(buf: Buffer, cap: number, redactor: Redactor | undefined): Buffer {
  return (redactor ? redactor.buffer(buf) : buf).subarray(0, cap);
}

/** One allowed exchange as the upstream saw it; the response is what the guest got (decoded and masked when it carried a secret). */
export function exchangeRecord(r: {
  capBytes: number;
  dest: Dest;
  method: string;
  prep: Prepared;
  requestBody: { buffer: Buffer; size: number };
  status: number;
  responseHeaders: HeaderPairs;
  responseBody: Capture;
  startedAtMs: number;
  durationMs: number;
}): ExchangeData {
  const { dest, prep, capBytes } = r;
  const redactor = prep.redactor;
  const red = (s: string) => (redactor ? redactor.text(s) : s);
  return {
    scheme: dest.scheme,
    host: dest.host.host,
    port: dest.port,
    method: r.method,
    url: recordedUrl(dest, prep),
    requestHeaders: prep.recordHeaders.map(([k, v]) => [k, red(v)]),
    requestBody: recordedBody(r.requestBody.buffer, r.requestBody.size, capBytes, redactor),
    status: r.status,
    responseHeaders: r.responseHeaders.map(([k, v]) => [k, red(v)]),
    responseBody: recordedBody(r.responseBody.buffer, r.responseBody.size, capBytes, redactor),
    startedAtMs: r.startedAtMs,
    durationMs: r.durationMs,
  };
}
