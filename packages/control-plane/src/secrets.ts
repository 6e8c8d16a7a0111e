// Tenant secrets: sealed at rest under the tenant's 'secret' key, listed as metadata only, opened at the moment of use.
import type { Kysely } from 'kysely';
import { invalidArgument, Redacted, SandglassError, systemClock, type Clock, type ControlPlaneApi } from '@sandglass/core';
import { isUniqueViolation, toIso, type SecretApproval, type SecretRow, type Schema } from '@sandglass/db';
import { parsePolicy } from '@sandglass/egress';
import type { EventLog } from '@sandglass/events';
import { seal, unseal, type KeyProvider } from '@sandglass/kms';

/** Environment-variable style, since the sandbox sees each secret as a variable holding its placeholder. */
export const SECRET_NAME = /^[A-Z_][A-Z0-9_]{0,63}$/;
export const SECRET_VALUE_MAX_BYTES = 64 * 1024;
// The egress proxy refuses to use shorter values: they could not be found and redacted in what it records.
export const SECRET_VALUE_MIN_CHARS = 4;
const SECRET_HOSTS_MAX = 32;
// Headers the egress proxy owns; a secret may not set them.
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'upgrade', 'te', 'trailer', 'keep-alive', 'proxy-connection']);
// What cannot go into an HTTP header value.
const NOT_IN_HEADER = /[^\t\x20-\x7e\x80-\xff]/;

export interface SecretInput {
  /** ^[A-Z_][A-Z0-9_]{0,63}$ */
  name: string;
  value: string;
  /** Where the value may be sent: exact hosts or *.suffix, optionally :port (no port: 443 only). */
  hosts: string[];
  /** Injected on every request to a scoped host, as `format` with {value} replaced. */
  header?: string;
  /** Default '{value}'; only with header. */
  format?: string;
  /** Media types whose request bodies are searched for the placeholder. */
  bodyContentTypes?: string[];
  approval?: SecretApproval;
  /** Also substitute into requests that go upstream in clear text (http://); default false: only over verified TLS. */
  allowPlaintext?: boolean;
  /** Also substitute into protocol-upgrade (WebSocket) requests, whose frames after the 101 are not masked; default false. */
  allowUpgrade?: boolean;
}

/** A secret as the API shows it: everything but the value. */
export type SecretInfo = ControlPlaneApi.components['schemas']['SecretInfo'];

/** What the gateway binds to a sandbox: the configuration, and the value only through value(), decrypted when called. */
export interface ResolvedSecret {
  name: string;
  hosts: string[];
  header: string | null;
  format: string | null;
  bodyContentTypes: string[];
  approval: SecretApproval;
  allowPlaintext: boolean;
  allowUpgrade: boolean;
  value(): Promise<Redacted<string>>;
}

export interface SecretStoreDeps {
  db: Kysely<Schema>;
  keys: KeyProvider;
  events: EventLog;
  clock?: Clock;
}

const aadOf = (tenantId: string, name: string) => Buffer.from(`${tenantId}/${name}`);

function notFound(name: string, field = 'name'): SandglassError {
  const where = field === 'name' ? '' : `${field}: `;
  return new SandglassError('secret_not_found', `${where}No secret ${name} exists for your tenant; PUT /v1/secrets/${name} creates it.`, {
    details: { field },
  });
}

export function checkSecretName(name: string, field = 'name'): void {
  if (!SECRET_NAME.test(name)) throw invalidArgument(field, 'must be 1-64 of A-Z, 0-9 and _, not starting with a digit (an environment variable name)');
}

/**
 * Checks host patterns with the egress policy grammar (as allow rules, so '*' and public suffixes are refused), naming
 * `${field}[i]`; a scope is a host and port only, never a method or path.
 */
export function checkSecretHosts(hosts: string[], field = 'hosts'): void {
  if (hosts.length === 0 || hosts.length > SECRET_HOSTS_MAX) throw invalidArgument(field, `must name 1-${SECRET_HOSTS_MAX} hosts`);
  let policy;
  try {
    policy = parsePolicy({ allow: hosts });
  } catch (err) {
    throw renameRuleField(err, (f) => (f.startsWith('allow') ? field + f.slice('allow'.length) : field));
  }
  policy.allow.forEach((rule, i) => {
    if (rule.method !== undefined || rule.pathPrefix !== undefined) {
      const problem = 'may name only a host and port: a secret is scoped to hosts, not to methods or paths';
      throw new SandglassError('policy_invalid', `${field}[${i}]: '${hosts[i]}' ${problem}`, { details: { field: `${field}[${i}]`, rule: hosts[i], problem } });
    }
  });
}

/** A policy_invalid from parsePolicy names `allow[i]`; the API names the field as the caller wrote it (`network.allow[i]`, `hosts[i]`). */
export function renameRuleField(err: unknown, rename: (field: string) => string): unknown {
  if (!(err instanceof SandglassError) || err.code !== 'policy_invalid') return err;
  const field = String(err.details?.field ?? 'policy');
  const renamed = rename(field);
  const message = err.message.startsWith(`${field}:`) ? renamed + err.message.slice(field.length) : `${renamed}: ${err.message}`;
  return new SandglassError('policy_invalid', message, { details: { ...err.details, field: renamed } });
}

function checkInput(input: SecretInput): void {
  const bytes = Buffer.byteLength(input.value);
  if (input.value.length < SECRET_VALUE_MIN_CHARS)
    throw invalidArgument('value', `must be at least ${SECRET_VALUE_MIN_CHARS} characters, or it could not be kept out of recorded traffic`);
  if (bytes > SECRET_VALUE_MAX_BYTES) throw invalidArgument('value', `must be at most ${SECRET_VALUE_MAX_BYTES} bytes (UTF-8)`);
  checkSecretHosts(input.hosts);
  if (input.header !== undefined) {
    if (RESERVED_HEADERS.has(input.header.toLowerCase())) throw invalidArgument('header', 'is a header the egress proxy manages; choose another');
    if (NOT_IN_HEADER.test(input.value)) throw invalidArgument('value', 'has control characters (such as a line break), so it cannot be sent in a header');
  }
  if (input.format !== undefined) {
    if (input.header === undefined) throw invalidArgument('format', 'applies only with header');
    if (!input.format.includes('{value}')) throw invalidArgument('format', "must contain '{value}'");
    if (NOT_IN_HEADER.test(input.format)) throw invalidArgument('format', 'must not contain control characters');
  }
}

function toInfo(row: SecretRow): SecretInfo {
  return {
    name: row.name,
    hosts: JSON.parse(row.hosts) as string[],
    header: row.header,
    format: row.format,
    bodyContentTypes: JSON.parse(row.body_content_types) as string[],
    approval: row.approval,
    allowPlaintext: row.allow_plaintext === 1,
    allowUpgrade: row.allow_upgrade === 1,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** The tenant's secrets. Values go in sealed and come out only through resolve(...).value(); no other method returns them. */
export class SecretStore {
  readonly #db: Kysely<Schema>;
  readonly #keys: KeyProvider;
  readonly #events: EventLog;
  readonly #clock: Clock;

  constructor(deps: SecretStoreDeps) {
    this.#db = deps.db;
    this.#keys = deps.keys;
    this.#events = deps.events;
    this.#clock = deps.clock ?? systemClock;
  }

  /** Creates or replaces the secret and records secret.set (without the value) in one transaction. */
  async set(tenantId: string, input: SecretInput): Promise<{ secret: SecretInfo; created: boolean }> {
    const { name } = input;
    checkSecretName(name);
    checkInput(input);
    const version = (await this.#keys.keyVersion?.(tenantId)) ?? 1;
    const key = await this.#keys.dataKey(tenantId, 'secret', version);
    const sealed = withVersion(version, seal(key, Buffer.from(input.value, 'utf8'), aadOf(tenantId, name)).toString('base64'));
    const now = toIso(this.#clock.nowMs());
    const header = input.header ?? null;
    const config = {
      hosts: JSON.stringify(input.hosts),
      header,
      format: header === null ? null : (input.format ?? '{value}'),
      body_content_types: JSON.stringify(input.bodyContentTypes ?? []),
      approval: input.approval ?? 'none',
      allow_plaintext: input.allowPlaintext === true ? 1 : 0,
      allow_upgrade: input.allowUpgrade === true ? 1 : 0,
    };
    let created = false;
    try {
      await this.#db.transaction().execute(async (trx) => {
        const existing = await trx.selectFrom('secrets').select('created_at').where('tenant_id', '=', tenantId).where('name', '=', name).executeTakeFirst();
        created = existing === undefined;
        if (existing) {
          await trx
            .updateTable('secrets')
            .set({ ...config, value_sealed: sealed, updated_at: now })
            .where('tenant_id', '=', tenantId)
            .where('name', '=', name)
            .execute();
        } else {
          await trx
            .insertInto('secrets')
            .values({ tenant_id: tenantId, name, ...config, value_sealed: sealed, created_at: now, updated_at: now })
            .execute();
        }
        await this.#events.append(
          {
            type: 'secret.set',
            tenantId,
            data: {
              name,
              hosts: input.hosts,
              header,
              approval: config.approval,
              ...(input.allowPlaintext ? { allowPlaintext: true } : {}),
              ...(input.allowUpgrade ? { allowUpgrade: true } : {}),
            },
          },
          { clock: this.#clock, trx },
        );
      });
    } catch (err) {
      // Another control plane created the same secret between our look and our insert: it exists now, so this is a
      // replacement, made again as one.
      if (created && isUniqueViolation(err)) return this.set(tenantId, input);
      throw err;
    }
    return { secret: toInfo(await this.#row(tenantId, name)), created };
  }

  async list(tenantId: string): Promise<SecretInfo[]> {
    return (await this.#db.selectFrom('secrets').selectAll().where('tenant_id', '=', tenantId).orderBy('name').execute()).map(toInfo);
  }

  /** Removes the secret and records secret.removed; sandboxes already bound to it lose it on their next use. */
  async remove(tenantId: string, name: string): Promise<void> {
    await this.#db.transaction().execute(async (trx) => {
      const gone = await trx.deleteFrom('secrets').where('tenant_id', '=', tenantId).where('name', '=', name).executeTakeFirst();
      if (gone.numDeletedRows === 0n) throw notFound(name);
      await this.#events.append({ type: 'secret.removed', tenantId, data: { name } }, { clock: this.#clock, trx });
    });
  }

  /** Throws secret_not_found naming `field` for the first name the tenant has no secret of. */
  async checkExist(tenantId: string, names: readonly string[], field = 'secrets'): Promise<void> {
    if (names.length === 0) return;
    const known = new Set(
      (
        await this.#db
          .selectFrom('secrets')
          .select('name')
          .where('tenant_id', '=', tenantId)
          .where('name', 'in', [...names])
          .execute()
      ).map((r) => r.name),
    );
    names.forEach((name, i) => {
      if (!known.has(name)) throw notFound(name, `${field}[${i}]`);
    });
  }

  /**
   * The secret's configuration now, and value() that reads and decrypts it when called (so a value replaced or a secret
   * removed since takes effect at once). A failure to decrypt is `key_unavailable` or `internal`, never the ciphertext.
   */
  async resolve(tenantId: string, name: string): Promise<ResolvedSecret> {
    const { createdAt: _c, updatedAt: _u, ...info } = toInfo(await this.#row(tenantId, name));
    return {
      ...info,
      value: async () => {
        const row = await this.#row(tenantId, name);
        const { version, sealedB64 } = versionOf(row.value_sealed);
        // Sealed under the data key version current when it was set: a rotation since leaves it readable.
        const key = await this.#keys.dataKey(tenantId, 'secret', version);
        try {
          return new Redacted(unseal(key, Buffer.from(sealedB64, 'base64'), aadOf(tenantId, name)).toString('utf8'));
        } catch (err) {
          throw new SandglassError('internal', `Secret ${name} could not be decrypted.`, { cause: new Error(`unseal failed: ${(err as Error).message}`) });
        }
      },
    };
  }

  async #row(tenantId: string, name: string): Promise<SecretRow> {
    const row = await this.#db.selectFrom('secrets').selectAll().where('tenant_id', '=', tenantId).where('name', '=', name).executeTakeFirst();
    if (!row) throw notFound(name);
    return row;
  }
}

/** Values sealed under data key version 1 are bare base64, as before rotations existed; later ones say their version. */
function withVersion(version: number, sealedB64: string): string {
  return version === 1 ? sealedB64 : `k${version}.${sealedB64}`;
}

function versionOf(stored: string): { version: number; sealedB64: string } {
  const m = /^k([1-9][0-9]{0,8})\.(.*)$/s.exec(stored);
  return m ? { version: Number(m[1]), sealedB64: m[2]! } : { version: 1, sealedB64: stored };
}
