// A tenant's key held in a PKCS#11 HSM: data keys are wrapped inside the token under an AES key that never leaves it.
import { Worker } from 'node:worker_threads';
import { invalidArgument, SandglassError } from '@sandglass/core';

/** Where the tenant's wrapping key lives. The PIN is read from pinFile at each login and never kept or logged. */
export interface Pkcs11Config {
  /** Path of the PKCS#11 module (the vendor's .so; SoftHSM2's is /usr/lib/softhsm/libsofthsm2.so). */
  module: string;
  /** Label of the token (CKA_LABEL of the token info). */
  token: string;
  /** Label of the AES key object (CKO_SECRET_KEY, CKK_AES) that wraps and unwraps. */
  key: string;
  pinFile: string;
}

export const DEFAULT_PKCS11_TIMEOUT_MS = 5_000;
const DATA_KEY_BYTES = 32;
/**
 * Answers that mean the HSM (or its owner) refuses this key: it was deleted, disabled or the PIN withdrawn. They are
 * honoured as a revocation. Anything else (a crashed module, a device error) is an outage: key_unavailable.
 */
const REFUSALS = new Set([
  'CKR_KEY_HANDLE_INVALID',
  'CKR_OBJECT_HANDLE_INVALID',
  'CKR_WRAPPING_KEY_HANDLE_INVALID',
  'CKR_UNWRAPPING_KEY_HANDLE_INVALID',
  'CKR_KEY_FUNCTION_NOT_PERMITTED',
  'CKR_WRAPPED_KEY_INVALID',
  'CKR_PIN_INCORRECT',
  'CKR_PIN_LOCKED',
  'CKR_PIN_EXPIRED',
  'CKR_PIN_INVALID',
  'CKR_PIN_LEN_RANGE',
  'CKR_USER_PIN_NOT_INITIALIZED',
  'CKR_TOKEN_NOT_PRESENT',
  'CKR_TOKEN_NOT_RECOGNIZED',
]);
// By the package's folder, so the compiled servers (packages/server/dist, the same depth) find it too.
const WORKER_URL = new URL('../../kms/src/pkcs11-worker.mjs', import.meta.url);

type Op = 'wrap' | 'unwrap' | 'probe' | 'close';
/** The worker's answer: bytes moved over (never copied), or what went wrong, classified there and never holding a key. */
type Reply = { id: number; ok: true; data?: ArrayBuffer } | { id: number; ok: false; refused: boolean; code?: string; message: string };

interface Call {
  what: Op;
  worker: Worker;
  resolve: (data: ArrayBuffer | undefined) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export interface Pkcs11WrapperOptions {
  /** The deadline of each call, counted from when it is made (a call queued behind a slow one waits inside it). */
  timeoutMs?: number;
  /**
   * Tests only: while element 0 is non-zero the worker blocks before each PKCS#11 call, as a hung module does, so a
   * test can prove the deadline and the replacement of the worker.
   */
  testGate?: Int32Array;
}

/**
 * Wraps and unwraps data keys with one token's AES key. Every PKCS#11 call runs on a worker thread this wrapper owns,
 * one after another on one logged-in session (a PKCS#11 session is not safe for concurrent calls), so a module that
 * hangs (even in C_Login or C_FindObjects) blocks that thread, never the event loop. Each call fails closed: an answer
 * later than timeoutMs is key_unavailable, and the worker is terminated then (with every call still queued on it) and
 * started afresh by the next call; a refusal by the HSM (key gone, PIN refused) is key_revoked. The key object is
 * looked up by label at every operation, so deleting it on the token takes effect at the next one. Keys cross between
 * the threads as transferred buffers, zeroed on the side that let go of them.
 */
export class Pkcs11Wrapper {
  readonly config: Readonly<Pkcs11Config>;
  readonly #timeoutMs: number;
  readonly #gate: Int32Array | undefined;
  #worker: Worker | undefined;
  readonly #calls = new Map<number, Call>();
  #nextId = 1;

  constructor(config: Pkcs11Config, opts: Pkcs11WrapperOptions = {}) {
    for (const field of ['module', 'token', 'key', 'pinFile'] as const) {
      if (typeof config[field] !== 'string' || config[field].length === 0 || config[field].length > 4096) {
        throw invalidArgument(field, 'must be a non-empty string');
      }
    }
    this.config = Object.freeze({ ...config });
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_PKCS11_TIMEOUT_MS;
    if (!Number.isInteger(this.#timeoutMs) || this.#timeoutMs < 1) throw invalidArgument('timeoutMs', 'must be a positive whole number of milliseconds');
    this.#gate = opts.testGate;
  }

  /** The wrapped form of key (32 bytes), made inside the token. The caller keeps (and zeroes) its own key buffer. */
  async wrap(key: Buffer): Promise<Buffer> {
    if (key.length !== DATA_KEY_BYTES) throw invalidArgument('key', `must be ${DATA_KEY_BYTES} bytes`);
    return Buffer.from((await this.#call('wrap', movable(key)))!);
  }

  /** The data key inside wrapped, unwrapped by the token into a session object that is read once and destroyed. */
  async unwrap(wrapped: Buffer): Promise<Buffer> {
    const data = await this.#call('unwrap', movable(wrapped));
    if (data?.byteLength !== DATA_KEY_BYTES)
      throw new SandglassError('key_unavailable', `The HSM (token ${this.config.token}) answered the unwrap with no key.`);
    return Buffer.from(data);
  }

  /** Resolves when the token answers and still holds the wrapping key; throws key_revoked or key_unavailable otherwise. */
  async probe(): Promise<void> {
    await this.#call('probe');
  }

  /** Logs out by closing the session and ends the worker; the next operation starts a new one. */
  async close(): Promise<void> {
    const worker = this.#worker;
    if (!worker) return;
    try {
      await this.#call('close');
    } catch {
      // A worker that cannot even close in time is terminated below all the same.
    }
    this.#retire(worker, 'the wrapper was closed');
  }

  #call(what: Op, data?: ArrayBuffer): Promise<ArrayBuffer | undefined> {
    const worker = this.#spawn();
    const id = this.#nextId++;
    return new Promise<ArrayBuffer | undefined>((resolve, reject) => {
      const timer = setTimeout(() => {
        // The thread may be stuck inside the module: it is let go with every call queued on it, and the next call
        // starts a fresh one (a new session, a new login).
        this.#fail(
          id,
          new SandglassError(
            'key_unavailable',
            `The HSM (token ${this.config.token}) did not answer the ${what} within ${this.#timeoutMs} ms; nothing falls back.`,
          ),
        );
        this.#retire(worker, `an earlier call got no answer within ${this.#timeoutMs} ms`);
      }, this.#timeoutMs);
      this.#calls.set(id, { what, worker, resolve, reject, timer });
      worker.postMessage({ id, op: what, data }, data ? [data] : []);
    });
  }

  #spawn(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(WORKER_URL, {
      workerData: { ...this.config, ...(this.#gate ? { gate: this.#gate } : {}) },
    });
    // The callers' deadlines keep the process alive while calls are out: an idle worker does not hold it open.
    worker.unref();
    worker.on('message', (reply: Reply) => this.#answer(reply));
    worker.on('error', (err) => this.#retire(worker, `the PKCS#11 worker failed (${err.message})`));
    worker.on('exit', (code) => this.#retire(worker, `the PKCS#11 worker exited (${code})`));
    this.#worker = worker;
    return worker;
  }

  #answer(reply: Reply): void {
    const call = this.#calls.get(reply.id);
    if (!call) {
      // Too late: its caller was already told key_unavailable. A key that arrives now is destroyed unread.
      if (reply.ok && reply.data) new Uint8Array(reply.data).fill(0);
      return;
    }
    this.#calls.delete(reply.id);
    clearTimeout(call.timer);
    if (reply.ok) {
      call.resolve(reply.data);
      return;
    }
    const where = `token ${this.config.token}, key ${this.config.key}`;
    const refused = reply.refused || (reply.code !== undefined && REFUSALS.has(reply.code));
    call.reject(
      refused
        ? new SandglassError('key_revoked', `The HSM refused the ${call.what} (${where}): ${reply.message}.`)
        : new SandglassError('key_unavailable', `The HSM failed the ${call.what} (${where}): ${reply.message}.`),
    );
  }

  /** Lets a worker go (late, dead or closed): every call still on it fails closed, and the next call starts another. */
  #retire(worker: Worker, why: string): void {
    if (this.#worker === worker) this.#worker = undefined;
    for (const [id, call] of [...this.#calls]) {
      if (call.worker === worker) {
        this.#fail(id, new SandglassError('key_unavailable', `The HSM (token ${this.config.token}) cannot be asked: ${why}; nothing falls back.`));
      }
    }
    // Not awaited: a thread inside a hung C call ends only when the call returns, and nothing here waits for that.
    void worker.terminate();
  }

  #fail(id: number, err: SandglassError): void {
    const call = this.#calls.get(id);
    if (!call) return;
    this.#calls.delete(id);
    clearTimeout(call.timer);
    call.reject(err);
  }
}

/** A copy of bytes in an ArrayBuffer of its own, which postMessage moves to the worker and detaches here. */
function movable(bytes: Buffer): ArrayBuffer {
  const out = new ArrayBuffer(bytes.length);
  new Uint8Array(out).set(bytes);
  return out;
}
