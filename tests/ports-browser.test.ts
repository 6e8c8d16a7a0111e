// Guest ports in Chromium against the real server and VMs: the console lists a sandbox's listening ports, opens one
// through a signed URL whose page talks to the guest over WebSocket, and makes it public; a second sandbox's host and
// page get nothing from the first one's cookie.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { Sandbox } from '@sandglass/sdk';
import { launchChromium, signInPage } from './browser.js';
import { adminKey, api, apiUrl, checkResponsesAgainstSpec, config, gatewayUrl } from './helpers.js';
import { PORT_APP, send } from './port-support.js';

checkResponsesAgainstSpec();

const APP_PORT = 8080;
const FILES_PORT = 8000;
const DOMAIN = 'sandglass.localhost';
const COOKIE = 'sandglass_port_access';
const gw = new URL(gatewayUrl);
const hostOf = (port: number, id: string) => `${port}-${id}.${DOMAIN}:${gw.port}`;

/** A sandbox serving the preview app, and python3's http.server for a page on a second port of the same sandbox. */
async function serving(): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...config(), timeoutS: 900, snapshotIntervalS: 3600 });
  await sbx.files.write('/tmp/app.py', PORT_APP);
  await sbx.files.write('/tmp/www/index.html', '<!doctype html><title>files</title><p>second port</p>');
  await sbx.commands.run(`exec python3 /tmp/app.py ${APP_PORT}`, { background: true, timeoutMs: 0 });
  await sbx.commands.run(`cd /tmp/www && exec python3 -m http.server ${FILES_PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
  for (;;) {
    const ports = (await sbx.ports.list()).map((p) => p.port);
    if (ports.includes(APP_PORT) && ports.includes(FILES_PORT)) return sbx;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** What a script of `page` gets from a WebSocket to `url` that sends one message: the echo, or `refused`. */
function wsFromPage(page: Page, url: string): Promise<string> {
  return page.evaluate(
    (u) =>
      new Promise<string>((resolve) => {
        const ws = new WebSocket(u);
        ws.onopen = () => ws.send('from-another-page');
        ws.onmessage = (e) => resolve(String(e.data));
        ws.onerror = () => resolve('refused');
      }),
    url,
  );
}

let browser: Browser;
let context: BrowserContext;
let a: Sandbox;
let b: Sandbox;
/** Every address the browser asked for. */
const requested: string[] = [];

beforeAll(async () => {
  [a, b] = await Promise.all([serving(), serving()]);
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
  context.on('request', (r) => requested.push(r.url()));
}, 600_000);

afterAll(async () => {
  await browser?.close();
  await Promise.all([a?.kill(), b?.kill()]);
});

describe('guest ports in a browser', () => {
  let consolePage: Page;

  it("lists the sandbox's listening ports in the console and opens one: its page talks to the guest over WebSocket", async () => {
    consolePage = await context.newPage();
    await signInPage(consolePage);
    await consolePage.goto(`${apiUrl}/console/#/sandboxes/${a.id}`);
    const ports = consolePage.getByRole('region', { name: 'Ports' });
    const open = ports.getByRole('button', { name: `Open port ${APP_PORT}`, exact: true });
    await open.waitFor({ timeout: 120_000 });
    await ports.getByRole('button', { name: `Open port ${FILES_PORT}`, exact: true }).waitFor();
    expect(await ports.getByLabel(`Public port ${APP_PORT}`).isChecked()).toBe(false);

    const opened = context.waitForEvent('page');
    await open.click();
    const preview = await opened;
    await preview.getByText('echo:from-the-page').waitFor({ timeout: 60_000 });
    // The signed URL's token left the address at its first use; the page sees no cookie and has no handle on the console.
    const at = new URL(preview.url());
    expect([at.host, at.pathname, at.search]).toEqual([hostOf(APP_PORT, a.id), '/', '']);
    expect(await preview.evaluate(() => [document.cookie, window.opener === null])).toEqual(['', true]);
    const cookies = await context.cookies(`http://${hostOf(APP_PORT, a.id)}/`);
    expect(cookies).toEqual([expect.objectContaining({ name: COOKIE, domain: `${APP_PORT}-${a.id}.${DOMAIN}`, path: '/', httpOnly: true, sameSite: 'Lax' })]);
    // The one address that carried a credential for the port is the signed URL, used once; the API key was in none.
    const signed = requested.filter((u) => u.includes('sandglass_url_token='));
    expect(signed).toHaveLength(1);
    expect(signed[0]).toMatch(new RegExp(`^http://${APP_PORT}-${a.id}\\.${DOMAIN.replace('.', '\\.')}:${gw.port}/\\?sandglass_url_token=sgpu_`));
    expect(requested.filter((u) => u.includes(adminKey))).toEqual([]);
    // The guest's page against the console in the same browser: the console's cookie is SameSite=Strict to another
    // site, and its API wants a header that a page of another origin sends only after a CORS grant the API never gives.
    const fromGuest = await preview.evaluate(
      async ([apiBase, id]) => {
        const read = await fetch(`${apiBase}/v1/sandboxes`, { credentials: 'include', headers: { 'x-sandglass-console': '1' } }).then(
          (r) => `read ${r.status}`,
          () => 'read blocked',
        );
        // Sent, with whatever cookie the browser would attach, but its answer unreadable: the API is reachable from here.
        const post = await fetch(`${apiBase}/v1/sandboxes/${id}/pause`, { method: 'POST', credentials: 'include', mode: 'no-cors' }).then(
          (r) => r.type,
          () => 'failed',
        );
        return [read, post];
      },
      [apiUrl, a.id] as const,
    );
    expect(fromGuest).toEqual(['read blocked', 'opaque']);
    expect((await api('GET', `/v1/sandboxes/${a.id}`)).body!.state).toBe('running');
    // The page's WebSocket went through the port route, and the sandbox's log counted it.
    const upgrades = async () => (await a.events()).filter((e) => e.type === 'port.request' && e.data.port === APP_PORT && e.data.status === 101).length;
    await expect.poll(upgrades, { timeout: 30_000 }).toBeGreaterThan(0);
    await preview.close();
  }, 300_000);

  it("opens a second sandbox's preview with its own cookie: its host refuses the first one's, and its page cannot use it", async () => {
    const preview = await context.newPage();
    await preview.goto((await b.ports.url(APP_PORT)).url);
    await preview.getByText('echo:from-the-page').waitFor({ timeout: 60_000 });
    const cookieOf = async (id: string) => (await context.cookies(`http://${hostOf(APP_PORT, id)}/`)).map((c) => c.value);
    const [ofA, ofB] = [await cookieOf(a.id), await cookieOf(b.id)];
    expect(ofA).toHaveLength(1);
    expect(ofB).toHaveLength(1);
    expect(ofB[0]).not.toBe(ofA[0]);

    // The browser keeps each cookie to its host; sent there by hand, A's cookie opens nothing of B's.
    for (const path of ['/', `/v1/sandboxes/${b.id}/ports/${APP_PORT}/`]) {
      const r = await send(path, { headers: { host: path === '/' ? hostOf(APP_PORT, b.id) : gw.host, cookie: `${COOKIE}=${ofA[0]}` } });
      expect([r.status, JSON.parse(r.body.toString()).error.code]).toEqual([403, 'permission_denied']);
    }

    // B's page is the guest's, so hostile: a WebSocket from it to A's host carries A's cookie (the two hosts are one
    // site to the browser), and the gateway must not let it through.
    expect(await wsFromPage(preview, `ws://${hostOf(APP_PORT, a.id)}/ws`)).toBe('refused');
    const fromB = await send('/ws', {
      headers: {
        host: hostOf(APP_PORT, a.id),
        cookie: `${COOKIE}=${ofA[0]}`,
        origin: `http://${hostOf(APP_PORT, b.id)}`,
        upgrade: 'websocket',
        connection: 'Upgrade',
      },
    });
    expect([fromB.status, JSON.parse(fromB.body.toString()).error.code]).toEqual([403, 'permission_denied']);

    // B's page sets a cookie of the port cookie's name for the whole domain, path /ws so the browser sends it first to
    // A's host: A's own cookie, sent after it, still opens A's page and its WebSocket.
    await preview.evaluate(() => {
      // biome-ignore lint/suspicious/noDocumentCookie: this is the hostile page's own trick, a cookie set by script.
      document.cookie = `sandglass_port_access=sgpu_dG9zc2Vk.dG9zc2Vk; domain=${location.hostname.split('.').slice(1).join('.')}; path=/ws; max-age=3600`;
    });
    const sentToWs = (await context.cookies(`http://${hostOf(APP_PORT, a.id)}/ws`)).map((c) => c.value);
    expect(sentToWs.sort()).toEqual([ofA[0]!, 'sgpu_dG9zc2Vk.dG9zc2Vk'].sort());
    const again = await context.newPage();
    await again.goto((await a.ports.url(APP_PORT)).url);
    await expect.poll(() => again.locator('#ws').textContent(), { timeout: 60_000 }).not.toBe('connecting');
    expect(await again.locator('#ws').textContent()).toBe('echo:from-the-page');
    await again.close();

    // A page on another port of the same sandbox may: a dev server's front end calling its own back end.
    const files = await context.newPage();
    await files.goto((await a.ports.url(FILES_PORT)).url);
    await files.getByText('second port').waitFor({ timeout: 60_000 });
    expect(await wsFromPage(files, `ws://${hostOf(APP_PORT, a.id)}/ws`)).toBe('echo:from-another-page');
    await Promise.all([preview.close(), files.close()]);
  }, 300_000);

  it('makes a port public from the console and private again, each change an event', async () => {
    const ports = consolePage.getByRole('region', { name: 'Ports' });
    const toggle = ports.getByLabel(`Public port ${APP_PORT}`);
    const anonymous = () => send('/', { headers: { host: hostOf(APP_PORT, a.id) } });
    expect((await anonymous()).status).toBe(401);
    // A click, not check(): the box shows the gateway's answer once the list reloads, not the click itself.
    await toggle.click();
    await expect.poll(() => toggle.isChecked()).toBe(true);
    expect((await anonymous()).status).toBe(200);
    // Only that port: the other one still wants a credential.
    expect((await send('/', { headers: { host: hostOf(FILES_PORT, a.id) } })).status).toBe(401);
    await toggle.click();
    await expect.poll(() => toggle.isChecked()).toBe(false);
    expect((await anonymous()).status).toBe(401);
    const visibility = (await a.events()).filter((e) => e.type === 'port.visibility').map((e) => e.data);
    expect(visibility).toEqual([
      { port: APP_PORT, public: true },
      { port: APP_PORT, public: false },
    ]);
  }, 120_000);
});
