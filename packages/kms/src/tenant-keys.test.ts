import { mkdtemp, readdir, readFile, rm, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LocalKeyring } from './local-keyring.js';
import { seal, unseal } from './seal.js';
import { softHsm, type SoftHsm } from './softhsm-fixture.js';
import { TenantKeys, type ProviderChoice } from './tenant-keys.js';

let hsm: SoftHsm;
let dir: string;
let pkcs11: (key?: string) => ProviderChoice;

beforeAll(() => {
  hsm = softHsm(['byok']);
  for (const label of ['kek-a', 'kek-b', 'kek-c', 'kek-d', 'kek-e', 'kek-new']) hsm.createKey('byok', label);
  pkcs11 = (key = 'kek-a') => ({ provider: 'pkcs11', module: hsm.module, token: 'byok', key, pinFile: hsm.pinFile });
});
afterAll(() => hsm.cleanup());
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-tenant-keys-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function open(): TenantKeys {
  return new TenantKeys({ dir, keyring: new LocalKeyring({ dir }) });
}

describe('TenantKeys', () => {
  it('a PKCS#11 tenant: keys are the same in every instance, and nothing on disk opens without the HSM', async () => {
    const keys = open();
    const st = await keys.use('ten_hsm', pkcs11());
    expect(st).toMatchObject({ provider: 'pkcs11', currentVersion: 1, revoked: false, pkcs11: { token: 'byok', key: 'kek-a' } });
    const k = await keys.dataKey('ten_hsm', 'chunk-data');
    expect(await open().dataKey('ten_hsm', 'chunk-data')).toEqual(k);
    expect(await keys.dataKey('ten_hsm', 'secret')).not.toEqual(k);
    // The keyring holds no key of this tenant; the registration holds only the HSM's wrap and no PIN.
    expect(await new LocalKeyring({ dir }).hasKey('ten_hsm')).toBe(false);
    const state = await readFile(join(dir, 'byok', 'ten_hsm.json'), 'utf8');
    expect(state).not.toContain(k.toString('base64'));
    expect(state).not.toContain('4711');
    expect((await keys.status('ten_hsm')).lastUsedAt).not.toBeNull();
    await keys.close();
  });

  it("replicas sharing the directory see each other's registration, rotation and revocation at their next use", async () => {
    const a = open();
    const b = open();
    // b looked first and found no registration: it must not keep that answer once a registers an HSM key.
    expect((await b.status('ten_rep')).provider).toBe('keyring');
    await a.use('ten_rep', pkcs11('kek-e'));
    expect(await b.status('ten_rep')).toMatchObject({ provider: 'pkcs11', currentVersion: 1 });
    const v1 = await b.dataKey('ten_rep', 'chunk-data');
    expect(await a.dataKey('ten_rep', 'chunk-data')).toEqual(v1);
    await a.rotate('ten_rep');
    expect(await b.keyVersion('ten_rep')).toBe(2);
    expect(await b.dataKey('ten_rep', 'chunk-data')).toEqual(await a.dataKey('ten_rep', 'chunk-data', 2));
    expect(await b.dataKey('ten_rep', 'chunk-data', 1)).toEqual(v1);
    await a.revoke('ten_rep');
    await expect(b.verify('ten_rep')).rejects.toMatchObject({ code: 'key_revoked' });
    await expect(b.dataKey('ten_rep', 'chunk-data', 1)).rejects.toMatchObject({ code: 'key_revoked' });
    await a.close();
    await b.close();
  });

  it('refuses to move a tenant with keys to another provider, and is idempotent for the same one', async () => {
    const keys = open();
    await keys.dataKey('ten_kr', 'secret');
    await expect(keys.use('ten_kr', pkcs11('kek-b'))).rejects.toMatchObject({ code: 'conflict' });
    await keys.use('ten_p', pkcs11('kek-b'));
    await expect(keys.use('ten_p', pkcs11('kek-c'))).rejects.toMatchObject({ code: 'conflict' });
    await expect(keys.use('ten_p', { provider: 'keyring' })).rejects.toMatchObject({ code: 'conflict' });
    expect((await keys.use('ten_p', pkcs11('kek-b'))).currentVersion).toBe(1);
    await expect(keys.use('ten_bad', { ...pkcs11('no-such-key') })).rejects.toMatchObject({ code: 'key_revoked' });
    expect((await keys.status('ten_bad')).provider).toBe('keyring');
  });

  it('revocation shreds every version: key_revoked everywhere, other tenants untouched', async () => {
    const keys = open();
    await keys.use('ten_r', pkcs11('kek-c'));
    const sealed = seal(await keys.dataKey('ten_r', 'manifest'), Buffer.from('tenant data'), Buffer.from('aad'));
    await keys.rotate('ten_r');
    await keys.dataKey('ten_other', 'chunk-data');
    await keys.revoke('ten_r');
    for (const k of [keys, open()]) {
      await expect(k.dataKey('ten_r', 'manifest', 1)).rejects.toMatchObject({ code: 'key_revoked' });
      await expect(k.dataKey('ten_r', 'chunk-id')).rejects.toMatchObject({ code: 'key_revoked' });
      await expect(k.verify('ten_r')).rejects.toMatchObject({ code: 'key_revoked' });
      await expect(k.rotate('ten_r')).rejects.toMatchObject({ code: 'key_revoked' });
      await expect(k.use('ten_r', { provider: 'keyring' })).rejects.toMatchObject({ code: 'key_revoked' });
    }
    expect(await keys.status('ten_r')).toMatchObject({ revoked: true, currentVersion: 2 });
    // Whatever is left on disk (registration, keyring) holds no wrapped key; the master key opens nothing of it.
    expect(await readFile(join(dir, 'byok', 'ten_r.json'), 'utf8')).not.toContain('wrapped');
    const master = await readFile(join(dir, 'master.key'));
    expect(() => unseal(master, sealed, Buffer.from('aad'))).toThrow();
    expect((await keys.dataKey('ten_other', 'chunk-data')).length).toBe(32);
    await keys.verify('ten_other');
  });

  it('a key deleted on the HSM is refused at the next verify, with no API call; cached keys go with it', async () => {
    const keys = open();
    await keys.use('ten_d', pkcs11('kek-d'));
    await keys.verify('ten_d');
    hsm.deleteKey('byok', 'kek-d');
    await expect(keys.verify('ten_d')).rejects.toMatchObject({ code: 'key_revoked' });
    await expect(keys.dataKey('ten_d', 'chunk-data')).rejects.toMatchObject({ code: 'key_revoked' });
    expect((await keys.status('ten_d')).revoked).toBe(false);
  });

  it('a lost registration of a PKCS#11 tenant is refused, never answered with a fresh keyring key', async () => {
    const keys = open();
    await keys.use('ten_lost', pkcs11('kek-a'));
    await unlink(join(dir, 'byok', 'ten_lost.json'));
    await expect(open().dataKey('ten_lost', 'chunk-data')).rejects.toMatchObject({ code: 'key_revoked' });
    expect((await readdir(join(dir, 'tenants'))).filter((f) => f.startsWith('ten_lost'))).toEqual(['ten_lost.revoked']);
  });

  it('rotation: new writes use the new version, old versions read back, chunk ids do not change', async () => {
    const keys = open();
    await keys.use('ten_rot', pkcs11('kek-e'));
    const v1 = await keys.dataKey('ten_rot', 'chunk-data');
    const id1 = await keys.dataKey('ten_rot', 'chunk-id');
    const st = await keys.rotate('ten_rot');
    expect(st.currentVersion).toBe(2);
    expect(st.versions.map((v) => v.version)).toEqual([1, 2]);
    expect(await keys.keyVersion('ten_rot')).toBe(2);
    const v2 = await keys.dataKey('ten_rot', 'chunk-data');
    expect(v2).not.toEqual(v1);
    expect(await keys.dataKey('ten_rot', 'chunk-data', 1)).toEqual(v1);
    expect(await keys.dataKey('ten_rot', 'chunk-id')).toEqual(id1);
    // A new HSM key: every version is re-wrapped under it, so the old key can go and old data still opens.
    await keys.rotate('ten_rot', { key: 'kek-new' });
    hsm.deleteKey('byok', 'kek-e');
    const fresh = open();
    expect(await fresh.dataKey('ten_rot', 'chunk-data', 1)).toEqual(v1);
    expect(await fresh.dataKey('ten_rot', 'chunk-data', 2)).toEqual(v2);
    expect(await fresh.dataKey('ten_rot', 'chunk-id')).toEqual(id1);
    expect((await fresh.status('ten_rot')).pkcs11?.key).toBe('kek-new');
    await expect(fresh.dataKey('ten_rot', 'chunk-data', 9)).rejects.toMatchObject({ code: 'key_unavailable' });
  });

  it('rotation of a keyring tenant keeps version 1 in the keyring and seals later ones under the master key', async () => {
    const keys = open();
    const v1 = await keys.dataKey('ten_kr', 'chunk-data');
    await keys.rotate('ten_kr');
    expect(await keys.keyVersion('ten_kr')).toBe(2);
    expect(await open().dataKey('ten_kr', 'chunk-data', 1)).toEqual(v1);
    expect(await open().dataKey('ten_kr', 'chunk-data')).not.toEqual(v1);
    await expect(keys.rotate('ten_kr', { key: 'kek-a' })).rejects.toMatchObject({ code: 'invalid_argument' });
    await keys.revoke('ten_kr');
    await expect(open().dataKey('ten_kr', 'chunk-data', 2)).rejects.toMatchObject({ code: 'key_revoked' });
  });
});
