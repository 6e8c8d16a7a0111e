// Issue 14, bring your own key, with real VMs and SoftHSM2: rotation keeps old data readable without rewriting it; a
// revocation (by API, or by deleting the key on the token) stops the tenant, wipes its plaintext and leaves nothing readable.
import { createHash, hkdfSync } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '@sandglass/db';
import { unseal } from '@sandglass/kms';
import { Sandbox, TenantKeys } from '@sandglass/sdk';
import { softHsm, type SoftHsm } from '@sandglass/kms/softhsm-fixture';
import { adminKey, api, apiUrl, checkResponsesAgainstSpec, home } from './helpers.js';

checkResponsesAgainstSpec();

const run = Date.now().toString(36);
/** The operator: only its key manages tenants' keys. */
const operator = { apiUrl, apiKey: adminKey };
const TOKEN = `byok-${run}`;
/** The server's tmpfs directory of RAM files and snapshot images (gateway ram.ts). */
const shm = join('/dev/shm', `sandglass-${createHash('sha256').update(home).digest('hex').slice(0, 12)}`);

let hsm: SoftHsm;
const made: Sandbox[] = [];

async function tenant(label: string): Promise<{ id: string; key: string }> {
  const t = await api('POST', '/v1/tenants', { body: { name: `byok-${label}-${run}` } });
  expect(t.status, JSON.stringify(t.body)).toBe(201);
  const admin = await api('POST', `/v1/tenants/${t.body!.id}/api-keys`, { body: { role: 'admin' } });
  expect(admin.status).toBe(201);
  return { id: t.body!.id, key: admin.body!.key };
}

function usePkcs11(tenantId: string, key: string) {
  return TenantKeys.use(tenantId, { provider: 'pkcs11', module: hsm.module, token: TOKEN, key, pinFile: hsm.pinFile }, operator);
}

async function create(apiKey: string): Promise<Sandbox> {
  const s = await Sandbox.create({ apiUrl, apiKey, timeoutS: 1800, snapshotIntervalS: 3600 });
  made.push(s);
  return s;
}

/** Every file under a directory, with the sha256 of its bytes. */
function filesUnder(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  if (!existsSync(dir)) return out;
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.set(p, createHash('sha256').update(readFileSync(p)).digest('hex'));
    }
  };
  walk(dir);
  return out;
}

/** The node's plaintext of these sandboxes and snapshots: RAM files, run directories (overlays), cached snapshot images. */
function plaintextOf(sandboxIds: string[], snapshotIds: string[]): string[] {
  const names = existsSync(shm) ? readdirSync(shm) : [];
  const ram = names.filter((n) => sandboxIds.some((id) => n === `${id}.mem`) || snapshotIds.some((id) => n === `snap-${id}.img`));
  const run = sandboxIds.filter((id) => existsSync(join(home, 'run', id)));
  return [...ram.map((n) => join(shm, n)), ...run.map((id) => join(home, 'run', id))];
}

async function stateOf(id: string, apiKey: string): Promise<string> {
  return (await api('GET', `/v1/sandboxes/${id}`, { key: apiKey })).body!.state as string;
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting until ${what}`);
}

beforeAll(() => {
  // The server (tests/global-setup.ts) reads the same token store, and loads the module only at its first use: after this.
  hsm = softHsm([TOKEN], { dir: join(home, 'softhsm') });
  for (const label of ['kek-t', 'kek-h']) hsm.createKey(TOKEN, label);
});
afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
});

describe('a tenant on PKCS#11', () => {
  let t: { id: string; key: string };
  let other: { id: string; key: string };
  let a: Sandbox;
  let fork: Sandbox;
  let paused: Sandbox;
  let otherSbx: Sandbox;
  let s1: string;
  let s2: string;
  let pausedSnap: string;

  it('registers its key, and rotation keeps data before and after readable without rewriting a chunk', async () => {
    t = await tenant('t');
    other = await tenant('other');
    // Only the operator manages keys: a module is code the server loads. A tenant's own admin is refused, changing nothing.
    for (const [method, path, body] of [
      ['PUT', `/v1/tenants/${t.id}/keys`, { provider: 'pkcs11', module: '/tmp/evil.so', token: TOKEN, key: 'kek-t', pinFile: hsm.pinFile }],
      ['GET', `/v1/tenants/${t.id}/keys`, undefined],
      ['POST', `/v1/tenants/${t.id}/keys/revoke`, undefined],
    ] as const) {
      const r = await api(method, path, { key: t.key, body });
      expect([r.status, r.body?.error?.code], path).toEqual([403, 'permission_denied']);
    }
    const relative = await api('PUT', `/v1/tenants/${t.id}/keys`, {
      body: { provider: 'pkcs11', module: 'libsofthsm2.so', token: TOKEN, key: 'kek-t', pinFile: hsm.pinFile },
    });
    expect([relative.status, relative.body?.error?.details?.field]).toEqual([400, 'module']);
    const st = await usePkcs11(t.id, 'kek-t');
    expect(st).toMatchObject({ provider: 'pkcs11', currentVersion: 1, revoked: false, pkcs11: { token: TOKEN, key: 'kek-t' } });
    a = await create(t.key);
    await a.files.write('/root/one.txt', 'written before the rotation');
    s1 = (await a.snapshot()).id;
    const chunksDir = join(home, 'store', 'chunks', t.id);
    const before = filesUnder(chunksDir);
    expect(before.size).toBeGreaterThan(0);

    const rotated = await TenantKeys.rotate(t.id, operator);
    expect(rotated.currentVersion).toBe(2);
    expect(rotated.versions.map((v) => v.version)).toEqual([1, 2]);
    await a.files.write('/root/two.txt', 'written after the rotation');
    s2 = (await a.snapshot()).id;
    const after = filesUnder(chunksDir);
    // Every chunk stored before is still there, byte for byte; new ones are sealed under version 2.
    for (const [path, sha] of before) expect(after.get(path), path).toBe(sha);
    const added = [...after.keys()].filter((p) => !before.has(p));
    expect(added.length).toBeGreaterThan(0);
    // The capture opened the store after the rotation: its new chunks and its manifest are sealed under version 2.
    // (The sandbox's input recording keeps the store it opened at create, and with it version 1, until it ends.)
    const v2 = (p: string) => [...readFileSync(p).subarray(0, 5)].join() === [0x80, 0, 0, 0, 2].join();
    expect(added.filter(v2).length).toBeGreaterThan(0);
    expect(v2(join(home, 'store', 'manifests', t.id, s2))).toBe(true);
    expect(v2(join(home, 'store', 'manifests', t.id, s1))).toBe(false);

    // A fork of the snapshot after the rotation reads chunks of both versions.
    fork = (await Sandbox.fork(s2, { apiUrl, apiKey: t.key, timeoutS: 1800 }))[0]!;
    made.push(fork);
    expect((await fork.commands.run('cat /root/one.txt /root/two.txt')).stdout).toBe('written before the rotationwritten after the rotation');
    const status = await TenantKeys.status(t.id, operator);
    expect(status.lastUsedAt).not.toBeNull();
  });

  it('revocation while two run and one is paused: both stop, plaintext is wiped, boots answer key_revoked, another tenant runs on', async () => {
    paused = await create(t.key);
    await paused.files.write('/root/p.txt', 'paused data');
    pausedSnap = (await paused.pause()).id;
    const secret = await api('PUT', '/v1/secrets/BYOK_TOKEN', { key: t.key, body: { value: 'byok-secret-value', hosts: ['api.example.test'] } });
    expect(secret.status, JSON.stringify(secret.body)).toBeLessThan(300);
    otherSbx = await create(other.key);
    await otherSbx.files.write('/root/o.txt', 'other tenant');
    const otherSnap = (await otherSbx.snapshot()).id;

    const running = [a.id, fork.id];
    const snaps = [s1, s2, pausedSnap];
    expect(plaintextOf(running, snaps).length).toBeGreaterThan(0);
    const otherPlain = plaintextOf([otherSbx.id], [otherSnap]);
    expect(otherPlain.length).toBeGreaterThan(0);

    // A template of the tenant's is its snapshot, sealed under its key like any other.
    const tpl = await api('POST', '/v1/templates', { key: t.key, body: { name: 'byok-tools', snapshotId: s1 } });
    expect(tpl.status, JSON.stringify(tpl.body)).toBe(201);

    const res = await api('POST', `/v1/tenants/${t.id}/keys/revoke`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect([...res.body!.stoppedSandboxes].sort()).toEqual([...running].sort());
    expect(res.body!.keys).toMatchObject({ revoked: true });

    // The call returns once the node stopped them and wiped their files.
    for (const id of running) expect(await stateOf(id, t.key)).toBe('failed');
    expect(plaintextOf([...running, paused.id], snaps)).toEqual([]);
    // Another tenant is untouched: its sandbox runs and its files are where they were.
    expect((await otherSbx.commands.run('cat /root/o.txt')).stdout).toBe('other tenant');
    for (const p of otherPlain) expect(existsSync(p), p).toBe(true);

    const refused = [
      await api('POST', '/v1/sandboxes', { key: t.key, body: {} }),
      await api('POST', `/v1/sandboxes/${paused.id}/resume`, { key: t.key, body: {} }),
      await api('POST', '/v1/forks', { key: t.key, body: { snapshotId: s1 } }),
      await api('POST', '/v1/sandboxes', { key: t.key, body: { template: 'byok-tools' } }),
    ];
    for (const r of refused) expect([r.status, r.body?.error?.code]).toEqual([403, 'key_revoked']);
    expect(await stateOf(paused.id, t.key)).toBe('paused');
  });

  it('nothing of the tenant decrypts, even with the master key file and the database', async () => {
    const master = readFileSync(join(home, 'keys', 'master.key'));
    // What an operator could try: the master key as a data key, every purpose key derived from it, and any key file left.
    const candidates = [master];
    for (const purpose of ['chunk-id', 'chunk-data', 'manifest', 'secret']) {
      candidates.push(Buffer.from(hkdfSync('sha256', master, Buffer.alloc(0), `sandglass/v1/${t.id}/${purpose}`, 32)));
    }
    expect(existsSync(join(home, 'keys', 'tenants', `${t.id}.key`))).toBe(false);
    expect(readFileSync(join(home, 'keys', 'byok', `${t.id}.json`), 'utf8')).not.toContain('wrapped');
    const blobs = [...filesUnder(join(home, 'store', 'chunks', t.id)).keys(), ...filesUnder(join(home, 'store', 'manifests', t.id)).keys()].map((p) => {
      const b = readFileSync(p);
      return b[0] === 0x80 ? b.subarray(5) : b;
    });
    const { db, close } = await openDatabase({ url: `sqlite:${join(home, 'sandglass.db')}` });
    try {
      for (const row of await db.selectFrom('secrets').select('value_sealed').where('tenant_id', '=', t.id).execute()) {
        blobs.push(Buffer.from(row.value_sealed.replace(/^k\d+\./, ''), 'base64'));
      }
    } finally {
      await close();
    }
    expect(blobs.length).toBeGreaterThan(3);
    let opened = 0;
    for (const blob of blobs) {
      for (const key of candidates) {
        try {
          unseal(key, blob);
          opened++;
        } catch {
          // Expected: authentication fails.
        }
      }
    }
    expect(opened).toBe(0);
    // And through the product: the snapshots' manifests are refused, not served.
    expect((await api('GET', `/v1/sandboxes/${a.id}/snapshots`, { key: t.key })).status).toBe(200);
    expect((await api('POST', '/v1/forks', { key: t.key, body: { snapshotId: s2 } })).body?.error?.code).toBe('key_revoked');
  });
});

describe('the key deleted on the token, with no API call', () => {
  it('stops the tenant within the poll interval and refuses its boots', async () => {
    const h = await tenant('h');
    await usePkcs11(h.id, 'kek-h');
    const sbx = await create(h.key);
    await sbx.files.write('/root/h.txt', 'hsm tenant');
    const snap = (await sbx.snapshot()).id;
    expect(plaintextOf([sbx.id], [snap]).length).toBeGreaterThan(0);

    hsm.deleteKey(TOKEN, 'kek-h');
    await until('the node stops the sandbox', async () => (await stateOf(sbx.id, h.key)) !== 'running');
    expect(await stateOf(sbx.id, h.key)).toBe('failed');
    await until('its plaintext is wiped', async () => plaintextOf([sbx.id], [snap]).length === 0);
    const r = await api('POST', '/v1/sandboxes', { key: h.key, body: {} });
    expect([r.status, r.body?.error?.code]).toEqual([403, 'key_revoked']);
    const f = await api('POST', '/v1/forks', { key: h.key, body: { snapshotId: snap } });
    expect(f.body?.error?.code).toBe('key_revoked');
    // Not an operator revocation: the registration still holds its wrapped keys, useless without the token's key.
    expect((await TenantKeys.status(h.id, operator)).revoked).toBe(false);
    expect(statSync(join(home, 'keys', 'byok', `${h.id}.json`)).size).toBeGreaterThan(0);
  });
});
