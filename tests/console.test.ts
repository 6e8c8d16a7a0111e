// The web console against the suite's real server and VMs: its session and CSRF boundary over plain HTTP, then Debian's
// Chromium (through playwright-core) signing in, creating a sandbox and running a command in its terminal, and a custom
// template's page, build log and picker.
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startHttpsUpstream } from '@sandglass/egress/test-support';
import type { Browser, Page, WebSocketRoute } from 'playwright-core';
import { DEFAULT_CONSOLE_LIMITS } from '@sandglass/control-plane';
import { Sandbox } from '@sandglass/sdk';
import { launchChromium, signInPage } from './browser.js';
import { adminKey, api, apiUrl, config, home } from './helpers.js';

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
      const lines = text.slice(0, end).split('\n');
      const data = lines.find((l) => l.startsWith('data: '));
      text = text.slice(end + 2);
      // The stream's one `ready` marker (the backlog is through) is seen as a pseudo-event of type `(ready)`.
      if (lines.includes('event: ready')) {
        const ready = { type: '(ready)', sandboxId: null, data: {} };
        seen.push(ready);
        if (until(ready)) return seen;
      } else if (data && lines.includes('event: log')) {
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

  it("marks where the log's backlog ends and live events begin", async () => {
    const { cookie } = await signIn(adminKey);
    const named = (name: string) => (ev: { type: string }) => ev.type === 'api_key.created' && JSON.stringify(ev).includes(name);
    const before = `console-before-${Date.now()}`;
    const after = `console-after-${Date.now()}`;
    expect((await api('POST', '/v1/api-keys', { body: { name: before } })).status).toBe(201);
    let created: Promise<unknown> | undefined;
    const seen = await readStream(cookie, 'afterSeq=0', (ev) => {
      if (ev.type === '(ready)') created = api('POST', '/v1/api-keys', { body: { name: after } });
      return named(after)(ev);
    });
    await created;
    const readyAt = seen.findIndex((e) => e.type === '(ready)');
    expect(seen.filter((e) => e.type === '(ready)')).toHaveLength(1);
    expect(seen.findIndex(named(before))).toBeLessThan(readyAt);
    expect(seen.findIndex(named(after))).toBeGreaterThan(readyAt);
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

/** A console event stream held open: its status, a refusal's error code, and each `event: log` type as it comes. */
async function holdStream(cookie: string) {
  const abort = new AbortController();
  const res = await fetch(`${apiUrl}/console/api/stream?afterSeq=0`, { headers: { cookie, ...CSRF }, signal: abort.signal });
  if (res.status !== 200) return { status: res.status, code: ((await res.json()) as { error: { code: string } }).error.code, close: () => abort.abort() };
  const seen: string[] = [];
  const reading = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      seen.push(decoder.decode(chunk, { stream: true }));
      if (seen.join('').includes('console-live-after-cap')) return true;
    }
    return false;
  })().catch(() => false);
  return { status: res.status, code: undefined, close: () => abort.abort(), sawLiveEvent: reading };
}

describe('console event streams are bounded', () => {
  const held: Array<{ close(): void }> = [];
  afterAll(() => {
    for (const s of held) s.close();
  });

  it('refuses streams past the caps per session and per tenant with rate_limited, and the open ones stay live', async () => {
    const { streamsPerSession, streamsPerTenant, sessionsPerKey } = DEFAULT_CONSOLE_LIMITS;
    // A tenant of its own, so no other test's streams count against its cap.
    const tenant = await api('POST', '/v1/tenants', { body: { name: `console-caps-${Date.now()}` } });
    const key = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { role: 'admin' } });
    expect(key.status).toBe(201);
    const hold = async (cookie: string) => {
      const s = await holdStream(cookie);
      held.push(s);
      return s;
    };
    const first = (await signIn(key.body!.key)).cookie;
    const firsts = [];
    for (let i = 0; i < streamsPerSession; i++) firsts.push(await hold(first));
    expect(firsts.map((s) => s.status)).toEqual(firsts.map(() => 200));
    const overSession = await hold(first);
    expect([overSession.status, overSession.code]).toEqual([429, 'rate_limited']);

    // More sessions of the same key (as many as it may hold) fill the tenant's cap, and one more stream is refused.
    const sessionsNeeded = Math.ceil(streamsPerTenant / streamsPerSession);
    expect(sessionsNeeded).toBeLessThanOrEqual(sessionsPerKey);
    let open = streamsPerSession;
    for (let i = 1; i < sessionsNeeded; i++) {
      const cookie = (await signIn(key.body!.key)).cookie;
      while (open < Math.min(streamsPerTenant, (i + 1) * streamsPerSession)) {
        expect((await hold(cookie)).status).toBe(200);
        open++;
      }
    }
    // A second key of the tenant: a ninth session of the first key would end its oldest, the first above.
    const other = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: { role: 'member' } });
    const spare = (await signIn(other.body!.key)).cookie;
    const overTenant = await hold(spare);
    expect([overTenant.status, overTenant.code]).toEqual([429, 'rate_limited']);

    // The first stream, opened before every refusal, still carries what happens in the tenant now.
    expect((await api('POST', '/v1/api-keys', { body: { name: 'console-live-after-cap' }, key: key.body!.key })).status).toBe(201);
    expect(await firsts[0]!.sawLiveEvent).toBe(true);
  }, 120_000);
});

/**
 * Waits for the shell's prompt in a terminal (`scope`: the page or one terminal's section), so keystrokes reach a shell
 * that reads them. A prompt not shown in 30 s is logged with what the terminal does show, then asked for again with
 * Enter (a person would press it too); the wait fails if that shows none either.
 */
async function seePrompt(page: Page, scope: Pick<Page, 'locator'> = page): Promise<void> {
  const prompt = scope.locator('.xterm-rows').filter({ hasText: /[$#]/ });
  try {
    await prompt.waitFor({ timeout: 30_000 });
    return;
  } catch {
    const rows = await scope.locator('.xterm-rows').allTextContents();
    const status = await scope.locator('[data-testid="terminal-status"]').allTextContents();
    console.error(`[console test] no prompt after 30 s; terminal status ${JSON.stringify(status)}, rows ${JSON.stringify(rows)}`);
  }
  await scope.locator('.xterm').click();
  await page.keyboard.press('Enter');
  await prompt.waitFor({ timeout: 60_000 });
}

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

/** The terminal's size as the page shows it (cols×rows). */
async function terminalSize(page: Page): Promise<{ cols: number; rows: number }> {
  const [cols, rows] = ((await page.getByTestId('terminal-size').textContent()) ?? '').split('×').map(Number);
  return { cols: cols!, rows: rows! };
}

describe('console in a browser', () => {
  let browser: Browser;
  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    for (const id of killAtEnd) await api('DELETE', `/v1/sandboxes/${id}`);
  });

  it('signs in, creates a sandbox, and drives its terminal, files, background commands and timeline', async () => {
    const context = await browser.newContext({ viewport: { width: 1366, height: 768 }, acceptDownloads: true });
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

    const before = new Set((await api('GET', '/v1/sandboxes')).body!.sandboxes.map((s: { id: string }) => s.id));
    await page.getByRole('button', { name: 'New sandbox' }).click();
    let createdId: string | undefined;
    await expect
      .poll(
        async () => {
          createdId = (await api('GET', '/v1/sandboxes')).body!.sandboxes.find((s: { id: string }) => !before.has(s.id))?.id;
          return createdId;
        },
        { timeout: 120_000 },
      )
      .toBeDefined();
    killAtEnd.push(createdId!);
    const newest = { id: createdId! };
    // The new row, and then its state, arrive through the page's event stream, with no reload.
    await page
      .getByTestId('sandbox-row')
      .filter({ hasText: newest.id })
      .getByTestId('sandbox-state')
      .filter({ hasText: 'running' })
      .waitFor({ timeout: 120_000 });
    await page.screenshot({ path: join(artifacts, '2-sandboxes.png') });

    // This test takes minutes on TCG: no rolling snapshot may land between the two it takes, and no timeout end it.
    expect((await api('POST', `/v1/sandboxes/${newest.id}/snapshot-interval`, { body: { snapshotIntervalS: 3600 } })).status).toBe(200);
    expect((await api('POST', `/v1/sandboxes/${newest.id}/timeout`, { body: { timeoutS: 3600 } })).status).toBe(200);
    // The page's command streams pass through here, so the test can drop one as a network would.
    const streams: Array<{ page: WebSocketRoute; server: WebSocketRoute }> = [];
    await page.routeWebSocket(
      (url) => url.pathname.endsWith('/stream'),
      (ws) => {
        streams.push({ page: ws, server: ws.connectToServer() });
      },
    );
    await page.goto(`${apiUrl}/console/#/sandboxes/${newest.id}`);
    await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    // The shell's prompt shows before typing, so the keystrokes reach a shell that reads them.
    await seePrompt(page);
    await typeAndSee(page, 'echo $((6*7))', '42');

    // The terminal's connection drops: the page reattaches from the last byte it showed, losing and repeating nothing.
    expect(streams).toHaveLength(1);
    await streams[0]!.server.close();
    await streams[0]!.page.close();
    await page.getByTestId('terminal-status').filter({ hasText: 'reconnecting' }).waitFor();
    await page
      .getByTestId('terminal-status')
      .filter({ hasText: /^connected$/ })
      .waitFor({ timeout: 60_000 });
    expect(streams).toHaveLength(2);
    await typeAndSee(page, 'echo $((6*8))', '48');
    expect(
      await page
        .locator('.xterm-rows > div')
        .filter({ hasText: /^\s*42\s*$/ })
        .count(),
    ).toBe(1);
    await page.screenshot({ path: join(artifacts, '3-terminal.png') });

    // The sandbox's metrics, charted from its gateway's series: CPU, memory and disk as the guest reports them.
    const metrics = page.getByRole('region', { name: 'Metrics' });
    await metrics
      .getByTestId('metric-now')
      .first()
      .filter({ hasText: /^\d+ % of \d+ CPU$/ })
      .waitFor({ timeout: 60_000 });
    expect(await metrics.getByRole('img').count()).toBe(3);
    expect(await metrics.getByTestId('metric-now').nth(1).textContent()).toMatch(/^\d+ MiB of \d+ MiB$/);

    // The terminal fits its box: a narrower window gives the shell's PTY fewer columns.
    const wide = await terminalSize(page);
    await page.setViewportSize({ width: 900, height: 768 });
    await page
      .getByTestId('terminal-size')
      .filter({ hasNotText: `${wide.cols}×${wide.rows}` })
      .waitFor();
    const narrow = await terminalSize(page);
    expect(narrow.cols).toBeLessThan(wide.cols);
    await typeAndSee(page, 'clear; stty size', `${narrow.rows} ${narrow.cols}`);
    await page.setViewportSize({ width: 1366, height: 768 });
    await page
      .getByTestId('terminal-size')
      .filter({ hasText: `${wide.cols}×${wide.rows}` })
      .waitFor();

    // Files: a file the shell wrote is listed and downloads with its bytes; an uploaded one is there for the shell.
    await typeAndSee(page, 'echo old > /root/console-f; echo written-$((1+1))', 'written-2');
    const files = page.getByRole('region', { name: 'Files' });
    await files.getByRole('button', { name: 'Refresh' }).click();
    const download = page.waitForEvent('download');
    await files.getByRole('button', { name: 'Download console-f' }).click();
    const downloaded = await download;
    expect(downloaded.suggestedFilename()).toBe('console-f');
    expect(readFileSync((await downloaded.path())!, 'utf8')).toBe('old\n');
    const uploaded = `uploaded-${Date.now()}`;
    await files.getByLabel('Upload a file').setInputFiles({ name: 'console-upload.txt', mimeType: 'text/plain', buffer: Buffer.from(`${uploaded}\n`) });
    await files.getByRole('button', { name: 'Download console-upload.txt' }).waitFor({ timeout: 60_000 });
    await typeAndSee(page, 'clear; ls /root/console-upload.txt', '/root/console-upload.txt');
    await typeAndSee(page, 'cat /root/console-upload.txt', uploaded);
    await files.getByRole('button', { name: 'Up', exact: true }).click();
    await files.getByRole('button', { name: 'Open directory root' }).click();
    await files.getByRole('button', { name: 'Download console-f' }).waitFor();
    await page.screenshot({ path: join(artifacts, '4-files.png'), fullPage: true });

    // A background command's output, live, then again after the page is reloaded: the gateway keeps it to reattach to.
    const commands = page.getByRole('region', { name: 'Background commands' });
    await commands.getByLabel('Command').fill('for i in 1 2 3; do echo tick-$i; sleep 1; done');
    await commands.getByRole('button', { name: 'Run in background' }).click();
    await commands.getByTestId('command-output').filter({ hasText: 'tick-3' }).waitFor({ timeout: 60_000 });
    await commands
      .getByTestId('command-row')
      .filter({ hasText: 'tick-' })
      .getByTestId('command-state')
      .filter({ hasText: 'exit 0' })
      .waitFor({ timeout: 60_000 });
    await page.reload();
    await commands.getByTestId('command-row').filter({ hasText: 'tick-' }).getByRole('button', { name: 'Show output' }).click({ timeout: 120_000 });
    await commands.getByTestId('command-output').filter({ hasText: 'tick-3' }).waitFor({ timeout: 60_000 });
    expect(await commands.getByTestId('command-output').textContent()).toBe('tick-1\ntick-2\ntick-3\n');
    await page.screenshot({ path: join(artifacts, '5-commands.png'), fullPage: true });
    await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    // A terminal opened on a fresh page load fits its box as well.
    await page
      .getByTestId('terminal-size')
      .filter({ hasText: `${wide.cols}×${wide.rows}` })
      .waitFor();

    // Two snapshots around a change of the file through the file browser; scrubbing to the first shows that change.
    await page.getByRole('button', { name: 'Take snapshot' }).click();
    const firstItem = page.getByTestId('snapshots').locator('li').filter({ hasText: 'manual' }).first();
    await firstItem.waitFor({ timeout: 120_000 });
    const shownAtMs = Date.now();
    const first = (await api('GET', `/v1/sandboxes/${newest.id}/snapshots`)).body!.snapshots.find((s: { reason: string }) => s.reason === 'manual');
    const logged = (await api('GET', `/v1/sandboxes/${newest.id}/events?type=snapshot.taken`)).body!.events.find(
      (e: { data: { snapshotId?: string } }) => e.data.snapshotId === first.id,
    );
    // From takenAt the capture itself (seconds under TCG) is included; from the event's time, only the way to the page.
    console.log(
      `console timeline: snapshot taken → on the timeline: ${shownAtMs - Date.parse(first.takenAt)} ms; snapshot.taken logged → on the timeline: ${logged ? shownAtMs - Date.parse(logged.at) : 'n/a'} ms`,
    );
    await files.getByLabel('Upload a file').setInputFiles({ name: 'console-f', mimeType: 'text/plain', buffer: Buffer.from('new\n') });
    await files.getByTestId('files-status').filter({ hasText: 'Uploaded /root/console-f' }).waitFor({ timeout: 60_000 });
    await page.getByLabel('Snapshot name (pins it)').fill('after-upload');
    await page.getByRole('button', { name: 'Take snapshot' }).click();
    await page.getByTestId('snapshots').locator('li').filter({ hasText: 'after-upload' }).waitFor({ timeout: 120_000 });
    await typeAndSee(page, 'clear; cat /root/console-f', 'new');

    await page.getByRole('button', { name: new RegExp(`^Snapshot ${first.id} `) }).click();
    const scrubbed = page.getByTestId('scrubbed');
    await scrubbed.getByTestId('selected-snapshot').filter({ hasText: first.id }).waitFor();
    await scrubbed.getByTestId('changed-files').filter({ hasText: 'written /root/console-f' }).waitFor();
    expect(await scrubbed.getByTestId('changed-files').textContent()).not.toContain('console-upload.txt');
    // The scrubber is a slider: the keyboard moves the point in time past the next snapshot, then back.
    await page.getByRole('button', { name: 'Next snapshot' }).click();
    await scrubbed.getByTestId('selected-snapshot').filter({ hasNotText: first.id }).waitFor();
    const second = (await api('GET', `/v1/sandboxes/${newest.id}/snapshots`)).body!.snapshots.find(
      (s: { name: string | null }) => s.name === 'after-upload',
    ).id;
    await scrubbed.getByTestId('selected-snapshot').filter({ hasText: second }).waitFor();
    expect(await scrubbed.getByTestId('changed-files').textContent()).not.toContain('written /root/console-f');
    await page.getByLabel('Scrub the timeline').focus();
    await page.keyboard.press('Home');
    await scrubbed.filter({ hasText: 'before the first snapshot' }).waitFor();
    await page.getByRole('button', { name: 'Next snapshot' }).click();
    await scrubbed.getByTestId('selected-snapshot').filter({ hasText: first.id }).waitFor();
    await page.screenshot({ path: join(artifacts, '6-timeline.png'), fullPage: true });

    // Name the selected snapshot after the fact: pinned, and on the timeline from the stream; clearing unpins it.
    await page.getByLabel('Name of this snapshot').fill('baseline');
    await page.getByRole('button', { name: 'Save name' }).click();
    await page.getByTestId('snapshots').locator('li').filter({ hasText: 'baseline' }).filter({ hasText: first.id }).waitFor({ timeout: 30_000 });
    await scrubbed.getByRole('heading').filter({ hasText: '"baseline"' }).waitFor();
    expect((await api('GET', `/v1/snapshots/${first.id}`)).body).toMatchObject({ name: 'baseline', pinned: true });
    await page.getByLabel('Name of this snapshot').fill('');
    await page.getByRole('button', { name: 'Save name' }).click();
    await page.getByTestId('snapshots').locator('li').filter({ hasText: 'baseline' }).waitFor({ state: 'detached', timeout: 30_000 });
    expect((await api('GET', `/v1/snapshots/${first.id}`)).body).toMatchObject({ name: null, pinned: false });
    const namings = (await api('GET', `/v1/sandboxes/${newest.id}/events?type=snapshot.named`)).body!.events.map((e: { data: unknown }) => e.data);
    expect(namings).toEqual([
      { snapshotId: first.id, name: 'baseline', previousName: null },
      { snapshotId: first.id, name: null, previousName: 'baseline' },
    ]);

    // Delete the second snapshot from the timeline; the first stays, and a fork from it has the old file.
    await page.getByRole('button', { name: /^Snapshot after-upload / }).click();
    await scrubbed.getByTestId('selected-snapshot').filter({ hasText: second }).waitFor();
    await page.getByRole('button', { name: 'Delete snapshot' }).click();
    await page.getByRole('button', { name: 'Confirm delete' }).click();
    await page.getByTestId('snapshots').locator('li').filter({ hasText: 'after-upload' }).waitFor({ state: 'detached', timeout: 60_000 });
    expect((await api('GET', `/v1/snapshots/${second}`)).status).toBe(404);

    await page.getByRole('button', { name: new RegExp(`^Snapshot ${first.id} `) }).click();
    await scrubbed.getByTestId('selected-snapshot').filter({ hasText: first.id }).waitFor();
    // A fork with a count lists the forks it started; one alone opens its page.
    await page.getByLabel('Forks', { exact: true }).fill('2');
    await page.getByRole('button', { name: 'Fork from this snapshot' }).click();
    const started = page.getByRole('list', { name: 'Forks started' }).getByRole('link');
    await started.nth(1).waitFor({ timeout: 120_000 });
    const pair = await started.allTextContents();
    killAtEnd.push(...pair);
    expect(pair).toHaveLength(2);
    for (const id of pair) expect((await api('GET', `/v1/sandboxes/${id}`)).body!.sourceSnapshotId).toBe(first.id);
    for (const id of pair) await api('DELETE', `/v1/sandboxes/${id}`);
    await page.getByLabel('Forks', { exact: true }).fill('1');
    await page.getByRole('button', { name: 'Fork from this snapshot' }).click();
    await page.waitForURL((url) => url.hash.startsWith('#/sandboxes/') && !url.hash.endsWith(newest.id), { timeout: 120_000 });
    const forkId = new URL(page.url()).hash.slice('#/sandboxes/'.length);
    killAtEnd.push(forkId);
    expect((await api('GET', `/v1/sandboxes/${forkId}`)).body!.sourceSnapshotId).toBe(first.id);
    await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    await seePrompt(page);
    await typeAndSee(page, 'cat /root/console-f', 'old');
    await page.screenshot({ path: join(artifacts, '7-fork.png') });

    // Back on the source, which holds the new file: resuming it at the first snapshot brings the old one back.
    await page.goto(`${apiUrl}/console/#/sandboxes/${newest.id}`);
    await page.getByRole('button', { name: new RegExp(`^Snapshot ${first.id} `) }).click();
    await scrubbed.getByTestId('selected-snapshot').filter({ hasText: first.id }).waitFor();
    await page.getByRole('button', { name: 'Resume the sandbox here' }).click();
    await page.getByText('Resuming…').waitFor();
    await page.getByText('Resuming…').waitFor({ state: 'detached', timeout: 240_000 });
    const resumed = (await api('GET', `/v1/sandboxes/${newest.id}/events?type=sandbox.resumed`)).body!.events.at(-1);
    expect(resumed.data.snapshotId).toBe(first.id);
    // The terminal of the resumed VM, not the one the pause ended.
    const terminal = page.locator(`section[data-vm="${resumed.seq}"]`);
    await terminal.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    await seePrompt(page, terminal);
    await typeAndSee(page, 'cat /root/console-f', 'old');
    await page.screenshot({ path: join(artifacts, '8-resumed.png') });

    expect(cspViolations).toEqual([]);
    expect(bodies.join('\n')).not.toContain(adminKey);
    await context.close();
  }, 900_000);

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
      await seePrompt(page);

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
      await page.screenshot({ path: join(artifacts, '9-approved.png') });

      await page.locator('.xterm').click();
      await page.keyboard.type(`clear; curl -sS -m 60 https://${host}/echo?denied; echo; echo done-$((4+4))\n`);
      await page.getByTestId('approval').filter({ hasText: 'CONSOLE_JIT' }).getByRole('button', { name: 'Deny' }).click({ timeout: 120_000 });
      await page
        .locator('.xterm-rows > div')
        .filter({ hasText: /^\s*done-8\s*$/ })
        .first()
        .waitFor({ timeout: 60_000 });
      expect(await page.locator('.xterm-rows').textContent()).toContain('egress_approval_denied');
      await page.screenshot({ path: join(artifacts, '10-denied.png') });

      // The network page: the policy in force, and both decisions as the proxy logged them, with the secret's name.
      await page.getByRole('link', { name: 'Network & secrets' }).click();
      await expect.poll(() => page.getByLabel('Allow (one rule a line)').inputValue()).toBe(host);
      const egress = page.getByTestId('egress-row');
      await egress.filter({ hasText: '/echo' }).filter({ hasText: 'allowed' }).filter({ hasText: 'CONSOLE_JIT' }).first().waitFor({ timeout: 60_000 });
      await egress.filter({ hasText: '/echo' }).filter({ hasText: 'refused' }).first().waitFor({ timeout: 60_000 });

      // The tenant's secrets: add one, rotate it, remove it; neither value ever comes back to the page.
      const added = `console-added-${Date.now()}-value`;
      const rotated = `console-rotated-${Date.now()}-value`;
      const form = page.getByRole('form', { name: 'Add a secret' });
      await form.getByLabel('Name').fill('CONSOLE_ADDED');
      await form.getByLabel('Value').fill(added);
      await form.getByLabel('Hosts (comma-separated)').fill('api.example.com');
      await form.getByLabel('Header').fill('authorization');
      await form.getByLabel('Format').fill('Bearer {value}');
      await form.getByRole('button', { name: 'Add secret' }).click();
      const row = page.getByTestId('secret-row').filter({ hasText: 'CONSOLE_ADDED' });
      await row.filter({ hasText: 'api.example.com' }).waitFor();
      expect(await form.getByLabel('Value').inputValue()).toBe('');
      const before = (await api('GET', '/v1/secrets')).body!.secrets.find((x: { name: string }) => x.name === 'CONSOLE_ADDED');
      expect(before.header).toBe('authorization');
      await row.getByRole('button', { name: 'Rotate CONSOLE_ADDED' }).click();
      await row.getByLabel('New value for CONSOLE_ADDED').fill(rotated);
      await row.getByRole('button', { name: 'Save new value' }).click();
      await page.getByTestId('secrets-status').filter({ hasText: 'Secret CONSOLE_ADDED rotated.' }).waitFor();
      const after = (await api('GET', '/v1/secrets')).body!.secrets.find((x: { name: string }) => x.name === 'CONSOLE_ADDED');
      // The same scope, a new value.
      expect({ ...after, updatedAt: '' }).toEqual({ ...before, updatedAt: '' });
      expect(after.updatedAt >= before.updatedAt).toBe(true);
      await page.screenshot({ path: join(artifacts, '11-network.png'), fullPage: true });
      await row.getByRole('button', { name: 'Remove CONSOLE_ADDED' }).click();
      await row.getByRole('button', { name: 'Confirm remove CONSOLE_ADDED' }).click();
      await row.waitFor({ state: 'detached' });
      expect((await api('GET', '/v1/secrets')).body!.secrets.map((x: { name: string }) => x.name)).not.toContain('CONSOLE_ADDED');
      for (const v of [added, rotated]) {
        expect(bodies.join('\n')).not.toContain(v);
        expect(await page.content()).not.toContain(v);
      }

      // The events page verifies the sandbox's signed export in the page; an edited event fails that check.
      await page.getByRole('link', { name: 'Events' }).click();
      await page
        .getByTestId('chain')
        .filter({ hasText: /^Chain verified: \d+ events/ })
        .waitFor({ timeout: 60_000 });
      await page.screenshot({ path: join(artifacts, '12-events.png') });
      await page.route('**/audit/export', async (route) => {
        const res = await route.fetch();
        const lines = (await res.text()).split('\n');
        lines[1] = lines[1]!.replace('"at":"', '"at":"1');
        await route.fulfill({ response: res, body: lines.join('\n') });
      });
      await page.getByRole('button', { name: 'Verify the chain' }).click();
      await page.getByTestId('chain').filter({ hasText: 'Chain FAILED at line 2 (hash)' }).waitFor({ timeout: 60_000 });
      await page.unroute('**/audit/export');
      // The value reached the upstream only: no page, answer or screen showed it.
      expect(bodies.join('\n')).not.toContain(value);
      expect(await page.content()).not.toContain(value);
      await context.close();
    } finally {
      await upstream.close();
    }
  }, 600_000);

  it('lists a custom template with its versions and a followed build log, creates from it, and deletes it', async () => {
    const name = `console-tpl-${Date.now().toString(36)}`;
    // A template made by hand through the API, as a builder makes one: a build record, one step, a snapshot, a version.
    const build = await api('POST', '/v1/template-builds', { body: { name } });
    expect(build.status).toBe(201);
    const buildId = build.body!.id as string;
    const report = (body: unknown) => api('POST', `/v1/template-builds/${buildId}/log`, { body });
    const builder = await Sandbox.create({ ...config(), timeoutS: 1200, snapshotIntervalS: 3600 });
    killAtEnd.push(builder.id);
    const step = 'echo from-the-template > /root/tpl-mark';
    expect((await report({ lines: [{ stream: 'info', text: 'making the mark' }], step: { index: 0, name: step, status: 'running' } })).status).toBe(204);

    const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
    const page = await context.newPage();
    const creates: string[] = [];
    page.on('request', (req) => {
      if (req.method() === 'POST' && new URL(req.url()).pathname === '/v1/sandboxes') creates.push(req.postData() ?? '');
    });
    await signInPage(page);
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Templates' }).click();
    // The build runs before any version exists: the Templates page lists it, and its log is followed as it grows.
    const buildRow = page.getByTestId('build-row').filter({ hasText: buildId });
    await buildRow.getByTestId('build-status').filter({ hasText: 'running' }).waitFor({ timeout: 30_000 });
    await buildRow.filter({ hasText: 'running step 0' }).waitFor();
    await buildRow.getByRole('link', { name: `Log of build ${buildId}` }).click();
    const log = page.getByTestId('build-log');
    await log.filter({ hasText: 'making the mark' }).waitFor({ timeout: 30_000 });
    await page.getByTestId('build-log-status').filter({ hasText: 'running, following' }).waitFor();
    await page
      .getByRole('heading', { name: `Template ${name}` })
      .filter({ hasText: 'no published version' })
      .waitFor();

    expect((await builder.commands.run(step)).exitCode).toBe(0);
    const done = { lines: [{ stream: 'stdout', text: 'mark made' }], step: { index: 0, name: step, status: 'done', durationMs: 1200 } };
    expect((await report(done)).status).toBe(204);
    await log.filter({ hasText: 'mark made' }).waitFor({ timeout: 30_000 });
    // Read on from nextLine: the first line is there once.
    expect(((await log.textContent()) ?? '').split('making the mark')).toHaveLength(2);
    const snap = await builder.snapshot();
    const published = await api('POST', '/v1/templates', { body: { name, snapshotId: snap.id, buildId } });
    expect(published.status).toBe(201);
    const first = published.body as { id: string; memoryMib: number; vcpus: number };
    // The page sees the build end by its log, and the version through the tenant's event stream.
    await page.getByTestId('build-log-status').filter({ hasText: 'ready' }).waitFor({ timeout: 30_000 });
    await page.getByTestId('build-row').filter({ hasText: buildId }).getByTestId('build-status').filter({ hasText: 'ready' }).waitFor({ timeout: 30_000 });
    const versionRow = page.getByTestId('version-row').filter({ hasText: first.id });
    await versionRow
      .filter({ hasText: 'v1' })
      .filter({ hasText: snap.id })
      .filter({ hasText: `${first.memoryMib} MiB` })
      .waitFor({ timeout: 30_000 });
    await page.screenshot({ path: join(artifacts, '13-template.png'), fullPage: true });
    // A second version, of the same snapshot, so one version can be deleted and the template stay.
    const second = await api('POST', '/v1/templates', { body: { name, snapshotId: snap.id } });
    expect(second.status).toBe(201);
    await page.getByTestId('version-row').filter({ hasText: second.body!.id }).filter({ hasText: 'v2' }).waitFor({ timeout: 30_000 });
    await builder.kill();

    await page.getByRole('link', { name: 'All templates' }).click();
    const row = page.getByTestId('template-row').filter({ hasText: name });
    await row.filter({ hasText: 'custom' }).filter({ hasText: 'v2' }).waitFor({ timeout: 30_000 });
    await page.getByTestId('template-row').filter({ hasText: 'base' }).filter({ hasText: 'platform' }).first().waitFor();

    // The New sandbox picker offers it, says its size is fixed, and sends none of its own.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Sandboxes' }).click();
    const form = page.getByRole('form', { name: 'New sandbox' });
    // A size typed for a platform template is not carried over to a custom one.
    await form.getByLabel('Memory (MiB)').fill('512');
    await expect.poll(() => form.getByLabel('Template').locator('option').allTextContents()).toContainEqual(expect.stringContaining(`${name} v2 (custom,`));
    await form.getByLabel('Template').selectOption(name);
    await form
      .getByTestId('template-size')
      .filter({ hasText: 'fixed by the template' })
      .filter({ hasText: `${first.memoryMib} MiB` })
      .waitFor();
    expect(await form.getByLabel('Memory (MiB)').count()).toBe(0);
    await form.getByRole('button', { name: 'New sandbox' }).click();
    const createdLink = form.getByTestId('created').getByRole('link');
    await createdLink.waitFor({ timeout: 120_000 });
    const createdId = (await createdLink.textContent())!;
    killAtEnd.push(createdId);
    expect(creates.map((b) => JSON.parse(b))).toEqual([{ template: name }]);
    expect((await api('GET', `/v1/sandboxes/${createdId}`)).body).toMatchObject({ template: name, memoryMib: first.memoryMib, vcpus: first.vcpus });
    await createdLink.click();
    await page.getByRole('heading', { name: `Sandbox ${createdId}` }).waitFor();
    await page.getByTestId('terminal-status').filter({ hasText: 'connected' }).waitFor({ timeout: 120_000 });
    await seePrompt(page);
    await typeAndSee(page, 'cat /root/tpl-mark', 'from-the-template');

    // Published by the operator: another tenant's member sees it in its list and picker, marked, and cannot delete it.
    expect((await api('PATCH', `/v1/templates/${name}`, { body: { public: true } })).status).toBe(200);
    const tenant = await api('POST', '/v1/tenants', { body: { name: `console-viewer-${Date.now()}` } });
    const member = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: {} });
    const other = await browser.newContext({ viewport: { width: 1366, height: 768 } });
    const theirs = await other.newPage();
    await signInPage(theirs, member.body!.key as string);
    const picker = theirs.getByRole('form', { name: 'New sandbox' }).getByLabel('Template');
    await expect.poll(() => picker.locator('option').allTextContents()).toContainEqual(expect.stringContaining(`${name} v2 (published,`));
    await theirs.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Templates' }).click();
    await theirs.getByTestId('template-row').filter({ hasText: name }).filter({ hasText: 'published by the platform' }).waitFor({ timeout: 30_000 });
    await theirs.goto(`${apiUrl}/console/#/templates/${name}`);
    await theirs.getByTestId('version-row').filter({ hasText: second.body!.id }).waitFor({ timeout: 30_000 });
    expect(await theirs.getByRole('button', { name: /Delete/ }).count()).toBe(0);
    await other.close();

    // Deleting one version, then the template, each after a confirmation.
    await page.goto(`${apiUrl}/console/#/templates/${name}`);
    await page.getByRole('button', { name: 'Delete version 1' }).click();
    await page.getByRole('button', { name: 'Keep it' }).click();
    await page.getByRole('button', { name: 'Delete version 1' }).click();
    expect((await api('GET', `/v1/templates/${name}`)).body!.versions).toHaveLength(2);
    await page.getByRole('button', { name: 'Confirm delete version 1' }).click();
    await page.getByTestId('version-row').filter({ hasText: first.id }).waitFor({ state: 'detached', timeout: 30_000 });
    await page.getByTestId('version-row').filter({ hasText: second.body!.id }).waitFor();
    expect((await api('GET', `/v1/templates/${name}`)).body!.versions.map((v: { version: number }) => v.version)).toEqual([2]);
    await page.getByRole('button', { name: 'Delete template' }).click();
    await page.getByRole('button', { name: `Confirm delete template ${name}` }).click();
    await page.waitForURL((url) => url.hash === '#/templates');
    await page.getByTestId('template-row').filter({ hasText: 'base' }).first().waitFor();
    expect(await page.getByTestId('template-row').filter({ hasText: name }).count()).toBe(0);
    expect((await api('GET', `/v1/templates/${name}`)).body!.error.code).toBe('template_not_found');
    // The sandbox made from it runs on.
    expect((await api('GET', `/v1/sandboxes/${createdId}`)).body!.state).toBe('running');
    await context.close();
  }, 900_000);
});
