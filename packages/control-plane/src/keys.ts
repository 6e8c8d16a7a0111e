// API keys: generation, hashing (only a SHA-256 hash is stored), authentication, who may manage which keys, and the local operator key of `sandglass up`.
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Kysely } from 'kysely';
import { newId, SandglassError, systemClock, systemRandom, type Clock, type Random } from '@sandglass/core';
import { fromIso, isUniqueViolation, preparedQuery, toIso, type ApiKeyRole, type ApiKeyRow, type Schema, type TenantRow } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';
import type { ApiKey, ApiKeyInfo, CreateApiKeyInTenantRequest } from './api.js';

export interface Principal {
  tenantId: string;
  keyId: string;
  role: ApiKeyRole;
  /** When the key expires (unix ms), if it does: no access token obtained with it outlives it. */
  expiresAtMs?: number;
}

/** The two formats of one key: Sandglass's own, and E2B's (`e2b_` + hex) for E2B SDK releases that refuse any other. */
const KEY_PATTERN = /^(?:sg_[A-Za-z0-9_-]{43}|e2b_[0-9a-f]{64})$/;
const PREFIX_LENGTH = 10;
/** last_used_at is refreshed at most this often, so authenticating is a read, not a write, on almost every request. */
const LAST_USED_RESOLUTION_MS = 60_000;

export type ApiKeyFormat = 'sandglass' | 'e2b';

/** 256 random bits either way; only the spelling differs, so both are hashed, looked up and checked alike. */
export function generateApiKey(random: Random = systemRandom, format: ApiKeyFormat = 'sandglass'): string {
  const bits = random.bytes(32);
  return format === 'e2b' ? `e2b_${bits.toString('hex')}` : `sg_${bits.toString('base64url')}`;
}

/**
 * Unkeyed SHA-256 is enough: a key is 256 random bits, so there is nothing to guess or precompute, and the lookup by hash
 * leaks no timing an attacker could use (they would have to choose hashes, that is, invert SHA-256).
 */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** Every authenticated request's lookup, compiled once (`key_hash` is unique). */
const keyByHash = preparedQuery(1, (db: Kysely<Schema>, hash: string) =>
  db.selectFrom('api_keys').select(['id', 'tenant_id', 'role', 'expires_at', 'revoked_at', 'last_used_at']).where('key_hash', '=', hash),
);

/**
 * The tenant and role behind an `Authorization: Bearer sg_…` (or `e2b_…`) header, checked against the database on every request so a
 * revocation holds from the next request on. Unknown or malformed: `unauthenticated`; revoked: `api_key_revoked`; past its
 * expiry: `api_key_expired`. The two latter only ever answer someone holding a once-valid key, which cannot be guessed.
 */
export async function authenticate(db: Kysely<Schema>, authorization: string | undefined, clock: Clock): Promise<Principal> {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  if (!m) throw new SandglassError('unauthenticated', 'Send Authorization: Bearer <api key>.');
  if (!KEY_PATTERN.test(m[1]!)) throw new SandglassError('unauthenticated', 'The API key is not known.');
  const [row] = await keyByHash(db, hashApiKey(m[1]!));
  if (!row) throw new SandglassError('unauthenticated', 'The API key is not known.');
  const nowMs = clock.nowMs();
  if (row.revoked_at !== null) throw new SandglassError('api_key_revoked', 'This API key was revoked.');
  if (row.expires_at !== null && fromIso(row.expires_at) <= nowMs) throw new SandglassError('api_key_expired', 'This API key has expired.');
  if (row.last_used_at === null || nowMs - fromIso(row.last_used_at) >= LAST_USED_RESOLUTION_MS) {
    await db
      .updateTable('api_keys')
      .set({ last_used_at: toIso(nowMs) })
      .where('id', '=', row.id)
      .execute();
  }
  return { tenantId: row.tenant_id, keyId: row.id, role: row.role, ...(row.expires_at === null ? {} : { expiresAtMs: fromIso(row.expires_at) }) };
}

export interface IssueKeyOptions {
  clock: Clock;
  random?: Random;
  name?: string;
  /** Register this key instead of generating one (the local key file, reused after the database was reset). */
  key?: string;
  /** How a generated key is spelled; default sandglass. */
  format?: ApiKeyFormat;
  createdByKeyId?: string;
  expiresAtMs?: number;
  /** The creation time an expiry was computed from, so `expiresInS` is exact; default: now. */
  createdAtMs?: number;
}

/** Stores the key's hash and appends `api_key.created` in one transaction; returns the key, which is never stored. */
export async function issueApiKey(db: Kysely<Schema>, events: EventLog, tenantId: string, role: ApiKeyRole, opts: IssueKeyOptions): Promise<ApiKey> {
  const key = opts.key ?? generateApiKey(opts.random, opts.format);
  const row: ApiKeyRow = {
    id: newId('key', (opts.random ?? systemRandom).bytes),
    tenant_id: tenantId,
    name: opts.name ?? null,
    role,
    key_hash: hashApiKey(key),
    prefix: key.slice(0, PREFIX_LENGTH),
    created_at: toIso(opts.createdAtMs ?? opts.clock.nowMs()),
    created_by_key_id: opts.createdByKeyId ?? null,
    expires_at: opts.expiresAtMs === undefined ? null : toIso(opts.expiresAtMs),
    revoked_at: null,
    revoked_by_key_id: null,
    last_used_at: null,
  };
  await db.transaction().execute(async (trx) => {
    await trx.insertInto('api_keys').values(row).execute();
    const data = { keyId: row.id, role, prefix: row.prefix, name: opts.name, createdByKeyId: opts.createdByKeyId, expiresAt: row.expires_at ?? undefined };
    await events.append({ type: 'api_key.created', tenantId, data }, { clock: opts.clock, random: opts.random, trx });
  });
  return { ...toApiKeyInfo(row), key };
}

export function toApiKeyInfo(row: ApiKeyRow): ApiKeyInfo {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    ...(row.name === null ? {} : { name: row.name }),
    role: row.role,
    prefix: row.prefix,
    createdAt: row.created_at,
    createdByKeyId: row.created_by_key_id,
    expiresAt: row.expires_at,
    lastUsedAt: row.last_used_at,
    revokedAt: row.revoked_at,
  };
}

/** The body of a key creation after validation (the spec fills in role); tenantId absent: the caller's own tenant. */
export type CreateApiKeyInput = CreateApiKeyInTenantRequest;

/**
 * Who may manage which keys. member: none. admin: member and admin keys of its own tenant only; another tenant's id
 * answers exactly as an unknown one (tenant_not_found, api_key_not_found), and operator keys are out of its reach.
 * operator: every tenant's keys; operator keys only in its own tenant, the platform's. Every refusal changes nothing.
 */
export class ApiKeyService {
  constructor(
    private readonly deps: {
      db: Kysely<Schema>;
      events: EventLog;
      clock: Clock;
      random?: Random;
      /** Runs once a key is newly revoked, after the revocation is committed: gateways then refuse its access tokens. */
      onRevoked?: (keyIds: string[]) => Promise<void>;
    },
  ) {}

  async create(by: Principal, input: CreateApiKeyInput): Promise<ApiKey> {
    const tenantId = await this.managedTenant(by, input.tenantId);
    if (input.role === 'operator') {
      if (by.role !== 'operator')
        throw new SandglassError('permission_denied', 'Only an operator key may create operator keys.', { details: { field: 'role' } });
      if (tenantId !== by.tenantId) {
        throw new SandglassError('invalid_argument', "Operator keys belong to the operator's own tenant; leave tenantId out.", { details: { field: 'role' } });
      }
    }
    const nowMs = this.deps.clock.nowMs();
    let expiresAtMs: number | undefined;
    if (input.expiresInS !== undefined && input.expiresAt !== undefined) {
      throw new SandglassError('invalid_argument', 'Give expiresInS or expiresAt, not both.', { details: { field: 'expiresAt' } });
    }
    if (input.expiresInS !== undefined) expiresAtMs = nowMs + input.expiresInS * 1000;
    if (input.expiresAt !== undefined) {
      expiresAtMs = Date.parse(input.expiresAt);
      if (!(expiresAtMs > nowMs)) throw new SandglassError('invalid_argument', 'expiresAt must be a time in the future.', { details: { field: 'expiresAt' } });
    }
    return issueApiKey(this.deps.db, this.deps.events, tenantId, input.role, {
      clock: this.deps.clock,
      random: this.deps.random,
      name: input.name,
      createdByKeyId: by.keyId,
      expiresAtMs,
      createdAtMs: nowMs,
      format: input.format,
    });
  }

  /** The keys of one tenant (the caller's by default), oldest first: metadata only, never the key or its hash. */
  async list(by: Principal, tenantId?: string): Promise<ApiKeyInfo[]> {
    const tenant = await this.managedTenant(by, tenantId);
    const rows = await this.deps.db.selectFrom('api_keys').selectAll().where('tenant_id', '=', tenant).orderBy('created_at').orderBy('id').execute();
    return rows.map(toApiKeyInfo);
  }

  /** Refuses the key from the next request on and records `api_key.revoked`; revoking a revoked key changes nothing. */
  async revoke(by: Principal, keyId: string): Promise<ApiKeyInfo> {
    this.mayManageKeys(by);
    const { db, events, clock } = this.deps;
    let newly = false;
    const info = await db.transaction().execute(async (trx) => {
      const row = await trx.selectFrom('api_keys').selectAll().where('id', '=', keyId).executeTakeFirst();
      if (!row || (by.role !== 'operator' && row.tenant_id !== by.tenantId)) {
        throw new SandglassError('api_key_not_found', `No API key ${keyId} exists in a tenant you may manage.`);
      }
      if (row.role === 'operator' && by.role !== 'operator') throw new SandglassError('permission_denied', 'Only an operator key may revoke an operator key.');
      if (row.revoked_at !== null) return toApiKeyInfo(row);
      newly = true;
      const revoked: ApiKeyRow = { ...row, revoked_at: toIso(clock.nowMs()), revoked_by_key_id: by.keyId };
      await trx.updateTable('api_keys').set({ revoked_at: revoked.revoked_at, revoked_by_key_id: by.keyId }).where('id', '=', keyId).execute();
      await events.append(
        { type: 'api_key.revoked', tenantId: row.tenant_id, data: { keyId, role: row.role, prefix: row.prefix, revokedByKeyId: by.keyId } },
        { clock, random: this.deps.random, trx },
      );
      return toApiKeyInfo(revoked);
    });
    if (newly) await this.deps.onRevoked?.([keyId]);
    return info;
  }

  /** Keys revoked since `sinceMs`: what a gateway that started afresh must be told again. */
  async revokedSince(sinceMs: number): Promise<string[]> {
    const rows = await this.deps.db.selectFrom('api_keys').select('id').where('revoked_at', '>', toIso(sinceMs)).execute();
    return rows.map((r) => r.id);
  }

  private mayManageKeys(by: Principal): void {
    if (by.role === 'member') throw new SandglassError('permission_denied', 'Only an admin or operator API key may manage API keys.');
  }

  /** The tenant whose keys the caller asked for, when it may manage them; another tenant looks like no tenant at all to an admin. */
  private async managedTenant(by: Principal, tenantId: string | undefined): Promise<string> {
    this.mayManageKeys(by);
    const wanted = tenantId ?? by.tenantId;
    const notFound = () => new SandglassError('tenant_not_found', `No tenant ${wanted} exists.`);
    if (by.role !== 'operator' && wanted !== by.tenantId) throw notFound();
    if (!(await this.deps.db.selectFrom('tenants').select('id').where('id', '=', wanted).executeTakeFirst())) throw notFound();
    return wanted;
  }
}

/** Creates the tenant and appends `tenant.created` in one transaction; a taken name is a `conflict`. */
export async function createTenant(
  db: Kysely<Schema>,
  events: EventLog,
  name: string,
  opts: { clock: Clock; random?: Random; createdByKeyId?: string },
): Promise<TenantRow> {
  const row: TenantRow = { id: newId('ten', (opts.random ?? systemRandom).bytes), name, created_at: toIso(opts.clock.nowMs()) };
  const taken = () => new SandglassError('conflict', `A tenant named ${JSON.stringify(name)} already exists.`, { details: { field: 'name' } });
  try {
    await db.transaction().execute(async (trx) => {
      if (await trx.selectFrom('tenants').select('id').where('name', '=', name).executeTakeFirst()) throw taken();
      await trx.insertInto('tenants').values(row).execute();
      await events.append(
        { type: 'tenant.created', tenantId: row.id, data: { name, createdByKeyId: opts.createdByKeyId } },
        { clock: opts.clock, random: opts.random, trx },
      );
    });
  } catch (err) {
    // Another replica created the same name between our check and our insert: the name's UNIQUE refused ours.
    if (isUniqueViolation(err)) throw taken();
    throw err;
  }
  return row;
}

export interface BootstrapOptions {
  db: Kysely<Schema>;
  events: EventLog;
  /** Where the operator key is kept, mode 0600 ($SANDGLASS_HOME/admin-key). */
  keyFile: string;
  clock?: Clock;
  random?: Random;
}

/** The tenant `sandglass up` creates, in which the local operator key acts for sandboxes, secrets and snapshots. */
export const DEFAULT_TENANT = 'default';

/**
 * The embedded deployment's first run: tenant `default` and the operator key, written to keyFile. An existing key file is
 * reused (and registered again if the database was reset), so the CLI's saved key keeps working; an earlier version's
 * admin key there becomes the operator key. A revoked or expired key in the file stays refused: remove the file and
 * start again for a new one.
 */
export async function bootstrapLocal(opts: BootstrapOptions): Promise<string> {
  const clock = opts.clock ?? systemClock;
  const existingTenant = () => opts.db.selectFrom('tenants').selectAll().where('name', '=', DEFAULT_TENANT).executeTakeFirst();
  // Replicas starting at once may race to create it: the loser uses the winner's.
  const tenant =
    (await existingTenant()) ??
    (await createTenant(opts.db, opts.events, DEFAULT_TENANT, { clock, random: opts.random }).catch(async (err: unknown) => {
      const winner = err instanceof SandglassError && err.code === 'conflict' ? await existingTenant() : undefined;
      if (!winner) throw err;
      return winner;
    }));
  const existing = readKeyFile(opts.keyFile);
  if (existing !== undefined) {
    chmodSync(opts.keyFile, 0o600);
    const known = await opts.db.selectFrom('api_keys').select(['id', 'role', 'tenant_id']).where('key_hash', '=', hashApiKey(existing)).executeTakeFirst();
    if (!known) await issueApiKey(opts.db, opts.events, tenant.id, 'operator', { clock, random: opts.random, name: 'local operator', key: existing });
    else if (known.role !== 'operator') {
      if (known.tenant_id !== tenant.id)
        throw new Error(`${opts.keyFile} holds a key of another tenant than ${DEFAULT_TENANT}; remove it to have a new one made`);
      await opts.db.transaction().execute(async (trx) => {
        await trx.updateTable('api_keys').set({ role: 'operator' }).where('id', '=', known.id).execute();
        await opts.events.append(
          { type: 'api_key.role_changed', tenantId: tenant.id, data: { keyId: known.id, from: known.role, to: 'operator' } },
          { clock, random: opts.random, trx },
        );
      });
    }
    return existing;
  }
  const key = generateApiKey(opts.random);
  // File first: if the database write then fails, the next start finds the file and registers it.
  mkdirSync(dirname(opts.keyFile), { recursive: true, mode: 0o700 });
  writeFileSync(opts.keyFile, `${key}\n`, { mode: 0o600, flag: 'wx' });
  await issueApiKey(opts.db, opts.events, tenant.id, 'operator', { clock, random: opts.random, name: 'local operator', key });
  return key;
}

function readKeyFile(file: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const key = text.trim();
  if (!KEY_PATTERN.test(key)) throw new Error(`${file} does not hold a Sandglass API key (sg_…); remove it to have a new one made`);
  return key;
}
