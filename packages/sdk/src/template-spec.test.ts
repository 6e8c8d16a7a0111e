// The template spec readers: YAML and the Dockerfile subset normalize alike, and every refusal names its field.
import { describe, expect, it } from 'vitest';
import type { SandglassError } from './errors.js';
import { parseDockerfile, parseTemplateFile, parseTemplateYaml, shellJoin } from './template-spec.js';

function refusal(fn: () => unknown): { code: string; field: unknown; message: string } {
  try {
    fn();
  } catch (err) {
    const e = err as SandglassError;
    return { code: e.code, field: e.details?.field, message: e.message };
  }
  throw new Error('expected a refusal');
}

const YAML = `
name: web
from: base
envs: { APP_ENV: prod }
user: app
workdir: /srv/app
steps:
  - run: useradd -m app
    envs: { APP_ENV: prod }
  - copy: { src: site, dest: /srv/app/ }
    user: app
  - run: python3 -c 'print(1)' > out.txt
    user: app
    workdir: /srv/app
  - run: ["touch", "/root/as root"]
    workdir: /srv/app
start:
  cmd: python3 -m http.server 8000
  ready: { cmd: curl -sf http://127.0.0.1:8000/, timeoutS: 30, intervalMs: 200 }
`;

const DOCKERFILE = `# the same template as a Dockerfile
FROM base
ENV APP_ENV=prod
RUN useradd -m app
WORKDIR /srv/app
COPY --chown=app site /srv/app/
USER app
RUN python3 -c 'print(1)' \\
> out.txt
USER root
RUN ["touch", "/root/as root"]
USER app
EXPOSE 8000
HEALTHCHECK --interval=200ms --start-period=30s CMD curl -sf http://127.0.0.1:8000/
CMD ["python3", "-m", "http.server", "8000"]
`;

describe('parseTemplateYaml', () => {
  it('normalizes steps with the user, directory and variables each runs with', () => {
    const { spec, name } = parseTemplateYaml(YAML);
    expect(name).toBe('web');
    expect(spec.steps[0]).toEqual({ kind: 'run', name: 'RUN useradd -m app', cmd: 'useradd -m app', user: 'root', workdir: '/', envs: { APP_ENV: 'prod' } });
    expect(spec.steps[1]).toEqual({ kind: 'copy', name: 'COPY site /srv/app/', src: ['site'], dest: '/srv/app/', user: 'app' });
    expect(spec.steps[3]).toMatchObject({ cmd: "touch '/root/as root'", user: 'root' });
    expect(spec.start).toEqual({
      cmd: 'python3 -m http.server 8000',
      user: 'app',
      workdir: '/srv/app',
      ready: { cmd: 'curl -sf http://127.0.0.1:8000/', timeoutS: 30, intervalMs: 200 },
    });
  });

  it('defaults to root in / with the top-level envs, and a ready check of 60 s', () => {
    const { spec } = parseTemplateYaml('from: base\nenvs: {A: "1"}\nsteps: [{run: "true"}]\nstart: {cmd: srv, ready: {cmd: check}}\n');
    expect(spec).toEqual({
      from: 'base',
      envs: { A: '1' },
      user: 'root',
      workdir: '/',
      steps: [{ kind: 'run', name: 'RUN true', cmd: 'true', user: 'root', workdir: '/', envs: { A: '1' } }],
      start: { cmd: 'srv', user: 'root', workdir: '/', ready: { cmd: 'check', timeoutS: 60, intervalMs: 500 } },
    });
  });

  it('passes resources, network and secrets through', () => {
    const { spec } = parseTemplateYaml('from: base\nmemoryMib: 512\nvcpus: 2\ndiskMib: 2048\nnetwork: {allow: [deb.example.com]}\nsecrets: [TOKEN]\n');
    expect(spec).toMatchObject({ memoryMib: 512, vcpus: 2, diskMib: 2048, network: { allow: ['deb.example.com'], deny: [] }, secrets: ['TOKEN'] });
  });

  it.each([
    ['from: base\nsteps: [{apt: curl}]', 'steps[0].apt', /unknown step kind 'apt'/],
    ['from: base\nsteps: [{run: a, copy: {src: a, dest: /a}}]', 'steps[0]', /exactly one/],
    ['from: base\nsteps: [{run: "true"}, {run: "true"}, {copy: {src: ../etc, dest: /x}}]', 'steps[2].copy.src', /leaves the build context/],
    ['from: base\nsteps: [{copy: {src: /etc/passwd, dest: /x}}]', 'steps[0].copy.src', /absolute/],
    ['from: base\nsteps: [{copy: {src: "a/*", dest: /x}}]', 'steps[0].copy.src', /wildcards/],
    ['from: base\nsteps: [{copy: {src: [a, b], dest: /x}}]', 'steps[0].copy.dest', /end with \//],
    ['from: base\nsteps: [{copy: {src: a, dest: rel}}]', 'steps[0].copy.dest', /absolute/],
    ['from: base\nsteps: [{copy: {src: a, dest: /a}, workdir: /x}]', 'steps[0].workdir', /no working directory/],
    ['from: base\nsteps: [{run: "true", user: "Bad User"}]', 'steps[0].user', /user name/],
    ['from: base\nsteps: [{run: ""}]', 'steps[0].run', /empty/],
    ['from: base\nsteps: [{run: [1, 2]}]', 'steps[0].run', /exec form/],
    ['from: base\nsteps: [{run: "true", envs: {"1BAD": x}}]', 'steps[0].envs.1BAD', /name like/],
    ['from: base\nenvs: {A: 1}', 'envs.A', /string/],
    ['from: base\nstart: {cmd: srv, ready: {cmd: c, timeoutS: 601}}', 'start.ready.timeoutS', /1 to 600/],
    ['from: base\nstart: {cmd: srv, ready: {cmd: c, timeoutS: 0}}', 'start.ready.timeoutS', /1 to 600/],
    ['from: base\nstart: {cmd: srv, ready: {cmd: c, retries: 3}}', 'start.ready.retries', /not a field/],
    ['from: base\nstart: {}', 'start.cmd', /command line/],
    ['from: ubuntu:22.04', 'from', /OCI image: Sandglass builds from its own templates/],
    ['from: docker.io/library/debian', 'from', /OCI image/],
    ['steps: []', 'from', /required/],
    ['from: base\nmemoryMib: 1.5', 'memoryMib', /integer/],
    ['from: base\ndiskMib: 100', 'diskMib', /1024 to 65536/],
    ['from: base\nnetwork: {allow: [a], block: [b]}', 'network.block', /not a policy field/],
    ['from: base\nsecrets: [lower]', 'secrets[0]', /secret name/],
    ['from: base\nname: Web', 'name', /lower-case/],
    ['from: base\nworkdir: srv', 'workdir', /absolute/],
    ['from: base\nuser: "1000"', 'user', /user name/],
    ['from: base\nbuild: x', 'spec.build', /not a field/],
    ['from: base\nfrom: other', 'line 2', /valid YAML/],
    ['- a\n- b', 'spec', /map/],
  ])('refuses %j naming %s', (text, field, message) => {
    const r = refusal(() => parseTemplateYaml(text));
    expect(r).toMatchObject({ code: 'invalid_argument', field });
    expect(r.message).toMatch(message);
  });
});

describe('parseDockerfile', () => {
  it('reads the subset into the spec the YAML file means', () => {
    const yaml = parseTemplateYaml(YAML).spec;
    const docker = parseDockerfile(DOCKERFILE);
    // Step names are what each form shows; everything a build runs is equal.
    const unnamed = (s: typeof yaml) => ({ ...s, steps: s.steps.map(({ name: _, ...rest }) => rest) });
    expect(unnamed(docker.spec)).toEqual(unnamed(yaml));
    expect(docker.notes).toEqual(['line 13: EXPOSE ignored (every guest port is reachable through the gateway)']);
  });

  it('applies ENV, WORKDIR and USER to what follows, and the last of each to the template', () => {
    const { spec } = parseDockerfile('FROM base\nRUN one\nENV A=1 B="two words"\nWORKDIR sub\nRUN two\nENV A 3 and more\nWORKDIR $A\nUSER nobody\n');
    expect(spec.steps).toEqual([
      { kind: 'run', name: 'RUN one', cmd: 'one', user: 'root', workdir: '/', envs: {} },
      { kind: 'run', name: 'RUN two', cmd: 'two', user: 'root', workdir: '/sub', envs: { A: '1', B: 'two words' } },
    ]);
    expect(spec).toMatchObject({ envs: { A: '3 and more', B: 'two words' }, workdir: '/sub/3 and more', user: 'nobody' });
  });

  it('expands an unset variable to nothing, even one named like a property every object has', () => {
    const { spec } = parseDockerfile(`FROM base\nENV A=$constructor B=x\${toString}y\nCOPY a$__proto__ /x\n`);
    expect(spec.envs).toEqual({ A: '', B: 'xy' });
    expect(spec.steps[0]).toMatchObject({ src: ['a'] });
  });

  it('reads continuations, comments inside them and relative COPY destinations', () => {
    const { spec } = parseDockerfile('FROM base\nWORKDIR /app\nRUN a && \\\n# a comment\n    b\nCOPY x y ./\nCOPY one.txt two.txt\n');
    expect(spec.steps).toMatchObject([
      { kind: 'run', cmd: 'a &&     b', workdir: '/app' },
      { kind: 'copy', src: ['x', 'y'], dest: '/app/' },
      { kind: 'copy', src: ['one.txt'], dest: '/app/two.txt', user: 'root' },
    ]);
  });

  it('combines ENTRYPOINT and CMD as Docker does', () => {
    expect(parseDockerfile('FROM base\nENTRYPOINT ["srv"]\nCMD ["--port", "8 0"]\n').spec.start?.cmd).toBe("srv --port '8 0'");
    expect(parseDockerfile('FROM base\nENTRYPOINT srv -x\nCMD ["ignored"]\n').spec.start?.cmd).toBe('srv -x');
    expect(parseDockerfile('FROM base\nCMD node app.js\n').spec.start).toEqual({ cmd: 'node app.js', user: 'root', workdir: '/' });
  });

  it('notes ARG and LABEL', () => {
    expect(parseDockerfile('ARG V=1\nFROM base\nLABEL a=b\n').notes).toEqual([
      'line 1: ARG ignored (it has no meaning for a template)',
      'line 3: LABEL ignored (it has no meaning for a template)',
    ]);
  });

  it.each([
    ['FROM ubuntu:22.04', 'line 1', /OCI image: Sandglass builds from its own templates \(snapshots of its VMs\), not container images/],
    ['FROM e2bdev/code-interpreter', 'line 1', /OCI image/],
    ['FROM base@sha256:abc', 'line 1', /OCI image/],
    ['FROM base\nFROM base', 'line 2', /multi-stage/],
    ['RUN true', 'line 1', /before FROM/],
    ['FROM base\nADD https://example.com/x /x', 'line 2', /use COPY/],
    ['FROM base\n\n# c\nVOLUMES /x', 'line 4', /VOLUMES is not in the supported subset/],
    ['FROM base\nSHELL ["/bin/sh", "-c"]', 'line 2', /SHELL is not supported/],
    ['FROM base\nCOPY --from=build /a /b', 'line 2', /multi-stage/],
    ['FROM base\nCOPY --chmod=755 a /b', 'line 2', /--chmod is not supported/],
    ['FROM base\nCOPY ../secret /x', 'line 2', /leaves the build context/],
    ['FROM base\nCOPY a', 'line 2', /sources and a destination/],
    ['FROM base\nCOPY a b /dir', 'line 2', /end with \//],
    ['FROM base\nRUN --mount=type=cache,target=/x true', 'line 2', /--mount is not supported/],
    ['FROM base\nRUN <<EOF\necho\nEOF', 'line 2', /heredocs/],
    ['FROM base\nUSER app:staff', 'line 2', /group is not supported/],
    ['FROM base\nENV 1X=2', 'line 2', /variable name/],
    ['FROM base\nENV A="open', 'line 2', /unterminated/],
    ['FROM base\nRUN ["a", 1]', 'line 2', /exec form/],
    ['FROM base\nHEALTHCHECK CMD true', 'start.ready', /nothing to check/],
    ['FROM base\nHEALTHCHECK --interval=soon CMD true\nCMD srv', 'line 2', /duration/],
    ['# only a comment', 'from', /no FROM/],
  ])('refuses %j naming %s', (text, field, message) => {
    const r = refusal(() => parseDockerfile(text));
    expect(r).toMatchObject({ code: 'invalid_argument', field });
    expect(r.message).toMatch(message);
  });
});

describe('parseTemplateFile', () => {
  it('picks the reader by the file name', () => {
    expect(parseTemplateFile('ctx/e2b.Dockerfile', 'FROM base\n').spec.from).toBe('base');
    expect(parseTemplateFile('Dockerfile', 'FROM base\n').spec.from).toBe('base');
    expect(parseTemplateFile('sandglass.template.yaml', 'from: base\n').spec.from).toBe('base');
  });
});

describe('shellJoin', () => {
  it('quotes what the shell would split or expand', () => {
    expect(shellJoin(['echo', 'a b', "it's", '$HOME', 'x=1'])).toBe(`echo 'a b' 'it'\\''s' '$HOME' x=1`);
  });
});
