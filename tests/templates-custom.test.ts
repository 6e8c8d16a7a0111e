// A tenant's own template against real VMs: a package installed through the build's egress from a repository served on
// loopback, a server started before the snapshot, sandboxes (Sandglass's SDK and E2B's) that wake with both and run as
// the template's user in its workdir, and a template no other tenant can see, use or delete unless the operator
// published it for every tenant.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox as E2bSandbox, Template as E2bTemplate } from 'e2b';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { api, apiUrl, checkResponsesAgainstSpec, config, gatewayUrl } from './helpers.js';

checkResponsesAgainstSpec();

const REPO_PORT = inject('egressUpstreamPorts')[5]!;
const REPO_HOST = `api.example.test:${REPO_PORT}`;
const SERVER_PORT = 8321;
const made: Array<{ kill(): Promise<unknown> }> = [];
let repoDir: string;
let repo: http.Server;
const repoHits: string[] = [];

/**
 * A one-package Debian repository (flat, `deb [trusted=yes] http://host/ ./`) in a temporary directory: the package is
 * made here with dpkg-deb (arch all, one script), so the test needs nothing from a mirror.
 */
function makeRepository(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sg-apt-'));
  const pkg = join(dir, 'pkg');
  mkdirSync(join(pkg, 'DEBIAN'), { recursive: true });
  mkdirSync(join(pkg, 'usr/bin'), { recursive: true });
  writeFileSync(
    join(pkg, 'DEBIAN/control'),
    'Package: sandglass-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Sandglass tests <tests@sandglass.invalid>\nDescription: says hello\n',
  );
  writeFileSync(join(pkg, 'usr/bin/sandglass-hello'), '#!/bin/sh\necho hello from a package\n');
  chmodSync(join(pkg, 'usr/bin/sandglass-hello'), 0o755);
  const deb = join(dir, 'sandglass-hello_1.0_all.deb');
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', pkg, deb], { stdio: 'ignore' });
  rmSync(pkg, { recursive: true });
  const control = execFileSync('dpkg-deb', ['-f', deb]).toString().trimEnd();
  const bytes = readFileSync(deb);
  const stanza = `${control}\nFilename: ./sandglass-hello_1.0_all.deb\nSize: ${statSync(deb).size}\nSHA256: ${createHash('sha256').update(bytes).digest('hex')}\n`;
  writeFileSync(join(dir, 'Packages'), `${stanza}\n`);
  return dir;
}

async function newTenant(label: string): Promise<string> {
  const tenant = await api('POST', '/v1/tenants', { body: { name: `${label}-${Date.now()}` } });
  expect(tenant.status).toBe(201);
  const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: {} });
  expect(key.status).toBe(201);
  return key.body!.key as string;
}

async function sh(s: Sandbox, cmd: string, timeoutMs = 300_000): Promise<{ code: number; out: string }> {
  try {
    const r = await s.commands.run(cmd, { timeoutMs });
    return { code: r.exitCode, out: r.stdout + r.stderr };
  } catch (e) {
    const r = e as { exitCode?: number; stdout?: string; stderr?: string; message?: string };
    return { code: r.exitCode ?? -1, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.exitCode === undefined ? (r.message ?? '') : ''}` };
  }
}

let owner: string;
let stranger: string;
let version: { id: string; name: string; version: number; snapshotId: string };
const NAME = `tools-${Date.now().toString(36)}`;
// What the version keeps of its start command: how it ran, not only what.
const START = {
  cmd: `python3 -m http.server ${SERVER_PORT} --bind 127.0.0.1`,
  user: 'root',
  workdir: '/srv/www',
  ready: { cmd: `curl -sf http://127.0.0.1:${SERVER_PORT}/`, timeoutS: 120, intervalMs: 500 },
};

beforeAll(async () => {
  repoDir = makeRepository();
  repo = http.createServer((req, res) => {
    repoHits.push(req.url ?? '');
    const name = (req.url ?? '/').split('?')[0]!.replace(/^.*\//, '');
    try {
      const body = readFileSync(join(repoDir, name));
      res.writeHead(200, { 'content-length': body.length }).end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => repo.listen(REPO_PORT, '127.0.0.1', resolve));
  owner = await newTenant('templates');
  stranger = await newTenant('templates-other');

  // The build, by hand through the API the SDK's builder uses: a build record, a sandbox, steps, a snapshot, a version.
  const build = await api('POST', '/v1/template-builds', { key: owner, body: { name: NAME } });
  expect(build.status, JSON.stringify(build.body)).toBe(201);
  const again = await api('POST', '/v1/template-builds', { key: owner, body: { name: NAME } });
  expect([again.status, again.body!.error.code, again.body!.error.details.buildId]).toEqual([409, 'template_build_in_progress', build.body!.id]);
  const b = await Sandbox.create({ ...config(owner), timeoutS: 1800, snapshotIntervalS: 3600, network: { allow: [REPO_HOST] } });
  made.push(b);
  const steps = [
    `echo 'deb [trusted=yes] http://${REPO_HOST}/ ./' > /etc/apt/sources.list.d/local.list`,
    'apt-get -q -o Dir::Etc::sourcelist=/etc/apt/sources.list.d/local.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 update',
    'DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends sandglass-hello',
    'mkdir -p /srv/www && echo "served from the template" > /srv/www/index.html',
    'useradd -m worker && chown worker /srv/www',
  ];
  for (const [i, cmd] of steps.entries()) {
    const r = await sh(b, cmd);
    expect(r.code, `step ${i}: ${r.out}`).toBe(0);
    await api('POST', `/v1/template-builds/${build.body!.id}/log`, {
      key: owner,
      body: { lines: [{ stream: 'stdout', text: r.out.slice(-1000) }], step: { index: i, name: cmd.slice(0, 100), status: 'done' } },
    });
  }
  await b.commands.run(`cd /srv/www && exec python3 -m http.server ${SERVER_PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
  let ready = -1;
  for (let i = 0; i < 120 && ready !== 0; i++) ready = (await sh(b, `curl -sf http://127.0.0.1:${SERVER_PORT}/ >/dev/null`)).code;
  expect(ready).toBe(0);
  const snap = await b.snapshot();
  const published = await api('POST', '/v1/templates', {
    key: owner,
    body: {
      name: NAME,
      snapshotId: snap.id,
      envs: { GREETING: 'from the template' },
      user: 'worker',
      workdir: '/srv/www',
      buildId: build.body!.id,
      start: START,
    },
  });
  expect(published.status, JSON.stringify(published.body)).toBe(201);
  expect(published.body).toMatchObject({ user: 'worker', workdir: '/srv/www', start: START });
  version = published.body as typeof version;
  const done = await api('GET', `/v1/template-builds/${build.body!.id}`, { key: owner });
  expect(done.body).toMatchObject({ status: 'ready', versionId: version.id, steps: steps.map((_, index) => ({ index, status: 'done' })) });
  await b.kill();
}, 1_200_000);

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
  await new Promise((r) => repo?.close(r));
  rmSync(repoDir, { recursive: true, force: true });
});

describe('custom templates', () => {
  it('a sandbox from it has the package and the files, its server answers unstarted, and it gets none of the build’s egress', async () => {
    expect(repoHits.some((u) => u.endsWith('.deb'))).toBe(true);
    const s = await Sandbox.create({ ...config(owner), template: NAME, timeoutS: 600 });
    made.push(s);
    expect((await sh(s, 'sandglass-hello')).out).toBe('hello from a package\n');
    expect((await sh(s, `curl -sf http://127.0.0.1:${SERVER_PORT}/index.html`)).out).toBe('served from the template\n');
    expect((await sh(s, 'echo "$GREETING"')).out).toBe('from the template\n');
    // The build could reach the repository; a sandbox that names no network reaches nothing.
    const hits = repoHits.length;
    const denied = await sh(s, `curl -sS -m 20 http://${REPO_HOST}/Packages`);
    expect(denied.out).toMatch(/403|egress_denied/);
    expect(repoHits.length).toBe(hits);
    const info = await api('GET', `/v1/sandboxes/${s.id}`, { key: owner });
    expect(info.body).toMatchObject({ template: NAME });
    const detail = await api('GET', `/v1/templates/${NAME}`, { key: owner });
    expect(detail.body!.versions[0]).toMatchObject({ user: 'worker', workdir: '/srv/www', start: START });
    const listed = await api('GET', '/v1/templates', { key: owner });
    expect(listed.body!.templates).toContainEqual(expect.objectContaining({ name: NAME, custom: true, version: 1, id: version.id }));
    expect(listed.body!.templates).toContainEqual(expect.objectContaining({ name: 'base' }));
  });

  it("runs commands, terminals and relative paths as the template's user in its workdir; a call's own user and cwd win", async () => {
    const s = await Sandbox.create({ ...config(owner), template: NAME, timeoutS: 600 });
    made.push(s);
    expect((await sh(s, 'id -un; pwd')).out).toBe('worker\n/srv/www\n');
    expect((await s.commands.run('id -un; pwd', { user: 'root', cwd: '/tmp' })).stdout).toBe('root\n/tmp\n');
    const out: Uint8Array[] = [];
    const term = await s.pty.create({ cols: 80, rows: 24, cmd: 'id -un; pwd', onData: (d) => void out.push(d) });
    await term.wait();
    expect(Buffer.concat(out).toString('utf8')).toBe('worker\r\n/srv/www\r\n');
    // A relative path is the workdir's, and what a call creates is the user's.
    expect(await s.files.write('notes/plan.txt', 'relative')).toMatchObject({ path: '/srv/www/notes/plan.txt' });
    expect((await sh(s, 'stat -c "%U %n" notes notes/plan.txt; cat notes/plan.txt')).out).toBe('worker notes\nworker notes/plan.txt\nrelative');
    expect(await s.files.read('notes/plan.txt')).toBe('relative');
    expect((await s.files.stat('/srv/www/notes')).type).toBe('dir');
    await expect(s.files.read('../etc/shadow')).rejects.toMatchObject({ code: 'path_outside_sandbox' });
  });

  it('the unmodified E2B SDK creates a sandbox from it by name', async () => {
    process.env.E2B_API_URL = `${apiUrl}/e2b`;
    process.env.E2B_SANDBOX_URL = `${gatewayUrl}/e2b`;
    delete process.env.E2B_DOMAIN;
    const s = await E2bSandbox.create(NAME, { apiKey: owner, timeoutMs: 600_000 });
    made.push(s);
    const r = await s.commands.run('sandglass-hello; echo "$GREETING"; id -un; pwd');
    expect(r.stdout).toBe('hello from a package\nfrom the template\nworker\n/srv/www\n');
    expect((await s.commands.run('id -un; pwd', { user: 'root', cwd: '/tmp' })).stdout).toBe('root\n/tmp\n');
    // Template.exists sees the tenant's own template, and another tenant does not.
    expect(await E2bTemplate.exists(NAME, { apiKey: owner })).toBe(true);
    expect(await E2bTemplate.exists(NAME, { apiKey: stranger })).toBe(false);
  });

  it('its snapshot is template data: not renamed or deleted through /v1/snapshots while a version holds it', async () => {
    const unpin = await api('PATCH', `/v1/snapshots/${version.snapshotId}`, { key: owner, body: { name: null } });
    expect([unpin.status, unpin.body!.error.code]).toEqual([409, 'conflict']);
    const del = await api('DELETE', `/v1/snapshots/${version.snapshotId}`, { key: owner });
    expect([del.status, del.body!.error.code]).toEqual([409, 'conflict']);
    const snap = await api('GET', `/v1/snapshots/${version.snapshotId}`, { key: owner });
    expect(snap.body).toMatchObject({ pinned: true });
  });

  it('another tenant cannot see, create from, publish over or delete it', async () => {
    const list = await api('GET', '/v1/templates', { key: stranger });
    expect(list.body!.templates.map((t: { name: string }) => t.name)).not.toContain(NAME);
    for (const [method, path, body] of [
      ['GET', `/v1/templates/${NAME}`, undefined],
      ['DELETE', `/v1/templates/${NAME}`, undefined],
      ['POST', '/v1/sandboxes', { template: NAME }],
      ['POST', '/v1/sandboxes', { template: version.id }],
    ] as const) {
      const res = await api(method, path, { key: stranger, body });
      expect([res.status, res.body!.error.code], `${method} ${path}`).toEqual([404, 'template_not_found']);
    }
    const steal = await api('POST', '/v1/templates', { key: stranger, body: { name: NAME, snapshotId: version.snapshotId } });
    expect([steal.status, steal.body!.error.code]).toEqual([404, 'snapshot_not_found']);
    const cache = await api('PUT', `/v1/template-cache/${'a'.repeat(64)}`, { key: stranger, body: { snapshotId: version.snapshotId } });
    expect([cache.status, cache.body!.error.code]).toEqual([404, 'snapshot_not_found']);
    expect((await api('GET', `/v1/templates/${NAME}`, { key: owner })).body!.versions).toHaveLength(1);
  });

  it('refuses bad input naming the field, and changes nothing', async () => {
    const before = (await api('GET', '/v1/templates', { key: owner })).body!.templates;
    for (const [body, field, code] of [
      [{ name: 'base', snapshotId: version.snapshotId }, 'name', 'invalid_argument'],
      [{ name: 'Not A Name', snapshotId: version.snapshotId }, 'name', 'invalid_argument'],
      [{ name: `${NAME}-x`, snapshotId: 'snap_aaaaaaaaaaaaaaaaaaaa' }, undefined, 'snapshot_not_found'],
      [{ name: `${NAME}-x`, snapshotId: version.snapshotId, envs: { 'BAD=NAME': '1' } }, 'envs', 'invalid_argument'],
      [{ name: `${NAME}-x`, snapshotId: version.snapshotId, buildId: 'bld_aaaaaaaaaaaaaaaaaaaa' }, 'buildId', 'invalid_argument'],
    ] as const) {
      const res = await api('POST', '/v1/templates', { key: owner, body });
      expect(res.body!.error.code, JSON.stringify(body)).toBe(code);
      if (field !== undefined) expect(res.body!.error.details.field, JSON.stringify(body)).toContain(field);
    }
    const disk = await api('POST', '/v1/sandboxes', { key: owner, body: { template: NAME, diskMib: 4096 } });
    expect([disk.status, disk.body!.error.details.field]).toEqual([400, 'diskMib']);
    const badKey = await api('GET', '/v1/template-cache/not-hex', { key: owner });
    expect(badKey.status).toBe(400);
    expect((await api('GET', '/v1/templates', { key: owner })).body!.templates).toEqual(before);
  });

  it('a compact snapshot leaves freed guest memory out of what it stores', async () => {
    const sizes: Record<string, number> = {};
    for (const compact of [false, true]) {
      const s = await Sandbox.create({ ...config(owner), timeoutS: 600, snapshotIntervalS: 3600 });
      made.push(s);
      // 48 MiB of random bytes held by a process that then exits: freed pages the guest kernel does not zero.
      const held = await sh(s, `python3 -c "import os; b = bytearray(os.urandom(48 << 20)); print(len(b))"`);
      expect(held.out).toBe('50331648\n');
      sizes[String(compact)] = (await s.snapshot({ compact })).sizeAddedBytes;
      expect((await sh(s, 'echo alive')).out).toBe('alive\n');
      await s.kill();
    }
    // Random bytes neither compress nor dedupe: only the zeroing of freed memory keeps them out of the store.
    expect(sizes.true).toBeLessThan(sizes.false! - 32 * 1024 * 1024);
  });

  it("the operator's published template: another tenant lists it, creates from it under its own key, never changes it", async () => {
    const PUB = `published-${Date.now().toString(36)}`;
    process.env.E2B_API_URL = `${apiUrl}/e2b`;
    process.env.E2B_SANDBOX_URL = `${gatewayUrl}/e2b`;
    delete process.env.E2B_DOMAIN;
    // The operator's own template, promoted from a snapshot holding a marker file.
    const src = await Sandbox.create({ ...config(), timeoutS: 600, snapshotIntervalS: 3600 });
    made.push(src);
    await src.files.write('/srv/marker.txt', 'from the platform');
    const snap = await src.snapshot();
    await src.kill();
    const v = await api('POST', '/v1/templates', { body: { name: PUB, snapshotId: snap.id } });
    expect(v.status, JSON.stringify(v.body)).toBe(201);
    // Only an operator key publishes, naming the field: not another tenant's member key, nor a tenant on its own template.
    for (const [key, name] of [
      [stranger, PUB],
      [owner, NAME],
    ] as const) {
      const refused = await api('PATCH', `/v1/templates/${name}`, { key, body: { public: true } });
      expect([refused.status, refused.body!.error.code, refused.body!.error.details.field]).toEqual([403, 'permission_denied', 'public']);
    }
    expect((await api('POST', '/v1/sandboxes', { key: stranger, body: { template: PUB } })).body!.error.code).toBe('template_not_found');
    const published = await api('PATCH', `/v1/templates/${PUB}`, { body: { public: true } });
    expect([published.status, published.body!.public]).toEqual([200, true]);

    const listed = (await api('GET', '/v1/templates', { key: stranger })).body!.templates.find((t: { name: string }) => t.name === PUB);
    expect(listed).toMatchObject({ id: v.body!.id, custom: true, public: true, readOnly: true });
    expect((await api('GET', `/v1/templates/${PUB}`, { key: stranger })).body!.versions.map((x: { id: string }) => x.id)).toEqual([v.body!.id]);
    expect(await E2bTemplate.exists(PUB, { apiKey: stranger })).toBe(true);
    // Used, never changed or deleted by the tenant it was published to.
    for (const [method, body] of [
      ['DELETE', undefined],
      ['PATCH', { warmPoolSize: 1 }],
    ] as const) {
      const res = await api(method, `/v1/templates/${PUB}`, { key: stranger, body });
      expect([res.status, res.body!.error.code], method).toEqual([403, 'permission_denied']);
    }

    // By name through the SDK, by version id through the API: the marker is there, in a sandbox of the stranger's.
    const s = await Sandbox.create({ ...config(stranger), template: PUB, timeoutS: 600, snapshotIntervalS: 3600 });
    made.push(s);
    expect((await sh(s, 'cat /srv/marker.txt')).out).toBe('from the platform');
    const byId = await api('POST', '/v1/sandboxes', { key: stranger, body: { template: v.body!.id, timeoutS: 600 } });
    expect(byId.status, JSON.stringify(byId.body)).toBe(201);
    await api('DELETE', `/v1/sandboxes/${byId.body!.id}`, { key: stranger });
    const e = await E2bSandbox.create(PUB, { apiKey: stranger, timeoutMs: 600_000 });
    made.push(e);
    expect((await e.commands.run('cat /srv/marker.txt', { user: 'root' })).stdout).toBe('from the platform');
    await e.kill();

    // The stranger's own snapshot is its own tenant's alone: stored in full under its key, naming no parent in the
    // publisher's store; the publisher's own sandbox from it stores only what changed since the template.
    await s.files.write('/srv/mine.txt', 'tenant data');
    const own = await s.snapshot();
    expect(own.parentId).toBeNull();
    await s.kill();
    const same = await Sandbox.create({ ...config(), template: PUB, timeoutS: 600, snapshotIntervalS: 3600 });
    made.push(same);
    await same.files.write('/srv/mine.txt', 'tenant data');
    const incremental = await same.snapshot();
    await same.kill();
    expect(incremental.parentId).toBe(snap.id);
    console.info(
      `first snapshot after a create from a template: ${own.sizeAddedBytes} B stored for another tenant, ${incremental.sizeAddedBytes} B for its own`,
    );
    expect(own.sizeAddedBytes).toBeGreaterThan(incremental.sizeAddedBytes);

    // Withdrawn: no longer listed nor created from, by name or id; the stranger's snapshot still restores.
    expect((await api('PATCH', `/v1/templates/${PUB}`, { body: { public: false } })).body!.public).toBe(false);
    expect(await E2bTemplate.exists(PUB, { apiKey: stranger })).toBe(false);
    for (const template of [PUB, v.body!.id]) {
      const res = await api('POST', '/v1/sandboxes', { key: stranger, body: { template } });
      expect([res.status, res.body!.error.code], template).toEqual([404, 'template_not_found']);
    }
    const [fork] = await Sandbox.fork(own.id, { ...config(stranger), timeoutS: 600 });
    made.push(fork!);
    expect((await sh(fork!, 'cat /srv/marker.txt; echo; cat /srv/mine.txt')).out).toBe('from the platform\ntenant data');
    await fork!.kill();
    expect((await api('DELETE', `/v1/templates/${PUB}`)).status).toBe(204);
  });

  it('a deleted template leaves the sandboxes made from it, and their snapshots, working', async () => {
    const s = await Sandbox.create({ ...config(owner), template: NAME, timeoutS: 600, snapshotIntervalS: 3600 });
    made.push(s);
    await s.files.write('mine.txt', 'after the template');
    const own = await s.snapshot();
    const del = await api('DELETE', `/v1/templates/${NAME}`, { key: owner });
    expect(del.status).toBe(204);
    expect((await api('GET', `/v1/templates/${NAME}`, { key: owner })).body!.error.code).toBe('template_not_found');
    expect((await api('POST', '/v1/sandboxes', { key: owner, body: { template: NAME } })).body!.error.code).toBe('template_not_found');
    // The version's pin is gone with it: its snapshot is the build sandbox's history again.
    expect((await api('GET', `/v1/snapshots/${version.snapshotId}`, { key: owner })).body).toMatchObject({ pinned: false });
    expect((await sh(s, 'sandglass-hello')).out).toBe('hello from a package\n');
    const [fork] = await Sandbox.fork(own.id, { ...config(owner), timeoutS: 600 });
    made.push(fork!);
    // The fork keeps the template's user and workdir: they travel in the sandbox's snapshots, not in the template.
    expect((await sh(fork!, 'cat mine.txt; echo; sandglass-hello; id -un; pwd')).out).toBe('after the template\nhello from a package\nworker\n/srv/www\n');
  });
});
