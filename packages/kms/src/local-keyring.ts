// The default key provider: one random data key per tenant, wrapped under a master key file on local disk.
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { invalidArgument, SandglassError } from '@sandglass/core';
import { ensureDir, errorCode, exists, fsyncDir, readIfExists, writeExclusive } from './files.js';
import { checkPurpose, derivePurposeKey, type AuditSigner, type KeyProvider, type KeyPurpose } from './provider.js';
import { seal, unseal } from './seal.js';

const KEY_BYTES = 32;
/** A tenant id becomes a file name, so it must be a single path segment that cannot climb out of the directory. */
const TENANT_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const AUDIT_KEY_FILE = 'audit-signing.key';
/** Binds the sealed audit key to its use: no tenant key file (aad = tenant id) can be swapped in for it. */
const AUDIT_KEY_AAD = Buffer.from('sandglass/audit-signing');

/**
 * Layout under dir: master.key (32 raw bytes, mode 0600); tenants/<tenantId>.key (the data key sealed under the
 * master key, aad = tenant id); tenants/<tenantId>.revoked (empty tombstone, so a revoked tenant never gets a new key);
 * audit-signing.key (the deployment's Ed25519 private key, PKCS#8 DER sealed under the master key).
 */
export class LocalKeyring implements KeyProvider, AuditSigner {
  readonly name = 'local';
  readonly #dir: string;
  readonly #tenantsDir: string;
  /** Read (or created) once; a failed load is retried by the next use. */
  readonly #masterKey = onceUntilFailure(() => this.#loadOrCreateMaster());
  /** Unwrapped data keys by tenant; promises, so concurrent first uses share one read or creation. */
  readonly #dataKeys = new Map<string, Promise<Buffer>>();
  readonly #auditSigningKey = onceUntilFailure(() => this.#loadOrCreateAuditKey());

  constructor(opts: { dir: string }) {
    this.#dir = opts.dir;
    this.#tenantsDir = join(opts.dir, 'tenants');
  }

  async dataKey(tenantId: string, purpose: KeyPurpose, version?: number): Promise<Buffer> {
    checkTenantId(tenantId);
    checkPurpose(purpose);
    // Later versions are wrapped here but kept by TenantKeys: answering version 1 for them would decrypt nothing.
    if (version !== undefined && version !== 1) throw unavailable(tenantId, `the local keyring alone holds only version 1, not ${version}`);
    // Checked on every call, cache hit or not: a revocation by another process must take effect here too.
    await this.#refuseIfRevoked(tenantId);
    let pending = this.#dataKeys.get(tenantId);
    if (!pending) {
      const loading = this.#loadOrCreate(tenantId);
      // A failure is not remembered: the next call tries the disk again.
      loading.catch(() => {
        if (this.#dataKeys.get(tenantId) === loading) this.#dataKeys.delete(tenantId);
      });
      this.#dataKeys.set(tenantId, loading);
      pending = loading;
    }
    return derivePurposeKey(await pending, tenantId, purpose);
  }

  async revoke(tenantId: string): Promise<void> {
    checkTenantId(tenantId);
    this.#dataKeys.delete(tenantId);
    await ensureDir(this.#tenantsDir);
    // Tombstone first: a crash before the key file is gone still leaves the tenant revoked, never silently re-keyed.
    await writeExclusive(this.#tombstonePath(tenantId), Buffer.alloc(0));
    // Deleting the wrapped key is the shredding: blocks the disk may keep are useless without the master key.
    try {
      await unlink(this.#keyPath(tenantId));
    } catch (err) {
      if (errorCode(err) !== 'ENOENT') throw err;
    }
    await fsyncDir(this.#tenantsDir);
    this.#dataKeys.delete(tenantId);
  }

  /** Whether the tenant has a data key here: a tenant whose data this keyring encrypts cannot move to another provider. */
  async hasKey(tenantId: string): Promise<boolean> {
    checkTenantId(tenantId);
    return exists(this.#keyPath(tenantId));
  }

  /**
   * Seals a later version of a tenant's data key (a rotation) under the master key; aad = `<tenant>/v<version>`, so no
   * version can stand in for another. The caller keeps the result: version 1 stays this keyring's own key file.
   */
  async wrapDataKey(tenantId: string, version: number, key: Buffer): Promise<Buffer> {
    checkTenantId(tenantId);
    await this.#refuseIfRevoked(tenantId);
    return seal(await this.#masterKey(), key, versionAad(tenantId, version));
  }

  async unwrapDataKey(tenantId: string, version: number, wrapped: Buffer): Promise<Buffer> {
    checkTenantId(tenantId);
    await this.#refuseIfRevoked(tenantId);
    try {
      return unseal(await this.#masterKey(), wrapped, versionAad(tenantId, version));
    } catch (err) {
      if (err instanceof SandglassError) throw err;
      throw unavailable(tenantId, `its key version ${version} does not open under ${join(this.#dir, 'master.key')}`, err);
    }
  }

  async signAudit(message: Buffer): Promise<Buffer> {
    return sign(null, message, await this.#auditSigningKey());
  }

  async auditPublicKeyPem(): Promise<string> {
    return createPublicKey(await this.#auditSigningKey())
      .export({ type: 'spki', format: 'pem' })
      .toString();
  }

  async #loadOrCreateAuditKey(): Promise<KeyObject> {
    const path = join(this.#dir, AUDIT_KEY_FILE);
    let master: Buffer;
    let wrapped: Buffer | undefined;
    try {
      master = await this.#masterKey();
      wrapped = await readIfExists(path);
      if (!wrapped) {
        const { privateKey } = generateKeyPairSync('ed25519');
        const fresh = seal(master, privateKey.export({ type: 'pkcs8', format: 'der' }), AUDIT_KEY_AAD);
        // Replicas sharing this directory that create it at once all end up signing with the one that landed first.
        wrapped = (await writeExclusive(path, fresh)) ? fresh : await readFile(path);
      }
    } catch (err) {
      if (err instanceof SandglassError) throw err;
      throw new SandglassError('key_unavailable', `The audit signing key in ${this.#dir} is unavailable (${(err as Error).message}).`, { cause: err });
    }
    try {
      return createPrivateKey({ key: unseal(master, wrapped, AUDIT_KEY_AAD), format: 'der', type: 'pkcs8' });
    } catch (err) {
      throw new SandglassError(
        'key_unavailable',
        `The audit signing key ${path} does not open under ${join(this.#dir, 'master.key')}; the master key was replaced or the key file damaged.`,
        { cause: err },
      );
    }
  }

  async #refuseIfRevoked(tenantId: string): Promise<void> {
    let revoked: boolean;
    try {
      revoked = await exists(this.#tombstonePath(tenantId));
    } catch (err) {
      throw unavailable(tenantId, `its revocation state cannot be read (${(err as Error).message})`, err);
    }
    if (revoked) throw revokedError(tenantId);
  }

  async #loadOrCreate(tenantId: string): Promise<Buffer> {
    const path = this.#keyPath(tenantId);
    const aad = Buffer.from(tenantId);
    let master: Buffer;
    let wrapped: Buffer | undefined;
    try {
      master = await this.#masterKey();
      wrapped = await readIfExists(path);
      if (!wrapped) {
        await ensureDir(this.#tenantsDir);
        const fresh = seal(master, randomBytes(KEY_BYTES), aad);
        // When two processes create the same tenant's key at once, both use the one that landed first.
        wrapped = (await writeExclusive(path, fresh)) ? fresh : await readFile(path);
        // A revocation racing this creation wins: no key file may outlive its tombstone.
        if (await exists(this.#tombstonePath(tenantId))) {
          await unlink(path).catch(() => undefined);
          throw revokedError(tenantId);
        }
      }
    } catch (err) {
      if (err instanceof SandglassError) throw err;
      throw unavailable(tenantId, `the local keyring in ${this.#dir} failed (${(err as Error).message})`, err);
    }
    try {
      return unseal(master, wrapped, aad);
    } catch (err) {
      throw unavailable(
        tenantId,
        `its wrapped key does not open under ${join(this.#dir, 'master.key')}; the master key was replaced or the key file damaged`,
        err,
      );
    }
  }

  async #loadOrCreateMaster(): Promise<Buffer> {
    const path = join(this.#dir, 'master.key');
    let key = await readIfExists(path);
    if (!key) {
      await ensureDir(this.#dir);
      const fresh = randomBytes(KEY_BYTES);
      key = (await writeExclusive(path, fresh)) ? fresh : await readFile(path);
    }
    if (key.length !== KEY_BYTES) {
      throw new SandglassError('key_unavailable', `The master key ${path} is ${key.length} bytes, not ${KEY_BYTES}; restore it from a backup.`);
    }
    return key;
  }

  #keyPath(tenantId: string): string {
    return join(this.#tenantsDir, `${tenantId}.key`);
  }

  #tombstonePath(tenantId: string): string {
    return join(this.#tenantsDir, `${tenantId}.revoked`);
  }
}

/** load() run once and its promise shared; a load that fails is forgotten, so the next call tries again. */
function onceUntilFailure<T>(load: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | undefined;
  return () => {
    pending ??= load().catch((err: unknown) => {
      pending = undefined;
      throw err;
    });
    return pending;
  };
}

function checkTenantId(tenantId: string): void {
  if (typeof tenantId !== 'string' || !TENANT_ID.test(tenantId)) {
    throw invalidArgument('tenantId', 'must be 1-128 letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
}

function versionAad(tenantId: string, version: number): Buffer {
  if (!Number.isInteger(version) || version < 2) throw invalidArgument('version', 'must be a whole number from 2: version 1 is the key file itself');
  return Buffer.from(`${tenantId}/v${version}`);
}

function revokedError(tenantId: string): SandglassError {
  return new SandglassError('key_revoked', `The data key of tenant ${tenantId} was revoked; nothing of the tenant can be read or booted.`, {
    details: { tenantId },
  });
}

function unavailable(tenantId: string, why: string, cause?: unknown): SandglassError {
  return new SandglassError('key_unavailable', `The data key of tenant ${tenantId} is unavailable: ${why}.`, { details: { tenantId }, cause });
}
