// Template builds against real VMs: a YAML spec that copies a directory, runs steps as a user it created and as root and starts a server; a rebuild reusing the cached prefix; the same steps as a Dockerfile; a failing step.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SandglassError, Template, type TemplateBuildResult } from '@sandglass/sdk';
import { checkResponsesAgainstSpec, config, home } from './helpers.js';

checkResponsesAgainstSpec();

// A nonce in every step's envs: the cache is the tenant's, so an earlier run of this file must not make this one warm.
const nonce = randomBytes(4).toString('hex');
const yamlName = `tb-yaml-${nonce}`;
const dockerName = `tb-docker-${nonce}`;
const failName = `tb-fail-${nonce}`;
const cliName = `tb-cli-${nonce}`;
const promotedName = `tb-promoted-${nonce}`;
const PAGE = '<h1>built into the template</h1>\n';
let ctx: string;
const sandboxes: Sandbox[] = [];
const templates = [yamlName, dockerName, failName, cliName, promotedName];
const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

/** The CLI as a user runs it: it finds the local server and key by itself. */
function sg(args: string[]) {
  const env: NodeJS.ProcessEnv = { ...process.env, SANDGLASS_HOME: home };
  delete env.SANDGLASS_URL;
  delete env.SANDGLASS_API_KEY;
  const r = spawnSync(bin, args, { env, timeout: 600_000 });
  return { code: r.status, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') };
}

/** The YAML spec; `version` is what the last step writes, the one a rebuild changes. */
const yamlSpec = (version: string) => `
name: ${yamlName}
from: base
envs: { GREETING: hello, RUN_ID: "${nonce}" }
user: app
workdir: /srv/site
steps:
  - run: useradd -m app
  - copy: { src: site, dest: /srv/site/ }
    user: app
  - run: whoami > built-by.txt && echo "$GREETING from $(pwd)" >> built-by.txt
    user: app
    workdir: /srv/site
  - run: id -u > /root/root-step.txt && stat -c %U /srv/site/index.html >> /root/root-step.txt
    workdir: /srv/site
  - run: echo ${version} > version.txt
    workdir: /srv/site
start:
  cmd: python3 -m http.server 8000 --bind 127.0.0.1 --directory /srv/site
  ready: { cmd: curl -sf http://127.0.0.1:8000/index.html, timeoutS: 120, intervalMs: 1000 }
`;

// The same steps as the rebuilt YAML spec, in the Dockerfile subset.
const DOCKERFILE = `FROM base
ENV GREETING=hello RUN_ID=${nonce}
RUN useradd -m app
COPY --chown=app site /srv/site/
WORKDIR /srv/site
USER app
RUN whoami > built-by.txt && echo "$GREETING from $(pwd)" >> built-by.txt
USER root
RUN id -u > /root/root-step.txt && stat -c %U /srv/site/index.html >> /root/root-step.txt
RUN echo v2 > version.txt
USER app
EXPOSE 8000
HEALTHCHECK --interval=1s --start-period=120s CMD curl -sf http://127.0.0.1:8000/index.html
CMD python3 -m http.server 8000 --bind 127.0.0.1 --directory /srv/site
`;

function write(file: string, text: string): string {
  const path = join(ctx, file);
  writeFileSync(path, text);
  return path;
}

/** What a sandbox made from a template holds: the copied files, the steps' outputs, the server answering. */
async function inspect(template: string): Promise<string> {
  const sbx = await Sandbox.create({ ...config(), template, timeoutS: 600 });
  sandboxes.push(sbx);
  // Nothing is started here: the server answers because it was running when the template was snapshotted.
  const r = await sbx.commands.run(
    [
      'cd /srv/site',
      'cat built-by.txt version.txt',
      'stat -c "%n %U %a" index.html run.sh sub sub/data.txt',
      'readlink home',
      'cat /root/root-step.txt',
      // The template's envs are every process's in its sandboxes.
      'echo "$GREETING $RUN_ID"',
      'curl -sf http://127.0.0.1:8000/index.html',
      'curl -sf http://127.0.0.1:8000/sub/data.txt',
    ].join(' && '),
    { user: 'root' },
  );
  return r.stdout;
}

beforeAll(() => {
  ctx = mkdtempSync(join(tmpdir(), 'sg-template-ctx-'));
  mkdirSync(join(ctx, 'site/sub'), { recursive: true });
  chmodSync(join(ctx, 'site/sub'), 0o755);
  write('site/index.html', PAGE);
  write('site/sub/data.txt', 'data\n');
  chmodSync(write('site/run.sh', '#!/bin/sh\necho run\n'), 0o755);
  symlinkSync('index.html', join(ctx, 'site/home'));
});

afterAll(async () => {
  for (const s of sandboxes) await s.kill().catch(() => undefined);
  for (const t of templates) await Template.delete(t, config()).catch(() => undefined);
  rmSync(ctx, { recursive: true, force: true });
});

const expected = (version: string) =>
  [
    'app',
    'hello from /srv/site',
    version,
    'index.html app 644',
    'run.sh app 755',
    'sub app 755',
    'sub/data.txt app 644',
    'index.html',
    '0',
    'app',
    `hello ${nonce}`,
    PAGE.trimEnd(),
    'data',
    '',
  ].join('\n');

describe('a template built from a YAML spec', () => {
  let cold: TemplateBuildResult;
  let warm: TemplateBuildResult;

  it('copies the context, runs steps as its user and as root, and wakes with its server running', async () => {
    const lines: string[] = [];
    const file = write('sandglass.template.yaml', yamlSpec('v1'));
    cold = await Template.build({ ...config(), name: yamlName, file, context: ctx, onLog: (l) => lines.push(l.text) });
    expect(cold.steps.map((s) => [s.index, s.cached])).toEqual([
      [0, false],
      [1, false],
      [2, false],
      [3, false],
      [4, false],
      [5, false],
    ]);
    expect(cold.version).toMatchObject({ name: yamlName, version: 1, envs: { GREETING: 'hello', RUN_ID: nonce }, user: 'app', workdir: '/srv/site' });
    expect(lines).toContain('step 1/5 RUN useradd -m app');
    expect(lines).toContain('start: ready');
    expect(cold.version.start).toEqual({
      cmd: 'python3 -m http.server 8000 --bind 127.0.0.1 --directory /srv/site',
      user: 'app',
      workdir: '/srv/site',
      ready: { cmd: 'curl -sf http://127.0.0.1:8000/index.html', timeoutS: 120, intervalMs: 1000 },
    });
    expect(await inspect(yamlName)).toBe(expected('v1'));
    // A call that names no user or directory runs as the template's user in its workdir.
    expect((await sandboxes.at(-1)!.commands.run('id -un; pwd; cat version.txt')).stdout).toBe('app\n/srv/site\nv1\n');
    const build = await Template.getBuild(cold.buildId, config());
    expect(build).toMatchObject({ status: 'ready', versionId: cold.version.id, error: null });
  }, 900_000);

  it('rebuilds with only the last step changed from the cached prefix', async () => {
    const file = write('sandglass.template.yaml', yamlSpec('v2'));
    warm = await Template.build({ ...config(), name: yamlName, file, context: ctx });
    expect(warm.steps.map((s) => [s.index, s.cached])).toEqual([
      [0, true],
      [1, true],
      [2, true],
      [3, true],
      [4, false],
      [5, false],
    ]);
    // The build's record says the same: what the build reported, step by step.
    const build = await Template.getBuild(warm.buildId, config());
    expect(build.steps.map((s) => [s.index, s.status])).toEqual([
      [0, 'cached'],
      [1, 'cached'],
      [2, 'cached'],
      [3, 'cached'],
      [4, 'done'],
      [5, 'done'],
    ]);
    expect(warm.version.version).toBe(2);
    expect(await inspect(yamlName)).toBe(expected('v2'));
    // The figure for the report (no assertion on time): each build's total and its steps, cached or in ms.
    const steps = (r: TemplateBuildResult) => r.steps.map((x) => (x.cached ? 'cached' : String(x.durationMs))).join(' ');
    process.stderr.write(
      `template build: cold ${cold.durationMs} ms [${steps(cold)}], rebuild with the last step changed ${warm.durationMs} ms [${steps(warm)}]: ${(cold.durationMs / warm.durationMs).toFixed(2)}x\n`,
    );
  }, 900_000);

  it('equals the build of the same steps as a Dockerfile', async () => {
    const file = write('e2b.Dockerfile', DOCKERFILE);
    const docker = await Template.build({ ...config(), name: dockerName, file, context: ctx });
    // The same steps have the same keys: the YAML build's snapshots serve every one of them.
    expect(docker.steps.every((s) => s.cached)).toBe(true);
    expect(docker.notes).toEqual(['line 12: EXPOSE ignored (every guest port is reachable through the gateway)']);
    expect(docker.version).toMatchObject({
      name: dockerName,
      envs: warm.version.envs,
      user: warm.version.user,
      workdir: warm.version.workdir,
      start: warm.version.start,
    });
    expect(await inspect(dockerName)).toBe(await inspect(yamlName));
  }, 900_000);

  it('builds, lists, shows logs, promotes and removes through the CLI', async () => {
    const built = sg(['template', 'build', '-f', join(ctx, 'e2b.Dockerfile'), '--name', cliName, ctx]);
    expect(built.code, built.stderr).toBe(0);
    expect(built.stdout).toMatch(/^tpl_\S+\n$/);
    expect(built.stderr).toContain('==> step 1/5 RUN useradd -m app: cached');
    expect(built.stderr).toContain('note: line 12: EXPOSE ignored');
    expect(built.stderr).toMatch(new RegExp(`==> ${cliName} version 1 in [0-9.]+ s \\(build bld_`));
    const listed = sg(['template', 'ls', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: cliName, id: built.stdout.trim(), custom: true, version: 1 })]),
    );
    const logs = sg(['template', 'logs', cliName]);
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout).toContain('==> step 5/5 RUN echo v2 > version.txt: cached');
    const promoted = sg(['template', 'create', '--from', warm.version.snapshotId, promotedName]);
    expect(promoted.code, promoted.stderr).toBe(0);
    expect((await Template.get(promotedName, config())).versions.map((v) => v.snapshotId)).toEqual([warm.version.snapshotId]);
    for (const name of [cliName, promotedName]) {
      const removed = sg(['template', 'rm', name]);
      expect(removed.code, removed.stderr).toBe(0);
      expect(await Template.exists(name, config())).toBe(false);
    }
  }, 900_000);
});

describe('a build that cannot finish', () => {
  it('fails naming the step, with its output, and publishes nothing', async () => {
    const spec = `from: base\nenvs: { RUN_ID: "${nonce}" }\nsteps:\n  - run: echo first\n  - run: echo about to fail; echo on stderr >&2; exit 3\n  - run: echo never\n`;
    const file = write('fail.yaml', spec);
    const err = (await Template.build({ ...config(), name: failName, file, context: ctx }).catch((e: unknown) => e)) as SandglassError;
    expect(err).toBeInstanceOf(SandglassError);
    expect(err.code).toBe('template_build_failed');
    expect(err.details).toMatchObject({ step: 1, stepName: 'RUN echo about to fail; echo on stderr >&2; exit 3', exitCode: 3 });
    expect(err.details?.outputTail).toContain('about to fail');
    expect(err.message).toMatch(/step 1 \(RUN echo about to fail.*\) exited with code 3/);
    expect(await Template.exists(failName, config())).toBe(false);
    const [build] = await Template.builds({ ...config(), name: failName });
    expect(build).toMatchObject({ status: 'failed', versionId: null, error: { step: 1 } });
    const { lines } = await Template.logs(build!.id, config());
    expect(lines.map((l) => [l.stream, l.text])).toEqual(
      expect.arrayContaining([
        ['stdout', 'about to fail'],
        ['stderr', 'on stderr'],
      ]),
    );
    expect(lines.map((l) => l.text)).not.toContain('never');
  }, 900_000);

  it('refuses a copy source that leaves the context before any build is opened', async () => {
    const outside = mkdtempSync(join(tmpdir(), 'sg-outside-'));
    try {
      writeFileSync(join(outside, 'secret'), 'not for the guest\n');
      symlinkSync(join(outside, 'secret'), join(ctx, 'site-escape'));
      const file = write('escape.yaml', 'from: base\nsteps:\n  - run: "true"\n  - copy: { src: site-escape, dest: /tmp/x }\n');
      await expect(Template.build({ ...config(), name: failName, file, context: ctx })).rejects.toMatchObject({
        code: 'invalid_argument',
        details: { field: 'steps[1].copy.src' },
      });
      expect((await Template.builds({ ...config(), name: failName })).length).toBe(1);
    } finally {
      rmSync(join(ctx, 'site-escape'));
      rmSync(outside, { recursive: true, force: true });
    }
  });
});
