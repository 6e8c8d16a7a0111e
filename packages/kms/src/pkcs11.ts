// A tenant's key held in a PKCS#11 HSM: data keys are wrapped inside the token under an AES key that never leaves it.
import { readFile } from 'node:fs/promises';
import pkcs11js from 'pkcs11js';
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

/** The calls of pkcs11js's PKCS11 this file makes: a test hands in the real module behind a misbehaving wrapper. */
export type Pkcs11Lib = Pick<
  pkcs11js.PKCS11,
  | 'C_GetSlotList'
  | 'C_GetTokenInfo'
  | 'C_OpenSession'
  | 'C_CloseSession'
  | 'C_Login'
  | 'C_FindObjectsInit'
  | 'C_FindObjects'
  | 'C_FindObjectsFinal'
  | 'C_CreateObject'
  | 'C_DestroyObject'
  | 'C_GetAttributeValue'
  | 'C_WrapKeyAsync'
  | 'C_UnwrapKeyAsync'
>;

export const DEFAULT_PKCS11_TIMEOUT_MS = 5_000;
const DATA_KEY_BYTES = 32;
/** AES key wrap with padding (RFC 5649): the mechanism every PKCS#11 v2.40 HSM offers for wrapping secret keys. */
const WRAP_MECHANISM = { mechanism: pkcs11js.CKM_AES_KEY_WRAP_PAD };
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

/** One loaded and initialised module per path and process: C_Initialize may run only once per library. */
const loaded = new Map<string, Pkcs11Lib>();

function loadModule(path: string): Pkcs11Lib {
  let lib = loaded.get(path);
  if (!lib) {
    const p = new pkcs11js.PKCS11();
    p.load(path);
    try {
      p.C_Initialize();
    } catch (err) {
      if (ckr(err) !== 'CKR_CRYPTOKI_ALREADY_INITIALIZED') throw err;
    }
    lib = p;
    loaded.set(path, lib);
  }
  return lib;
}

/**
 * Wraps and unwraps data keys with one token's AES key. Every operation runs in turn on one logged-in session (a
 * PKCS#11 session is not safe for concurrent calls) and fails closed: an answer later than timeoutMs is
 * key_unavailable, a refusal by the HSM (key gone, PIN refused) key_revoked. The key object is looked up by label at
 * every operation, so deleting it on the token takes effect at the next one.
 */
export class Pkcs11Wrapper {
  readonly config: Readonly<Pkcs11Config>;
  readonly #timeoutMs: number;
  readonly #lib: (() => Pkcs11Lib) | undefined;
  #session: { lib: Pkcs11Lib; handle: Buffer } | undefined;
  /** The queue: each operation starts after the previous one really finished, even one whose caller timed out. */
  #tail: Promise<unknown> = Promise.resolve();

  constructor(config: Pkcs11Config, opts: { timeoutMs?: number; lib?: Pkcs11Lib } = {}) {
    for (const field of ['module', 'token', 'key', 'pinFile'] as const) {
      if (typeof config[field] !== 'string' || config[field].length === 0 || config[field].length > 4096) {
        throw invalidArgument(field, 'must be a non-empty string');
      }
    }
    this.config = Object.freeze({ ...config });
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_PKCS11_TIMEOUT_MS;
    if (!Number.isInteger(this.#timeoutMs) || this.#timeoutMs < 1) throw invalidArgument('timeoutMs', 'must be a positive whole number of milliseconds');
    const lib = opts.lib;
    this.#lib = lib && (() => lib);
  }

  /** The wrapped form of key (32 bytes), made inside the token. */
  wrap(key: Buffer): Promise<Buffer> {
    if (key.length !== DATA_KEY_BYTES) return Promise.reject(invalidArgument('key', `must be ${DATA_KEY_BYTES} bytes`));
    return this.#run('wrap', async (lib, session) => {
      const kek = this.#findKey(lib, session);
      // A session object (never on the token), extractable only so the token can wrap it; destroyed right after.
      const obj = lib.C_CreateObject(session, [
        { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
        { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_AES },
        { type: pkcs11js.CKA_TOKEN, value: false },
        { type: pkcs11js.CKA_EXTRACTABLE, value: true },
        { type: pkcs11js.CKA_VALUE, value: key },
      ]);
      try {
        return await lib.C_WrapKeyAsync(session, WRAP_MECHANISM, kek, obj, Buffer.alloc(DATA_KEY_BYTES + 16));
      } finally {
        lib.C_DestroyObject(session, obj);
      }
    });
  }

  /** The data key inside wrapped, unwrapped by the token into a session object that is read once and destroyed. */
  unwrap(wrapped: Buffer): Promise<Buffer> {
    return this.#run('unwrap', async (lib, session) => {
      const kek = this.#findKey(lib, session);
      const obj = await lib.C_UnwrapKeyAsync(session, WRAP_MECHANISM, kek, wrapped, [
        { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
        { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_AES },
        { type: pkcs11js.CKA_TOKEN, value: false },
        { type: pkcs11js.CKA_SENSITIVE, value: false },
        { type: pkcs11js.CKA_EXTRACTABLE, value: true },
      ]);
      try {
        const value = lib.C_GetAttributeValue(session, obj, [{ type: pkcs11js.CKA_VALUE }])[0]?.value;
        if (!Buffer.isBuffer(value) || value.length !== DATA_KEY_BYTES) throw new Error(`the unwrapped key is not ${DATA_KEY_BYTES} bytes`);
        return Buffer.from(value);
      } finally {
        lib.C_DestroyObject(session, obj);
      }
    });
  }

  /** Resolves when the token answers and still holds the wrapping key; throws key_revoked or key_unavailable otherwise. */
  probe(): Promise<void> {
    return this.#run('probe', async (lib, session) => {
      this.#findKey(lib, session);
    });
  }

  /** Logs out by closing the session; the next operation opens a new one. */
  async close(): Promise<void> {
    await this.#tail.catch(() => undefined);
    this.#dropSession();
  }

  #run<T>(what: string, op: (lib: Pkcs11Lib, session: Buffer) => Promise<T>): Promise<T> {
    const started = this.#tail
      .catch(() => undefined)
      .then(async () => {
        const { lib, handle } = this.#session ?? (await this.#open());
        try {
          return await op(lib, handle);
        } catch (err) {
          // A session the token invalidated (device removed, logged out) is not reused: the next call logs in afresh.
          this.#dropSession();
          throw err;
        }
      });
    this.#tail = started;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new SandglassError(
              'key_unavailable',
              `The HSM (token ${this.config.token}) did not answer the ${what} within ${this.#timeoutMs} ms; nothing falls back.`,
            ),
          ),
        this.#timeoutMs,
      );
    });
    return Promise.race([started, timeout])
      .catch((err: unknown) => {
        throw this.#classify(what, err);
      })
      .finally(() => clearTimeout(timer));
  }

  async #open(): Promise<{ lib: Pkcs11Lib; handle: Buffer }> {
    const lib = this.#lib?.() ?? loadModule(this.config.module);
    const slot = lib.C_GetSlotList(true).find((s) => lib.C_GetTokenInfo(s).label.trim() === this.config.token);
    if (!slot) throw new Pkcs11Refusal(`no token labelled ${this.config.token} is present`);
    const handle = lib.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION | pkcs11js.CKF_RW_SESSION);
    try {
      // Trailing newlines are how PIN files are usually written; the PIN itself goes nowhere but C_Login.
      const pin = (await readFile(this.config.pinFile, 'utf8')).replace(/\r?\n$/, '');
      try {
        lib.C_Login(handle, pkcs11js.CKU_USER, pin);
      } catch (err) {
        // The token's login is per application: a second session of a logged-in token is already in.
        if (ckr(err) !== 'CKR_USER_ALREADY_LOGGED_IN') throw err;
      }
    } catch (err) {
      lib.C_CloseSession(handle);
      throw err;
    }
    this.#session = { lib, handle };
    return this.#session;
  }

  #dropSession(): void {
    const s = this.#session;
    this.#session = undefined;
    if (!s) return;
    try {
      s.lib.C_CloseSession(s.handle);
    } catch {
      // Already invalid: nothing to give back.
    }
  }

  #findKey(lib: Pkcs11Lib, session: Buffer): Buffer {
    lib.C_FindObjectsInit(session, [
      { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
      { type: pkcs11js.CKA_LABEL, value: this.config.key },
    ]);
    let found: Buffer[];
    try {
      found = lib.C_FindObjects(session, 2);
    } finally {
      lib.C_FindObjectsFinal(session);
    }
    if (found.length === 0) throw new Pkcs11Refusal(`token ${this.config.token} holds no key labelled ${this.config.key}`);
    // Two keys under one label would make which one wraps a matter of chance: refuse rather than guess.
    if (found.length > 1) throw new Pkcs11Refusal(`token ${this.config.token} holds more than one key labelled ${this.config.key}`);
    return found[0]!;
  }

  #classify(what: string, err: unknown): SandglassError {
    if (err instanceof SandglassError) return err;
    const code = ckr(err);
    const where = `token ${this.config.token}, key ${this.config.key}`;
    if (err instanceof Pkcs11Refusal || (code !== undefined && REFUSALS.has(code))) {
      return new SandglassError('key_revoked', `The HSM refused the ${what} (${where}): ${(err as Error).message}.`, { cause: err });
    }
    return new SandglassError('key_unavailable', `The HSM failed the ${what} (${where}): ${(err as Error).message}.`, { cause: err });
  }
}

/** The token answered, and the answer is no. */
class Pkcs11Refusal extends Error {}

function ckr(err: unknown): string | undefined {
  const m = /(CKR_[A-Z_]+)/.exec((err as Error | undefined)?.message ?? '');
  return m?.[1];
}
