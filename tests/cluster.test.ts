// Scale-out on one machine: PostgreSQL, an S3 server, two control-plane replicas behind haproxy, three gateways.
// Sandboxes spread; a gateway killed outright loses nothing committed (its sandboxes come back elsewhere from their
// snapshots, memory and files intact, commands re-attachable); a replica killed mid-traffic is invisible through
// haproxy; the dead gateway started again is fenced and runs nothing twice. E2B's SDK, given one gateway as its
// data-plane URL, reaches sandboxes on every gateway (the gateway forwards envd requests).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deriveNodeKeys } from '@sandglass/core';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';
import { Sandbox as E2bSandbox } from 'e2b';
import { Cluster, waitFor } from './cluster-harness.js';
import { home as sharedHome } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'sg-cluster-'));
const cluster = new Cluster({
  dir,
  artifactsFrom: sharedHome,
  basePort: Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 300,
  controlPlanes: 2,
  gateways: 3,
  deadAfterS: 6,
  heartbeatIntervalS: 1,
});
let config: ConnectionConfig;

beforeAll(async () => {
  try {
    await cluster.start();
  } catch (err) {
    for (const name of ['cp1', 'cp2', 'gateway-n1', 'gateway-n2', 'gateway-n3']) console.error(`--- ${name}.log ---\n${cluster.log(name).slice(-4000)}`);
    throw err;
  }
  config = { apiUrl: cluster.apiUrl, apiKey: cluster.adminKey };
}, 900_000);

afterAll(async () => {
  await cluster.stop();
  if (!process.env.SANDGLASS_KEEP_CLUSTER) rmSync(dir, { recursive: true, force: true });
});

/** What a gateway's internal API says it runs (with the node secret's internal bearer, as the control plane calls it). */
async function runningOn(nodeId: string): Promise<string[]> {
  const info = cluster.gatewayInfo.get(nodeId)!;
  const secret = Buffer.from(readFileSync(join(dir, 'node-secret'), 'utf8').trim(), 'hex');
  const res = await fetch(`${info.internalUrl}/internal/v1/sandboxes`, {
    headers: { authorization: `Bearer ${deriveNodeKeys(secret).internalBearer.toString('hex')}` },
  });
  const body = (await res.json()) as { sandboxes: Array<{ id: string; state: string }> };
  return body.sandboxes.filter((s) => s.state === 'running').map((s) => s.id);
}

describe('a cluster of two control planes and three gateways', () => {
  const sandboxes: Sandbox[] = [];
  const counters = new Map<string, { commandId: string; offset: number; atSnapshot: number }>();
  /** The snapshot taken on the victim node before it died, per sandbox. */
  const snapshots = new Map<string, string>();

  it('spreads nine sandboxes over the three gateways', async () => {
    for (let i = 0; i < 9; i++) sandboxes.push(await Sandbox.create({ ...config, timeoutS: 1800, snapshotIntervalS: 3600 }));
    const placed = new Map<string, number>();
    for (const s of sandboxes) {
      const info = (await Sandbox.list(config)).find((x) => x.id === s.id)!;
      placed.set(info.gatewayId!, (placed.get(info.gatewayId!) ?? 0) + 1);
    }
    expect([...placed.keys()].sort()).toEqual(['n1', 'n2', 'n3']);
    expect([...placed.values()]).toEqual([3, 3, 3]);
  });

  it("E2B's SDK reaches sandboxes on every gateway through one gateway's URL", async () => {
    // Options rather than E2B_* variables: the other tests of this file share the process.
    const e2b = { apiKey: cluster.adminKey, apiUrl: `${cluster.apiUrl}/e2b`, sandboxUrl: `${cluster.gatewayInfo.get('n1')!.url}/e2b` };
    const listed = await Sandbox.list(config);
    // One sandbox per gateway: n1's is served where the SDK points, n2's and n3's are forwarded to their gateways.
    for (const node of ['n1', 'n2', 'n3']) {
      const id = sandboxes.map((s) => listed.find((x) => x.id === s.id)!).find((x) => x.gatewayId === node)!.id;
      const sbx = await E2bSandbox.connect(id, e2b);
      expect((await sbx.commands.run('echo hi')).stdout).toBe('hi\n');
      await sbx.files.write('/tmp/e2b.txt', `via n1 to ${node}`);
      expect(await sbx.files.read('/tmp/e2b.txt')).toBe(`via n1 to ${node}`);
      expect(await sbx.isRunning()).toBe(true);
    }
    // A sandbox made through E2B, then killed: no gateway runs it any more, so n1 answers 502 (not running).
    const made = await E2bSandbox.create(e2b);
    expect((await made.commands.run('echo made')).stdout).toBe('made\n');
    await made.kill();
    expect(await made.isRunning()).toBe(false);
  });

  it("brings a killed gateway's sandboxes back elsewhere from their snapshots", async () => {
    const victim = 'n2';
    const onVictim = [];
    for (const s of sandboxes) if ((await Sandbox.list(config)).find((x) => x.id === s.id)?.gatewayId === victim) onVictim.push(s);
    expect(onVictim).toHaveLength(3);
    for (const s of onVictim) {
      await s.files.write('/root/proof.txt', `file of ${s.id}\n`);
      // A counter that lives only in the shell's memory: after the move it must go on from the snapshot's value.
      const h = await s.commands.run('i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 0.2; done', { background: true, timeoutMs: 0 });
      const ticks = () => [...h.stdout.matchAll(/tick (\d+)/g)].map((m) => Number(m[1]));
      await waitFor(() => ticks().length >= 5, 60_000, 'the counter did not start');
      // The snapshot holds the counter at some value at or past what was seen before it was asked for.
      const before = Math.max(...ticks());
      const snap = await s.snapshot({ name: 'before-the-crash' });
      await h.disconnect();
      counters.set(s.id, { commandId: h.id, offset: 0, atSnapshot: before });
      expect(snap.name).toBe('before-the-crash');
      snapshots.set(s.id, snap.id);
    }
    // A sandbox with no snapshot at all is failed with the reason, not resumed from nothing.
    const bare = await Sandbox.create({ ...config, timeoutS: 1800, snapshotIntervalS: 3600 });
    const bareNode = (await Sandbox.list(config)).find((x) => x.id === bare.id)!.gatewayId;

    const t0 = Date.now();
    await cluster.killGateway(victim);
    for (const s of onVictim) {
      await waitFor(
        async () => {
          const info = (await Sandbox.list(config)).find((x) => x.id === s.id);
          return info?.state === 'running' && info.gatewayId !== victim;
        },
        180_000,
        `sandbox ${s.id} did not come back`,
      );
    }
    console.log(`[cluster] ${onVictim.length} sandboxes running elsewhere ${((Date.now() - t0) / 1000).toFixed(1)} s after the kill`);

    for (const s of onVictim) {
      const moved = await Sandbox.connect(s.id, config);
      expect((await moved.files.read('/root/proof.txt')).toString()).toBe(`file of ${s.id}\n`);
      const { commandId, atSnapshot } = counters.get(s.id)!;
      // Re-attached by offset: the bytes before the snapshot are the same bytes, and the counter goes on from there.
      const h = await moved.commands.connect(commandId, { fromOffset: 0 });
      await waitFor(() => [...h.stdout.matchAll(/tick (\d+)/g)].length > atSnapshot + 3, 60_000, 'the counter did not go on');
      await h.disconnect();
      const ticks = [...h.stdout.matchAll(/tick (\d+)/g)].map((m) => Number(m[1]));
      expect(ticks.slice(0, atSnapshot)).toEqual(Array.from({ length: atSnapshot }, (_, i) => i + 1));
      expect(Math.max(...ticks)).toBeGreaterThan(atSnapshot);
      const events = await moved.events({ types: ['sandbox.moved'] });
      expect(events).toHaveLength(1);
      expect(events[0]!.data).toMatchObject({ fromGatewayId: victim, reason: 'node_dead' });
      expect(typeof events[0]!.data.snapshotId).toBe('string');
    }
    // A snapshot the dead node took forks on any other node: the store and the template are shared.
    const [fork] = await Sandbox.fork(snapshots.get(onVictim[0]!.id)!, { ...config, timeoutS: 600 });
    const forkNode = (await Sandbox.list(config)).find((x) => x.id === fork!.id)!.gatewayId;
    expect(forkNode).not.toBe(victim);
    expect((await fork!.files.read('/root/proof.txt')).toString()).toBe(`file of ${onVictim[0]!.id}\n`);
    await fork!.kill();
    if (bareNode === victim) {
      await waitFor(async () => (await Sandbox.list(config)).find((x) => x.id === bare.id)?.state === 'failed', 60_000, 'the bare sandbox was not failed');
      const info = (await Sandbox.list(config)).find((x) => x.id === bare.id)!;
      expect(info.failureReason).toMatch(/before the sandbox's first snapshot/);
    }
  });

  it('keeps answering through haproxy while a control-plane replica is killed', async () => {
    let failures = 0;
    let ok = 0;
    const traffic = (async () => {
      for (let i = 0; i < 60; i++) {
        try {
          await Sandbox.list(config);
          await (await Sandbox.connect(sandboxes[i % sandboxes.length]!.id, config).catch(() => undefined))?.commands.list();
          ok++;
        } catch {
          failures++;
        }
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    cluster.killControlPlane(0);
    await traffic;
    expect(failures).toBe(0);
    expect(ok).toBe(60);
    // The survivor alone runs everything now, failover included.
    const created = await Sandbox.create({ ...config, timeoutS: 600 });
    expect((await created.commands.run('echo still here')).stdout).toBe('still here\n');
    await created.kill();
  });

  it('fences the dead gateway when it comes back: nothing runs twice', async () => {
    await cluster.startGateway('n2');
    // Its VMs died with it; what it ran moved, and the control plane tells it so.
    expect(await runningOn('n2')).toEqual([]);
    const everywhere = [...(await runningOn('n1')), ...(await runningOn('n2')), ...(await runningOn('n3'))];
    expect(new Set(everywhere).size).toBe(everywhere.length);
    // New work reaches it again.
    const placed: string[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await Sandbox.create({ ...config, timeoutS: 600 });
      placed.push((await Sandbox.list(config)).find((x) => x.id === s.id)!.gatewayId!);
    }
    expect(placed).toContain('n2');
  });
});
