// The console over the real HTTP edge and a real SQLite database, on a manual clock: how long a session lives, that it
// never outlives its key, that signing out ends it, and that its event streams are capped and share one tail per tenant.
import { mkdtempSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger, ManualClock } from '@sandglass/core';
import { openDatabase, type Database } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { SESSION_TTL_MS, type ConsoleLimits } from './console.js';
import { LogStreams, STREAM_UNSENT_MAX_BYTES } from './console-streams.js';
import { bootstrapLocal, createControlPlane, singleGateway, type ControlPlane } from './index.js';

const CSRF = { 'x-sandglass-console': '1' };
let database: Database;
let events: EventLog;
let clock: ManualClock;
let cp: ControlPlane;
let home: string;
let operatorKey: string;

function controlPlane(limits: Partial<ConsoleLimits> = {}): ControlPlane {
  return createControlPlane({
    db: database.db,
    events,
    // No route these tests call reaches a gateway; the address is one nothing listens on.
    gateways: singleGateway({ id: 'node_none', url: 'http://127.0.0.1:9', internalUrl: 'http://127.0.0.1:9' }),
    nodeSecret: Buffer.alloc(32, 7),
    clock,
    logger: createLogger('test', 'silent'),
    console: limits,
  });
}

beforeEach(async () => {
  clock = new ManualClock(Date.UTC(2025, 5, 1, 12));
  database = await openDatabase({ url: 'sqlite::memory:' });
  events = new EventLog(database.db);
  home = mkdtempSync(join(tmpdir(), 'sg-console-'));
  operatorKey = await bootstrapLocal({ db: database.db, events, keyFile: join(home, 'admin-key'), clock });
  cp = controlPlane();
  await cp.app.ready();
});
afterEach(async () => {
  vi.restoreAllMocks();
  await cp.close();
  await database.close();
  rmSync(home, { recursive: true, force: true });
});

async function signIn(apiKey: string): Promise<{ cookie: string; maxAgeS: number; tenantId: string }> {
  const res = await cp.app.inject({ method: 'POST', url: '/console/api/session', headers: CSRF, payload: { apiKey } });
  expect(res.statusCode, res.body).toBe(201);
  const setCookie = String(res.headers['set-cookie']);
  return { cookie: setCookie.split(';')[0]!, maxAgeS: Number(/Max-Age=(\d+)/.exec(setCookie)![1]), tenantId: res.json().tenantId };
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

interface LogLine {
  seq: number;
  type: string;
  sandboxId: string | null;
}

/** One event stream read over a real socket: what it has delivered so far, and a way to wait for more. */
interface OpenStream {
  status: number;
  /** The answer's Connection header. */
  connection?: string;
  /** The refusal's wire error, for a stream that did not open. */
  error?: { code: string; details?: Record<string, unknown> };
  /** Events in order; the `ready` marker appears as `(ready)`. */
  seen: LogLine[];
  ended: boolean;
  until(pred: (s: OpenStream) => boolean): Promise<void>;
  close(): void;
}

function openStream(baseUrl: string, cookie: string, query = 'afterSeq=0'): Promise<OpenStream> {
  return new Promise((resolve, reject) => {
    const req = get(`${baseUrl}/console/api/stream?${query}`, { headers: { cookie, ...CSRF }, agent: false }, (res) => {
      const waiters: Array<() => void> = [];
      const notify = () => {
        for (const w of waiters.splice(0)) w();
      };
      const stream: OpenStream = {
        status: res.statusCode ?? 0,
        connection: res.headers.connection,
        seen: [],
        ended: false,
        until: (pred) =>
          new Promise((done) => {
            const check = () => (pred(stream) ? done() : waiters.push(check));
            check();
          }),
        close: () => req.destroy(),
      };
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        let end = text.indexOf('\n\n');
        while (end >= 0 && stream.status === 200) {
          const lines = text.slice(0, end).split('\n');
          text = text.slice(end + 2);
          if (lines.includes('event: ready')) stream.seen.push({ seq: 0, type: '(ready)', sandboxId: null });
          const data = lines.find((l) => l.startsWith('data: '));
          if (data && lines.includes('event: log')) stream.seen.push(JSON.parse(data.slice(6)) as LogLine);
          end = text.indexOf('\n\n');
        }
        notify();
      });
      res.on('close', () => {
        stream.ended = true;
        if (stream.status !== 200) stream.error = (JSON.parse(text) as { error: OpenStream['error'] }).error;
        notify();
      });
      if (stream.status === 200) resolve(stream);
      else res.on('close', () => resolve(stream));
    });
    req.on('error', reject);
  });
}

const isReady = (s: OpenStream) => s.seen.some((e) => e.type === '(ready)');
const marker = (tenantId: string) => events.append({ type: 'console.marker', tenantId, data: {} }, { clock });
const hasMarker = (seq: number) => (s: OpenStream) => s.seen.some((e) => e.seq === seq);

describe('console event streams', () => {
  let url: string;
  const opened: OpenStream[] = [];
  async function listening(limits: Partial<ConsoleLimits>): Promise<void> {
    await cp.close();
    cp = controlPlane(limits);
    url = await cp.listen(0);
  }
  const open = async (cookie: string, query?: string) => {
    const s = await openStream(url, cookie, query);
    opened.push(s);
    return s;
  };
  afterEach(() => {
    for (const s of opened.splice(0)) s.close();
  });

  it('are capped per session and per tenant, refused rate_limited before the stream starts', async () => {
    await listening({ streamsPerSession: 2, streamsPerTenant: 3 });
    const { cookie: a, tenantId } = await signIn(operatorKey);
    const b = (await signIn(operatorKey)).cookie;
    const [a1, a2] = [await open(a), await open(a)];
    expect([a1.status, a2.status]).toEqual([200, 200]);
    const a3 = await open(a);
    expect(a3.status).toBe(429);
    expect(a3.error).toMatchObject({ code: 'rate_limited', details: { scope: 'session', limit: 2 } });
    // The refused attempt does not keep its socket either.
    expect(a3.connection).toBe('close');
    const b1 = await open(b);
    expect(b1.status).toBe(200);
    const b2 = await open(b);
    expect(b2.status).toBe(429);
    expect(b2.error).toMatchObject({ code: 'rate_limited', details: { scope: 'tenant', limit: 3 } });

    // The streams that were admitted still carry live events after the refusals.
    await Promise.all([a1, a2, b1].map((s) => s.until(isReady)));
    const ev = await marker(tenantId);
    await Promise.all([a1, a2, b1].map((s) => s.until(hasMarker(ev.seq))));

    // A closed stream gives its place back: once the server has seen it go, the other session may open one.
    a1.close();
    let again = await open(b);
    while (again.status === 429) {
      await a1.until((s) => s.ended);
      again = await open(b);
    }
    expect(again.status).toBe(200);
  }, 30_000);

  it("read the tenant's log once a round for all of its streams, each still scoped as before", async () => {
    const n = 12;
    await listening({ streamsPerSession: n + 2, streamsPerTenant: n + 2 });
    const { cookie, tenantId } = await signIn(operatorKey);
    const before = await events.append({ type: 'command.started', tenantId, sandboxId: 'sbx_one', data: {} }, { clock });
    const other = await cp.app.inject({
      method: 'POST',
      url: '/v1/tenants',
      headers: { authorization: `Bearer ${operatorKey}` },
      payload: { name: 'other' },
    });
    expect(other.statusCode, other.body).toBe(201);
    const otherKey = await cp.app.inject({
      method: 'POST',
      url: `/v1/tenants/${other.json().id}/api-keys`,
      headers: { authorization: `Bearer ${operatorKey}` },
      payload: { role: 'member' },
    });
    const stranger = await open((await signIn(otherKey.json().key)).cookie);

    const all = await Promise.all(Array.from({ length: n }, () => open(cookie)));
    const oneSandbox = await open(cookie, 'afterSeq=0&sandboxId=sbx_one');
    const fromBefore = await open(cookie, `afterSeq=${before.seq}`);
    const streams = [...all, oneSandbox, fromBefore];
    await Promise.all([...streams, stranger].map((s) => s.until(isReady)));
    // The backlog came before the marker, once.
    expect(all[0]!.seen.findIndex((e) => e.seq === before.seq)).toBeLessThan(all[0]!.seen.findIndex((e) => e.type === '(ready)'));
    expect(fromBefore.seen.map((e) => e.type)).toEqual(['(ready)']);

    const list = vi.spyOn(events, 'list');
    const live = await marker(tenantId);
    const mine = await events.append({ type: 'command.exited', tenantId, sandboxId: 'sbx_one', data: {} }, { clock });
    await Promise.all([...all, fromBefore].map((s) => s.until(hasMarker(mine.seq))));
    await oneSandbox.until(hasMarker(mine.seq));
    // Each of the tenant's 14 streams got both events, and the tenant's log was read at most once a round: a round may
    // have been under way when the events were appended, and the next one reads them.
    const tailReads = list.mock.calls.filter(([f]) => f?.tenantId === tenantId).length;
    expect(tailReads).toBeLessThanOrEqual(2);
    for (const s of [...all, fromBefore]) expect(s.seen.filter((e) => e.seq === live.seq || e.seq === mine.seq)).toHaveLength(2);
    // A stream of one sandbox sees that sandbox's events only; another tenant's sees none of this tenant's.
    expect(oneSandbox.seen.filter((e) => e.type !== '(ready)').map((e) => e.seq)).toEqual([before.seq, mine.seq]);
    const last = await marker(other.json().id);
    await stranger.until(hasMarker(last.seq));
    expect(stranger.seen.some((e) => [before.seq, live.seq, mine.seq].includes(e.seq))).toBe(false);
  }, 30_000);

  it("end when the key is revoked, or when signing in again drops their session as the key's oldest", async () => {
    await listening({ sessionsPerKey: 2 });
    const key = await cp.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { authorization: `Bearer ${operatorKey}` },
      payload: { name: 'member', role: 'member' },
    });
    const first = (await signIn(key.json().key)).cookie;
    const stream = await open(first);
    await stream.until(isReady);
    const second = (await signIn(key.json().key)).cookie;
    expect(await whoami(first)).toBe(200);
    const third = (await signIn(key.json().key)).cookie;
    // The oldest of the key's sessions is gone, and its stream ends at its next round.
    expect(await whoami(first)).toBe(401);
    await stream.until((s) => s.ended);
    expect([await whoami(second), await whoami(third)]).toEqual([200, 200]);

    const revoked = await open(third);
    await revoked.until(isReady);
    const res = await cp.app.inject({ method: 'DELETE', url: `/v1/api-keys/${key.json().id}`, headers: { authorization: `Bearer ${operatorKey}` } });
    expect(res.statusCode, res.body).toBe(200);
    await revoked.until((s) => s.ended);
  }, 30_000);

  it("end a stream whose client leaves too much unread, and its tenant's tail with it", async () => {
    const { tenantId } = await signIn(operatorKey);
    const streams = new LogStreams({ events, limits: { perSession: 1, perTenant: 1 }, signedIn: async (ids) => new Set(ids), onError: () => {} });
    let ended = false;
    const sink = { write: () => true, end: () => (ended = true), writableLength: STREAM_UNSENT_MAX_BYTES + 1 };
    streams.open({ tenantId, sessionId: 'session', afterSeq: 0, sink });
    expect(streams.count(tenantId)).toBe(1);
    await vi.waitFor(() => expect(ended).toBe(true));
    expect(streams.count()).toBe(0);
    // Its place is free again: the caps count open streams only.
    streams.open({ tenantId, sessionId: 'session', afterSeq: 0, sink: { ...sink, writableLength: 0 } });
    expect(streams.count(tenantId)).toBe(1);
    streams.closeAll();
    expect(streams.count()).toBe(0);
  });
});
