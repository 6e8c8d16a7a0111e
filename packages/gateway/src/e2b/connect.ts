// The Connect protocol's JSON flavour as E2B's SDK speaks it: envelopes, end-of-stream frames, errors, timeouts.

/** Connect's error codes, as they travel (strings), with the HTTP status a unary error answers with. */
export const CONNECT_STATUS = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
} as const;

export type ConnectCode = keyof typeof CONNECT_STATUS;

/** An RPC's failure in Connect's terms: what a unary reply's body or a stream's end frame carries. */
export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
    this.name = 'ConnectError';
  }

  get status(): number {
    return CONNECT_STATUS[this.code];
  }

  toJSON(): { code: ConnectCode; message: string } {
    return { code: this.code, message: this.message };
  }
}

/** Envelope flags: bit 0 compressed (never sent by us, refused from clients), bit 1 end of stream. */
export const FLAG_COMPRESSED = 0x01;
export const FLAG_END_STREAM = 0x02;
const HEADER_BYTES = 5;

export function encodeEnvelope(flags: number, payload: Buffer): Buffer {
  const head = Buffer.allocUnsafe(HEADER_BYTES);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** One message of a server stream. */
export function messageEnvelope(message: unknown): Buffer {
  return encodeEnvelope(0, Buffer.from(JSON.stringify(message), 'utf8'));
}

/** The frame that closes a server stream: `{}` on success, the error otherwise. */
export function endStreamEnvelope(err?: ConnectError): Buffer {
  return encodeEnvelope(FLAG_END_STREAM, Buffer.from(JSON.stringify(err ? { error: err.toJSON() } : {}), 'utf8'));
}

export interface Envelope {
  flags: number;
  payload: Buffer;
}

/**
 * Splits a byte stream into envelopes whatever the chunking. A declared length above maxMessageBytes is refused as
 * soon as its header arrives, before any of its payload is held.
 */
export class EnvelopeReader {
  #buf: Buffer = Buffer.alloc(0);

  constructor(private readonly maxMessageBytes: number) {}

  push(chunk: Buffer): Envelope[] {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    const out: Envelope[] = [];
    while (this.#buf.length >= HEADER_BYTES) {
      const length = this.#buf.readUInt32BE(1);
      if (length > this.maxMessageBytes) {
        throw new ConnectError('resource_exhausted', `a message of ${length} bytes is larger than the ${this.maxMessageBytes} bytes accepted`);
      }
      if (this.#buf.length < HEADER_BYTES + length) break;
      out.push({ flags: this.#buf[0]!, payload: this.#buf.subarray(HEADER_BYTES, HEADER_BYTES + length) });
      this.#buf = this.#buf.subarray(HEADER_BYTES + length);
    }
    return out;
  }

  /** Bytes of an envelope not yet complete; non-zero at the end of the body means it was cut short. */
  get pendingBytes(): number {
    return this.#buf.length;
  }
}

/**
 * `Connect-Timeout-Ms`: the RPC's deadline in ms from now, at most 10 digits by the protocol. Absent, empty or 0
 * (the SDK's "no timeout") is none; anything else malformed is refused.
 */
export function parseTimeoutMs(header: string | string[] | undefined): number | undefined {
  if (header === undefined || header === '') return undefined;
  const v = Array.isArray(header) ? header[0]! : header;
  if (!/^\d{1,10}$/.test(v)) throw new ConnectError('invalid_argument', `Connect-Timeout-Ms: ${JSON.stringify(v.slice(0, 20))} is not a number of ms`);
  const ms = Number(v);
  return ms === 0 ? undefined : ms;
}

/** `Keepalive-Ping-Interval` (seconds; E2B's own header): how often an idle stream sends a keepalive message. */
export function parseKeepaliveS(header: string | string[] | undefined): number | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  if (v === undefined || !/^\d{1,6}$/.test(v)) return undefined;
  const s = Number(v);
  return s > 0 ? s : undefined;
}
