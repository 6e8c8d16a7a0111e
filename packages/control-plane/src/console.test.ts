// The console's session over the real HTTP edge and a real SQLite database, on a manual clock: how long a session
// lives, that it never outlives its key, and that signing out ends it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { SESSION_TTL_MS } from './console.js';
import { bootstrapLocal, createControlPlane, singleGateway, type ControlPlane } from './index.js';

const CSRF = { 'x-sandglass-console': '1' };
let database: Database;
let clock: ManualClock;
let cp: ControlPlane;
let home: string;
let operatorKey: string;

beforeEach(async () => {
  clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
  database = await openDatabase({ url: 'sqlite::memory:' });
  const events = new EventLog(database.db);
  home = mkdtempSync(join(tmpdir(), 'sg-console-'));
  operatorKey = await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock });
  cp = createControlPlane({
    db: database.db,
    events,
    // No route these tests call reaches a gateway; the address is one nothing listens on.
    gateways: singleGateway({ id: 'node_none', url: 'http://127.0.0.1:9', internalUrl: 'http://127.0.0.1:9' }),
    nodeSecret: Buffer.alloc(32, 7),
    clock,
    logger: createLogger('test', 'silent'),
  });
  await cp.app.ready();
});
afterEach(async () => {
  await cp.close();
  await database.close();
  rmSync(home, { recursive: true, force: true });
});

async function signIn(apiKey: string): Promise<{ cookie: string; maxAgeS: number }> {
  const res = await cp.app.inject({ method: 'POST', url: '/console/api/session', headers: CSRF, payload: { apiKey } });
  expect(res.statusCode, res.body).toBe(201);
  const setCookie = String(res.headers['set-cookie']);
  return { cookie: setCookie.split(';')[0]!, maxAgeS: Number(/Max-Age=(\d+)/.exec(setCookie)![1]) };
}

const whoami = async (cookie: string) => (await cp.app.inject({ method: 'GET', url: '/console/api/session', headers: { cookie, ...CSRF } })).statusCode;

describe('console sessions', () => {
  it('end after their lifetime', async () => {
    const { cookie, maxAgeS } = await signIn(operatorKey);
    expect(maxAgeS).toBe(SESSION_TTL_MS / 1000);
    clock.advance(SESSION_TTL_MS - 1);
    expect(await whoami(cookie)).toBe(200);
    clock.advance(1);
    expect(await whoami(cookie)).toBe(401);
  });

  it('never outlive the key they were opened with', async () => {
    const key = await cp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { authorization: `Bearer ${operatorKey}` },
      payload: { name: 'short', role: 'admin', expiresInS: 60 },
    });
    expect(key.statusCode, key.body).toBe(201);
    const { cookie, maxAgeS } = await signIn(key.json().key);
    expect(maxAgeS).toBe(60);
    clock.advance(59_000);
    expect(await whoami(cookie)).toBe(200);
    clock.advance(1_000);
    expect(await whoami(cookie)).toBe(401);
  });

  it('end when signed out, and the cookie is then worth nothing', async () => {
    const { cookie } = await signIn(operatorKey);
    const out = await cp.app.inject({ method: 'DELETE', url: '/console/api/session', headers: { cookie, ...CSRF } });
    expect(out.statusCode).toBe(204);
    expect(String(out.headers['set-cookie'])).toContain('Max-Age=0');
    expect(await whoami(cookie)).toBe(401);
    expect((await cp.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: { cookie, ...CSRF } })).statusCode).toBe(401);
  });

  it('are accepted on the API only with the CSRF header', async () => {
    const { cookie } = await signIn(operatorKey);
    expect((await cp.app.inject({ method: 'GET', url: '/v1/api-keys', headers: { cookie, ...CSRF } })).statusCode).toBe(200);
    expect((await cp.app.inject({ method: 'GET', url: '/v1/api-keys', headers: { cookie } })).statusCode).toBe(401);
    const cross = await cp.app.inject({ method: 'GET', url: '/v1/api-keys', headers: { cookie, ...CSRF, origin: 'http://evil.example' } });
    expect(cross.statusCode).toBe(403);
  });
});
