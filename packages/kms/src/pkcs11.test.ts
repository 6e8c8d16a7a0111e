import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import pkcs11js from 'pkcs11js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Pkcs11Wrapper, type Pkcs11Config } from './pkcs11.js';
import { SOFTHSM_PIN, softHsm, type SoftHsm } from './softhsm-fixture.js';

let hsm: SoftHsm;
let config: Pkcs11Config;

beforeAll(() => {
  hsm = softHsm(['tok-a', 'tok-b', 'tok-c']);
  hsm.createKey('tok-a', 'kek-1');
  hsm.createKey('tok-a', 'kek-gone');
  hsm.createKey('tok-b', 'kek-1');
  config = { module: hsm.module, token: 'tok-a', key: 'kek-1', pinFile: hsm.pinFile };
});
afterAll(() => hsm.cleanup());

describe('Pkcs11Wrapper on SoftHSM2', () => {
  it('wraps inside the token and unwraps to the same key; another token key does not open it', async () => {
    const w = new Pkcs11Wrapper(config);
    const key = Buffer.alloc(32, 9);
    const wrapped = await w.wrap(key);
    expect(wrapped.length).toBe(40);
    expect(wrapped.includes(key)).toBe(false);
    expect(await w.unwrap(wrapped)).toEqual(key);
    expect(await new Pkcs11Wrapper(config).unwrap(wrapped)).toEqual(key);
    // Same label, another token: another key, so the wrap does not open. SoftHSM answers a failed integrity check
    // with CKR_GENERAL_ERROR, which is not read as the owner's refusal: key_unavailable, and nothing is unwrapped.
    await expect(new Pkcs11Wrapper({ ...config, token: 'tok-b' }).unwrap(wrapped)).rejects.toMatchObject({ code: 'key_unavailable' });
    await w.close();
  });

  it('the wrapping key never leaves the token: its value cannot be read', () => {
    const lib = new pkcs11js.PKCS11();
    lib.load(hsm.module);
    const slot = lib.C_GetSlotList(true).find((s) => lib.C_GetTokenInfo(s).label.trim() === 'tok-a')!;
    const s = lib.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION);
    try {
      lib.C_FindObjectsInit(s, [{ type: pkcs11js.CKA_LABEL, value: 'kek-1' }]);
      const [kek] = lib.C_FindObjects(s, 1);
      lib.C_FindObjectsFinal(s);
      expect(() => lib.C_GetAttributeValue(s, kek!, [{ type: pkcs11js.CKA_VALUE }])).toThrow(/CKR_ATTRIBUTE_SENSITIVE/);
      const [extractable] = lib.C_GetAttributeValue(s, kek!, [{ type: pkcs11js.CKA_EXTRACTABLE }]);
      expect(extractable!.value).toEqual(Buffer.of(0));
    } finally {
      lib.C_CloseSession(s);
    }
  });

  it('a key deleted on the token is a revocation at the next operation, for probe and unwrap alike', async () => {
    const w = new Pkcs11Wrapper({ ...config, key: 'kek-gone' });
    const wrapped = await w.wrap(Buffer.alloc(32, 1));
    await w.probe();
    hsm.deleteKey('tok-a', 'kek-gone');
    await expect(w.probe()).rejects.toMatchObject({ code: 'key_revoked' });
    await expect(w.unwrap(wrapped)).rejects.toMatchObject({ code: 'key_revoked' });
    await expect(w.wrap(Buffer.alloc(32, 1))).rejects.toMatchObject({ code: 'key_revoked' });
  });

  it('a refused PIN or a missing token is a revocation, and the PIN appears in no error', async () => {
    const wrongPin = join(hsm.dir, 'wrong-pin');
    writeFileSync(wrongPin, 'not-the-pin-31337\n');
    // A token no session of this process logged in to yet (PKCS#11 logins are per application and token).
    hsm.createKey('tok-c', 'kek-1');
    const err = await new Pkcs11Wrapper({ ...config, token: 'tok-c', pinFile: wrongPin }).probe().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'key_revoked' });
    expect(JSON.stringify({ m: (err as Error).message, d: (err as { details?: unknown }).details })).not.toContain('not-the-pin');
    await expect(new Pkcs11Wrapper({ ...config, token: 'no-such-token' }).probe()).rejects.toMatchObject({ code: 'key_revoked' });
    expect(readFileSync(hsm.pinFile, 'utf8')).toContain(SOFTHSM_PIN);
  });

  it('a hung module blocks only its worker: the event loop keeps serving, the call fails closed at its deadline, the next call gets a new worker', async () => {
    const good = await new Pkcs11Wrapper(config).wrap(Buffer.alloc(32, 4));
    // Closed gate: the worker blocks before C_GetSlotList/C_Login as in a C call that never returns.
    const gate = new Int32Array(new SharedArrayBuffer(4));
    Atomics.store(gate, 0, 1);
    const w = new Pkcs11Wrapper(config, { timeoutMs: 1_000, testGate: gate });
    const server = createServer((_req, res) => res.end('served'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const hung = w.unwrap(good).catch((err: unknown) => err);
      // Queued behind the hung call on the same thread: it fails with it, never runs beside it.
      const queued = w.probe().catch((err: unknown) => err);
      const { port } = server.address() as AddressInfo;
      // Served while the worker is certainly still blocked (the gate stays closed until below): had the call run on
      // this thread, neither the request nor the deadline's timer could run at all.
      expect(await (await fetch(`http://127.0.0.1:${port}/`)).text()).toBe('served');
      expect(Atomics.load(gate, 0)).toBe(1);
      expect(await hung).toMatchObject({ code: 'key_unavailable', message: expect.stringContaining('did not answer the unwrap within 1000 ms') });
      expect(await queued).toMatchObject({ code: 'key_unavailable' });
    } finally {
      server.close();
    }
    // The module answers again: the next call starts a fresh worker, logs in afresh and unwraps.
    Atomics.store(gate, 0, 0);
    Atomics.notify(gate, 0);
    expect(await w.unwrap(good)).toEqual(Buffer.alloc(32, 4));
    await w.close();
  });

  it('a closed wrapper starts a new worker on its next call', async () => {
    const w = new Pkcs11Wrapper(config);
    const wrapped = await w.wrap(Buffer.alloc(32, 6));
    await w.close();
    expect(await w.unwrap(wrapped)).toEqual(Buffer.alloc(32, 6));
    await w.close();
  });

  it('refuses incomplete configuration before touching any module', () => {
    expect(() => new Pkcs11Wrapper({ ...config, key: '' })).toThrow(/key/);
    expect(() => new Pkcs11Wrapper(config, { timeoutMs: 0 })).toThrow(/timeoutMs/);
  });
});
