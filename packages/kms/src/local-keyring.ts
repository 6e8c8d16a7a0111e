// The default key provider: one random data key per tenant, wrapped under a master key file on local disk.
import { randomBytes } from 'node:crypto';
import { readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { invalidArgument, SandglassError } from '@sandglass/core';
import { ensureDir, errorCode, exists, fsyncDir, readIfExists, writeExclusive } from './files.js';
import { checkPurpose, derivePurposeKey, type KeyProvider, type KeyPurpose } from './provider.js';
import { seal, unseal } from './seal.js';

const KEY_BYTES = 32;
/** A tenant id becomes a file name, so it must be a single path segment that cannot climb out of the directory. */
const TENANT_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/**
 * Layout under dir: master.key (32 raw bytes, mode 0600); tenants/<tenantId>.key (the data key sealed under the
 * master key, aad = tenant id); tenants/<tenantId>.revoked (empty tombstone, so a revoked tenant never gets a new key).
 */
export class LocalKeyring implements KeyProvider {
  readonly name = 'local';
  readonly #dir: string;
  readonly #tenantsDir: string;
  #master: Promise<Buffer> | undefined;
  /** Unwrapped data keys by tenant; promises, so concurrent first uses share one read or creation. */
  readonly #dataKeys = new Map<string, Promise<Buffer>>();

  constructor(opts: { dir: string }) {
    this.#dir = opts.dir;
    this.#tenantsDir = join(opts.dir, 'tenants');
  }

  async dataKey(tenantId: string, purpose: KeyPurpose): Promise<Buffer> {
    checkTenantId(tenantId);
    checkPurpose(purpose);
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

  async #refuseIfRevoked(tenantId: string): Promise<void> {
    let revoked: boolean;
    try {
      revoked = await exists(this.#tombstonePath(tenantId));
    } catch (err) {
      throw unavailable(tenantId, `its revocation state cannot be read (${(err as Error).message})`, err);
    }
    if (revoked) throw unavailable(tenantId, 'it was revoked');
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
          throw unavailable(tenantId, 'it was revoked');
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

  #masterKey(): Promise<Buffer> {
    this.#master ??= this.#loadOrCreateMaster().catch((err: unknown) => {
      this.#master = undefined;
      throw err;
    });
    return this.#master;
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

function checkTenantId(tenantId: string): void {
  if (typeof tenantId !== 'string' || !TENANT_ID.test(tenantId)) {
    throw invalidArgument('tenantId', 'must be 1-128 letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
}

function unavailable(tenantId: string, why: string, cause?: unknown): SandglassError {
  return new SandglassError('key_unavailable', `The data key of tenant ${tenantId} is unavailable: ${why}.`, { details: { tenantId }, cause });
}
