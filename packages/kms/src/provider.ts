// The key provider interface and how a data key becomes one key per purpose.
import { hkdfSync } from 'node:crypto';
import { invalidArgument } from '@sandglass/core';

export const KEY_PURPOSES = ['chunk-id', 'chunk-data', 'manifest', 'secret'] as const;
export type KeyPurpose = (typeof KEY_PURPOSES)[number];

export interface KeyProvider {
  readonly name: string;
  /**
   * 32-byte key for (tenant, purpose), derived (HKDF-SHA256) from the tenant's data key; the data key is created on first use.
   * `version` names a data key version (a rotation makes a new one); absent, the version new writes use. The
   * `chunk-id` key comes from version 1 whatever is asked, so chunk ids and deduplication survive a rotation.
   * Throws SandglassError('key_revoked') when the tenant's key was revoked (or its HSM deleted or refuses it), and
   * SandglassError('key_unavailable') when the provider cannot answer (in time).
   */
  dataKey(tenantId: string, purpose: KeyPurpose, version?: number): Promise<Buffer>;
  /** Destroys the tenant's data key (crypto-shredding): later dataKey calls throw key_revoked. */
  revoke(tenantId: string): Promise<void>;
  /** The data key version new writes use; providers that do not rotate have only version 1. */
  keyVersion?(tenantId: string): Promise<number>;
  /**
   * Asks the key's holder now, past any cache (an HSM round trip): resolves when the tenant's key is usable, throws
   * key_revoked or key_unavailable like dataKey. Boot paths and the node's poll call it.
   */
  verify?(tenantId: string): Promise<void>;
}

/**
 * The deployment's Ed25519 key for audit exports: one per deployment, not per tenant, so one published public key
 * verifies every tenant's exports. Asymmetric so that an auditor verifies without holding any secret of the platform.
 */
export interface AuditSigner {
  /** An Ed25519 signature over message; the key is created on first use. */
  signAudit(message: Buffer): Promise<Buffer>;
  /** The public half as SPKI PEM: what operators publish and auditors verify exports with. */
  auditPublicKeyPem(): Promise<string>;
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
