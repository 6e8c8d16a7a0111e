// API keys: generation, hashing (only a SHA-256 hash is stored), authentication, and the local admin key of `sandglass up`.
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Kysely } from 'kysely';
import { newId, SandglassError, systemClock, systemRandom, type Clock, type Random } from '@sandglass/core';
import { toIso, type ApiKeyRole, type Schema, type TenantRow } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';

export interface Principal {
  tenantId: string;
  keyId: string;
  role: ApiKeyRole;
}

const KEY_PATTERN = /^sg_[A-Za-z0-9_-]{43}$/;
const PREFIX_LENGTH = 10;

export function generateApiKey(random: Random = systemRandom): string {
  return `sg_${random.bytes(32).toString('base64url')}`;
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** The tenant and role behind an `Authorization: Bearer sg_…` header; anything else is `unauthenticated`. */
export async function authenticate(db: Kysely<Schema>, authorization: string | undefined): Promise<Principal> {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  if (!m) throw new SandglassError('unauthenticated', 'Send Authorization: Bearer <api key>.');
  const row = await db.selectFrom('api_keys').select(['id', 'tenant_id', 'role']).where('key_hash', '=', hashApiKey(m[1]!)).executeTakeFirst();
  if (!row) throw new SandglassError('unauthenticated', 'The API key is not known.');
  return { tenantId: row.tenant_id, keyId: row.id, role: row.role };
}

export interface IssueKeyOptions {
  clock: Clock;
  random?: Random;
  name?: string;
  /** Register this key instead of generating one (the local admin key file, reused after the database was reset). */
  key?: string;
  createdByKeyId?: string;
}

/** Stores the key's hash and appends `api_key.created` in one transaction; returns the key, which is never stored. */
export async function issueApiKey(db: Kysely<Schema>, events: EventLog, tenantId: string, role: ApiKeyRole, opts: IssueKeyOptions): Promise<{ id: string; key: string }> {
  const key = opts.key ?? generateApiKey(opts.random);
  const id = newId('key', (opts.random ?? systemRandom).bytes);
  const prefix = key.slice(0, PREFIX_LENGTH);
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto('api_keys')
      .values({ id, tenant_id: tenantId, name: opts.name ?? null, role, key_hash: hashApiKey(key), prefix, created_at: toIso(opts.clock.nowMs()) })
      .execute();
    await events.append(
      { type: 'api_key.created', tenantId, data: { keyId: id, role, prefix, name: opts.name, createdByKeyId: opts.createdByKeyId } },
      { clock: opts.clock, random: opts.random, trx },
    );
  });
  return { id, key };
}

/** Creates the tenant and appends `tenant.created` in one transaction; a taken name is a `conflict`. */
export async function createTenant(db: Kysely<Schema>, events: EventLog, name: string, opts: { clock: Clock; random?: Random; createdByKeyId?: string }): Promise<TenantRow> {
  const row: TenantRow = { id: newId('ten', (opts.random ?? systemRandom).bytes), name, created_at: toIso(opts.clock.nowMs()) };
  await db.transaction().execute(async (trx) => {
    if (await trx.selectFrom('tenants').select('id').where('name', '=', name).executeTakeFirst()) {
      throw new SandglassError('conflict', `A tenant named ${JSON.stringify(name)} already exists.`, { details: { field: 'name' } });
    }
    await trx.insertInto('tenants').values(row).execute();
    await events.append({ type: 'tenant.created', tenantId: row.id, data: { name, createdByKeyId: opts.createdByKeyId } }, { clock: opts.clock, random: opts.random, trx });
  });
  return row;
}

export interface BootstrapOptions {
  db: Kysely<Schema>;
  events: EventLog;
  /** Where the admin key is kept, mode 0600 ($SANDGLASS_HOME/admin-key). */
  keyFile: string;
  clock?: Clock;
  random?: Random;
}

export const DEFAULT_TENANT = 'default';

/**
 * The embedded deployment's first run: tenant `default` and an admin key written to keyFile. An existing key file is
 * reused (and registered again if the database was reset), so the CLI's saved key keeps working.
 */
export async function bootstrapLocal(opts: BootstrapOptions): Promise<string> {
  const clock = opts.clock ?? systemClock;
  const tenant =
    (await opts.db.selectFrom('tenants').selectAll().where('name', '=', DEFAULT_TENANT).executeTakeFirst()) ??
    (await createTenant(opts.db, opts.events, DEFAULT_TENANT, { clock, random: opts.random }));
  const existing = readKeyFile(opts.keyFile);
  if (existing !== undefined) {
    chmodSync(opts.keyFile, 0o600);
    const known = await opts.db.selectFrom('api_keys').select('id').where('key_hash', '=', hashApiKey(existing)).executeTakeFirst();
    if (!known) await issueApiKey(opts.db, opts.events, tenant.id, 'admin', { clock, random: opts.random, name: 'local admin', key: existing });
    return existing;
  }
  const key = generateApiKey(opts.random);
  // File first: if the database write then fails, the next start finds the file and registers it.
  mkdirSync(dirname(opts.keyFile), { recursive: true, mode: 0o700 });
  writeFileSync(opts.keyFile, `${key}\n`, { mode: 0o600, flag: 'wx' });
  await issueApiKey(opts.db, opts.events, tenant.id, 'admin', { clock, random: opts.random, name: 'local admin', key });
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
