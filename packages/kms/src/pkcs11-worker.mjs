// The thread that makes every PKCS#11 call of one Pkcs11Wrapper, so a module that hangs blocks this thread, never Node's.
// Plain JavaScript: a worker thread does not inherit the TypeScript loader of the process that starts it.
import { readFileSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import pkcs11js from 'pkcs11js';

const DATA_KEY_BYTES = 32;
/** AES key wrap with padding (RFC 5649): the mechanism every PKCS#11 v2.40 HSM offers for wrapping secret keys. */
const WRAP_MECHANISM = { mechanism: pkcs11js.CKM_AES_KEY_WRAP_PAD };

/** @type {{ module: string, token: string, key: string, pinFile: string, gate?: Int32Array }} */
const config = workerData;
/** @type {import('pkcs11js').PKCS11 | undefined} */
let lib;
/** @type {Buffer | undefined} */
let session;

/** The token answered, and the answer is no (as opposed to a failure of the module or the device). */
class Refusal extends Error {}

/** The tests' stand-in for a hung module: while the gate is closed (non-zero) this thread blocks as in a C call. */
function gate() {
  if (config.gate) while (Atomics.load(config.gate, 0) !== 0) Atomics.wait(config.gate, 0, Atomics.load(config.gate, 0), 1_000);
}

function ckr(err) {
  return /(CKR_[A-Z_]+)/.exec(err?.message ?? '')?.[1];
}

/** C_Initialize may run once per library and process; another wrapper's thread may have done it already. */
function load() {
  if (lib) return lib;
  const p = new pkcs11js.PKCS11();
  p.load(config.module);
  try {
    p.C_Initialize();
  } catch (err) {
    if (ckr(err) !== 'CKR_CRYPTOKI_ALREADY_INITIALIZED') throw err;
  }
  lib = p;
  return lib;
}

function open() {
  if (session) return session;
  const l = load();
  gate();
  const slot = l.C_GetSlotList(true).find((s) => l.C_GetTokenInfo(s).label.trim() === config.token);
  if (!slot) throw new Refusal(`no token labelled ${config.token} is present`);
  const handle = l.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION | pkcs11js.CKF_RW_SESSION);
  try {
    // Trailing newlines are how PIN files are usually written; the PIN itself goes nowhere but C_Login.
    const pin = readFileSync(config.pinFile, 'utf8').replace(/\r?\n$/, '');
    try {
      l.C_Login(handle, pkcs11js.CKU_USER, pin);
    } catch (err) {
      // The token's login is per application: a second session of a logged-in token is already in.
      if (ckr(err) !== 'CKR_USER_ALREADY_LOGGED_IN') throw err;
    }
  } catch (err) {
    l.C_CloseSession(handle);
    throw err;
  }
  session = handle;
  return session;
}

function dropSession() {
  const s = session;
  session = undefined;
  if (!s || !lib) return;
  try {
    lib.C_CloseSession(s);
  } catch {
    // Already invalid: nothing to give back.
  }
}

function findKey(s) {
  lib.C_FindObjectsInit(s, [
    { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
    { type: pkcs11js.CKA_LABEL, value: config.key },
  ]);
  let found;
  try {
    found = lib.C_FindObjects(s, 2);
  } finally {
    lib.C_FindObjectsFinal(s);
  }
  if (found.length === 0) throw new Refusal(`token ${config.token} holds no key labelled ${config.key}`);
  // Two keys under one label would make which one wraps a matter of chance: refuse rather than guess.
  if (found.length > 1) throw new Refusal(`token ${config.token} holds more than one key labelled ${config.key}`);
  return found[0];
}

/** A fresh ArrayBuffer holding a copy of bytes, to be transferred (moved, not copied) to the other thread. */
function movable(bytes) {
  const out = new ArrayBuffer(bytes.length);
  new Uint8Array(out).set(bytes);
  return out;
}

const ops = {
  wrap(s, data) {
    const key = Buffer.from(data);
    try {
      const kek = findKey(s);
      // A session object (never on the token), extractable only so the token can wrap it; destroyed right after.
      const obj = lib.C_CreateObject(s, [
        { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
        { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_AES },
        { type: pkcs11js.CKA_TOKEN, value: false },
        { type: pkcs11js.CKA_EXTRACTABLE, value: true },
        { type: pkcs11js.CKA_VALUE, value: key },
      ]);
      try {
        return movable(lib.C_WrapKey(s, WRAP_MECHANISM, kek, obj, Buffer.alloc(DATA_KEY_BYTES + 16)));
      } finally {
        lib.C_DestroyObject(s, obj);
      }
    } finally {
      key.fill(0);
    }
  },
  unwrap(s, data) {
    const kek = findKey(s);
    const obj = lib.C_UnwrapKey(s, WRAP_MECHANISM, kek, Buffer.from(data), [
      { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
      { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_AES },
      { type: pkcs11js.CKA_TOKEN, value: false },
      { type: pkcs11js.CKA_SENSITIVE, value: false },
      { type: pkcs11js.CKA_EXTRACTABLE, value: true },
    ]);
    try {
      const value = lib.C_GetAttributeValue(s, obj, [{ type: pkcs11js.CKA_VALUE }])[0]?.value;
      if (!Buffer.isBuffer(value) || value.length !== DATA_KEY_BYTES) throw new Error(`the unwrapped key is not ${DATA_KEY_BYTES} bytes`);
      const out = movable(value);
      value.fill(0);
      return out;
    } finally {
      lib.C_DestroyObject(s, obj);
    }
  },
  probe(s) {
    findKey(s);
    return undefined;
  },
};

// Messages are handled one after another on this one thread: a PKCS#11 session is not safe for concurrent calls.
parentPort.on('message', (msg) => {
  if (msg.op === 'close') {
    dropSession();
    parentPort.postMessage({ id: msg.id, ok: true });
    return;
  }
  try {
    const s = open();
    gate();
    const data = ops[msg.op](s, msg.data);
    parentPort.postMessage({ id: msg.id, ok: true, data }, data ? [data] : []);
  } catch (err) {
    // A session the token invalidated (device removed, logged out) is not reused: the next call logs in afresh.
    dropSession();
    const refused = err instanceof Refusal;
    parentPort.postMessage({ id: msg.id, ok: false, refused, code: refused ? undefined : ckr(err), message: String(err?.message ?? err) });
  } finally {
    if (msg.data instanceof ArrayBuffer) new Uint8Array(msg.data).fill(0);
  }
});
