// The web console against the suite's real server and VMs: its session and CSRF boundary over plain HTTP, then Debian's
// Chromium (through playwright-core) signing in, creating a sandbox and running a command in its terminal.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startHttpsUpstream } from '../packages/egress/src/test-support.js';
import { type Browser, chromium, type Page } from 'playwright-core';
import { adminKey, api, apiUrl, home } from './helpers.js';

const CSRF = { 'x-sandglass-console': '1' };
const artifacts = join(home, 'console-artifacts');
const killAtEnd: string[] = [];

/** Signs in over HTTP as a browser would; the cookie's name=value, and the Set-Cookie header as sent. */
async function signIn(apiKey: string): Promise<{ cookie: string; setCookie: string }> {
  const res = await fetch(`${apiUrl}/console/api/session`, {
    method: 'POST',
    headers: { ...CSRF, 'content-type': 'application/json' },
    body: JSON.stringify({ apiKey }),
  });
  expect(res.status).toBe(201);
  const setCookie = res.headers.get('set-cookie') ?? '';
  return { cookie: setCookie.split(';')[0]!, setCookie };
}

function asConsole(cookie: string, path: string, init: { method?: string; headers?: Record<string, string>; body?: unknown } = {}) {
  return fetch(`${apiUrl}${path}`, {
    method: init.method ?? 'GET',
    headers: { cookie, ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}), ...init.headers },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
}

/** Reads a console event stream until `until` matches an event; every event up to it, in order. */
async function readStream(cookie: string, query: string, until: (ev: { type: string; sandboxId: string | null }) => boolean) {
  const res = await fetch(`${apiUrl}/console/api/stream?${query}`, { headers: { cookie, ...CSRF } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/event-stream');
  const seen: Array<{ type: string; sandboxId: string | null; data: unknown }> = [];
  let text = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    text += decoder.decode(chunk, { stream: true });
    let end = text.indexOf('\n\n');
    while (end >= 0) {
      const data = text
        .slice(0, end)
        .split('\n')
        .find((l) => l.startsWith('data: '));
      text = text.slice(end + 2);
      if (data) {
        const ev = JSON.parse(data.slice(6));
        seen.push(ev);
        // Leaving the loop cancels the body, which closes the stream.
        if (until(ev)) return seen;
      }
      end = text.indexOf('\n\n');
    }
  }
  return seen;
}

describe('console session and CSRF boundary', () => {
  let otherKey: string;
  let otherKeyId: string;
  let sandboxId: string;
  const secretValue = `console-secret-${Date.now()}-do-not-show`;

  beforeAll(async () => {
    const tenant = await api('POST', '/v1/tenants', { body: { name: `console-other-${Date.now()}` } });
    expect(tenant.status).toBe(201);
    const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { role: 'admin' } });
    expect(key.status).toBe(201);
    otherKey = key.body!.key;
    otherKeyId = key.body!.id;
    const sbx = await api('POST', '/v1/sandboxes', { body: {} });
    expect(sbx.status).toBe(201);
    sandboxId = sbx.body!.id;
    killAtEnd.push(sandboxId);
    expect((await api('PUT', '/v1/secrets/CONSOLE_TEST_TOKEN', { body: { value: secretValue, hosts: ['api.example.com'] } })).status).toBeLessThan(300);
  });

  it('serves the console with a strict CSP and no inline script', async () => {
    const res = await fetch(`${apiUrl}/console/`);
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toMatch(/script-src[^;]*unsafe-inline/);
    expect(csp).toContain("frame-ancestors 'none'");
    const html = await res.text();
    // Every script is a file of 'self': none has a body.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect((await fetch(`${apiUrl}/console/..%2F..%2Fpackage.json`)).status).toBe(404);
  });

  it('answers the console endpoints only with a session', async () => {
    expect((await fetch(`${apiUrl}/console/api/session`, { headers: CSRF })).status).toBe(401);
    expect((await fetch(`${apiUrl}/console/api/stream`, { headers: CSRF })).status).toBe(401);
    expect((await asConsole('sg_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '/v1/sandboxes', { headers: CSRF })).status).toBe(401);
    const bad = await fetch(`${apiUrl}/console/api/session`, {
      method: 'POST',
      headers: { ...CSRF, 'content-type': 'application/json' },
      body: '{"apiKey":"sg_nope"}',
    });
    expect(bad.status).toBe(401);
    expect(bad.headers.get('set-cookie')).toBeNull();
  });

  it('sets an HttpOnly, SameSite=Strict cookie that stands for the key', async () => {
    const { cookie, setCookie } = await signIn(adminKey);
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).toMatch(/Path=\//);
    // The cookie is no form of the key.
    expect(cookie).not.toContain(adminKey);
    const list = await asConsole(cookie, '/v1/sandboxes', { headers: CSRF });
    expect(list.status).toBe(200);
    expect(((await list.json()) as { sandboxes: Array<{ id: string }> }).sandboxes.map((s) => s.id)).toContain(sandboxId);
  });

  it('refuses a cookie without the CSRF header, or from another origin', async () => {
    const { cookie } = await signIn(adminKey);
    // What a cross-site form post or image load carries: the cookie alone (were SameSite to let it through).
    const forged = await asConsole(cookie, `/v1/sandboxes/${sandboxId}/pause`, { method: 'POST', body: {} });
    expect(forged.status).toBe(401);
    const forgedRead = await asConsole(cookie, '/v1/secrets');
    expect(forgedRead.status).toBe(401);
    const otherOrigin = await asConsole(cookie, `/v1/sandboxes/${sandboxId}`, { method: 'DELETE', headers: { ...CSRF, origin: 'http://evil.example' } });
    expect(otherOrigin.status).toBe(403);
    // A page of another origin cannot sign a browser in either.
    const loginCsrf = await fetch(`${apiUrl}/console/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ apiKey: adminKey }),
    });
    expect(loginCsrf.status).toBe(401);
    expect(loginCsrf.headers.get('set-cookie')).toBeNull();
    // The sandbox is untouched by all of the above.
    expect((await api('GET', `/v1/sandboxes/${sandboxId}`)).body!.state).toBe('running');
  });

  it("shows one tenant's cookie nothing of another tenant", async () => {
    const { cookie } = await signIn(otherKey);
    const list = (await (await asConsole(cookie, '/v1/sandboxes', { headers: CSRF })).json()) as { sandboxes: Array<{ id: string }> };
    expect(list.sandboxes.map((s) => s.id)).not.toContain(sandboxId);
    expect((await asConsole(cookie, `/v1/sandboxes/${sandboxId}`, { headers: CSRF })).status).toBe(404);
    expect((await asConsole(cookie, `/v1/sandboxes/${sandboxId}/events`, { headers: CSRF })).status).toBe(404);
    expect((await asConsole(cookie, `/v1/sandboxes/${sandboxId}/access`, { method: 'POST', headers: CSRF })).status).toBe(404);
    // A marker in the other tenant's log, appended after the first tenant's sandbox: the stream reaches it in seq order,
    // so an event of the first tenant's sandbox, had it leaked, would come before it.
    const marker = await asConsole(cookie, '/v1/api-keys', { method: 'POST', headers: CSRF, body: { name: 'console-marker' } });
    expect(marker.status).toBe(201);
    const events = await readStream(cookie, 'afterSeq=0', (ev) => ev.type === 'api_key.created' && JSON.stringify(ev).includes('console-marker'));
    expect(events.at(-1)!.type).toBe('api_key.created');
    expect(events.filter((e) => e.sandboxId === sandboxId)).toEqual([]);
  }, 60_000);

  it('ends the session when its key is revoked', async () => {
    const { cookie } = await signIn(otherKey);
    expect((await asConsole(cookie, '/console/api/session', { headers: CSRF })).status).toBe(200);
    expect((await api('DELETE', `/v1/api-keys/${otherKeyId}`)).status).toBe(200);
    expect((await asConsole(cookie, '/console/api/session', { headers: CSRF })).status).toBe(401);
    expect((await asConsole(cookie, '/v1/sandboxes', { headers: CSRF })).status).toBe(401);
  });

  it('puts no secret value in the event stream', async () => {
    const { cookie } = await signIn(adminKey);
    const events = await readStream(cookie, 'afterSeq=0', (ev) => ev.type.startsWith('secret.') && JSON.stringify(ev).includes('CONSOLE_TEST_TOKEN'));
    expect(events.length).toBeGreaterThan(0);
    expect(JSON.stringify(events)).not.toContain(secretValue);
  }, 60_000);
});

/** Types a line into the page's terminal and waits for a screen row that is exactly `expected` (letters, digits, dashes). */
async function typeAndSee(page: Page, line: string, expected: string): Promise<void> {
  await page.locator('.xterm').click();
  await page.keyboard.type(`${line}\n`);
  await page
    .locator('.xterm-rows > div')
    .filter({ hasText: new RegExp(`^\\s*${expected}\\s*$`) })
    .first()
    .waitFor({ timeout: 60_000 });
}

async function signInPage(page: Page): Promise<void> {
  await page.goto(`${apiUrl}/console/`);
  await page.getByLabel('API key').fill(adminKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Sandboxes' }).waitFor();
}

describe('console in a browser', () => {
  let browser: Browser;
  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
  });
  afterAll(async () => {
    await browser?.close();
    for (const id of killAtEnd) await api('DELETE', `/v1/sandboxes/${id}`);
  });

  it('signs in, creates a sandbox and runs a command in its terminal', async () => {
    const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
    const page = await context.newPage();
    const bodies: string[] = [];
    page.on('response', async (res) => {
      if ((res.headers()['content-type'] ?? '').includes('event-stream')) return;
      bodies.push(await res.text().catch(() => ''));
    });
    const cspViolations: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
    });

    await page.goto(`${apiUrl}/console/`);
    await page.getByLabel('API key').waitFor();
    const fcpMs = await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1);
    console.log(`console first contentful paint: ${fcpMs.toFixed(0)} ms`);
    expect(fcpMs).toBeGreaterThan(0);
    await page.screenshot({ path: join(artifacts, '1-sign-in.png') });

    await page.getByLabel('API key').fill(adminKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Sandboxes' }).waitFor();
    // The key is in no storage the page's scripts can read; the session cookie is HttpOnly.
    const stored = await page.evaluate(() => JSON.stringify({ local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie }));
    expect(stored).not.toContain(adminKey);
    expect(stored).not.toContain('sg_session');

    const rowsBefore = await page.getByTestId('sandbox-row').count();
    await page.getByRole('button', { name: 'New sandbox' }).click();
    // The new row arrives through the page's event stream, with no reload.
    await page.getByTestId('sandbox-row').nth(rowsBefore).waitFor({ timeout: 120_000 });
    const ids = await page.getByTestId('sandbox-row').locator('a').allTextContents();
    const known = new Set((await api('GET', '/v1/sandboxes')).body!.sandboxes.map((s: { id: string }) => s.id));
    const created = ids.filter((id) => !killAtEnd.includes(id) && known.has(id));
    killAtEnd.push(...created);
    await page.screenshot({ path: join(artifacts, '2-sandboxes.png') });

    const newest = (await api('GET', '/v1/sandboxes')).body!.sandboxes.filter((s: { id: string }) => created.includes(s.id))[0] as { id: string };
    await page.goto(`${apiUrl}/console/#/sandboxes/${newest.id}`);
    await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    // The shell's prompt shows before typing, so the keystrokes reach a shell that reads them.
    await page.locator('.xterm-rows').filter({ hasText: /[$#]/ }).waitFor({ timeout: 60_000 });
    await typeAndSee(page, 'echo $((6*7))', '42');
    await page.screenshot({ path: join(artifacts, '3-terminal.png') });

    // Two states of one file around a snapshot; the fork from it must show the first.
    await typeAndSee(page, 'echo old > /root/console-f; echo written-$((1+1))', 'written-2');
    await page.getByRole('button', { name: 'Take snapshot' }).click();
    const snapshotItem = page.getByTestId('snapshots').locator('li').filter({ hasText: 'manual' }).first();
    await snapshotItem.waitFor({ timeout: 120_000 });
    const shownAtMs = Date.now();
    const snap = (await api('GET', `/v1/sandboxes/${newest.id}/snapshots`)).body!.snapshots.find((s: { reason: string }) => s.reason === 'manual');
    console.log(`console timeline: snapshot taken → on the timeline: ${shownAtMs - Date.parse(snap.takenAt)} ms`);
    await page.screenshot({ path: join(artifacts, '4-timeline.png') });
    await typeAndSee(page, 'echo new > /root/console-f; echo changed-$((2+1))', 'changed-3');

    await snapshotItem.getByRole('button', { name: 'Fork' }).click();
    await page.waitForURL((url) => url.hash.startsWith('#/sandboxes/') && !url.hash.endsWith(newest.id), { timeout: 120_000 });
    const forkId = new URL(page.url()).hash.slice('#/sandboxes/'.length);
    killAtEnd.push(forkId);
    expect((await api('GET', `/v1/sandboxes/${forkId}`)).body!.sourceSnapshotId).toBe(snap.id);
    await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    await page.locator('.xterm-rows').filter({ hasText: /[$#]/ }).waitFor({ timeout: 60_000 });
    await typeAndSee(page, 'cat /root/console-f', 'old');
    await page.screenshot({ path: join(artifacts, '5-fork.png') });

    expect(cspViolations).toEqual([]);
    expect(bodies.join('\n')).not.toContain(adminKey);
    await context.close();
  }, 600_000);

  it('shows a pending approval the moment it waits, and approves or denies it', async () => {
    const upstream = await startHttpsUpstream(inject('egressPki'), inject('egressUpstreamPorts')[0]!);
    const host = `api.example.test:${upstream.port}`;
    const value = `jit-console-${Date.now()}-value`;
    try {
      const secret = await api('PUT', '/v1/secrets/CONSOLE_JIT', {
        body: { value, hosts: [host], header: 'x-jit', format: 'Token {value}', approval: 'required' },
      });
      expect(secret.status).toBeLessThan(300);
      const sbx = await api('POST', '/v1/sandboxes', {
        body: { timeoutS: 1200, snapshotIntervalS: 3600, network: { allow: [host] }, secrets: ['CONSOLE_JIT'] },
      });
      expect(sbx.status).toBe(201);
      killAtEnd.push(sbx.body!.id);
      const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
      const page = await context.newPage();
      const bodies: string[] = [];
      page.on('response', async (res) => {
        if ((res.headers()['content-type'] ?? '').includes('event-stream')) return;
        bodies.push(await res.text().catch(() => ''));
      });
      await signInPage(page);
      await page.goto(`${apiUrl}/console/#/sandboxes/${sbx.body!.id}`);
      await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
      await page.locator('.xterm-rows').filter({ hasText: /[$#]/ }).waitFor({ timeout: 60_000 });

      // The approval waits at most 4 s in the test server: the button is clicked as soon as the page shows it.
      await page.locator('.xterm').click();
      await page.keyboard.type(`curl -sS -m 60 https://${host}/echo?console; echo; echo done-$((3+4))\n`);
      await page.getByTestId('approval').filter({ hasText: 'CONSOLE_JIT' }).getByRole('button', { name: 'Approve', exact: true }).click({ timeout: 120_000 });
      await page
        .locator('.xterm-rows > div')
        .filter({ hasText: /^\s*done-7\s*$/ })
        .first()
        .waitFor({ timeout: 60_000 });
      expect(await page.locator('.xterm-rows').textContent()).toContain('"url":"/echo?console"');
      expect(upstream.seen.at(-1)!.headers['x-jit']).toBe(`Token ${value}`);
      await page.screenshot({ path: join(artifacts, '6-approved.png') });

      await page.locator('.xterm').click();
      await page.keyboard.type(`clear; curl -sS -m 60 https://${host}/echo?denied; echo; echo done-$((4+4))\n`);
      await page.getByTestId('approval').filter({ hasText: 'CONSOLE_JIT' }).getByRole('button', { name: 'Deny' }).click({ timeout: 120_000 });
      await page
        .locator('.xterm-rows > div')
        .filter({ hasText: /^\s*done-8\s*$/ })
        .first()
        .waitFor({ timeout: 60_000 });
      expect(await page.locator('.xterm-rows').textContent()).toContain('egress_approval_denied');
      await page.screenshot({ path: join(artifacts, '7-denied.png') });
      // The value reached the upstream only: no page, answer or screen showed it.
      expect(bodies.join('\n')).not.toContain(value);
      expect(await page.content()).not.toContain(value);
      await context.close();
    } finally {
      await upstream.close();
    }
  }, 600_000);
});
