// Envelope format shared by every Sandglass key use: AES-256-GCM with a random nonce, versioned so the algorithm can change.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { invalidArgument } from '@sandglass/core';

const VERSION = 1;
const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + NONCE_BYTES;

/** Encrypts and authenticates plaintext (and aad, which is not stored): version | nonce | ciphertext | tag. */
export function seal(key: Buffer, plaintext: Buffer, aad?: Buffer): Buffer {
  checkKey(key);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
  if (aad) cipher.setAAD(aad);
  return Buffer.concat([Buffer.of(VERSION), nonce, cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
}

/** The plaintext of seal's output; throws a plain Error on any failure, which each caller maps to its own code. */
export function unseal(key: Buffer, sealed: Buffer, aad?: Buffer): Buffer {
  checkKey(key);
  if (sealed.length < HEADER_BYTES + TAG_BYTES) throw new Error(`sealed data is ${sealed.length} bytes, shorter than its header and tag`);
  if (sealed[0] !== VERSION) throw new Error(`sealed data has unknown version ${sealed[0]}`);
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(1, HEADER_BYTES), { authTagLength: TAG_BYTES });
  if (aad) decipher.setAAD(aad);
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  return Buffer.concat([decipher.update(sealed.subarray(HEADER_BYTES, sealed.length - TAG_BYTES)), decipher.final()]);
}

function checkKey(key: Buffer): void {
  if (key.length !== KEY_BYTES) throw invalidArgument('key', `must be ${KEY_BYTES} bytes, not ${key.length}`);
}
