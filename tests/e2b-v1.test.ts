// Older `e2b` 2.x releases, unmodified, against a real `sandglass up`: the oldest the suite can drive (2.7.0, the first
// with E2B_SANDBOX_URL; pinned as `e2b-old`) and a middle one (2.45.0, `e2b-mid`, the last that refuses any key but
// `e2b_` + hex): their v1 create and connect, their defaults `allow_internet_access: true` and `secure: true`, with an
// API key minted in E2B's format. Loopback only, as tests/e2b.test.ts.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as Old from 'e2b-old';
import { offLoopback } from './e2b-env.js';
import { adminKey, api, apiUrl } from './helpers.js';

const RUN = randomBytes(4).toString('hex');

// What the SDK sends to the control plane, seen by wrapping the global fetch (the requests still go out unchanged).
const calls: string[] = [];
const realFetch = globalThis.fetch;
globalThis.fetch = ((input: RequestInfo | URL, init?: RequestInit) => {
  const req = input instanceof Request ? input : undefined;
  const url = new URL(req?.url ?? String(input));
  if (url.href.startsWith(`${apiUrl}/e2b/`)) calls.push(`${init?.method ?? req?.method ?? 'GET'} ${url.pathname.slice('/e2b'.length)}`);
  return realFetch(input, init);
}) as typeof fetch;
// Imported once the wrapper is in place: a release may keep the fetch it found at load.
const old = await import('e2b-old');
const mid = await import('e2b-mid');

const toKill: string[] = [];

afterAll(async () => {
  // Through Sandglass's API with the suite's key: each release's own key ends revoked.
  for (const id of toKill) await api('DELETE', `/v1/sandboxes/${id}`);
  globalThis.fetch = realFetch;
  expect(offLoopback, offLoopback.join('\n')).toEqual([]);
});

delete process.env.E2B_VALIDATE_API_KEY;

// The two releases differ in nothing these calls use; 2.7.0's types stand for both.
// 2.45.0 builds its own fetcher on Node, out of the wrapper's sight: that it creates and connects through v1 is in its
// source, and its create carries allow_internet_access: true, which the v2 route would refuse.
describe.each([
  ['2.7.0', old, true],
  ['2.45.0', mid as unknown as typeof Old, false],
])('e2b@%s (v1 routes)', (version, { AuthenticationError, CommandExitError, NotFoundError, Sandbox }, seen) => {
  let keyId: string;

  beforeAll(async () => {
    const made = await api('POST', '/v1/api-keys', { body: { format: 'e2b', role: 'member', name: `e2b-${version}-${RUN}` } });
    expect(made.status).toBe(201);
    keyId = made.body!.id;
    // The SDK's own check, in the releases that make it before sending anything (e2b@2.45.0's API_KEY_PATTERN).
    expect(made.body!.key).toMatch(/^e2b_[0-9a-f]+$/);
    process.env.E2B_API_KEY = made.body!.key;
    calls.length = 0;
  });

  it('creates with its defaults through POST /sandboxes (no egress rule), runs commands and files', async () => {
    const sbx = await Sandbox.create('base', { timeoutMs: 600_000, metadata: { suite: 'e2b-v1', run: RUN, version } });
    toKill.push(sbx.sandboxId);
    if (seen) expect(calls).toContain('POST /sandboxes');
    expect(calls).not.toContain('POST /v2/sandboxes');

    const info = await sbx.getInfo();
    expect(info).toMatchObject({ sandboxId: sbx.sandboxId, name: 'base', metadata: { suite: 'e2b-v1', run: RUN, version } });
    expect((await sbx.commands.run('echo hello $(whoami)')).stdout).toBe('hello user\n');
    await sbx.files.write('/home/user/note.txt', `from ${version} ${RUN}`);
    expect(await sbx.files.read('/home/user/note.txt')).toBe(`from ${version} ${RUN}`);
    await expect(sbx.commands.run('exit 3')).rejects.toBeInstanceOf(CommandExitError);

    // allow_internet_access: true was the default policy: no egress rule at all.
    const native = await api('GET', `/v1/sandboxes/${sbx.sandboxId}`);
    expect(native.body!.network).toBeNull();
    const listed = await Sandbox.list({ query: { metadata: { run: RUN, version } } }).nextItems();
    expect(listed.map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);
  });

  it('keeps allowOut as the policy, the SDK default allow_internet_access notwithstanding', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 600_000, network: { allowOut: ['api.example.test'] } });
    toKill.push(sbx.sandboxId);
    const native = await api('GET', `/v1/sandboxes/${sbx.sandboxId}`);
    expect(native.body!.network).toEqual({ allow: ['api.example.test'], deny: [] });
    await sbx.kill();
  });

  it('pauses and resumes through POST /sandboxes/{id}/connect, memory intact', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    toKill.push(sbx.sandboxId);
    await sbx.commands.run('echo kept > /dev/shm/mem.txt');
    expect(await sbx.betaPause()).toBe(true);
    expect((await sbx.getInfo()).state).toBe('paused');

    const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
    if (seen) expect(calls).toContain(`POST /sandboxes/${sbx.sandboxId}/connect`);
    expect((await resumed.getInfo()).state).toBe('running');
    expect(await resumed.files.read('/dev/shm/mem.txt')).toBe('kept\n');
    // Connecting to a running sandbox hands back a working handle.
    expect((await (await sbx.connect()).commands.run('cat /dev/shm/mem.txt')).stdout).toBe('kept\n');
    await resumed.kill();
    await expect(Sandbox.connect(sbx.sandboxId)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('needs the e2b_ spelling only where the release checks keys itself', async () => {
    const made = await Sandbox.create({ apiKey: adminKey, timeoutMs: 600_000 }).catch((e: unknown) => e);
    if (version === '2.45.0') {
      // Refused by the SDK before any request: why older SDKs need a key minted with format: e2b.
      expect(made).toBeInstanceOf(AuthenticationError);
      expect((made as Error).message).toMatch(/Invalid API key format/);
    } else {
      expect(made).toBeInstanceOf(Sandbox);
      toKill.push((made as InstanceType<typeof Sandbox>).sandboxId);
    }
  });

  it('is refused from the next request once its e2b_ key is revoked', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    toKill.push(sbx.sandboxId);
    expect((await api('DELETE', `/v1/api-keys/${keyId}`)).status).toBe(200);
    await expect(Sandbox.create()).rejects.toBeInstanceOf(AuthenticationError);
    await expect(Sandbox.connect(sbx.sandboxId)).rejects.toBeInstanceOf(AuthenticationError);
  });
});
