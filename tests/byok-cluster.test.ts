// Issue 14 in a cluster (two control-plane replicas on PostgreSQL, a gateway on S3) with SoftHSM2: a tenant's key
// registered, rotated and revoked through either replica; the revocation stops its sandbox on the gateway at once and
// refuses its boots, and its store is reclaimed after retention; a sandbox lost with its node while the key is gone
// from the HSM is not brought back.
import { type Dirent, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '@sandglass/db';
import { Sandbox } from '@sandglass/sdk';
import { softHsm, type SoftHsm } from '@sandglass/kms/softhsm-fixture';
import { Cluster, waitFor } from './cluster-harness.js';
import { home as sharedHome } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'sg-byok-cluster-'));
const TOKEN = 'byok-cluster';
const cluster = new Cluster({
  dir,
  artifactsFrom: sharedHome,
  basePort: Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 50,
  controlPlanes: 2,
  gateways: 1,
  deadAfterS: 6,
  heartbeatIntervalS: 1,
  controlPlaneStore: true,
});
let hsm: SoftHsm;

/** Straight to one replica, not through haproxy: which replica answers is the point. */
const replica = (i: number) => `http://127.0.0.1:${cluster.cpPorts[i]}`;

async function call(base: string, method: string, path: string, apiKey: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function tenant(name: string): Promise<{ id: string; key: string }> {
  const t = await call(replica(1), 'POST', '/v1/tenants', cluster.adminKey, { name });
  expect(t.status, JSON.stringify(t.body)).toBe(201);
  const k = await call(replica(1), 'POST', `/v1/tenants/${t.body.id}/api-keys`, cluster.adminKey, { role: 'admin' });
  expect(k.status).toBe(201);
  return { id: t.body.id, key: k.body.key };
}

const pkcs11 = (key: string) => ({ provider: 'pkcs11', module: hsm.module, token: TOKEN, key, pinFile: hsm.pinFile });

async function stateOf(id: string, apiKey: string): Promise<string> {
  return (await call(cluster.apiUrl, 'GET', `/v1/sandboxes/${id}`, apiKey)).body.state;
}

beforeAll(async () => {
  // Before the replicas start: they inherit SOFTHSM2_CONF, and the token store is this test's. A revoked tenant's
  // store is reclaimed at the first maintenance round after its revocation (retention 0).
  process.env.SANDGLASS_REVOKED_RETENTION_S = '0';
  process.env.SANDGLASS_MAINTENANCE_INTERVAL_S = '5';
  hsm = softHsm([TOKEN], { dir: join(dir, 'softhsm') });
  for (const label of ['kek-r', 'kek-f']) hsm.createKey(TOKEN, label);
  try {
    await cluster.start();
  } catch (err) {
    for (const name of ['cp1', 'cp2', 'gateway-n1']) console.error(`--- ${name}.log ---\n${cluster.log(name).slice(-4000)}`);
    throw err;
  }
}, 900_000);

afterAll(async () => {
  await cluster.stop();
  if (!process.env.SANDGLASS_KEEP_CLUSTER) rmSync(dir, { recursive: true, force: true });
});

describe('bring your own key in a cluster', () => {
  let t: { id: string; key: string };
  let other: { id: string; key: string };
  let sbx: Sandbox;
  let otherSbx: Sandbox;

  it('a key registered and rotated on one replica is the key the other replica and the gateway use', async () => {
    t = await tenant('byok-cluster-t');
    other = await tenant('byok-cluster-other');
    const used = await call(replica(1), 'PUT', `/v1/tenants/${t.id}/keys`, cluster.adminKey, pkcs11('kek-r'));
    expect(used.status, JSON.stringify(used.body)).toBe(200);
    expect((await call(replica(0), 'GET', `/v1/tenants/${t.id}/keys`, cluster.adminKey)).body).toMatchObject({
      provider: 'pkcs11',
      currentVersion: 1,
      pkcs11: { token: TOKEN, key: 'kek-r' },
    });
    sbx = await Sandbox.create({ apiUrl: replica(1), apiKey: t.key, timeoutS: 1800, snapshotIntervalS: 3600 });
    otherSbx = await Sandbox.create({ apiUrl: replica(0), apiKey: other.key, timeoutS: 1800, snapshotIntervalS: 3600 });
    await sbx.files.write('/root/one.txt', 'before the rotation');
    // The gateway seals this snapshot's chunks with version 1, handed out by the node API under the HSM's wrap.
    const s1 = await sbx.snapshot();
    const rotated = await call(replica(0), 'POST', `/v1/tenants/${t.id}/keys/rotate`, cluster.adminKey, {});
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    expect(rotated.body.currentVersion).toBe(2);
    expect((await call(replica(1), 'GET', `/v1/tenants/${t.id}/keys`, cluster.adminKey)).body.currentVersion).toBe(2);
    await sbx.files.write('/root/two.txt', 'after the rotation');
    // The gateway trusts the version it was told for 5 s (RemoteKeys' version cache): past that, captures use version 2.
    await new Promise((r) => setTimeout(r, 6_000));
    await sbx.snapshot();
    // Both versions in the shared store, each blob sealed under the version it names; none was rewritten.
    expect(sealedVersions(t.id)).toEqual(new Set([1, 2]));
    // A fork of the first snapshot opens version-1 data after the rotation, through the node API's versioned keys.
    const [fork] = await Sandbox.fork(s1.id, { apiUrl: replica(1), apiKey: t.key, timeoutS: 1800 });
    expect((await fork!.commands.run('cat /root/one.txt; test -e /root/two.txt || echo .')).stdout).toBe('before the rotation.\n');
    await fork!.kill();
    expect((await sbx.commands.run('cat /root/one.txt /root/two.txt')).stdout).toBe('before the rotationafter the rotation');
  });

  it('a revocation on one replica stops the tenant on the gateway at once; boots through the other answer key_revoked', async () => {
    const revoked = await call(replica(0), 'POST', `/v1/tenants/${t.id}/keys/revoke`, cluster.adminKey, {});
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
    // The replica told the gateway before answering: the sandbox was stopped and wiped by then.
    expect(revoked.body.stoppedSandboxes).toEqual([sbx.id]);
    const gatewayHome = cluster.gatewayInfo.get('n1')!.home;
    expect(existsSync(join(gatewayHome, 'run', sbx.id))).toBe(false);
    await waitFor(async () => (await stateOf(sbx.id, t.key)) === 'failed', 60_000, 'the revoked sandbox was not recorded failed');
    const created = await call(replica(1), 'POST', '/v1/sandboxes', t.key, { timeoutS: 600 });
    expect([created.status, created.body?.error?.code]).toEqual([403, 'key_revoked']);
    const status = await call(replica(1), 'GET', `/v1/tenants/${t.id}/keys`, cluster.adminKey);
    expect(status.body).toMatchObject({ revoked: true });
    // Another tenant on the same gateway runs on.
    expect((await otherSbx.commands.run('echo still here')).stdout).toBe('still here\n');
    // The gateway's wipe report reaches the shared log through the node API: the one tenant event about no sandbox a node may write.
    const { db, close } = await openDatabase({ url: cluster.dbUrl });
    try {
      const wipes = async () =>
        (
          await db
            .selectFrom('events')
            .select(['sandbox_id', 'data'])
            .where('tenant_id', '=', t.id)
            .where('type', '=', 'tenant.plaintext_wiped')
            .orderBy('seq')
            .execute()
        ).map((r) => ({ sandboxId: r.sandbox_id, data: JSON.parse(r.data) as { trigger: string; stoppedSandboxes: string[] } }));
      await waitFor(async () => (await wipes()).length > 0, 30_000, "the gateway's wipe report did not reach the log");
      // The gateway's key poll may see the revocation (the node API answers key_revoked) before the replica's call
      // arrives: then that one run is recorded as the provider's. Either way it is one wipe that stopped this sandbox.
      const [wipe] = await wipes();
      expect(wipe).toMatchObject({ sandboxId: null, data: { stoppedSandboxes: [sbx.id] } });
      expect(['api', 'provider']).toContain(wipe!.data.trigger);
    } finally {
      await close();
    }
    // One replica reclaims the revoked tenant's blobs from the shared store once its retention (0 here) is over.
    await waitFor(() => sealedVersions(t.id).size === 0, 120_000, "the revoked tenant's store was not reclaimed");
  });

  it('a sandbox lost with its node while its key is gone from the HSM is not brought back: it fails key_revoked', async () => {
    const f = await tenant('byok-cluster-f');
    expect((await call(replica(0), 'PUT', `/v1/tenants/${f.id}/keys`, cluster.adminKey, pkcs11('kek-f'))).status).toBe(200);
    const lost = await Sandbox.create({ apiUrl: replica(1), apiKey: f.key, timeoutS: 1800, snapshotIntervalS: 3600 });
    await lost.snapshot();
    // The other tenant's sandbox has a snapshot too: with no node left to take it, it waits to be moved instead.
    await otherSbx.snapshot();
    await cluster.killGateway('n1');
    // Deleted on the token directly, with no API call and no gateway left to poll.
    hsm.deleteKey(TOKEN, 'kek-f');
    await waitFor(async () => (await stateOf(lost.id, f.key)) === 'failed', 120_000, 'the lost sandbox was not failed');
    const events = await call(cluster.apiUrl, 'GET', `/v1/sandboxes/${lost.id}/events?type=sandbox.failed`, f.key);
    expect(events.body.events.map((e: { data: { code: string } }) => e.data.code)).toEqual(['key_revoked']);
    // The failover round asked the provider, not only the capacity: the keyring tenant's sandbox is still to be moved.
    expect(await stateOf(otherSbx.id, other.key)).toBe('running');
  });
});

/** Data key versions that sealed the tenant's chunks and manifests in the S3 server's files (s3rver keeps each object as a file). */
function sealedVersions(tenantId: string): Set<number> {
  const out = new Set<number>();
  // The S3 server deletes files and emptied directories while a purge runs: what vanished mid-walk is simply gone.
  const gone = (err: unknown) => (err as NodeJS.ErrnoException).code === 'ENOENT';
  const walk = (d: string) => {
    let entries: Dirent[];
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch (err) {
      if (gone(err)) return;
      throw err;
    }
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if ((p.includes(`/chunks/${tenantId}/`) || p.includes(`/manifests/${tenantId}/`)) && e.name.endsWith('._S3rver_object')) {
        let head: Buffer;
        try {
          head = readFileSync(p).subarray(0, 5);
        } catch (err) {
          if (gone(err)) continue;
          throw err;
        }
        // The chunk store's framing: a bare seal (format byte 1) is version 1; 0x80 and a u32 name a later version.
        if (head[0] === 0x80) out.add(head.readUInt32BE(1));
        else if (head[0] === 1) out.add(1);
      }
    }
  };
  walk(join(dir, 's3'));
  return out;
}
