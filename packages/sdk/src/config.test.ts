// Finding the server: options, env, then $SANDGLASS_HOME/server.json and its admin key file.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveConfig } from './config.js';
import { AuthenticationError } from './errors.js';

const saved = { ...process.env };
let home: string;

beforeEach(async () => {
  home = await mkdtemp(join(tmpdir(), 'sg-home-'));
  delete process.env.SANDGLASS_URL;
  delete process.env.SANDGLASS_API_KEY;
  process.env.SANDGLASS_HOME = home;
});
afterEach(async () => {
  process.env = { ...saved };
  await rm(home, { recursive: true, force: true });
});

describe('resolveConfig', () => {
  it('prefers explicit options, then env', async () => {
    process.env.SANDGLASS_URL = 'http://env:1/';
    process.env.SANDGLASS_API_KEY = 'envkey';
    expect(await resolveConfig()).toEqual({ apiUrl: 'http://env:1', apiKey: 'envkey', requestTimeoutMs: 60_000 });
    expect(await resolveConfig({ apiUrl: 'http://opt:2', apiKey: 'optkey', requestTimeoutMs: 5 })).toEqual({
      apiUrl: 'http://opt:2',
      apiKey: 'optkey',
      requestTimeoutMs: 5,
    });
  });

  it('reads server.json and the admin key file of a local `sandglass up`', async () => {
    const keyFile = join(home, 'admin-key');
    await writeFile(keyFile, 'sgk_admin\n');
    await writeFile(
      join(home, 'server.json'),
      JSON.stringify({ url: 'http://127.0.0.1:7070', gatewayUrl: 'http://127.0.0.1:7071', pid: 1, adminKeyFile: keyFile }),
    );
    expect(await resolveConfig()).toMatchObject({ apiUrl: 'http://127.0.0.1:7070', apiKey: 'sgk_admin' });
    process.env.SANDGLASS_API_KEY = 'envkey';
    expect(await resolveConfig()).toMatchObject({ apiUrl: 'http://127.0.0.1:7070', apiKey: 'envkey' });
  });

  it('says what to do when nothing is configured', async () => {
    const err = await resolveConfig().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthenticationError);
    expect(err).toMatchObject({ code: 'unauthenticated' });
    expect((err as Error).message).toMatch(/sandglass up.*SANDGLASS_URL.*SANDGLASS_API_KEY/);
  });
});
