// The key provider interface and how a data key becomes one key per purpose.
import { hkdfSync } from 'node:crypto';
import { invalidArgument } from '@sandglass/core';

export const KEY_PURPOSES = ['chunk-id', 'chunk-data', 'manifest', 'secret'] as const;
export type KeyPurpose = (typeof KEY_PURPOSES)[number];

export interface KeyProvider {
  readonly name: string;
  /**
   * 32-byte key for (tenant, purpose), derived (HKDF-SHA256) from the tenant's data key; the data key is created on first use.
   * Throws SandglassError('key_unavailable') when the tenant's key is revoked or the provider is unreachable.
   */
  dataKey(tenantId: string, purpose: KeyPurpose): Promise<Buffer>;
  /** Destroys the tenant's data key (crypto-shredding): later dataKey calls throw key_unavailable. */
  revoke(tenantId: string): Promise<void>;
}

const DERIVED_KEY_BYTES = 32;

/** Callers pass purposes from untyped code too (JSON, the CLI): check before any key is created. */
export function checkPurpose(purpose: string): asserts purpose is KeyPurpose {
  if (!(KEY_PURPOSES as readonly string[]).includes(purpose)) throw invalidArgument('purpose', `must be one of ${KEY_PURPOSES.join(', ')}`);
}

/** One key per purpose, so the chunk-id key (whose output is visible in paths) and the data keys are independent. */
export function derivePurposeKey(dataKey: Buffer, tenantId: string, purpose: KeyPurpose): Buffer {
  return Buffer.from(hkdfSync('sha256', dataKey, Buffer.alloc(0), `sandglass/v1/${tenantId}/${purpose}`, DERIVED_KEY_BYTES));
}
