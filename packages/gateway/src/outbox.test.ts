// The gateway's durable event outbox against a node API double: order, durability across a crash, idempotent resends, outages, trimming, the bound.
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import { NodeApiClient } from './node-api-client.js';
import { NodeApiDouble, testNodeCredential } from './node-api-double.js';
import { Outbox, type OutboxOptions } from './outbox.js';

const secret = testNodeCredential();
const NODE = 'node-a';
const SBX = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const logger = createLogger('test', 'silent');

let dir: string;
let cp: NodeApiDouble;
let client: NodeApiClient;
const open: Outbox[] = [];

beforeEach(async () => {
  dir = join(mkdtempSync(join(tmpdir(), 'outbox-')), 'outbox');
  cp = await new NodeApiDouble(secret, NODE).start();
  client = new NodeApiClient({ baseUrl: cp.url, nodeId: NODE, nodeKey: secret.nodeKey, retries: 0, timeoutMs: 5000 });
});

afterEach(async () => {
  for (const o of open.splice(0)) await o.close();
  client.close();
  await cp.close();
  rmSync(join(dir, '..'), { recursive: true, force: true });
});

async function outbox(opts: Partial<OutboxOptions> = {}): Promise<Outbox> {
  const o = new Outbox({ dir, sink: client, clock: new ManualClock(1_700_000_000_000), logger, backoffMinMs: 5, backoffMaxMs: 20, ...opts });
  await o.start();
  open.push(o);
  return o;
}

const event = (i: number, type = 'command.exited') => ({ type, tenantId: 'ten_a', sandboxId: SBX, data: { i } });
const delivered = () => cp.events.map((e) => e.data.i);

describe('Outbox', () => {
  it('delivers every event once, in the order appended, in batches of at most 500, with an id and the clock’s time', async () => {
    const o = await outbox();
    await Promise.all(Array.from({ length: 1200 }, (_, i) => o.append(event(i))));
    await vi.waitFor(() => expect(cp.events).toHaveLength(1200));
    expect(delivered()).toEqual(Array.from({ length: 1200 }, (_, i) => i));
    expect(Math.max(...cp.batches)).toBeLessThanOrEqual(500);
    expect(new Set(cp.events.map((e) => e.id)).size).toBe(1200);
    expect(cp.events[0]).toMatchObject({ id: expect.stringMatching(/^evt_[a-z2-7]{20}$/), at: '2023-11-14T22:13:20.000Z', sandboxId: SBX, tenantId: 'ten_a' });
  });

  it('waits for the acknowledgement when the control plane answers: the event is there when append resolves', async () => {
    const o = await outbox();
    await o.append(event(1));
    expect(delivered()).toEqual([1]);
  });

  it('re-delivers after a crash what was durable and never acknowledged, oldest first, skipping a torn last line', async () => {
    cp.down = true;
    const first = await outbox();
    // Each append resolves once its line is on disk, though nothing could be delivered.
    for (let i = 0; i < 20; i++) await first.append(event(i));
    expect(cp.events).toHaveLength(0);
    await first.close();
    // A crash in the middle of writing the next line leaves half of it at the end of the segment.
    const [segment] = readdirSync(dir).filter((n) => n.endsWith('.ndjson'));
    appendFileSync(join(dir, segment!), '{"id":"evt_torn","type":"comm');

    cp.down = false;
    const second = await outbox();
    await second.append(event(20));
    await vi.waitFor(() => expect(cp.events).toHaveLength(21));
    expect(delivered()).toEqual(Array.from({ length: 21 }, (_, i) => i));
  });

  it('is idempotent across a crash that lost the cursor: the resent events are recognised by id and appended once', async () => {
    const first = await outbox();
    for (let i = 0; i < 5; i++) await first.append(event(i));
    expect(cp.events).toHaveLength(5);
    await first.close();
    rmSync(join(dir, 'cursor.json'));

    const second = await outbox();
    await vi.waitFor(() => expect(cp.duplicates).toBe(5));
    await second.append(event(5));
    expect(delivered()).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('delivers new events when its cursor points past every segment on disk (segments removed by hand)', async () => {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'cursor.json'), JSON.stringify({ seq: 50, offset: 0 }));
    const o = await outbox();
    await o.append(event(0));
    await vi.waitFor(() => expect(delivered()).toEqual([0]));
  });

  it('resolves appends while the control plane is unreachable and delivers everything once it is back', async () => {
    const o = await outbox();
    cp.down = true;
    await Promise.all(Array.from({ length: 50 }, (_, i) => o.append(event(i))));
    expect(cp.events).toHaveLength(0);
    expect(o.undeliveredBytes()).toBeGreaterThan(0);
    cp.down = false;
    await vi.waitFor(() => expect(cp.events).toHaveLength(50));
    expect(delivered()).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(o.undeliveredBytes()).toBe(0);
  });

  it('deletes the segments behind the cursor once acknowledged, never the one being written', async () => {
    cp.down = true;
    const o = await outbox({ segmentBytes: 1024 });
    for (let i = 0; i < 100; i++) await o.append(event(i));
    const segments = () => readdirSync(dir).filter((n) => n.endsWith('.ndjson'));
    expect(segments().length).toBeGreaterThan(5);
    cp.down = false;
    await vi.waitFor(() => expect(cp.events).toHaveLength(100));
    await vi.waitFor(() => expect(segments()).toHaveLength(1));
    expect(existsSync(join(dir, 'cursor.json'))).toBe(true);
    await o.append(event(100));
    expect(delivered()).toHaveLength(101);
  });

  it('skips alone an event the control plane refuses as invalid; the others are delivered in order', async () => {
    const o = await outbox();
    cp.down = true;
    await Promise.all([o.append(event(0)), o.append(event(1, 'bad.event')), o.append(event(2))]);
    cp.refuseTypes.add('bad.event');
    cp.down = false;
    await vi.waitFor(() => expect(delivered()).toEqual([0, 2]));
  });

  it('does not send again an event the control plane dropped (its sandbox is placed elsewhere)', async () => {
    const o = await outbox();
    cp.dropSandboxes.add(SBX);
    await o.append(event(0));
    cp.dropSandboxes.clear();
    await o.append({ ...event(1), sandboxId: 'sbx_bbbbbbbbbbbbbbbbbbbb' });
    expect(delivered()).toEqual([1]);
    expect(cp.batches).toEqual([1, 1]);
    expect(cp.calls.events).toBe(2);
  });

  it('at its bound drops events other than lifecycle ones, then refuses lifecycle events too (storage_full)', async () => {
    cp.down = true;
    const o = await outbox({ maxBytes: 2000, lifecycleReserveBytes: 1000 });
    for (let i = 0; i < 30; i++) await o.append(event(i));
    expect(o.heldBytes()).toBeGreaterThan(1500);
    expect(o.heldBytes()).toBeLessThanOrEqual(2000);
    await o.append(event(0, 'sandbox.killed'));
    expect(o.heldBytes()).toBeGreaterThan(2000);
    let refused: unknown;
    for (let i = 0; i < 30 && !refused; i++) await o.append(event(i, 'sandbox.killed')).catch((err: unknown) => (refused = err));
    expect(refused).toMatchObject({ code: 'storage_full' });
    expect(o.heldBytes()).toBeLessThanOrEqual(3000);
  });
});
