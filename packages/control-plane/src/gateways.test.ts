// The control plane's client of a gateway's internal API: over the node's unix socket, with the derived bearer only.
import { createServer, type IncomingMessage } from 'node:http';
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
