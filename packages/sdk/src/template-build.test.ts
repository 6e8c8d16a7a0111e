// Step cache keys (stable across runs, sensitive to every input) and a build whose every step is cached, against a scripted control plane.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { baseKey, canonicalJson, startKey, stepKey } from './template-build.js';
import { Template } from './template.js';
import { parseTemplateYaml, type CopyStep, type RunStep, type TemplateSpec } from './template-spec.js';
import { readBody, sendJson, startTestServer, wireError, type TestServer } from './test-server.js';

const spec = (extra: Partial<TemplateSpec> = {}): TemplateSpec => ({ from: 'base', envs: {}, user: 'root', workdir: '/', steps: [], ...extra });
const run: RunStep = { kind: 'run', name: 'RUN make', cmd: 'make', user: 'root', workdir: '/src', envs: { A: '1' } };
const copy: CopyStep = { kind: 'copy', name: 'COPY app /app', src: ['app'], dest: '/app', user: 'root' };

describe('cache keys', () => {
  it('are the same for the same inputs, whatever the order of their fields or the step names', () => {
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: undefined }] })).toBe('{"a":[{"d":2}],"b":1}');
    const k0 = baseKey(spec({ memoryMib: 512, network: { allow: ['a'], deny: [] } }), 'tpl_1');
    expect(k0).toBe(baseKey({ network: { deny: [], allow: ['a'] }, memoryMib: 512, ...spec() }, 'tpl_1'));
    expect(k0).toMatch(/^[0-9a-f]{64}$/);
    expect(stepKey(k0, run, '')).toBe(stepKey(k0, { ...run, name: 'build it' }, ''));
    // Pinned: a change of the keys' recipe misses every cache entry written before it, so it must be deliberate.
    expect(baseKey(spec(), 'base')).toBe('aeeb68110b31e143ed25778445f30504b7682f2c50f4dd7a67ba2bfb22435008');
    expect(stepKey(baseKey(spec(), 'base'), run, '')).toBe('36e13960b659a3aaaf2c72ed45db8c9a5ac9620bed075365872f09f03896b593');
  });

  it('change with every input', () => {
    const k0 = baseKey(spec(), 'tpl_1');
    const others = [
      baseKey(spec(), 'tpl_2'),
      baseKey(spec({ from: 'other' }), 'tpl_1'),
      baseKey(spec({ memoryMib: 1024 }), 'tpl_1'),
      baseKey(spec({ vcpus: 2 }), 'tpl_1'),
      baseKey(spec({ diskMib: 2048 }), 'tpl_1'),
      baseKey(spec({ network: { allow: ['x'], deny: [] } }), 'tpl_1'),
      baseKey(spec({ secrets: ['TOKEN'] }), 'tpl_1'),
    ];
    expect(new Set([k0, ...others]).size).toBe(others.length + 1);
    const k1 = stepKey(k0, run, '');
    const steps = [
      stepKey(others[0]!, run, ''),
      stepKey(k0, { ...run, cmd: 'make all' }, ''),
      stepKey(k0, { ...run, user: 'app' }, ''),
      stepKey(k0, { ...run, workdir: '/' }, ''),
      stepKey(k0, { ...run, envs: { A: '2' } }, ''),
      stepKey(k0, copy, 'a'.repeat(64)),
      stepKey(k0, copy, 'b'.repeat(64)),
      stepKey(k0, { ...copy, user: 'app' }, 'a'.repeat(64)),
      stepKey(k0, { ...copy, dest: '/app/' }, 'a'.repeat(64)),
    ];
    expect(new Set([k1, ...steps]).size).toBe(steps.length + 1);
    const start = { cmd: 'srv', user: 'root', workdir: '/', ready: { cmd: 'check', timeoutS: 60, intervalMs: 500 } };
    const ks = startKey(k1, start, {});
    expect(new Set([ks, startKey(k1, { ...start, cmd: 'srv2' }, {}), startKey(k1, start, { A: '1' }), startKey(k0, start, {})]).size).toBe(4);
  });
});

describe('Template.build with every step cached', () => {
  let server: TestServer;
  const reports: unknown[] = [];
  let published: unknown;

  beforeEach(async () => {
    server = await startTestServer();
    reports.length = 0;
    server.on('GET /v1/templates/base', (_req, res) =>
      sendJson(res, 200, { template: { id: 'base', name: 'base', status: 'ready', memoryMib: 256, createdAt: new Date().toISOString() }, versions: [] }),
    );
    server.on('POST /v1/template-builds', (_req, res) =>
      sendJson(res, 201, { id: 'bld_1', name: 'web', status: 'running', steps: [], startedAt: '', finishedAt: null, versionId: null, error: null }),
    );
    server.on('POST /v1/template-builds/bld_1/log', async (req, res) => {
      reports.push(JSON.parse((await readBody(req)).toString()));
      sendJson(res, 204, undefined);
    });
    server.on('POST /v1/templates', async (req, res) => {
      published = JSON.parse((await readBody(req)).toString());
      sendJson(res, 201, { id: 'tpl_1', name: 'web', version: 1 });
    });
  });

  afterEach(() => server.close());

  it('publishes the cached snapshot without a sandbox, reporting each step cached', async () => {
    const { spec: s } = parseTemplateYaml('from: base\nenvs: {A: "1"}\nsteps: [{run: "one"}, {run: "two"}]\nstart: {cmd: srv}\n');
    const k0 = baseKey(s, 'base');
    const k1 = stepKey(k0, s.steps[0]!, '');
    const k2 = stepKey(k1, s.steps[1]!, '');
    const ks = startKey(k2, s.start!, s.envs);
    const snaps = new Map([
      [k1, 'snap_1'],
      [k2, 'snap_2'],
      [ks, 'snap_s'],
    ]);
    for (const [k, id] of snaps) server.on(`GET /v1/template-cache/${k}`, (_req, res) => sendJson(res, 200, { key: k, snapshotId: id, createdAt: '' }));
    const logs: string[] = [];
    const result = await Template.build({ name: 'web', spec: s, context: '.', apiUrl: server.url, apiKey: 'k', onLog: (l) => logs.push(l.text) });
    expect(result.steps).toEqual([
      { index: 0, name: 'RUN one', cached: true, durationMs: 0 },
      { index: 1, name: 'RUN two', cached: true, durationMs: 0 },
      { index: 2, name: 'start', cached: true, durationMs: 0 },
    ]);
    expect(published).toEqual({
      name: 'web',
      snapshotId: 'snap_s',
      envs: { A: '1' },
      user: 'root',
      workdir: '/',
      start: { cmd: 'srv', user: 'root', workdir: '/' },
      buildId: 'bld_1',
    });
    expect(server.requests.some((r) => r.path.startsWith('/v1/sandboxes'))).toBe(false);
    expect(reports.map((r) => (r as { step?: unknown }).step).filter(Boolean)).toEqual([
      { index: 0, name: 'RUN one', status: 'cached' },
      { index: 1, name: 'RUN two', status: 'cached' },
      { index: 2, name: 'start', status: 'cached' },
    ]);
    expect(logs.at(-1)).toBe('published web version 1 (tpl_1)');
  });

  it('answers an unknown from as template_not_found naming from, before a build is opened', async () => {
    await expect(
      Template.build({ name: 'web', spec: parseTemplateYaml('from: nope\n').spec, context: '.', apiUrl: server.url, apiKey: 'k' }),
    ).rejects.toMatchObject({
      code: 'template_not_found',
      details: { field: 'from' },
    });
    expect(server.requests.some((r) => r.path === '/v1/template-builds')).toBe(false);
  });

  it('refuses an unknown step kind in a spec given as an object before asking the server anything', async () => {
    const bad = spec({ steps: [{ kind: 'apt', name: 'x' } as unknown as RunStep] });
    await expect(Template.build({ name: 'web', spec: bad, context: '.', apiUrl: server.url, apiKey: 'k' })).rejects.toMatchObject({
      code: 'invalid_argument',
      details: { field: 'steps[0].kind' },
    });
    expect(server.requests).toEqual([]);
  });

  it('passes template_build_in_progress through', async () => {
    server.on('POST /v1/template-builds', (_req, res) => wireError(res, 409, 'template_build_in_progress'));
    await expect(Template.build({ name: 'web', spec: spec(), context: '.', apiUrl: server.url, apiKey: 'k' })).rejects.toMatchObject({
      code: 'template_build_in_progress',
    });
  });
});
