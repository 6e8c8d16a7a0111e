// A custom template's warm pool against real VMs: a create from it is a hand-over of a VM restored from the version's
// snapshot (pooled: true) with the template's files and the request's own envs and network; never another tenant's;
// drained (no QEMU left) by a revocation of the tenant's key and by the template's deletion; bad sizes refused; a
// published template's pool serving another tenant.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { OwnServer, type OwnServerInfo } from './own-server.js';

// Its own server: the base template's warm pool is off there, so every `pool_…` VM of its home is a template pool's.
const server = new OwnServer('template-pool');
let own: OwnServerInfo;
const made: Sandbox[] = [];
const run = Date.now().toString(36);

async function call(method: string, path: string, key: string, body?: unknown): Promise<{ status: number; body: Record<string, any> | undefined }> {
  const res = await fetch(`${own.apiUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, any>) : undefined };
}

async function newTenant(label: string): Promise<{ id: string; key: string }> {
  const tenant = await call('POST', '/v1/tenants', own.apiKey, { name: `${label}-${run}` });
  expect(tenant.status).toBe(201);
  const key = await call('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, own.apiKey, {});
  expect(key.status).toBe(201);
  return { id: tenant.body!.id as string, key: key.body!.key as string };
}

/**
 * The pooled VMs running now: those named `sandglass-pool_…` (QEMU, and its jailer before the exec) whose run directory
 * is in this server's home.
 */
function poolVms(): string[] {
  const out = new Set<string>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    const name = argv.find((a) => a.startsWith('sandglass-pool_'));
    if (name === undefined || !argv.includes('-name')) continue;
    const id = name.slice('sandglass-'.length);
    if (existsSync(join(server.home, 'run', id))) out.add(id);
  }
  return [...out].sort();
}

/** Which of these VMs still has a QEMU, whatever its run directory. */
function running(ids: string[]): string[] {
  const names = new Set(ids.map((id) => `sandglass-${id}`));
  const out = new Set<string>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      for (const a of readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')) if (names.has(a)) out.add(a);
    } catch {
      // Gone meanwhile.
    }
  }
  return [...out].sort();
}

/** Warmed VMs of the template ready now, as the public API reports them (its node's count: one still warming is not). */
async function ready(name: string, key = owner.key): Promise<number> {
  const res = await call('GET', `/v1/templates/${name}`, key);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body?.template.warmPoolReady as number;
}

async function until<T>(what: string, f: () => T | undefined | Promise<T | undefined>, timeoutMs = 300_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const cfg = (key: string) => ({ apiUrl: own.apiUrl, apiKey: key });
const startedOf = async (s: Sandbox) => (await s.events()).find((e) => e.type === 'sandbox.started')!.data as { pooled: boolean; vmId: string };

/** A template of the tenant's: a snapshot of a sandbox with a file in it, promoted (the cheapest build there is); its build sandbox's id. */
async function publish(key: string, name: string): Promise<string> {
  const b = await Sandbox.create({ ...cfg(key), timeoutS: 1800, snapshotIntervalS: 3600 });
  made.push(b);
  await b.files.write('/root/from-template.txt', 'written by the build');
  const snap = await b.snapshot();
  const published = await call('POST', '/v1/templates', key, { name, snapshotId: snap.id, envs: { FROM: 'template' } });
  expect(published.status, JSON.stringify(published.body)).toBe(201);
  await b.kill();
  return b.id;
}

let owner: { id: string; key: string };
let stranger: { id: string; key: string };
const NAME = `pooled-${run}`;

beforeAll(async () => {
  own = await server.up();
  owner = await newTenant('pool-owner');
  stranger = await newTenant('pool-stranger');
  await publish(owner.key, NAME);
}, 600_000);

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
  await server.dispose();
});

describe('template warm pools', () => {
  it('refuses bad sizes naming the field, the platform template, and another tenant', async () => {
    for (const warmPoolSize of [-1, 9, 1.5, '2']) {
      const r = await call('PATCH', `/v1/templates/${NAME}`, owner.key, { warmPoolSize });
      expect([r.status, r.body?.error.code], JSON.stringify(r.body)).toEqual([400, 'invalid_argument']);
      expect(JSON.stringify(r.body?.error)).toContain('warmPoolSize');
    }
    expect((await call('GET', `/v1/templates/${NAME}`, owner.key)).body?.template).toMatchObject({ warmPoolSize: 0, warmPoolReady: 0 });
    expect((await call('PATCH', '/v1/templates/base', owner.key, { warmPoolSize: 1 })).status).toBe(403);
    expect((await call('PATCH', `/v1/templates/${NAME}`, stranger.key, { warmPoolSize: 1 })).body?.error.code).toBe('template_not_found');
    expect(poolVms()).toEqual([]);
  });

  it('a create from it is a hand-over with its files and its own envs and network, at most once; another tenant never gets it', async () => {
    const set = await call('PATCH', `/v1/templates/${NAME}`, owner.key, { warmPoolSize: 1 });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body).toMatchObject({ name: NAME, warmPoolSize: 1 });
    const pooled = await until('the pool to fill', async () => ((await ready(NAME)) === 1 ? poolVms() : undefined));
    expect(pooled).toHaveLength(1);

    // The stranger cannot name the owner's template, and a create of theirs takes no pooled VM.
    const theirs = await call('POST', '/v1/sandboxes', stranger.key, { template: NAME });
    expect(theirs.body?.error.code).toBe('template_not_found');
    const base = await Sandbox.create({ ...cfg(stranger.key), timeoutS: 600 });
    made.push(base);
    expect(await startedOf(base)).toMatchObject({ pooled: false, vmId: base.id });
    expect(poolVms()).toEqual(pooled);

    const s = await Sandbox.create({ ...cfg(owner.key), template: NAME, timeoutS: 600, envs: { OWN: 'mine' }, network: { allow: ['example.com'] } });
    made.push(s);
    expect(await startedOf(s)).toMatchObject({ pooled: true, vmId: pooled[0] });
    expect((await s.commands.run('cat /root/from-template.txt')).stdout).toBe('written by the build');
    expect((await s.commands.run('echo "$FROM $OWN"')).stdout.trim()).toBe('template mine');
    const forked = (await s.events()).find((e) => e.type === 'sandbox.forked')!.data as { network: { allow?: string[] } | null };
    expect(forked.network?.allow).toEqual(['example.com']);

    // Handed out once: the next create gets another VM (the refill, or a direct fork), never the same one.
    const again = await Sandbox.create({ ...cfg(owner.key), template: NAME, timeoutS: 600 });
    made.push(again);
    expect((await startedOf(again)).vmId).not.toBe(pooled[0]);
    expect((await again.commands.run('cat /root/from-template.txt')).stdout).toBe('written by the build');
  });

  it('a restarted server keeps the pool; deleting the template drains it: no QEMU of it is left', async () => {
    await until('the pool to refill', async () => ((await ready(NAME)) === 1 ? true : undefined));
    // The size lives in the database: the control plane sends it again as it starts, and the new node fills it.
    await server.down();
    expect(poolVms()).toEqual([]);
    own = await server.up();
    const vms = await until('the pool to fill again', async () => ((await ready(NAME)) === 1 ? poolVms() : undefined));
    expect(vms).toHaveLength(1);
    expect((await call('GET', `/v1/templates/${NAME}`, owner.key)).body?.template.warmPoolSize).toBe(1);
    const del = await call('DELETE', `/v1/templates/${NAME}`, owner.key);
    expect(del.status).toBe(204);
    expect(running(vms)).toEqual([]);
    expect(poolVms()).toEqual([]);
  });

  it("a published template's pool serves another tenant, whose sandbox then captures under its own key alone", async () => {
    const name = `published-${run}`;
    await publish(own.apiKey, name);
    expect((await call('PATCH', `/v1/templates/${name}`, own.apiKey, { public: true, warmPoolSize: 1 })).body).toMatchObject({ public: true, warmPoolSize: 1 });
    const pooled = await until('the pool to fill', async () => ((await ready(name, own.apiKey)) === 1 ? poolVms() : undefined));
    // The other tenant sees how ready the platform's pool is, and its create takes the pooled VM.
    expect(await ready(name, stranger.key)).toBe(1);
    const s = await Sandbox.create({ ...cfg(stranger.key), template: name, timeoutS: 600, snapshotIntervalS: 3600 });
    made.push(s);
    expect(await startedOf(s)).toMatchObject({ pooled: true, vmId: pooled[0] });
    expect((await s.commands.run('cat /root/from-template.txt')).stdout).toBe('written by the build');
    const snap = await s.snapshot();
    expect(snap.parentId).toBeNull();
    const [fork] = await Sandbox.fork(snap.id, { ...cfg(stranger.key), timeoutS: 600 });
    made.push(fork!);
    expect((await fork!.commands.run('cat /root/from-template.txt')).stdout).toBe('written by the build');
    await Promise.all([s.kill(), fork!.kill()]);
    expect((await call('DELETE', `/v1/templates/${name}`, own.apiKey)).status).toBe(204);
  });

  it("a revocation of the tenant's key drains the tenant's pools", async () => {
    const t = await newTenant('pool-revoked');
    const name = `revoked-${run}`;
    await publish(t.key, name);
    expect((await call('PATCH', `/v1/templates/${name}`, t.key, { warmPoolSize: 2 })).status).toBe(200);
    const vms = await until('the pool to fill', async () => ((await ready(name, t.key)) === 2 ? poolVms() : undefined));
    expect(vms).toHaveLength(2);
    const res = await call('POST', `/v1/tenants/${t.id}/keys/revoke`, own.apiKey);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(running(vms)).toEqual([]);
    for (const id of vms) expect(existsSync(join(server.home, 'run', id))).toBe(false);
  });
  it("revoking the publisher's key stops creates from its published template; another tenant's own snapshots still restore", async () => {
    const name = `publisher-revoked-${run}`;
    const built = await publish(own.apiKey, name);
    const operatorTenant = (await call('GET', `/v1/sandboxes/${built}`, own.apiKey)).body!.tenantId as string;
    expect((await call('PATCH', `/v1/templates/${name}`, own.apiKey, { public: true })).status).toBe(200);
    const s = await Sandbox.create({ ...cfg(stranger.key), template: name, timeoutS: 600, snapshotIntervalS: 3600 });
    made.push(s);
    const snap = await s.snapshot();
    await s.kill();
    expect((await call('POST', `/v1/tenants/${operatorTenant}/keys/revoke`, own.apiKey)).status).toBe(200);
    // Refused for everyone, without naming the publisher's tenant.
    const refused = await call('POST', '/v1/sandboxes', stranger.key, { template: name });
    expect(refused.body?.error.code, JSON.stringify(refused.body)).toBe('key_revoked');
    expect(JSON.stringify(refused.body)).not.toContain(operatorTenant);
    // The other tenant's snapshot is sealed under its own key alone.
    const [fork] = await Sandbox.fork(snap.id, { ...cfg(stranger.key), timeoutS: 600 });
    made.push(fork!);
    expect((await fork!.commands.run('cat /root/from-template.txt')).stdout).toBe('written by the build');
  });
});
