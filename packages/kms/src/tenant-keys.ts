// Per-tenant key providers (the built-in keyring or the tenant's own PKCS#11 HSM), key versions, rotation and revocation.
import { randomBytes } from 'node:crypto';
import { open, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { invalidArgument, SandglassError, systemClock, type Clock } from '@sandglass/core';
import { ensureDir, errorCode, exists, fsyncDir, readIfExists, writeExclusive } from './files.js';
import type { LocalKeyring } from './local-keyring.js';
import { Pkcs11Wrapper, type Pkcs11Config } from './pkcs11.js';
import { checkPurpose, derivePurposeKey, type KeyProvider, type KeyPurpose } from './provider.js';

const DATA_KEY_BYTES = 32;
const TENANT_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** How long an unwrapped data key stays in memory after its last unwrap: one create asks for three purpose keys. */
export const DEFAULT_KEY_CACHE_MS = 5_000;

export type ProviderChoice = { provider: 'keyring' } | ({ provider: 'pkcs11' } & Pkcs11Config);

/** What `keys status` shows: never a key, a wrapped key or a PIN. */
export interface TenantKeyStatus {
  tenantId: string;
  provider: 'keyring' | 'pkcs11';
  /** Module, token and key labels of a PKCS#11 provider. */
  pkcs11?: { module: string; token: string; key: string };
  /** The version new writes use. */
  currentVersion: number;
  versions: Array<{ version: number; createdAt: string | null }>;
  /** When this process last handed out one of the tenant's keys. */
  lastUsedAt: string | null;
  revoked: boolean;
}

/**
 * `<keys>/byok/<tenant>.json`. Version 1 of a keyring tenant is the keyring's own key file (no `wrapped` here); every
 * other version is its data key wrapped by the tenant's provider (the HSM's AES key wrap, or the keyring's master key).
 */
interface TenantState {
  provider: 'keyring' | 'pkcs11';
  pkcs11?: Pkcs11Config;
  current: number;
  versions: Array<{ version: number; createdAt: string | null; wrapped?: string }>;
}

/**
 * The deployment's KeyProvider: routes each tenant to the provider registered for it (`keys use`), the built-in
 * keyring by default. A tenant's data is readable only while its provider unwraps its key versions, so revoking the
 * key (here, or by deleting it on the HSM) leaves every chunk, manifest and secret of it unreadable, the operator's
 * master key file and database notwithstanding.
 */
export class TenantKeys implements KeyProvider {
  readonly name = 'tenant-keys';
  readonly #dir: string;
  readonly #keyring: LocalKeyring;
  readonly #clock: Clock;
  readonly #timeoutMs: number | undefined;
  readonly #cacheMs: number;
  readonly #wrappers = new Map<string, Pkcs11Wrapper>();
  /** Registrations read, with the file's identity then: another replica sharing the directory may replace the file. */
  readonly #states = new Map<string, { state: TenantState | null; stamp: string }>();
  readonly #unwrapped = new Map<string, { key: Promise<Buffer>; untilMs: number }>();
  readonly #lastUsed = new Map<string, number>();
  /** Registration, rotation and revocation of one tenant run one at a time. */
  readonly #changing = new Map<string, Promise<unknown>>();

  constructor(opts: { dir: string; keyring: LocalKeyring; clock?: Clock; pkcs11TimeoutMs?: number; cacheMs?: number }) {
    this.#dir = join(opts.dir, 'byok');
    this.#keyring = opts.keyring;
    this.#clock = opts.clock ?? systemClock;
    this.#timeoutMs = opts.pkcs11TimeoutMs;
    this.#cacheMs = opts.cacheMs ?? DEFAULT_KEY_CACHE_MS;
  }

  async dataKey(tenantId: string, purpose: KeyPurpose, version?: number): Promise<Buffer> {
    checkTenantId(tenantId);
    checkPurpose(purpose);
    await this.#refuseIfRevoked(tenantId);
    const state = await this.#state(tenantId);
    this.#lastUsed.set(tenantId, this.#clock.nowMs());
    if (!state) {
      if (version !== undefined && version !== 1) throw noVersion(tenantId, version);
      return this.#keyring.dataKey(tenantId, purpose);
    }
    // Chunk ids stay those of version 1: a rotation must not make every chunk of the next capture look new.
    const v = purpose === 'chunk-id' ? 1 : (version ?? state.current);
    if (state.provider === 'keyring' && v === 1) return this.#keyring.dataKey(tenantId, purpose);
    return derivePurposeKey(await this.#versionKey(tenantId, state, v, false), tenantId, purpose);
  }

  async keyVersion(tenantId: string): Promise<number> {
    checkTenantId(tenantId);
    await this.#refuseIfRevoked(tenantId);
    return (await this.#state(tenantId))?.current ?? 1;
  }

  async verify(tenantId: string): Promise<void> {
    checkTenantId(tenantId);
    await this.#refuseIfRevoked(tenantId);
    const state = await this.#state(tenantId);
    if (!state || state.provider === 'keyring') {
      await this.#keyring.dataKey(tenantId, 'chunk-data');
      return;
    }
    await this.#versionKey(tenantId, state, state.current, true);
  }

  /**
   * Registers the tenant's provider. A PKCS#11 provider is proven by wrapping the tenant's first data key with it.
   * Moving a tenant that already has keys to another provider is refused: its data would stay under the old one.
   */
  use(tenantId: string, choice: ProviderChoice): Promise<TenantKeyStatus> {
    checkTenantId(tenantId);
    return this.#serial(tenantId, async () => {
      await this.#refuseIfRevoked(tenantId);
      const state = await this.#state(tenantId);
      if (state) {
        if (sameProvider(state, choice)) return this.#status(tenantId, state);
        throw new SandglassError(
          'conflict',
          `Tenant ${tenantId} already has data keys under ${describe(state)}; moving them to another provider is not supported.`,
        );
      }
      if (choice.provider === 'keyring') {
        const fresh: TenantState = { provider: 'keyring', current: 1, versions: [{ version: 1, createdAt: this.#now() }] };
        await this.#write(tenantId, fresh);
        return this.#status(tenantId, fresh);
      }
      if (await this.#keyring.hasKey(tenantId)) {
        throw new SandglassError(
          'conflict',
          `Tenant ${tenantId} already has data under the built-in keyring; a PKCS#11 key can only be brought for a tenant with no data yet.`,
        );
      }
      const config: Pkcs11Config = { module: choice.module, token: choice.token, key: choice.key, pinFile: choice.pinFile };
      const key = randomBytes(DATA_KEY_BYTES);
      const wrapped = await this.#wrapper(config).wrap(key);
      key.fill(0);
      const fresh: TenantState = {
        provider: 'pkcs11',
        pkcs11: config,
        current: 1,
        versions: [{ version: 1, createdAt: this.#now(), wrapped: wrapped.toString('base64') }],
      };
      await this.#write(tenantId, fresh);
      // The keyring's tombstone: should this registration ever be lost, the tenant is refused, never quietly given a
      // keyring key in place of its own.
      await this.#keyring.revoke(tenantId);
      return this.#status(tenantId, fresh);
    });
  }

  /**
   * A new data key version for new writes. Old versions stay readable: each is unwrapped and wrapped again under the
   * provider's key in force (`key`, a new HSM key label, re-wraps them under it), and no chunk is re-encrypted.
   */
  rotate(tenantId: string, opts: { key?: string } = {}): Promise<TenantKeyStatus> {
    checkTenantId(tenantId);
    return this.#serial(tenantId, async () => {
      await this.#refuseIfRevoked(tenantId);
      const state = (await this.#state(tenantId)) ?? { provider: 'keyring', current: 1, versions: [{ version: 1, createdAt: null }] };
      const next = Math.max(...state.versions.map((v) => v.version)) + 1;
      const fresh = randomBytes(DATA_KEY_BYTES);
      let rotated: TenantState;
      if (state.provider === 'keyring') {
        if (opts.key !== undefined) throw invalidArgument('key', 'names an HSM key; the built-in keyring has none');
        // Version 1 must exist before a later one does, or the tenant's chunk ids would change under it.
        await this.#keyring.dataKey(tenantId, 'chunk-id');
        const wrapped = await this.#keyring.wrapDataKey(tenantId, next, fresh);
        rotated = { ...state, current: next, versions: [...state.versions, { version: next, createdAt: this.#now(), wrapped: wrapped.toString('base64') }] };
      } else {
        const oldConfig = state.pkcs11!;
        const newConfig = opts.key === undefined ? oldConfig : { ...oldConfig, key: opts.key };
        const target = this.#wrapper(newConfig);
        const versions: TenantState['versions'] = [];
        for (const v of state.versions) {
          const key = await this.#versionKey(tenantId, state, v.version, true);
          versions.push({ ...v, wrapped: (await target.wrap(key)).toString('base64') });
        }
        versions.push({ version: next, createdAt: this.#now(), wrapped: (await target.wrap(fresh)).toString('base64') });
        rotated = { ...state, pkcs11: newConfig, current: next, versions };
      }
      fresh.fill(0);
      await this.#write(tenantId, rotated);
      this.#forget(tenantId);
      return this.#status(tenantId, rotated);
    });
  }

  /**
   * Crypto-shredding: a tombstone first (a crash half-way leaves the tenant revoked, never re-keyed), then every
   * wrapped version and the keyring's key file are deleted. The HSM's own key is the tenant's and is left alone.
   */
  revoke(tenantId: string): Promise<void> {
    checkTenantId(tenantId);
    return this.#serial(tenantId, async () => {
      await ensureDir(this.#dir);
      await writeExclusive(this.#tombstonePath(tenantId), Buffer.alloc(0));
      this.#forget(tenantId);
      const state = await this.#state(tenantId);
      if (state) await this.#write(tenantId, { ...state, versions: state.versions.map(({ wrapped: _, ...v }) => v) });
      await this.#keyring.revoke(tenantId);
      this.#forget(tenantId);
    });
  }

  /** Tenants revoked here, with when (the tombstone's time): what a retention sweep reclaims once old enough. */
  async revokedTenants(): Promise<Array<{ tenantId: string; revokedAtMs: number }>> {
    let names: string[];
    try {
      names = await readdir(this.#dir);
    } catch (err) {
      if (errorCode(err) === 'ENOENT') return [];
      throw err;
    }
    const out: Array<{ tenantId: string; revokedAtMs: number }> = [];
    for (const n of names) {
      const tenantId = n.slice(0, -'.revoked'.length);
      if (!n.endsWith('.revoked') || !TENANT_ID.test(tenantId)) continue;
      out.push({ tenantId, revokedAtMs: (await stat(join(this.#dir, n))).mtimeMs });
    }
    return out;
  }

  async status(tenantId: string): Promise<TenantKeyStatus> {
    checkTenantId(tenantId);
    return this.#status(tenantId, await this.#state(tenantId));
  }

  /** Drops every unwrapped key of the tenant from memory (a revocation seen elsewhere). */
  forget(tenantId: string): void {
    this.#forget(tenantId);
  }

  async close(): Promise<void> {
    for (const w of this.#wrappers.values()) await w.close();
    this.#wrappers.clear();
  }

  async #status(tenantId: string, state: TenantState | null): Promise<TenantKeyStatus> {
    const last = this.#lastUsed.get(tenantId);
    return {
      tenantId,
      provider: state?.provider ?? 'keyring',
      ...(state?.pkcs11 ? { pkcs11: { module: state.pkcs11.module, token: state.pkcs11.token, key: state.pkcs11.key } } : {}),
      currentVersion: state?.current ?? 1,
      versions: state ? state.versions.map((v) => ({ version: v.version, createdAt: v.createdAt })) : [{ version: 1, createdAt: null }],
      lastUsedAt: last === undefined ? null : new Date(last).toISOString(),
      revoked: await exists(this.#tombstonePath(tenantId)),
    };
  }

  /** The raw data key of one version; `fresh` skips the cache (a boot's or the poll's proof that the provider answers). */
  #versionKey(tenantId: string, state: TenantState, version: number, fresh: boolean): Promise<Buffer> {
    const id = `${tenantId}/${version}`;
    const nowMs = this.#clock.nowMs();
    const hit = this.#unwrapped.get(id);
    if (!fresh && hit && hit.untilMs > nowMs) return hit.key;
    const entry = state.versions.find((v) => v.version === version);
    if (!entry?.wrapped) return Promise.reject(noVersion(tenantId, version));
    const wrapped = Buffer.from(entry.wrapped, 'base64');
    const key = state.provider === 'pkcs11' ? this.#wrapper(state.pkcs11!).unwrap(wrapped) : this.#keyring.unwrapDataKey(tenantId, version, wrapped);
    this.#unwrapped.set(id, { key, untilMs: nowMs + this.#cacheMs });
    // A failure is never cached, and the keys cached before it go too: the provider just said no.
    key.catch(() => {
      if (this.#unwrapped.get(id)?.key === key) this.#forget(tenantId);
    });
    return key;
  }

  #wrapper(config: Pkcs11Config): Pkcs11Wrapper {
    const id = JSON.stringify([config.module, config.token, config.key, config.pinFile]);
    let w = this.#wrappers.get(id);
    if (!w) {
      w = new Pkcs11Wrapper(config, { timeoutMs: this.#timeoutMs });
      this.#wrappers.set(id, w);
    }
    return w;
  }

  #forget(tenantId: string): void {
    for (const id of [...this.#unwrapped.keys()]) if (id.startsWith(`${tenantId}/`)) this.#unwrapped.delete(id);
    this.#states.delete(tenantId);
  }

  async #refuseIfRevoked(tenantId: string): Promise<void> {
    let revoked: boolean;
    try {
      revoked = await exists(this.#tombstonePath(tenantId));
    } catch (err) {
      throw new SandglassError('key_unavailable', `Tenant ${tenantId}'s revocation state cannot be read (${(err as Error).message}).`, { cause: err });
    }
    if (revoked) {
      this.#forget(tenantId);
      throw new SandglassError('key_revoked', `The key of tenant ${tenantId} was revoked; nothing of the tenant can be read or booted.`, {
        details: { tenantId },
      });
    }
  }

  async #state(tenantId: string): Promise<TenantState | null> {
    let raw: Buffer | undefined;
    let stamp: string;
    try {
      // The file is replaced by rename (a new inode) on every change, here or by another replica: a cheap stat tells.
      stamp = await this.#stamp(tenantId);
      const cached = this.#states.get(tenantId);
      if (cached?.stamp === stamp) return cached.state;
      raw = await readIfExists(this.#statePath(tenantId));
    } catch (err) {
      throw new SandglassError('key_unavailable', `Tenant ${tenantId}'s key registration cannot be read (${(err as Error).message}).`, { cause: err });
    }
    let state: TenantState | null = null;
    if (raw) {
      try {
        state = JSON.parse(raw.toString('utf8')) as TenantState;
      } catch (err) {
        // Never treated as "no registration": that would silently give an HSM tenant a keyring key.
        throw new SandglassError('key_unavailable', `Tenant ${tenantId}'s key registration ${this.#statePath(tenantId)} is damaged.`, { cause: err });
      }
    }
    this.#states.set(tenantId, { state, stamp });
    return state;
  }

  async #stamp(tenantId: string): Promise<string> {
    try {
      const st = await stat(this.#statePath(tenantId));
      return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
    } catch (err) {
      if (errorCode(err) === 'ENOENT') return 'absent';
      throw err;
    }
  }

  /** Replaces the registration atomically (temporary file, fsync, rename, fsync of the directory). */
  async #write(tenantId: string, state: TenantState): Promise<void> {
    await ensureDir(this.#dir);
    const path = this.#statePath(tenantId);
    const tmp = `${path}.tmp-${randomBytes(6).toString('hex')}`;
    try {
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.writeFile(`${JSON.stringify(state, null, 2)}\n`);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, path);
    } finally {
      await rm(tmp, { force: true });
    }
    await fsyncDir(this.#dir);
    this.#states.set(tenantId, { state, stamp: await this.#stamp(tenantId) });
  }

  #serial<T>(tenantId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#changing.get(tenantId) ?? Promise.resolve();
    const run = prev.catch(() => undefined).then(fn);
    this.#changing.set(tenantId, run);
    run
      .catch(() => undefined)
      .finally(() => {
        if (this.#changing.get(tenantId) === run) this.#changing.delete(tenantId);
      });
    return run;
  }

  #now(): string {
    return new Date(this.#clock.nowMs()).toISOString();
  }

  #statePath(tenantId: string): string {
    return join(this.#dir, `${tenantId}.json`);
  }

  #tombstonePath(tenantId: string): string {
    return join(this.#dir, `${tenantId}.revoked`);
  }
}

/** The current PKCS#11 configuration of a tenant's state, for comparing and for messages. */
function sameProvider(state: TenantState, choice: ProviderChoice): boolean {
  if (state.provider !== choice.provider) return false;
  if (choice.provider === 'keyring') return true;
  const c = state.pkcs11!;
  return c.module === choice.module && c.token === choice.token && c.key === choice.key && c.pinFile === choice.pinFile;
}

function describe(state: TenantState): string {
  return state.provider === 'pkcs11' ? `PKCS#11 (token ${state.pkcs11!.token}, key ${state.pkcs11!.key})` : 'the built-in keyring';
}

function noVersion(tenantId: string, version: number): SandglassError {
  return new SandglassError('key_unavailable', `Tenant ${tenantId} has no data key version ${version}.`, { details: { tenantId } });
}

function checkTenantId(tenantId: string): void {
  if (typeof tenantId !== 'string' || !TENANT_ID.test(tenantId)) {
    throw invalidArgument('tenantId', 'must be 1-128 letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
}
