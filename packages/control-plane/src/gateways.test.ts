// The control plane's client of a gateway's internal API: over the node's unix socket, with the derived bearer only.
import { createServer, type IncomingMessage } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deriveNodeKeys } from '@sandglass/core';
import { GatewayClient } from './gateways.js';

const SECRET = Buffer.alloc(32, 9);
const dir = mkdtempSync(join(tmpdir(), 'sg-gwclient-'));
const socketPath = join(dir, 'gateway.sock');
const seen: Array<{ method?: string; url?: string; authorization?: string; body: string }> = [];
const server = createServer((req: IncomingMessage, res) => {
  let body = '';
  req.on('data', (d: Buffer) => (body += d.toString()));
  req.on('end', () => {
    seen.push({ method: req.method, url: req.url, authorization: req.headers.authorization, body });
    res.writeHead(204).end();
  });
});

beforeAll(() => new Promise<void>((resolve) => server.listen(socketPath, resolve)));
afterAll(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('GatewayClient', () => {
  it('calls the internal API over a unix socket with the internal-bearer key, never the node secret', async () => {
    const client = new GatewayClient(SECRET);
    await client.setExpiry(
      { id: 'node_a', url: 'http://127.0.0.1:1', internalUrl: `unix:${socketPath}` },
      'sbx_aaaaaaaaaaaaaaaaaaaa',
      '2025-06-01T00:00:00.000Z',
    );
    expect(seen).toEqual([
      {
        method: 'POST',
        url: '/internal/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/timeout',
        authorization: `Bearer ${deriveNodeKeys(SECRET).internalBearer.toString('hex')}`,
        body: JSON.stringify({ expiresAt: '2025-06-01T00:00:00.000Z' }),
      },
    ]);
    expect(seen[0]!.authorization).not.toContain(SECRET.toString('hex'));
  });

  it('sends a request again when a kept-alive connection is reset as it is reused', async () => {
    // A gateway that answers one request per connection and resets the connection when a second arrives on it: what
    // a server closing an idle keep-alive connection does to a client that reuses it at that moment.
    const connections: Socket[] = [];
    let answered = 0;
    const tcp = createTcpServer((socket) => {
      connections.push(socket);
      let served = false;
      let buffered = '';
      socket.on('data', (d: Buffer) => {
        buffered += d.toString('latin1');
        if (served) return void socket.resetAndDestroy();
        if (!buffered.includes('\r\n\r\n') || !buffered.endsWith('}')) return;
        served = true;
        answered++;
        socket.write('HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\nKeep-Alive: timeout=60\r\n\r\n');
      });
    });
    await new Promise<void>((resolve) => tcp.listen(0, '127.0.0.1', resolve));
    try {
      const gateway = { id: 'node_c', url: 'http://127.0.0.1:1', internalUrl: `http://127.0.0.1:${(tcp.address() as AddressInfo).port}` };
      const client = new GatewayClient(SECRET);
      await client.setExpiry(gateway, 'sbx_aaaaaaaaaaaaaaaaaaaa', '2025-06-01T00:00:00.000Z');
      await client.setExpiry(gateway, 'sbx_aaaaaaaaaaaaaaaaaaaa', '2025-06-01T00:00:01.000Z');
      expect(answered).toBe(2);
      expect(connections).toHaveLength(2);
    } finally {
      for (const c of connections) c.destroy();
      await new Promise((resolve) => tcp.close(resolve));
    }
  });

  it('refuses a node secret that is not 32 bytes', () => {
    expect(() => new GatewayClient(Buffer.alloc(0))).toThrow(/exactly 32 bytes/);
    expect(() => new GatewayClient(Buffer.alloc(16, 1))).toThrow(/exactly 32 bytes/);
  });

  it('answers gateway_unavailable for an internal URL it cannot use, without naming it to the caller', async () => {
    const client = new GatewayClient(SECRET);
    for (const internalUrl of [`unix:${join(dir, 'missing.sock')}`, 'https://127.0.0.1:1', 'ftp://127.0.0.1:1']) {
      const err = await client.killSandbox({ id: 'node_b', url: 'http://127.0.0.1:1', internalUrl }, 'sbx_aaaaaaaaaaaaaaaaaaaa').catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'gateway_unavailable' });
      expect((err as Error).message).not.toContain(dir);
    }
  });
});
