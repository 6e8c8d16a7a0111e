// A compromised node against a real control plane: what it may write to the log is bounded by what runs on it.
// One control plane (PostgreSQL, haproxy) and two gateways from cluster-harness.ts, each with a VM of its own.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '@sandglass/core';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';
import { Cluster, waitFor } from '../cluster-harness.js';
import { home as sharedHome } from '../helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'sg-node-trust-'));
const cluster = new Cluster({
  dir,
  artifactsFrom: sharedHome,
  // Inside the block the suite's tests may use above SANDGLASS_TEST_PORT.
  basePort: Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 20,
  controlPlanes: 1,
  gateways: 2,
  deadAfterS: 6,
  heartbeatIntervalS: 1,
});
let config: ConnectionConfig;
/** The ids of every event this suite forged: the only ones the control plane may have dropped. */
const forgedIds = new Set<string>();

beforeAll(async () => {
  try {
    await cluster.start();
  } catch (err) {
    for (const name of ['cp1', 'gateway-n1', 'gateway-n2']) console.error(`--- ${name}.log ---\n${cluster.log(name).slice(-4000)}`);
    throw err;
  }
  config = { apiUrl: cluster.apiUrl, apiKey: cluster.adminKey };
}, 900_000);

afterAll(async () => {
  await cluster.stop();
  if (!process.env.SANDGLASS_KEEP_CLUSTER) rmSync(dir, { recursive: true, force: true });
});

/** A node API call as node `as` makes it, with the credential that node holds. */
function asNode(as: string, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${cluster.apiUrl}${path}`, {
    method,
    headers: { ...cluster.nodeHeaders(as), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

describe('a compromised node', () => {
  it("cannot delete another node's pinned snapshot by a forged snapshot.deleted: it survives, and the victim's log is as it was", async () => {
    const victim = await Sandbox.create({ ...config, timeoutS: 600, snapshotIntervalS: 3600 });
    const info = (await Sandbox.list(config)).find((x) => x.id === victim.id)!;
    const victimNode = info.gatewayId!;
    const attacker = victimNode === 'n1' ? 'n2' : 'n1';
    const snap = await victim.snapshot({ name: 'keep' });
    const before = await victim.events();
    const at = new Date().toISOString();
    const forged = [
      // Issue 23: the system tenant, no sandbox, the snapshot id read off the shared store's object names.
      { id: newId('evt'), type: 'snapshot.deleted', tenantId: 'system', at, data: { snapshotId: snap.id, why: 'user' } },
      // The victim's own tenant and sandbox, from the node it does not run on.
      { id: newId('evt'), type: 'snapshot.deleted', tenantId: info.tenantId, sandboxId: victim.id, at, data: { snapshotId: snap.id, why: 'user' } },
    ];
    for (const e of forged) forgedIds.add(e.id);
    const res = await asNode(attacker, 'POST', '/node/v1/events', { events: forged });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { appended: number; dropped: Array<{ id: string; code: string; field: string }> };
    expect(body.appended).toBe(0);
    expect(body.dropped.map((d) => [d.id, d.code, d.field])).toEqual([
      [forged[0]!.id, 'node_event_invalid', '/sandboxId'],
      [forged[1]!.id, 'node_event_refused', '/sandboxId'],
    ]);
    expect((await victim.timeline()).map((s) => [s.id, s.name, s.pinned])).toEqual([[snap.id, 'keep', true]]);
    expect(await victim.events()).toEqual(before);
    // And the snapshot still brings the sandbox back.
    const [fork] = await Sandbox.fork(snap.id, config);
    expect((await fork!.commands.run('echo alive')).stdout).toBe('alive\n');
    await fork!.kill();
    await victim.kill();
  });

  it("cannot forge events into its own sandbox's log: an unlisted type, a malformed snapshotId, an extra field are all dropped", async () => {
    const sbx = await Sandbox.create({ ...config, timeoutS: 600, snapshotIntervalS: 3600 });
    const info = (await Sandbox.list(config)).find((x) => x.id === sbx.id)!;
    const node = info.gatewayId!;
    // What the node really records: a start, a command, a file write, a snapshot. All must land: the schema fits them.
    expect((await sbx.commands.run('echo hi')).stdout).toBe('hi\n');
    await sbx.files.write('/tmp/real.txt', 'real');
    const snap = await sbx.snapshot({ name: 'real' });
    const want = ['sandbox.created', 'sandbox.started', 'sandbox.synced', 'command.started', 'command.exited', 'file.written', 'snapshot.taken'];
    await waitFor(
      async () => {
        const types = new Set((await sbx.events()).map((e) => e.type));
        return want.every((t) => types.has(t));
      },
      60_000,
      "the node's own events did not reach the log",
    );
    const before = await sbx.events();
    const at = new Date().toISOString();
    const ev = (type: string, data: Record<string, unknown>) => ({ id: newId('evt'), type, tenantId: info.tenantId, sandboxId: sbx.id, at, data });
    const exited = before.find((e) => e.type === 'command.exited')!.data;
    const forged = [
      // A type in a family nodes send, which no gateway records.
      ev('command.forged', { commandId: newId('cmd'), note: 'anything' }),
      // The projection's pointer to the snapshot a resume starts from, as a number.
      ev('sandbox.paused', { snapshotId: 7 }),
      // A real type and a real shape, with a field the gateway never writes.
      ev('command.exited', { ...exited, commandId: newId('cmd'), exitCode: 0, verdict: 'all tests passed' }),
      ev('sandbox.paused', { snapshotId: snap.id, note: 'trust me' }),
      // A snapshot id that is well-formed but not this sandbox's (nor anyone's).
      ev('sandbox.paused', { snapshotId: newId('snap') }),
    ];
    for (const e of forged) forgedIds.add(e.id);
    const res = await asNode(node, 'POST', '/node/v1/events', { events: forged });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { appended: number; duplicates: number; dropped: Array<{ id: string; code: string; field: string }> };
    expect(body.appended).toBe(0);
    expect(body.dropped.map((d) => [d.id, d.code, d.field])).toEqual([
      [forged[0]!.id, 'node_event_invalid', '/type'],
      [forged[1]!.id, 'node_event_invalid', '/data/snapshotId'],
      [forged[2]!.id, 'node_event_invalid', '/data/verdict'],
      [forged[3]!.id, 'node_event_invalid', '/data/note'],
      [forged[4]!.id, 'node_event_refused', '/data/snapshotId'],
    ]);
    // Sent again (an outbox that retried): dropped again, never appended, never an error that would stall it.
    const again = (await (await asNode(node, 'POST', '/node/v1/events', { events: forged })).json()) as typeof body;
    expect([again.appended, again.duplicates, again.dropped.length]).toEqual([0, 0, forged.length]);
    expect(await sbx.events()).toEqual(before);
    expect((await Sandbox.list(config)).find((x) => x.id === sbx.id)?.state).toBe('running');
    // The node's own events go on landing after the forgeries.
    expect((await sbx.commands.run('echo after')).stdout).toBe('after\n');
    await waitFor(async () => (await sbx.events()).filter((e) => e.type === 'command.exited').length === 2, 60_000, 'the later command was not logged');
    await sbx.kill();
    // No legitimate event of either node was dropped: the control plane's only drops are the ones this suite forged.
    const dropLines = cluster
      .log('cp1')
      .split('\n')
      .filter((l) => l.includes('node events dropped'))
      .flatMap((l) => (JSON.parse(l) as { dropped: Array<{ id: string }> }).dropped);
    expect(dropLines.length).toBeGreaterThanOrEqual(2 * forged.length);
    expect(dropLines.filter((d) => !forgedIds.has(d.id))).toEqual([]);
  });

  it("cannot speak as another node: with its own key and the victim node's id, it gets no secret, key or heartbeat", async () => {
    const info = cluster.gatewayInfo;
    expect([...info.keys()].sort()).toEqual(['n1', 'n2']);
    for (const [as, claimed] of [
      ['n1', 'n2'],
      ['n2', 'n1'],
    ] as const) {
      const headers = { ...cluster.nodeHeaders(as), 'x-sandglass-node': claimed };
      const hb = await fetch(`${cluster.apiUrl}/node/v1/heartbeat`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(hb.status).toBe(403);
      expect(((await hb.json()) as { error: { code: string } }).error.code).toBe('permission_denied');
      const key = await fetch(`${cluster.apiUrl}/node/v1/tenants/system/key`, { headers });
      expect(key.status).toBe(403);
    }
    // The cluster's shared node secret opens nothing of the node API any more.
    const shared = await fetch(`${cluster.apiUrl}/node/v1/tenants/system/key`, {
      headers: { authorization: `Bearer ${cluster.sharedSecretHex()}`, 'x-sandglass-node': 'n1' },
    });
    expect(shared.status).toBe(401);
  });

  it('is fenced once revoked: its key is refused from the next request and its sandbox fails over to the other node', async () => {
    const sbx = await Sandbox.create({ ...config, timeoutS: 600, snapshotIntervalS: 3600 });
    await sbx.files.write('/tmp/marker.txt', 'before the revocation');
    await sbx.snapshot();
    const revoked = (await Sandbox.list(config)).find((x) => x.id === sbx.id)!.gatewayId!;
    const other = revoked === 'n1' ? 'n2' : 'n1';
    const keyOf = () => fetch(`${cluster.apiUrl}/node/v1/tenants/system/key`, { headers: cluster.nodeHeaders(revoked) });
    expect((await keyOf()).status).toBe(200);
    cluster.operator('nodes', 'revoke', revoked);
    const refused = await keyOf();
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('unauthenticated');
    const listed = JSON.parse(cluster.operator('nodes', 'ls', '--json')) as Array<{ id: string; state: string }>;
    expect(listed.map((n) => [n.id, n.state])).toEqual(
      [
        [revoked, 'revoked'],
        [other, 'alive'],
      ].sort(),
    );
    await waitFor(
      async () => {
        const now = (await Sandbox.list(config)).find((x) => x.id === sbx.id);
        return now?.state === 'running' && now.gatewayId === other;
      },
      300_000,
      'the sandbox of the revoked node did not fail over',
    );
    const moved = await Sandbox.connect(sbx.id, config);
    expect(await moved.files.read('/tmp/marker.txt')).toBe('before the revocation');
    await moved.kill();
  });
});
