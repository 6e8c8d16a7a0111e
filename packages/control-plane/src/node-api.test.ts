// The node API as a compromised or confused node would use it: who may call, what a node may read, what counts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger, ManualClock, newId } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { LocalKeyring, newNodeTransportKeys, openForNode, type NodeTransportKeys } from '@sandglass/kms';
import { createTenant } from './keys.js';
import { NodeCredentials } from './node-credentials.js';
import { NodeDirectory } from './nodes.js';
import { SecretStore } from './secrets.js';
import { createControlPlane, type ControlPlane } from './server.js';

const SECRET = Buffer.alloc(32, 9);

describe('node API', () => {
  let database: Database;
  let events: EventLog;
  let clock: ManualClock;
  let cp: ControlPlane;
  let dir: string;
  let tenant: string;
  let other: string;
  let onN1: string;
  let keys: LocalKeyring;
  let credentials: NodeCredentials;
  /** Each node's key and transport key pair, as its enrolment left them. */
  const enrolled = new Map<string, { nodeKey: string; transport: NodeTransportKeys }>();
  const bearer = (node: string) => `Bearer ${(enrolled.get(node) ?? enrolled.get('n1')!).nodeKey}`;
  const enrol = async (node: string) => {
    const transport = newNodeTransportKeys();
    const { token } = await credentials.issueEnrolment(node);
    enrolled.set(node, { nodeKey: (await credentials.enrol(node, token, transport.publicKey)).nodeKey, transport });
  };

  const call = (method: 'GET' | 'POST' | 'PUT', url: string, opts: { node?: string | null; as?: string; auth?: string; body?: unknown } = {}) =>
    cp.app.inject({
      method,
      url,
      headers: {
        authorization: opts.auth ?? bearer(opts.as ?? opts.node ?? 'n1'),
        ...(opts.node === null ? {} : { 'x-sandglass-node': opts.node ?? 'n1' }),
        ...(opts.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(opts.body === undefined ? {} : { payload: JSON.stringify(opts.body) }),
    });

  const heartbeat = (node: string, epoch: number | null = null) =>
    call('POST', '/node/v1/heartbeat', {
      node,
      body: {
        epoch,
        url: `http://${node}.test:1`,
        internalUrl: `http://${node}.test:2`,
        capacityMemoryMib: 1024,
        freeMemoryMib: 1024,
        sandboxes: [],
        templates: [],
      },
    });

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sg-node-api-'));
    clock = new ManualClock(Date.UTC(2026, 10, 30, 12));
    database = await openDatabase({ url: 'sqlite::memory:' });
    events = new EventLog(database.db);
    keys = new LocalKeyring({ dir });
    const nodes = new NodeDirectory({ db: database.db, clock, deadAfterMs: 10_000, heartbeatIntervalMs: 1000 });
    cp = createControlPlane({
      db: database.db,
      events,
      gateways: nodes,
      nodeSecret: SECRET,
      clock,
      logger: createLogger('test', 'silent'),
      keys,
      cluster: { nodes, failoverIntervalMs: 60_000 },
    });
    await cp.app.ready();
    credentials = new NodeCredentials(database.db, clock);
    for (const n of ['n1', 'n2']) await enrol(n);
    tenant = (await createTenant(database.db, events, 'acme', { clock })).id;
    other = (await createTenant(database.db, events, 'globex', { clock })).id;
    await new SecretStore({ db: database.db, keys, events, clock }).set(tenant, { name: 'GH_TOKEN', value: 'ghp_the-real-value', hosts: ['api.github.com'] });
    await new SecretStore({ db: database.db, keys, events, clock }).set(tenant, { name: 'UNBOUND', value: 'not-for-you', hosts: ['x.test'] });
    for (const n of ['n1', 'n2']) expect((await heartbeat(n)).statusCode).toBe(200);
    onN1 = newId('sbx');
    const data = {
      template: 'base',
      memoryMib: 256,
      vcpus: 1,
      timeoutS: 600,
      snapshotIntervalS: 60,
      metadata: {},
      gatewayId: 'n1',
      gatewayUrl: 'http://n1.test:1',
      secrets: ['GH_TOKEN'],
    };
    await events.append({ type: 'sandbox.created', tenantId: tenant, sandboxId: onN1, data }, { clock });
  });
  afterEach(async () => {
    await cp.close();
    await database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("wants the node's own key and the node id it is bound to, and is not reachable with an API key scheme", async () => {
    expect((await call('POST', '/node/v1/heartbeat', { auth: 'Bearer sg_nope', body: {} })).statusCode).toBe(401);
    expect((await call('POST', '/node/v1/heartbeat', { auth: `Bearer sgnk_${'a'.repeat(43)}`, body: {} })).statusCode).toBe(401);
    const noNode = await call('POST', '/node/v1/heartbeat', { node: null, body: {} });
    expect(noNode.statusCode).toBe(400);
    expect(noNode.json().error.details.field).toBe('x-sandglass-node');
    expect((await call('POST', '/node/v1/heartbeat', { node: '../n1', body: {} })).statusCode).toBe(400);
  });

  it("refuses a node speaking as another node's id, and a revoked node from its next request, fencing it", async () => {
    // n2's key presenting n1's id: the forged claim of issue 23.
    const asN1 = await call('POST', `/node/v1/tenants/${tenant}/secrets/GH_TOKEN/value`, { node: 'n1', as: 'n2' });
    expect(asN1.statusCode).toBe(403);
    expect(asN1.json().error.code).toBe('permission_denied');
    expect(asN1.body).not.toContain('sealed');
    const hb = await call('POST', '/node/v1/heartbeat', { node: 'n1', as: 'n2', body: {} });
    expect(hb.json().error.code).toBe('permission_denied');

    expect((await call('GET', `/node/v1/tenants/${tenant}/key`)).statusCode).toBe(200);
    const epoch = (await database.db.selectFrom('nodes').select('epoch').where('id', '=', 'n1').executeTakeFirstOrThrow()).epoch;
    expect((await credentials.revoke('n1')).state).toBe('revoked');
    const refused = await call('GET', `/node/v1/tenants/${tenant}/key`);
    expect([refused.statusCode, refused.json().error.code]).toEqual([401, 'unauthenticated']);
    // Fenced as dead at once, so failover moves its sandboxes; n2 is untouched.
    const row = await database.db.selectFrom('nodes').select(['state', 'epoch']).where('id', '=', 'n1').executeTakeFirstOrThrow();
    expect(row).toEqual({ state: 'dead', epoch: epoch + 1 });
    expect((await heartbeat('n2')).statusCode).toBe(200);
  });

  it('enrols a node once per token, only as the id the token was issued for', async () => {
    const transport = newNodeTransportKeys();
    const { token } = await credentials.issueEnrolment('n3');
    const enrolAs = (node: string, t: string) => call('POST', '/node/v1/enrol', { node, auth: '', body: { token: t, publicKey: transport.publicKey } });
    expect((await enrolAs('n1', token)).json().error.code).toBe('unauthenticated');
    const ok = await enrolAs('n3', token);
    expect(ok.statusCode).toBe(200);
    expect(ok.json().nodeId).toBe('n3');
    expect((await enrolAs('n3', token)).json().error.code).toBe('unauthenticated');
    // Its key speaks as n3 and no other id.
    const key = ok.json().nodeKey as string;
    expect((await call('POST', '/node/v1/heartbeat', { node: 'n3', auth: `Bearer ${key}`, body: {} })).statusCode).toBe(400);
    expect((await call('POST', '/node/v1/heartbeat', { node: 'n1', auth: `Bearer ${key}`, body: {} })).statusCode).toBe(403);
    // An expired token is refused like a spent one.
    const late = await credentials.issueEnrolment('n4', 60);
    clock.advance(61_000);
    expect((await enrolAs('n4', late.token)).json().error.code).toBe('unauthenticated');
  });

  it('fences a heartbeat from an old epoch', async () => {
    const again = await heartbeat('n1');
    expect(again.json().epoch).toBe(2);
    const stale = await heartbeat('n1', 1);
    expect(stale.statusCode).toBe(409);
    expect(stale.json().error.code).toBe('node_fenced');
  });

  it("appends a node's events once, and only about sandboxes placed on it", async () => {
    const started = {
      commandId: newId('cmd'),
      argv: ['true'],
      cwd: null,
      pty: false,
      user: 'root',
      envNames: [],
      stdin: false,
      timeoutMs: null,
      recordingId: null,
    };
    const mine = { id: newId('evt'), type: 'command.started', tenantId: tenant, sandboxId: onN1, at: '2026-11-30T11:59:00.000Z', data: started };
    const first = await call('POST', '/node/v1/events', { body: { events: [mine] } });
    expect(first.json()).toEqual({ appended: 1, duplicates: 0, dropped: [] });
    // Redelivered after a lost answer: in the log once.
    expect((await call('POST', '/node/v1/events', { body: { events: [mine] } })).json()).toEqual({ appended: 0, duplicates: 1, dropped: [] });
    const stored = await events.list({ sandboxId: onN1, types: ['command'] });
    expect(stored.map((e) => [e.id, e.at])).toEqual([[mine.id, mine.at]]);
    // Through the same append as the control plane's own events, so linked into the sandbox's chain: its exports verify.
    const chain = await events.list({ sandboxId: onN1 });
    expect(chain.at(-1)).toMatchObject({ id: mine.id, sandboxPrevHash: chain.at(-2)!.hash });

    // n2 cannot end or alter n1's sandbox, nor speak for a tenant about no sandbox.
    const forged = { ...mine, id: newId('evt'), type: 'sandbox.killed', data: { reason: 'killed' } };
    const tenantWide = { id: newId('evt'), type: 'secret.removed', tenantId: tenant, at: mine.at, data: { name: 'GH_TOKEN' } };
    const fromN2 = await call('POST', '/node/v1/events', { node: 'n2', body: { events: [forged, tenantWide] } });
    expect(fromN2.json().appended).toBe(0);
    expect(fromN2.json().dropped.map((d: { id: string }) => d.id)).toEqual([forged.id, tenantWide.id]);
    expect((await database.db.selectFrom('sandboxes').select('state').where('id', '=', onN1).executeTakeFirstOrThrow()).state).toBe('starting');
  });

  it("drops a node's forged events about its own sandbox: an unlisted type, a malformed or foreign snapshotId, an extra field", async () => {
    const at = '2026-11-30T11:59:00.000Z';
    const ev = (type: string, data: Record<string, unknown>) => ({ id: newId('evt'), type, tenantId: tenant, sandboxId: onN1, at, data });
    const exited = { commandId: newId('cmd'), exitCode: 0, signal: null, timedOut: false, outputBytes: 0 };
    const forged = [
      ev('command.forged', { commandId: newId('cmd') }),
      ev('sandbox.paused', { snapshotId: 7 }),
      ev('command.exited', { ...exited, verdict: 'all tests passed' }),
      ev('sandbox.paused', { snapshotId: newId('snap') }),
    ];
    const before = await events.list({ sandboxId: onN1 });
    const res = (await call('POST', '/node/v1/events', { body: { events: forged } })).json();
    expect(res.appended).toBe(0);
    expect(res.dropped.map((d: { id: string; code: string; field: string }) => [d.id, d.code, d.field])).toEqual([
      [forged[0]!.id, 'node_event_invalid', '/type'],
      [forged[1]!.id, 'node_event_invalid', '/data/snapshotId'],
      [forged[2]!.id, 'node_event_invalid', '/data/verdict'],
      [forged[3]!.id, 'node_event_refused', '/data/snapshotId'],
    ]);
    expect(await events.list({ sandboxId: onN1 })).toEqual(before);
    // The same shapes without the forgery pass.
    expect((await call('POST', '/node/v1/events', { body: { events: [ev('command.exited', exited)] } })).json()).toEqual({
      appended: 1,
      duplicates: 0,
      dropped: [],
    });
  });

  it("appends a node's wipe report only for a revoked tenant it ran, naming only that tenant's sandboxes there", async () => {
    const at = '2026-11-30T11:59:00.000Z';
    const report = (tenantId: string, data: Record<string, unknown> = {}) => ({
      id: newId('evt'),
      type: 'tenant.plaintext_wiped',
      tenantId,
      at,
      data: { trigger: 'api', stoppedSandboxes: [onN1], wipedFiles: 2, ...data },
    });
    const post = async (node: string, ...evs: unknown[]) => (await call('POST', '/node/v1/events', { node, body: { events: evs } })).json();
    const reasons = (res: { dropped: Array<{ reason: string }> }) => res.dropped.map((d) => d.reason);
    const drops = (res: { dropped: Array<{ code: string; field: string }> }) => res.dropped.map((d) => [d.code, d.field]);

    // Before the revocation: a node cannot claim a live tenant's data was destroyed.
    const early = await post('n1', report(tenant));
    expect([early.appended, reasons(early)]).toEqual([0, [`the key of tenant ${tenant} is not revoked`]]);

    await keys.revoke(tenant);
    const onN2 = newId('sbx');
    const forged = await post(
      'n2',
      report(tenant), // the tenant never ran on n2
      report(tenant, { stoppedSandboxes: [] }),
      report(tenant, { stoppedSandboxes: [onN2] }),
    );
    expect(forged.appended).toBe(0);
    expect(reasons(forged)).toEqual([
      `a stopped sandbox is not of tenant ${tenant} on this node`,
      `tenant ${tenant} has no sandbox placed on this node`,
      `a stopped sandbox is not of tenant ${tenant} on this node`,
    ]);
    const bent = await post(
      'n1',
      report(tenant, { stoppedSandboxes: [onN1, newId('sbx')] }), // one sandbox that is not on n1
      report(tenant, { trigger: 'operator' }),
      report(tenant, { wipedFiles: -1 }),
      report(other, { stoppedSandboxes: [] }), // another tenant: neither revoked nor ever on n1
      { ...report(tenant), type: 'tenant.deleted', data: {} }, // only the wipe report passes
    );
    expect(bent.appended).toBe(0);
    expect(reasons(bent)[0]).toBe(`a stopped sandbox is not of tenant ${tenant} on this node`);
    expect(reasons(bent)[3]).toBe(`tenant ${other} has no sandbox placed on this node`);
    expect(drops(bent)).toEqual([
      ['node_event_refused', '/data/stoppedSandboxes'],
      ['node_event_invalid', '/data/trigger'],
      ['node_event_invalid', '/data/wipedFiles'],
      ['node_event_refused', '/tenantId'],
      ['node_event_invalid', '/type'],
    ]);

    // The node that ran the tenant's sandbox reports its wipe once the key is gone, even with the sandbox ended.
    await events.append({ type: 'sandbox.failed', tenantId: tenant, sandboxId: onN1, data: { reason: 'revoked', code: 'key_revoked' } }, { clock });
    const wiped = report(tenant);
    expect(await post('n1', wiped)).toEqual({ appended: 1, duplicates: 0, dropped: [] });
    const logged = await events.list({ tenantId: tenant, types: ['tenant.plaintext_wiped'] });
    expect(logged.map((e) => [e.id, e.sandboxId ?? null, e.data])).toEqual([[wiped.id, null, wiped.data]]);
  });

  it("deletes, takes or fails a snapshot only of a sandbox placed on the node, and never another tenant's", async () => {
    const at = '2026-11-30T11:59:00.000Z';
    const taken = (snapshotId: string, sandboxId: string, tenantId = tenant) => ({
      type: 'snapshot.taken',
      tenantId,
      sandboxId,
      data: { snapshotId, parentId: null, reason: 'manual', name: 'keep', pinned: true, sizeAddedBytes: 1, memoryMib: 256, vcpus: 1, template: 'base' },
    });
    // A pinned snapshot of the other tenant, on n2, and one of the tenant's sandbox on n1.
    const victim = newId('sbx');
    await events.append(
      {
        type: 'sandbox.created',
        tenantId: other,
        sandboxId: victim,
        data: { template: 'base', memoryMib: 256, vcpus: 1, timeoutS: 600, metadata: {}, gatewayId: 'n2', gatewayUrl: 'http://n2.test:1' },
      },
      { clock },
    );
    const theirs = newId('snap');
    const mine = newId('snap');
    await events.append(taken(theirs, victim, other), { clock });
    await events.append(taken(mine, onN1), { clock });
    const ev = (type: string, data: Record<string, unknown>, more: Record<string, unknown> = {}) => ({
      id: newId('evt'),
      type,
      tenantId: tenant,
      sandboxId: onN1,
      at,
      data,
      ...more,
    });
    const forged = [
      // The attack of issue 23: the system tenant, no sandbox, a snapshot id read off the shared store.
      { id: newId('evt'), type: 'snapshot.deleted', tenantId: 'system', at, data: { snapshotId: theirs, why: 'user' } },
      { id: newId('evt'), type: 'snapshot.deleted', tenantId: other, at, data: { snapshotId: theirs, why: 'user' } },
      // Its own sandbox, another's snapshot; the victim's sandbox from the wrong node; renames are the control plane's.
      ev('snapshot.deleted', { snapshotId: theirs, why: 'user' }),
      ev('snapshot.deleted', { snapshotId: theirs, why: 'user' }, { tenantId: other, sandboxId: victim }),
      ev('snapshot.named', { snapshotId: mine, name: null, previousName: 'keep' }),
      ev('snapshot.taken', { ...taken(theirs, onN1).data }),
      ev('snapshot.deleted', { why: 'user' }),
      ev('sandbox.moved', { fromGatewayId: 'n1', gatewayId: 'n2', gatewayUrl: 'http://n2.test:1', reason: 'resume', snapshotId: mine, snapshotTakenAt: at }),
    ];
    const res = (await call('POST', '/node/v1/events', { body: { events: forged } })).json();
    expect(res.appended).toBe(0);
    expect(res.dropped.map((d: { id: string; code: string; field: string }) => [d.id, d.code, d.field])).toEqual(
      [
        ['node_event_invalid', '/sandboxId'],
        ['node_event_invalid', '/sandboxId'],
        ['node_event_refused', '/data/snapshotId'],
        ['node_event_refused', '/sandboxId'],
        ['node_event_refused', '/type'],
        ['node_event_refused', '/data/snapshotId'],
        ['node_event_invalid', '/data/snapshotId'],
        ['node_event_refused', '/type'],
      ].map(([code, field], i) => [forged[i]!.id, code, field]),
    );
    const snaps = await database.db.selectFrom('snapshots').select(['id', 'pinned']).orderBy('id').execute();
    expect(snaps).toEqual(
      [
        { id: theirs, pinned: 1 },
        { id: mine, pinned: 1 },
      ].sort((a, b) => a.id.localeCompare(b.id)),
    );
    expect(await events.list({ tenantId: other, types: ['snapshot'] })).toHaveLength(1);

    // Its own: a new capture, a failed one, and a deletion of its own snapshot pass.
    const fresh = newId('snap');
    const own = [
      ev('snapshot.taken', taken(fresh, onN1).data),
      ev('snapshot.failed', { snapshotId: newId('snap'), reason: 'x', code: 'internal' }),
      ev('snapshot.deleted', { snapshotId: mine, why: 'user' }),
    ];
    expect((await call('POST', '/node/v1/events', { body: { events: own } })).json()).toEqual({ appended: 3, duplicates: 0, dropped: [] });
    expect((await database.db.selectFrom('snapshots').select('id').orderBy('id').execute()).map((r) => r.id)).toEqual([fresh, theirs].sort());
    // Redelivered after its snapshot is gone: a duplicate, not a refusal.
    expect((await call('POST', '/node/v1/events', { body: { events: own } })).json()).toEqual({ appended: 0, duplicates: 3, dropped: [] });
  });

  it("appends a sandbox's cadence reports from its own node in the scheduler's shape, and no other", async () => {
    const at = '2026-11-30T11:59:00.000Z';
    const cadence = { intervalS: 5, achievedIntervalS: 11.2, windowS: 60, takenInWindow: 5 };
    const ev = (type: string, data: Record<string, unknown>) => ({ id: newId('evt'), type, tenantId: tenant, sandboxId: onN1, at, data });
    const behind = ev('snapshot.behind', { ...cadence, lateS: 3.1, why: 'slots_full' });
    const caughtUp = ev('snapshot.caught_up', { ...cadence, behindForS: 42 });
    const forged = [ev('snapshot.behind', { ...cadence, lateS: 3.1, why: '<script>' }), ev('snapshot.caught_up', { note: 'trust me' })];
    const fromN2 = (await call('POST', '/node/v1/events', { node: 'n2', body: { events: [behind] } })).json();
    expect(fromN2.dropped.map((d: { code: string }) => d.code)).toEqual(['node_event_refused']);
    const res = (await call('POST', '/node/v1/events', { body: { events: [behind, caughtUp, ...forged] } })).json();
    expect(res.appended).toBe(2);
    expect(res.dropped.map((d: { id: string }) => d.id)).toEqual(forged.map((e) => e.id));
    expect((await events.list({ sandboxId: onN1, types: ['snapshot'] })).map((e) => e.type)).toEqual(['snapshot.behind', 'snapshot.caught_up']);
  });

  it('hands a node keys and secret values sealed for it alone, only for what it runs', async () => {
    const res = await call('POST', `/node/v1/tenants/${tenant}/data-keys/chunk-data`);
    expect(res.statusCode).toBe(200);
    expect(res.json().version).toBe(1);
    const sealed = Buffer.from(res.json().sealed, 'base64');
    const n1 = enrolled.get('n1')!.transport.privateKey;
    expect(openForNode(n1, sealed, Buffer.from(`n1/${tenant}/chunk-data/v1`))).toHaveLength(32);
    // Opened by another node's key, read as another tenant's or as another version: does not open.
    expect(() => openForNode(enrolled.get('n2')!.transport.privateKey, sealed, Buffer.from(`n1/${tenant}/chunk-data/v1`))).toThrow();
    expect(() => openForNode(n1, sealed, Buffer.from(`n2/${tenant}/chunk-data/v1`))).toThrow();
    expect(() => openForNode(n1, sealed, Buffer.from(`n1/${other}/chunk-data/v1`))).toThrow();
    expect(() => openForNode(n1, sealed, Buffer.from(`n1/${tenant}/chunk-data/v2`))).toThrow();
    // The keyring has version 1 only: another is not handed out.
    expect((await call('POST', `/node/v1/tenants/${tenant}/data-keys/chunk-data?version=2`)).json().error.code).toBe('key_unavailable');
    expect((await call('GET', `/node/v1/tenants/${tenant}/key?verify=true`)).json()).toEqual({ currentVersion: 1 });
    expect((await call('GET', `/node/v1/tenants/${other}/key?verify=true`)).json().error.code).toBe('permission_denied');
    // n2 runs nothing of the tenant; nobody runs anything of the other tenant.
    expect((await call('POST', `/node/v1/tenants/${tenant}/data-keys/chunk-data`, { node: 'n2' })).json().error.code).toBe('permission_denied');
    expect((await call('POST', `/node/v1/tenants/${other}/data-keys/chunk-data`)).json().error.code).toBe('permission_denied');
    expect((await call('POST', `/node/v1/tenants/${tenant}/data-keys/no-such-purpose`)).statusCode).toBe(400);

    const rules = await call('GET', `/node/v1/tenants/${tenant}/secrets/GH_TOKEN`);
    expect(rules.json()).toMatchObject({ name: 'GH_TOKEN', hosts: ['api.github.com'], approval: 'none' });
    expect(rules.body).not.toContain('ghp_');
    const value = await call('POST', `/node/v1/tenants/${tenant}/secrets/GH_TOKEN/value`);
    expect(value.body).not.toContain('ghp_the-real-value');
    expect(openForNode(n1, Buffer.from(value.json().sealed, 'base64'), Buffer.from(`n1/${tenant}/GH_TOKEN`)).toString()).toBe('ghp_the-real-value');
    // A secret the sandbox does not bind, or asked for by a node that does not run it: refused before any decryption.
    expect((await call('POST', `/node/v1/tenants/${tenant}/secrets/UNBOUND/value`)).json().error.code).toBe('permission_denied');
    expect((await call('POST', `/node/v1/tenants/${tenant}/secrets/GH_TOKEN/value`, { node: 'n2' })).json().error.code).toBe('permission_denied');
  });

  it("hands the publisher's key to a node starting a sandbox from its published template, and only then", async () => {
    // A version of `other`'s template; a sandbox of `tenant` made from it is starting on n1.
    const snapshotId = newId('snap');
    const now = '2026-11-30T11:00:00.000Z';
    await database.db
      .insertInto('template_versions')
      .values({
        id: newId('tpl'),
        tenant_id: other,
        name: 'tools',
        version: 1,
        snapshot_id: snapshotId,
        memory_mib: 256,
        vcpus: 1,
        disk_mib: null,
        envs: '{}',
        user: null,
        workdir: null,
        start: null,
        build_id: null,
        created_at: now,
      })
      .execute();
    const fromTemplate = newId('sbx');
    const data = { template: 'tools', memoryMib: 256, vcpus: 1, timeoutS: 600, snapshotIntervalS: 60, metadata: {}, gatewayId: 'n1' };
    await events.append(
      {
        type: 'sandbox.created',
        tenantId: tenant,
        sandboxId: fromTemplate,
        data: { ...data, gatewayUrl: 'http://n1.test:1', sourceSnapshotId: snapshotId, secrets: [] },
      },
      { clock },
    );
    const ask = (node = 'n1') => call('POST', `/node/v1/tenants/${other}/data-keys/chunk-data`, { node });
    // Not published: the version is `other`'s alone.
    expect((await ask()).json().error.code).toBe('permission_denied');
    await database.db.insertInto('published_templates').values({ name: 'tools', tenant_id: other, published_at: now }).execute();
    expect((await ask()).statusCode).toBe(200);
    // Never to another node, never a secret of the publisher's.
    expect((await ask('n2')).json().error.code).toBe('permission_denied');
    expect((await call('POST', `/node/v1/tenants/${other}/secrets/GH_TOKEN/value`)).json().error.code).toBe('permission_denied');
    // Once the sandbox runs it needs nothing of the publisher's.
    await events.append({ type: 'sandbox.started', tenantId: tenant, sandboxId: fromTemplate, data: {} }, { clock });
    expect((await ask()).json().error.code).toBe('permission_denied');
  });

  it("tells where a running sandbox runs: its node and that node's data-plane URL, nothing else", async () => {
    const url = `/node/v1/sandboxes/${onN1}/location`;
    // Starting: no envd answers there yet.
    expect((await call('GET', url, { node: 'n2' })).json().error.code).toBe('sandbox_not_found');
    await events.append({ type: 'sandbox.started', tenantId: tenant, sandboxId: onN1, data: {} }, { clock });
    const found = await call('GET', url, { node: 'n2' });
    expect(found.statusCode).toBe(200);
    expect(found.json()).toEqual({ gatewayId: 'n1', dataPlaneUrl: 'http://n1.test:1' });
    expect((await call('GET', url, { node: 'n2', auth: 'Bearer sg_nope' })).statusCode).toBe(401);
    expect((await call('GET', `/node/v1/sandboxes/${newId('sbx')}/location`, { node: 'n2' })).statusCode).toBe(404);
    // Its node silent past deadAfter: not a place to send anything.
    clock.advance(11_000);
    expect((await call('GET', url, { node: 'n2' })).statusCode).toBe(404);
  });

  it('publishes a template once, to the first publisher', async () => {
    const key = '0123456789abcdef';
    expect((await call('GET', `/node/v1/templates/${key}`)).json().error.code).toBe('template_not_found');
    const a = { tenantId: 'system', snapshotId: newId('snap') };
    expect((await call('PUT', `/node/v1/templates/${key}`, { body: a })).json()).toEqual(a);
    expect((await call('PUT', `/node/v1/templates/${key}`, { node: 'n2', body: { tenantId: 'system', snapshotId: newId('snap') } })).json()).toEqual(a);
    expect((await call('PUT', `/node/v1/templates/${key}`, { body: { tenantId: tenant, snapshotId: newId('snap') } })).statusCode).toBe(400);
  });
});
