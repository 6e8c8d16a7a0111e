// Templates in the chunk store: `up` publishes its template; a second node with an empty template cache materializes
// that one (no boot) and resumes the first node's snapshots on it.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { ChunkStore, LocalDiskBackend } from '@sandglass/chunkstore';
import { createLogger, homeLayout, newId, systemClock } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { dbTemplateRegistry, DEFAULT_TENANT } from '@sandglass/control-plane';
import { BASE_TEMPLATE, Gateway, TEMPLATE_TENANT, type GatewayEvent } from '@sandglass/gateway';
import { defaultKernelArgs, ensureGuestImage } from '@sandglass/images';
import { LocalKeyring } from '@sandglass/kms';
import { DEFAULT_RETENTION, parseManifestBody, type ManifestBody } from '@sandglass/snapshots';
import type { AgentClient } from '@sandglass/agent-client';
import { config, home } from './helpers.js';

const layoutA = homeLayout(home);
// Node B: its own home whose artifacts are only the guest image's parts (links to the suite's), no template-*.
const homeB = mkdtempSync(join(tmpdir(), 'sg-tplstore-'));
let database: Database;
let gatewayB: Gateway | undefined;
const eventsB: GatewayEvent[] = [];

/** The base template `up` published: its registry record and the manifest that record names. */
async function published(): Promise<{ key: string; snapshotId: string; m: ManifestBody }> {
  // The base template's own shape, newest first: the sizes test publishes other shapes under the name base, and a
  // reused test home keeps the templates of earlier agent or image builds.
  const rows = await database.db.selectFrom('template_snapshots').selectAll().orderBy('created_at', 'desc').execute();
  const base = rows.find((r) => {
    const built = JSON.parse(readFileSync(join(layoutA.artifacts, `template-${r.key}`, 'template.json'), 'utf8'));
    return built.name === BASE_TEMPLATE.name && built.config?.memoryMib === BASE_TEMPLATE.memoryMib && built.config?.vcpus === BASE_TEMPLATE.vcpus;
  });
  expect(base, 'the registry has the base template').toBeDefined();
  const store = new ChunkStore({ backend: new LocalDiskBackend(layoutA.store), keys: new LocalKeyring({ dir: layoutA.keys }) });
  const { body } = await (await store.tenant(base!.tenant_id)).getManifest(base!.snapshot_id);
  return { key: base!.key, snapshotId: base!.snapshot_id, m: parseManifestBody(body) };
}

/** Runs argv in the guest to its exit, as the gateway's own commands do. */
async function runInGuest(agent: AgentClient, argv: string[]): Promise<number | null> {
  const id = `tpl_${randomBytes(6).toString('hex')}`;
  const exited = new Promise<number | null>((resolve) => {
    const onEvent = (ev: { event: string; id?: string; exitCode?: unknown }) => {
      if (ev.event !== 'proc.exit' || ev.id !== id) return;
      agent.off('event', onEvent);
      resolve(ev.exitCode as number | null);
    };
    agent.on('event', onEvent);
  });
  await agent.procStart({ id, argv, env: {}, stdin: false });
  return exited;
}

beforeAll(async () => {
  database = await openDatabase({ url: `sqlite:${layoutA.database}` });
  mkdirSync(join(homeB, 'artifacts'), { recursive: true });
  for (const name of readdirSync(layoutA.artifacts)) {
    if (name.startsWith('template-') || name === 'accel.json') continue;
    symlinkSync(join(layoutA.artifacts, name), join(homeB, 'artifacts', name));
  }
});

afterAll(async () => {
  await gatewayB?.shutdown();
  if (gatewayB) rmSync(gatewayB.ram.root, { recursive: true, force: true });
  await database?.close();
  rmSync(homeB, { recursive: true, force: true });
});

describe('templates in the chunk store', () => {
  it('up publishes its base template: the registry names it and its manifest is in the store, disk flattened', async () => {
    const { key, m } = await published();
    expect(m).toMatchObject({ reason: 'template', tenantId: TEMPLATE_TENANT, vm: { templateKey: key, template: 'base' }, template: { key, name: 'base' } });
    expect(m.disk.base).toBe('');
    // The root image's data is in it, not just the template's overlay: far more than the boot wrote.
    expect(m.disk.clusters.length * 64 * 1024).toBeGreaterThan(100 * 1024 * 1024);
  });

  it("a node with no template cache resumes another node's snapshot on the registry's template, materialized, never booted", async () => {
    const { key, m } = await published();
    // On node A (the suite's server): a file, then a snapshot of it.
    const src = await Sandbox.create({ ...config(), snapshotIntervalS: 86400 });
    const marker = randomBytes(8).toString('hex');
    await src.files.write('/root/marker', marker);
    const snap = await src.snapshot();
    await src.kill();
    const tenant = await database.db.selectFrom('tenants').select('id').where('name', '=', DEFAULT_TENANT).executeTakeFirstOrThrow();

    const image = await ensureGuestImage({ home: homeB });
    const progress: string[] = [];
    gatewayB = new Gateway({
      home: homeLayout(homeB),
      image,
      kernelArgs: defaultKernelArgs().join(' '),
      events: { append: async (e) => void eventsB.push(e) },
      nodeSecret: randomBytes(32),
      clock: systemClock,
      logger: createLogger('node-b', 'warn'),
      // The shape the template was built for: the same key on both nodes.
      accel: { accel: m.template!.config.accel, cpu: m.template!.config.cpu!, reason: 'as node A', attempts: [], cached: true },
      warmPoolSize: 0,
      store: new ChunkStore({ backend: new LocalDiskBackend(layoutA.store), keys: new LocalKeyring({ dir: layoutA.keys }) }),
      templateRegistry: { registry: dbTemplateRegistry(database.db), nodeId: 'node-b' },
      snapshotIndex: { all: async () => [], thinnable: async () => false },
      retention: DEFAULT_RETENTION,
      secrets: { resolve: async () => Promise.reject(new Error('node B resolves no secrets')) },
    });
    expect(existsSync(join(homeB, 'artifacts', `template-${key}`))).toBe(false);

    // (c) A's snapshot on B: its template is fetched from the store on the way, and A's file is there, intact.
    const forkId = newId('sbx');
    const fork = await gatewayB.restoreSandbox({ id: forkId, tenantId: tenant.id, snapshotId: snap.id, timeoutS: 300 }, 'fork');
    expect((await fork.requireRunning().readFileCapped('/root/marker', 1024)).toString()).toBe(marker);
    expect(await runInGuest(fork.requireRunning(), ['/bin/sh', '-c', 'test "$(cat /root/marker)" = ' + marker])).toBe(0);
    await gatewayB.killSandbox(forkId);

    // (b) B's base template is the one it materialized: no boot, the build's own record (bootMs) carried over.
    const builtOnA = JSON.parse(readFileSync(join(layoutA.artifacts, `template-${key}`, 'template.json'), 'utf8'));
    const t = await gatewayB.ensureBaseTemplate((p) => progress.push(p.message ?? ''));
    expect(t.key).toBe(key);
    expect(t.materializeMs).toBeGreaterThan(0);
    expect(t.bootMs).toBe(builtOnA.bootMs);
    expect(t.createdAt).toBe(builtOnA.createdAt);
    expect(progress.filter((p) => p.startsWith('booting'))).toEqual([]);
    console.log(`[templates] node B materialized template ${key} in ${Math.round(t.materializeMs!)} ms; node A booted it in ${Math.round(builtOnA.bootMs)} ms`);

    // A sandbox created on B from it runs a command.
    const id = newId('sbx');
    const sbx = await gatewayB.createSandbox({ id, tenantId: tenant.id, template: 'base', memoryMib: 256, vcpus: 1, timeoutS: 300 });
    expect(await runInGuest(sbx.requireRunning(), ['/bin/sh', '-c', 'echo hello > /root/b && sync'])).toBe(0);
    expect((await sbx.requireRunning().readFileCapped('/root/b', 64)).toString()).toBe('hello\n');
    await gatewayB.killSandbox(id);
  });
});
