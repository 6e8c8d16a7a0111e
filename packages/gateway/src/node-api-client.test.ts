// The node API client: its credentials, errors decoded to their codes, and which calls it retries.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SandglassError } from '@sandglass/core';
import { NodeApiClient } from './node-api-client.js';
import { NodeApiDouble, testNodeCredential } from './node-api-double.js';

const secret = testNodeCredential();
const NODE = 'node-a';
const hb = { url: 'http://127.0.0.1:1', internalUrl: 'http://127.0.0.1:2', capacityMemoryMib: 1024, freeMemoryMib: 1024, sandboxes: [], templates: [] };

let cp: NodeApiDouble;
const clients: NodeApiClient[] = [];
const client = (over: { nodeKey?: string; nodeId?: string } = {}) => {
  const c = new NodeApiClient({ baseUrl: cp.url, nodeId: NODE, nodeKey: secret.nodeKey, retries: 2, retryBaseMs: 1, ...over });
  clients.push(c);
  return c;
};

beforeEach(async () => {
  cp = await new NodeApiDouble(secret, NODE).start();
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await cp.close();
});

describe('NodeApiClient', () => {
  it('authenticates with the node-api key and its node id; another secret or node id is unauthenticated', async () => {
    await expect(client().heartbeat({ epoch: null, ...hb })).resolves.toMatchObject({ epoch: 1 });
    await expect(client({ nodeKey: testNodeCredential().nodeKey }).heartbeat({ epoch: null, ...hb })).rejects.toMatchObject({ code: 'unauthenticated' });
    await expect(client({ nodeId: 'node-b' }).heartbeat({ epoch: null, ...hb })).rejects.toMatchObject({ code: 'unauthenticated' });
  });

  it('decodes the control plane’s errors into SandglassErrors with their codes (node_fenced)', async () => {
    const c = client();
    await c.heartbeat({ epoch: null, ...hb });
    cp.fence();
    const err = await c.heartbeat({ epoch: 1, ...hb }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandglassError);
    expect(err).toMatchObject({ code: 'node_fenced', status: 409 });
  });

  it('retries an idempotent call through failing answers, and never a registration', async () => {
    const c = client();
    cp.failNext = 2;
    await expect(
      c.appendEvents([{ id: 'evt_aaaaaaaaaaaaaaaaaaaa', type: 'x.y', tenantId: 't', at: new Date(0).toISOString(), data: {} }]),
    ).resolves.toMatchObject({
      appended: 1,
    });
    expect(cp.requests).toBe(3);
    cp.failNext = 1;
    await expect(c.heartbeat({ epoch: null, ...hb })).rejects.toMatchObject({ code: 'internal' });
    expect(cp.requests).toBe(4);
  });

  it('reports a control plane it cannot reach as a retryable error naming it', async () => {
    const c = client();
    cp.down = true;
    await expect(c.templateLookup('0123456789abcdef')).rejects.toMatchObject({ code: 'internal', retryable: true, message: expect.stringContaining(cp.url) });
  });

  it('refuses a base URL that is not http(s) or carries credentials', () => {
    expect(() => new NodeApiClient({ baseUrl: 'ftp://x', nodeId: NODE, nodeKey: secret.nodeKey })).toThrow(/http/);
    expect(() => new NodeApiClient({ baseUrl: 'http://u:p@127.0.0.1:1', nodeId: NODE, nodeKey: secret.nodeKey })).toThrow(/credentials/);
  });
});
