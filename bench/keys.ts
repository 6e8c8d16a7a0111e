// What a tenant's key provider adds to a create and a fork: a keyring tenant and a PKCS#11 tenant (SoftHSM2) on one
// server, alternating operation by operation so both see the same host load.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalKeyring, TenantKeys as Providers } from '@sandglass/kms';
import { Sandbox, TenantKeys } from '@sandglass/sdk';
import { softHsm } from '@sandglass/kms/softhsm-fixture';

export interface KeysBenchRow {
  what: string;
  samplesMs: number[];
  note: string;
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

/** A tenant made by the operator, with an admin key of its own. */
async function tenant(apiUrl: string, operatorKey: string, name: string): Promise<{ id: string; key: string }> {
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${apiUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${operatorKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as Record<string, string>;
  };
  const t = await post('/v1/tenants', { name });
  const admin = await post(`/v1/tenants/${t.id}/api-keys`, { role: 'admin' });
  return { id: t.id!, key: admin.key! };
}

/**
 * `home` is the server's own (this process runs it): the SoftHSM2 token store goes under it before the server first
 * loads the module. Run with the warm pool off, so every create restores from the template and asks the provider.
 */
export async function keysBench(opts: { apiUrl: string; apiKey: string; home: string; quick: boolean }): Promise<KeysBenchRow[]> {
  const token = `bench-${Date.now().toString(36)}`;
  const hsm = softHsm([token], { dir: join(opts.home, 'softhsm') });
  hsm.createKey(token, 'bench-kek');
  const operator = { apiUrl: opts.apiUrl, apiKey: opts.apiKey };
  const stamp = Date.now().toString(36);
  const keyring = await tenant(opts.apiUrl, opts.apiKey, `bench-keyring-${stamp}`);
  const pkcs11 = await tenant(opts.apiUrl, opts.apiKey, `bench-pkcs11-${stamp}`);
  await TenantKeys.use(pkcs11.id, { provider: 'pkcs11', module: hsm.module, token, key: 'bench-kek', pinFile: hsm.pinFile }, operator);
  const n = opts.quick ? 2 : 6;
  const samples = { createKeyring: [] as number[], createPkcs11: [] as number[], forkKeyring: [] as number[], forkPkcs11: [] as number[] };
  const alive: Sandbox[] = [];
  try {
    const sources: Record<'keyring' | 'pkcs11', string> = { keyring: '', pkcs11: '' };
    for (const [name, t] of [
      ['keyring', keyring],
      ['pkcs11', pkcs11],
    ] as const) {
      // Warms each path once (TCG translates each new code path once) and leaves a snapshot to fork.
      const s = await Sandbox.create({ apiUrl: opts.apiUrl, apiKey: t.key, timeoutS: 1800, snapshotIntervalS: 3600 });
      alive.push(s);
      sources[name] = (await s.snapshot()).id;
    }
    for (let i = 0; i < n; i++) {
      for (const [name, t] of [
        ['keyring', keyring],
        ['pkcs11', pkcs11],
      ] as const) {
        const [createMs, created] = await timed(() => Sandbox.create({ apiUrl: opts.apiUrl, apiKey: t.key, timeoutS: 600 }));
        await created.kill();
        const [forkMs, forks] = await timed(() => Sandbox.fork(sources[name], { apiUrl: opts.apiUrl, apiKey: t.key, timeoutS: 600 }));
        await Promise.all(forks.map((f) => f.kill()));
        if (name === 'keyring') {
          samples.createKeyring.push(createMs);
          samples.forkKeyring.push(forkMs);
        } else {
          samples.createPkcs11.push(createMs);
          samples.forkPkcs11.push(forkMs);
        }
      }
    }
  } finally {
    await Promise.all(alive.map((s) => s.kill().catch(() => undefined)));
  }
  // The provider's own round trip, as every boot makes it (verify: past the cache), in this process.
  const dir = mkdtempSync(join(tmpdir(), 'sg-keys-bench-'));
  const verifyMs = { keyring: [] as number[], pkcs11: [] as number[] };
  try {
    const providers = new Providers({ dir, keyring: new LocalKeyring({ dir }) });
    await providers.use('ten_pkcs11', { provider: 'pkcs11', module: hsm.module, token, key: 'bench-kek', pinFile: hsm.pinFile });
    await providers.verify('ten_keyring');
    for (let i = 0; i < (opts.quick ? 50 : 500); i++) {
      verifyMs.keyring.push((await timed(() => providers.verify('ten_keyring')))[0]);
      verifyMs.pkcs11.push((await timed(() => providers.verify('ten_pkcs11')))[0]);
    }
    await providers.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return [
    { what: 'key check, keyring', samplesMs: verifyMs.keyring, note: 'verify(): the tombstone checked, the cached key' },
    {
      what: 'key check, PKCS#11',
      samplesMs: verifyMs.pkcs11,
      note: "verify(): C_FindObjects + C_UnwrapKey + read + destroy in SoftHSM2, on the provider's worker thread",
    },
    { what: 'create, keyring tenant', samplesMs: samples.createKeyring, note: 'restore from the template (warm pool off)' },
    { what: 'create, PKCS#11 tenant', samplesMs: samples.createPkcs11, note: 'same, plus an unwrap in the HSM before the boot' },
    { what: 'fork, keyring tenant', samplesMs: samples.forkKeyring, note: 'one fork of a snapshot cached on tmpfs' },
    { what: 'fork, PKCS#11 tenant', samplesMs: samples.forkPkcs11, note: 'same, plus an unwrap in the HSM before the boot' },
  ];
}
