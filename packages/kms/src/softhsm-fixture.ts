// Test fixture: a SoftHSM2 token store in a temporary directory, with tokens initialised and AES keys made by the test.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pkcs11js from 'pkcs11js';

export const SOFTHSM_MODULE = '/usr/lib/softhsm/libsofthsm2.so';
export const SOFTHSM_PIN = '4711-user-pin';

export interface SoftHsm {
  dir: string;
  module: string;
  pinFile: string;
  /** A non-extractable, sensitive AES-256 key on the token that may only wrap and unwrap. */
  createKey(token: string, label: string): void;
  /** Deletes the key object on the token, as the HSM's owner would: no Sandglass API involved. */
  deleteKey(token: string, label: string): void;
  cleanup(): void;
}

/** Writes a SoftHSM2 configuration keeping its tokens under dir; returns its path (what SOFTHSM2_CONF names). */
export function softHsmConf(dir: string): string {
  mkdirSync(join(dir, 'tokens'), { recursive: true, mode: 0o700 });
  const conf = join(dir, 'softhsm2.conf');
  writeFileSync(conf, `directories.tokendir = ${join(dir, 'tokens')}\nobjectstore.backend = file\nlog.level = ERROR\n`);
  return conf;
}

/**
 * Sets SOFTHSM2_CONF for this process (SoftHSM reads it once, at the module's C_Initialize), so call it before anything
 * loads the module, with every token the test needs. `dir`: a token store another process (a server) also uses.
 */
export function softHsm(tokens: string[], opts: { dir?: string } = {}): SoftHsm {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'sg-softhsm-'));
  const conf = softHsmConf(dir);
  process.env.SOFTHSM2_CONF = conf;
  for (const label of tokens) {
    execFileSync('softhsm2-util', ['--init-token', '--free', '--label', label, '--pin', SOFTHSM_PIN, '--so-pin', 'so-pin-0000'], {
      env: { ...process.env, SOFTHSM2_CONF: conf },
      stdio: 'ignore',
    });
  }
  const pinFile = join(dir, `pin-${process.pid}`);
  writeFileSync(pinFile, `${SOFTHSM_PIN}\n`, { mode: 0o600 });
  const lib = new pkcs11js.PKCS11();
  lib.load(SOFTHSM_MODULE);
  try {
    lib.C_Initialize();
  } catch (err) {
    if (!/CKR_CRYPTOKI_ALREADY_INITIALIZED/.test((err as Error).message)) throw err;
  }
  const withSession = (token: string, fn: (s: Buffer) => void) => {
    const slot = lib.C_GetSlotList(true).find((s) => lib.C_GetTokenInfo(s).label.trim() === token);
    if (!slot) throw new Error(`no token ${token}`);
    const s = lib.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION | pkcs11js.CKF_RW_SESSION);
    try {
      try {
        lib.C_Login(s, pkcs11js.CKU_USER, SOFTHSM_PIN);
      } catch (err) {
        if (!/CKR_USER_ALREADY_LOGGED_IN/.test((err as Error).message)) throw err;
      }
      fn(s);
    } finally {
      lib.C_CloseSession(s);
    }
  };
  return {
    dir,
    module: SOFTHSM_MODULE,
    pinFile,
    createKey: (token, label) =>
      withSession(token, (s) => {
        lib.C_GenerateKey(s, { mechanism: pkcs11js.CKM_AES_KEY_GEN }, [
          { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
          { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_AES },
          { type: pkcs11js.CKA_VALUE_LEN, value: 32 },
          { type: pkcs11js.CKA_TOKEN, value: true },
          { type: pkcs11js.CKA_PRIVATE, value: true },
          { type: pkcs11js.CKA_SENSITIVE, value: true },
          { type: pkcs11js.CKA_EXTRACTABLE, value: false },
          { type: pkcs11js.CKA_WRAP, value: true },
          { type: pkcs11js.CKA_UNWRAP, value: true },
          { type: pkcs11js.CKA_ENCRYPT, value: false },
          { type: pkcs11js.CKA_DECRYPT, value: false },
          { type: pkcs11js.CKA_LABEL, value: label },
        ]);
      }),
    deleteKey: (token, label) =>
      withSession(token, (s) => {
        lib.C_FindObjectsInit(s, [{ type: pkcs11js.CKA_LABEL, value: label }]);
        const found = lib.C_FindObjects(s, 10);
        lib.C_FindObjectsFinal(s);
        if (found.length === 0) throw new Error(`no key ${label} on ${token}`);
        for (const h of found) lib.C_DestroyObject(s, h);
      }),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
