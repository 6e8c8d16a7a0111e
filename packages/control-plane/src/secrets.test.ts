import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { LocalKeyring, TenantKeys } from '@sandglass/kms';
import { SecretStore } from './secrets.js';

let dir: string;
let database: Database;
let keys: TenantKeys;
let secrets: SecretStore;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-secrets-'));
  database = await openDatabase({ url: 'sqlite::memory:' });
  keys = new TenantKeys({ dir, keyring: new LocalKeyring({ dir }) });
  secrets = new SecretStore({ db: database.db, events: new EventLog(database.db), keys });
  await database.db
    .insertInto('tenants')
    .values({ id: 'ten_a', name: 'a', created_at: new Date(0).toISOString() })
    .execute();
});
afterEach(async () => {
  await database.close();
  await rm(dir, { recursive: true, force: true });
});

describe('SecretStore and the tenant key', () => {
  it('a secret set before a rotation and one set after both decrypt; a revocation makes both unreadable', async () => {
    await secrets.set('ten_a', { name: 'OLD_TOKEN', value: 'before-rotation', hosts: ['api.example.com'] });
    await keys.rotate('ten_a');
    await secrets.set('ten_a', { name: 'NEW_TOKEN', value: 'after-rotation', hosts: ['api.example.com'] });
    const sealed = await database.db.selectFrom('secrets').select(['name', 'value_sealed']).orderBy('name').execute();
    expect(sealed.map((r) => [r.name, r.value_sealed.startsWith('k2.')])).toEqual([
      ['NEW_TOKEN', true],
      ['OLD_TOKEN', false],
    ]);
    expect((await (await secrets.resolve('ten_a', 'OLD_TOKEN')).value()).reveal()).toBe('before-rotation');
    expect((await (await secrets.resolve('ten_a', 'NEW_TOKEN')).value()).reveal()).toBe('after-rotation');
    await keys.revoke('ten_a');
    for (const name of ['OLD_TOKEN', 'NEW_TOKEN']) {
      await expect((await secrets.resolve('ten_a', name)).value()).rejects.toMatchObject({ code: 'key_revoked' });
    }
  });
});
