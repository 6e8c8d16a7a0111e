// The local keyring: keys are stable, wrapped at rest, separate per tenant and purpose, and revocation is final.
import { createPrivateKey, createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalKeyring } from './index.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sg-kms-'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

describe('LocalKeyring', () => {
  it('creates the master key with mode 0600 and a wrapped data key on first use', async () => {
    const keyring = new LocalKeyring({ dir });
    const key = await keyring.dataKey('ten_a', 'chunk-data');
    expect(key.length).toBe(32);
    const master = await stat(join(dir, 'master.key'));
    expect(master.size).toBe(32);
    expect(master.mode & 0o777).toBe(0o600);
    expect((await readdir(join(dir, 'tenants'))).sort()).toEqual(['ten_a.key']);
    expect((await readdir(dir)).sort()).toEqual(['master.key', 'tenants']);
  });

  it('gives the same key across calls and instances, and different keys per purpose and tenant', async () => {
    const a = new LocalKeyring({ dir });
    const first = await a.dataKey('ten_a', 'chunk-data');
    expect(await a.dataKey('ten_a', 'chunk-data')).toEqual(first);
    expect(await new LocalKeyring({ dir }).dataKey('ten_a', 'chunk-data')).toEqual(first);
    const all = await Promise.all([
      a.dataKey('ten_a', 'chunk-id'),
      a.dataKey('ten_a', 'manifest'),
      a.dataKey('ten_a', 'secret'),
      a.dataKey('ten_b', 'chunk-data'),
    ]);
    expect(new Set([first, ...all].map((k) => k.toString('hex'))).size).toBe(5);
  });

  it('agrees on one key when instances race to create it', async () => {
    const keyrings = Array.from({ length: 8 }, () => new LocalKeyring({ dir }));
    const keys = await Promise.all(keyrings.map((k) => k.dataKey('ten_a', 'manifest')));
    expect(new Set(keys.map((k) => k.toString('hex'))).size).toBe(1);
    expect((await readdir(join(dir, 'tenants'))).sort()).toEqual(['ten_a.key']);
  });

  it('does not store the derived keys in the clear', async () => {
    const keyring = new LocalKeyring({ dir });
    const keys = await Promise.all((['chunk-id', 'chunk-data', 'manifest', 'secret'] as const).map((p) => keyring.dataKey('ten_a', p)));
    const wrapped = await readFile(join(dir, 'tenants', 'ten_a.key'));
    for (const key of keys) expect(wrapped.includes(key)).toBe(false);
  });

  it('revocation deletes the key, leaves a tombstone, and is final in every instance', async () => {
    const a = new LocalKeyring({ dir });
    const b = new LocalKeyring({ dir });
    await a.dataKey('ten_a', 'chunk-data');
    await b.dataKey('ten_a', 'chunk-data');
    await a.dataKey('ten_b', 'chunk-data');
    await a.revoke('ten_a');
    expect((await readdir(join(dir, 'tenants'))).sort()).toEqual(['ten_a.revoked', 'ten_b.key']);
    await expect(a.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_revoked' });
    await expect(b.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_revoked' });
    await expect(new LocalKeyring({ dir }).dataKey('ten_a', 'secret')).rejects.toMatchObject({ code: 'key_revoked' });
    expect((await a.dataKey('ten_b', 'chunk-data')).length).toBe(32);
    await a.revoke('ten_a');
  });

  it('a tenant revoked before first use never gets a key', async () => {
    const keyring = new LocalKeyring({ dir });
    await keyring.revoke('ten_new');
    await expect(keyring.dataKey('ten_new', 'chunk-id')).rejects.toMatchObject({ code: 'key_revoked' });
    expect(await readdir(join(dir, 'tenants'))).toEqual(['ten_new.revoked']);
  });

  it('refuses a key that no longer opens under the master key', async () => {
    await new LocalKeyring({ dir }).dataKey('ten_a', 'chunk-data');
    await writeFile(join(dir, 'master.key'), Buffer.alloc(32, 7));
    await expect(new LocalKeyring({ dir }).dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    await writeFile(join(dir, 'master.key'), Buffer.alloc(5));
    await expect(new LocalKeyring({ dir }).dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
  });

  it('rejects tenant ids that are not one safe path segment, and unknown purposes, before touching the disk', async () => {
    const keyring = new LocalKeyring({ dir });
    for (const bad of ['', '../ten_a', 'a/b', 'a\\b', '..', '.hidden', 'x'.repeat(129)]) {
      await expect(keyring.dataKey(bad, 'chunk-data'), bad).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'tenantId' } });
      await expect(keyring.revoke(bad), bad).rejects.toMatchObject({ code: 'invalid_argument' });
    }
    await expect(keyring.dataKey('ten_a', 'nope' as 'secret')).rejects.toMatchObject({ code: 'invalid_argument', details: { field: 'purpose' } });
    expect(await readdir(dir)).toEqual([]);
  });

  it('signs audit exports with one Ed25519 key per deployment, created on first use, 0600, sealed under the master key', async () => {
    const keyrings = Array.from({ length: 4 }, () => new LocalKeyring({ dir }));
    const pems = await Promise.all(keyrings.map((k) => k.auditPublicKeyPem()));
    expect(new Set(pems).size).toBe(1);
    const publicKey = createPublicKey(pems[0]!);
    expect(publicKey.asymmetricKeyType).toBe('ed25519');
    const message = Buffer.from('header and head hash');
    const signature = await new LocalKeyring({ dir }).signAudit(message);
    expect(verify(null, message, publicKey, signature)).toBe(true);
    expect(verify(null, message, generateKeyPairSync('ed25519').publicKey, signature)).toBe(false);

    const file = await stat(join(dir, 'audit-signing.key'));
    expect(file.mode & 0o777).toBe(0o600);
    expect((await readdir(dir)).sort()).toEqual(['audit-signing.key', 'master.key']);
    // Sealed: the file is not a private key anyone can load without the master key.
    const sealed = await readFile(join(dir, 'audit-signing.key'));
    expect(() => createPrivateKey({ key: sealed, format: 'der', type: 'pkcs8' })).toThrow();
  });

  it('refuses an audit key that no longer opens under the master key', async () => {
    await new LocalKeyring({ dir }).auditPublicKeyPem();
    await writeFile(join(dir, 'master.key'), Buffer.alloc(32, 7));
    await expect(new LocalKeyring({ dir }).signAudit(Buffer.from('x'))).rejects.toMatchObject({ code: 'key_unavailable' });
  });
});
