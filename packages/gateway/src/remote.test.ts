// Tenant keys, secret values and templates obtained through the node API: sealed for this node and tenant, cached only as said.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, Redacted } from '@sandglass/core';
import { NodeApiClient } from './node-api-client.js';
import { NodeApiDouble, testNodeCredential } from './node-api-double.js';
import { RemoteKeys, RemoteSecrets, RemoteTemplateRegistry } from './remote.js';

const secret = testNodeCredential();
const NODE = 'node-a';
const KEY = Buffer.alloc(32, 9);

let cp: NodeApiDouble;
let client: NodeApiClient;
let clock: ManualClock;

beforeEach(async () => {
  cp = await new NodeApiDouble(secret, NODE).start();
  client = new NodeApiClient({ baseUrl: cp.url, nodeId: NODE, nodeKey: secret.nodeKey, retries: 0 });
  clock = new ManualClock(1000);
  cp.dataKeys.set('ten_a/chunk-data', KEY);
  cp.dataKeys.set('ten_b/chunk-data', Buffer.alloc(32, 10));
  cp.secrets.set('ten_a/API_TOKEN', { hosts: ['api.example.com'], value: 'tok-123' });
});

afterEach(async () => {
  client.close();
  await cp.close();
});

describe('RemoteKeys', () => {
  it('opens the key sealed for this node and tenant, and keeps it only for cacheMs', async () => {
    const keys = new RemoteKeys({ client, transportPrivateKey: secret.privateKey, clock, cacheMs: 60_000 });
    expect(await keys.dataKey('ten_a', 'chunk-data')).toEqual(KEY);
    expect(await keys.dataKey('ten_a', 'chunk-data')).toEqual(KEY);
    expect(cp.calls.dataKey).toBe(1);
    clock.advance(60_000);
    expect(await keys.dataKey('ten_a', 'chunk-data')).toEqual(KEY);
    expect(cp.calls.dataKey).toBe(2);
  });

  it('refuses a key sealed for another node, another tenant or another purpose (key_unavailable), and caches no failure', async () => {
    const keys = new RemoteKeys({ client, transportPrivateKey: secret.privateKey, clock });
    cp.aad = (_node, tenant, purpose) => `node-b/${tenant}/${purpose}`;
    await expect(keys.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    // A reply for tenant b's request replayed to a's: the associated data names b.
    cp.aad = (node, _tenant, purpose) => `${node}/ten_b/${purpose}`;
    await expect(keys.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    cp.aad = (node, tenant) => `${node}/${tenant}/manifest/v1`;
    await expect(keys.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    // Another version's reply: the version is sealed in.
    cp.aad = (node, tenant, what) => `${node}/${tenant}/${what.replace('/v1', '/v2')}`;
    await expect(keys.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    cp.aad = (node, tenant, purpose) => `${node}/${tenant}/${purpose}`;
    expect(await keys.dataKey('ten_a', 'chunk-data')).toEqual(KEY);
  });

  it('is key_unavailable when the control plane cannot be reached or has no key, and cannot revoke', async () => {
    const keys = new RemoteKeys({ client, transportPrivateKey: secret.privateKey, clock });
    await expect(keys.dataKey('ten_c', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    cp.down = true;
    await expect(keys.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
    await expect(keys.revoke('ten_a')).rejects.toMatchObject({ code: 'permission_denied' });
  });

  it('asks for the version it is told, keeps chunk ids on version 1, and verifies past every cache', async () => {
    const v2 = Buffer.alloc(32, 11);
    cp.dataKeys.set('ten_a/chunk-data/v2', v2);
    cp.dataKeys.set('ten_a/chunk-id', Buffer.alloc(32, 12));
    cp.keyVersion = 2;
    const keys = new RemoteKeys({ client, transportPrivateKey: secret.privateKey, clock, versionCacheMs: 5_000 });
    expect(await keys.keyVersion('ten_a')).toBe(2);
    expect(await keys.dataKey('ten_a', 'chunk-data', 2)).toEqual(v2);
    expect(await keys.dataKey('ten_a', 'chunk-data', 1)).toEqual(KEY);
    expect(await keys.dataKey('ten_a', 'chunk-id', 2)).toEqual(Buffer.alloc(32, 12));
    // A rotation elsewhere is seen once the version's short cache runs out.
    cp.keyVersion = 3;
    expect(await keys.keyVersion('ten_a')).toBe(2);
    clock.advance(5_000);
    expect(await keys.keyVersion('ten_a')).toBe(3);
    // verify is never cached: each one reaches the control plane, which asks the provider.
    await keys.verify('ten_a');
    await keys.verify('ten_a');
    expect(cp.calls.verify).toBe(2);
  });

  it('passes the control plane’s key_revoked through, drops what it holds of the tenant, and fails closed otherwise', async () => {
    const keys = new RemoteKeys({ client, transportPrivateKey: secret.privateKey, clock, cacheMs: 60_000 });
    expect(await keys.dataKey('ten_a', 'chunk-data', 1)).toEqual(KEY);
    cp.keyRefusal = 'key_revoked';
    await expect(keys.verify('ten_a')).rejects.toMatchObject({ code: 'key_revoked' });
    // The refusal dropped the cached key: the next use asks again and is refused too.
    await expect(keys.dataKey('ten_a', 'chunk-data', 1)).rejects.toMatchObject({ code: 'key_revoked' });
    cp.keyRefusal = undefined;
    cp.down = true;
    await expect(keys.verify('ten_a')).rejects.toMatchObject({ code: 'key_unavailable' });
    await expect(keys.keyVersion('ten_a')).rejects.toMatchObject({ code: 'key_unavailable' });
  });

  it('does not open with another node’s transport key', async () => {
    const other = new RemoteKeys({ client, transportPrivateKey: testNodeCredential().privateKey, clock });
    await expect(other.dataKey('ten_a', 'chunk-data')).rejects.toMatchObject({ code: 'key_unavailable' });
  });
});

describe('RemoteSecrets', () => {
  it('resolves the rules, and the value only inside value(), redacted, asked for on every use', async () => {
    const secrets = new RemoteSecrets({ client, transportPrivateKey: secret.privateKey });
    const s = await secrets.resolve('ten_a', 'API_TOKEN');
    expect(s).toMatchObject({ name: 'API_TOKEN', hosts: ['api.example.com'], approval: 'none' });
    expect(cp.calls.secretValue).toBe(0);
    const v = await s.value();
    expect(v).toBeInstanceOf(Redacted);
    expect(v.reveal()).toBe('tok-123');
    expect(JSON.stringify(v)).not.toContain('tok-123');
    await s.value();
    expect(cp.calls.secretValue).toBe(2);
  });

  it('refuses a value sealed for another node or another tenant', async () => {
    cp.secrets.set('ten_b/API_TOKEN', { hosts: ['api.example.com'], value: 'b-secret' });
    const s = await new RemoteSecrets({ client, transportPrivateKey: secret.privateKey }).resolve('ten_a', 'API_TOKEN');
    cp.aad = (_node, tenant, name) => `node-b/${tenant}/${name}`;
    await expect(s.value()).rejects.toThrow(/not sealed for this node/);
    cp.aad = (node, _tenant, name) => `${node}/ten_b/${name}`;
    await expect(s.value()).rejects.toThrow(/not sealed for this node/);
  });

  it('passes secret_not_found through', async () => {
    await expect(new RemoteSecrets({ client, transportPrivateKey: secret.privateKey }).resolve('ten_a', 'NOPE')).rejects.toMatchObject({
      code: 'secret_not_found',
    });
  });
});

describe('RemoteTemplateRegistry', () => {
  it('looks up nothing for an unpublished key, and the first publisher wins', async () => {
    const reg = new RemoteTemplateRegistry(client);
    const key = '0123456789abcdef';
    expect(await reg.lookup(key)).toBeUndefined();
    const mine = { tenantId: 'system', snapshotId: 'snap_aaaaaaaaaaaaaaaaaaaa' };
    expect(await reg.publish(key, { ...mine, nodeId: NODE })).toEqual(mine);
    expect(await reg.publish(key, { tenantId: 'system', snapshotId: 'snap_bbbbbbbbbbbbbbbbbbbb', nodeId: NODE })).toEqual(mine);
    expect(await reg.lookup(key)).toEqual(mine);
  });
});
