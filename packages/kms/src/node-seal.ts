// Sealing to one node's X25519 public key: what the control plane hands a node opens only with that node's private key.
import { createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, hkdfSync, type KeyObject } from 'node:crypto';
import { seal, unseal } from './seal.js';

/** DER of an X25519 SubjectPublicKeyInfo: a fixed 12-byte header, then the 32-byte key. */
const SPKI_BYTES = 44;

/** A node's transport key pair: the public half (base64 SPKI DER) is all the control plane keeps of it. */
export interface NodeTransportKeys {
  publicKey: string;
  /** Base64 PKCS#8 DER; stays in the node's key file. */
  privateKey: string;
}

export function newNodeTransportKeys(): NodeTransportKeys {
  const { publicKey, privateKey } = generateKeyPairSync('x25519');
  return {
    publicKey: publicKey.export({ format: 'der', type: 'spki' }).toString('base64'),
    privateKey: privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64'),
  };
}

/** A node's public key as enrolment sends it; throws on anything but an X25519 SPKI. */
export function nodePublicKey(b64: string): KeyObject {
  const key = createPublicKey({ key: Buffer.from(b64, 'base64'), format: 'der', type: 'spki' });
  if (key.asymmetricKeyType !== 'x25519') throw new Error(`a node's transport key must be X25519, not ${key.asymmetricKeyType}`);
  return key;
}

function wrapKey(shared: Buffer, ephemeral: Buffer, recipient: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', shared, Buffer.concat([ephemeral, recipient]), 'sandglass/v1/node-seal', 32));
}

/**
 * An ephemeral key agreement per seal (ECIES): the ephemeral public key, then kms seal under the agreed key with
 * `aad`. Neither side holds a long-lived shared key, so one node's key opens nothing sealed for another.
 */
export function sealForNode(publicKeyB64: string, plaintext: Buffer, aad: Buffer): Buffer {
  const recipient = nodePublicKey(publicKeyB64);
  const eph = generateKeyPairSync('x25519');
  const ephDer = eph.publicKey.export({ format: 'der', type: 'spki' });
  const key = wrapKey(diffieHellman({ privateKey: eph.privateKey, publicKey: recipient }), ephDer, recipient.export({ format: 'der', type: 'spki' }));
  try {
    return Buffer.concat([ephDer, seal(key, plaintext, aad)]);
  } finally {
    key.fill(0);
  }
}

/** The plaintext of sealForNode's output; throws a plain Error on any failure. */
export function openForNode(privateKeyB64: string, sealed: Buffer, aad: Buffer): Buffer {
  if (sealed.length <= SPKI_BYTES) throw new Error(`sealed data is ${sealed.length} bytes, too short for its ephemeral key`);
  const privateKey = createPrivateKey({ key: Buffer.from(privateKeyB64, 'base64'), format: 'der', type: 'pkcs8' });
  const ephDer = sealed.subarray(0, SPKI_BYTES);
  const eph = createPublicKey({ key: ephDer, format: 'der', type: 'spki' });
  const own = createPublicKey(privateKey).export({ format: 'der', type: 'spki' });
  const key = wrapKey(diffieHellman({ privateKey, publicKey: eph }), ephDer, own);
  try {
    return unseal(key, sealed.subarray(SPKI_BYTES), aad);
  } finally {
    key.fill(0);
  }
}
