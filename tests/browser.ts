// What the browser tests share: Debian's Chromium through playwright-core, and signing in to the console as a person does.
import { type Browser, chromium, type Page } from 'playwright-core';
import { adminKey, apiUrl } from './helpers.js';

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
}

export async function signInPage(page: Page, key = adminKey): Promise<void> {
  await page.goto(`${apiUrl}/console/`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Sandboxes' }).waitFor();
}
