// The node secret shared by the control plane and a gateway, and the per-purpose keys derived from it. The node API
// takes each node's own key instead (control-plane node-credentials.ts): this secret never opens it.
import { hkdfSync, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';

export const NODE_SECRET_BYTES = 32;

/** What each derived key is for; a key of one purpose never verifies anything of another. */
export interface NodeKeys {
  /** Sent (hex) as `Authorization: Bearer` on the gateway's internal API. */
  readonly internalBearer: Buffer;
  /** Signs and verifies data-plane access tokens (`sgat_…`). */
  readonly accessToken: Buffer;
}

function derive(secret: Buffer, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), `sandglass/v1/node/${purpose}`, 32));
}

/**
 * Separate keys per purpose, so a leaked bearer cannot sign tokens and a token's MAC says nothing about the bearer.
 * Anything but exactly 32 bytes throws: an empty or short key would make every HMAC and comparison meaningless.
 */
export function deriveNodeKeys(secret: Buffer): NodeKeys {
  if (secret.length !== NODE_SECRET_BYTES) throw new Error(`the node secret must be exactly ${NODE_SECRET_BYTES} bytes, got ${secret.length}`);
  return {
    internalBearer: derive(secret, 'internal-bearer'),
    accessToken: derive(secret, 'access-token'),
  };
}

/**
 * Reads the node secret (64 hex digits, one optional trailing newline), creating it (mode 0600) when absent.
 * Anything else stops start-up naming the file: Buffer.from(hex) would silently stop at the first bad digit.
 */
export function loadNodeSecret(file: string): Buffer {
  try {
    writeFileSync(file, randomBytes(NODE_SECRET_BYTES).toString('hex') + '\n', { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const text = readFileSync(file, 'utf8');
  const m = /^([0-9a-fA-F]{64})\n?$/.exec(text);
  if (!m) {
    throw new Error(
      `${file} is not a node secret: it must hold exactly ${NODE_SECRET_BYTES} bytes as 64 hex digits (it has ${text.length} characters). ` +
        'Put back the secret the control plane shares with this node, or remove the file to make a new one (outstanding access tokens then stop working).',
    );
  }
  return Buffer.from(m[1]!, 'hex');
}
