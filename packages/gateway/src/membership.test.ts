// Membership against a node API double: registration, the stop list, revoked keys, outages, and fencing.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '@sandglass/core';
import { Membership, type MemberNode } from './membership.js';
import { NodeApiClient } from './node-api-client.js';
import { NodeApiDouble, testNodeCredential } from './node-api-double.js';

const secret = testNodeCredential();
const NODE = 'node-a';
const A = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const B = 'sbx_bbbbbbbbbbbbbbbbbbbb';
const logger = createLogger('test', 'silent');

/** A node whose "VMs" are ids in a set; evicting one removes it and records that it happened. */
class NodeDouble implements MemberNode {
  readonly running = new Set([A, B]);
  readonly evicted: string[] = [];
  evictAllCalls = 0;
  revoked: Array<{ keyIds: string[]; untilMs: number }> = [];
  sandboxIds = () => [...this.running];
  memory = () => ({ capacityMib: 4096, freeMib: 4096 - 256 * this.running.size });
  templateKeys = () => ['0123456789abcdef'];
  capacity: number | null = null;
  captureCapacityPerMin = () => this.capacity;
  evict = async (id: string) => {
    this.running.delete(id);
    this.evicted.push(id);
  };
  evictAll = async () => {
    this.evictAllCalls++;
    for (const id of this.running) await this.evict(id);
  };
  revokeKeys = (keyIds: string[], untilMs: number) => {
    this.revoked.push({ keyIds, untilMs });
  };
}

let cp: NodeApiDouble;
let client: NodeApiClient;
let node: NodeDouble;
let membership: Membership;

beforeEach(async () => {
  cp = await new NodeApiDouble(secret, NODE).start();
  client = new NodeApiClient({ baseUrl: cp.url, nodeId: NODE, nodeKey: secret.nodeKey, retries: 0 });
  node = new NodeDouble();
  membership = new Membership({ client, node, url: 'http://127.0.0.1:1', internalUrl: 'http://127.0.0.1:2', logger, retryMinMs: 5, retryMaxMs: 20 });
});

afterEach(async () => {
  await membership.stop();
  client.close();
  await cp.close();
});

describe('Membership', () => {
  it('registers with epoch null before start resolves, then heartbeats with its epoch, sandboxes, free memory and capture capacity', async () => {
    cp.revokedKeys = { keyIds: ['key_x'], untilMs: 5000 };
    await membership.start();
    expect(cp.heartbeats[0]).toEqual({ epoch: null, sandboxes: [A, B], freeMemoryMib: 3584, captureCapacityPerMin: null });
    expect(membership.currentEpoch).toBe(1);
    expect(node.revoked).toEqual([{ keyIds: ['key_x'], untilMs: 5000 }]);
    node.capacity = 42.5;
    await vi.waitFor(() => expect(cp.heartbeats.length).toBeGreaterThan(2));
    expect(cp.heartbeats.at(-1)).toMatchObject({ epoch: 1, captureCapacityPerMin: 42.5 });
  });

  it('stops the VMs of the sandboxes the control plane placed elsewhere, and only those', async () => {
    await membership.start();
    cp.stop = [B];
    await vi.waitFor(() => expect(node.evicted).toEqual([B]));
    expect(node.running).toEqual(new Set([A]));
    expect(node.evictAllCalls).toBe(0);
  });

  it('when its key is refused (revoked) stops every VM, once, and keeps asking', async () => {
    await membership.start();
    cp.keyRevoked = true;
    await vi.waitFor(() => expect(node.evictAllCalls).toBe(1));
    expect(node.running.size).toBe(0);
    const asked = cp.requests;
    await vi.waitFor(() => expect(cp.requests).toBeGreaterThan(asked + 2));
    expect(node.evictAllCalls).toBe(1);
  });

  it('when fenced stops every VM and registers again', async () => {
    await membership.start();
    cp.fence();
    await vi.waitFor(() => expect(membership.fencedCount).toBe(1));
    expect(node.evictAllCalls).toBe(1);
    expect(node.running.size).toBe(0);
    await vi.waitFor(() => expect(membership.currentEpoch).toBe(3));
    const afterFence = cp.heartbeats.findIndex((h, i) => i > 0 && h.epoch === null);
    expect(afterFence).toBeGreaterThan(0);
    expect(cp.heartbeats[afterFence]!.sandboxes).toEqual([]);
  });

  it('keeps the VMs running while the control plane is unreachable, and heartbeats again once it is back', async () => {
    await membership.start();
    cp.down = true;
    const before = cp.calls.heartbeat;
    // Unreachable: the double resets connections before counting them, so wait on the client's retries instead.
    await new Promise((r) => setTimeout(r, 100));
    expect(cp.calls.heartbeat).toBe(before);
    expect(node.evicted).toEqual([]);
    cp.down = false;
    await vi.waitFor(() => expect(cp.calls.heartbeat).toBeGreaterThan(before));
    expect(node.running.size).toBe(2);
    expect(membership.currentEpoch).toBe(1);
  });

  it('waits for the control plane to register at all', async () => {
    cp.down = true;
    let registered = false;
    const started = membership.start().then(() => (registered = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(registered).toBe(false);
    cp.down = false;
    await started;
    expect(membership.currentEpoch).toBe(1);
  });
});
