// The Python SDK's template builder against this one: the same specs, refusals, copy digests and step keys, so a build from either SDK reuses the steps the other cached.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandglassError } from './errors.js';
import { baseKey, canonicalJson, startKey, stepKey } from './template-build.js';
import { collectCopy, tarStream } from './template-context.js';
import { parseDockerfile, parseTemplateYaml, type ParsedTemplateFile } from './template-spec.js';

// Debian's interpreter, with python3-yaml (setup --test); the package straight from its source tree.
const PYTHON = '/usr/bin/python3';
const PYTHON_SRC = fileURLToPath(new URL('../../../sdks/python/src', import.meta.url));

/** What the Python side answers for a request: the same computations, each a result or a refusal. */
const PY_SCRIPT = `
import json, sys
from sandglass.errors import SandglassError
from sandglass.template_build import base_key, canonical_json, start_key, step_key
from sandglass.template_context import collect_copy, tar_stream
from sandglass.template_spec import parse_dockerfile, parse_template_yaml, posix_join, posix_normalize, posix_resolve

req = json.load(sys.stdin)

def attempt(fn):
    try:
        return {"ok": fn()}
    except SandglassError as e:
        return {"error": {"code": e.code, "field": e.details.get("field"), "message": e.message}}

def keys(parsed):
    spec = parsed["spec"]
    key = base_key(spec, req["fromId"])
    out = [key]
    for i, step in enumerate(spec["steps"]):
        digest = collect_copy(req["context"], step["src"], f"steps[{i}].copy.src").digest if step["kind"] == "copy" else ""
        key = step_key(key, step, digest)
        out.append(key)
    if "start" in spec:
        out.append(start_key(key, spec["start"], spec["envs"]))
    return out

def changed(scratch):
    # Each way a context changes between its check and its upload, as this SDK's test makes them.
    import os
    out = []
    for i, change in enumerate(["replaced", "symlink", "grown", "shrunk"]):
        root = os.path.join(scratch, change)
        os.makedirs(os.path.join(root, "d"))
        for name, text in (("f", "one"), ("g", "two")):
            with open(os.path.join(root, "d", name), "w") as f:
                f.write(text)
        collected = collect_copy(root, ["d"], "s")
        f = os.path.join(root, "d", "f")
        if change == "replaced":
            os.replace(os.path.join(root, "d", "g"), f)
        elif change == "symlink":
            os.remove(f)
            os.symlink("g", f)
        else:
            with open(f, "a" if change == "grown" else "w") as h:
                h.write("more" if change == "grown" else "")
        out.append(attempt(lambda: b"".join(tar_stream(collected.entries)) and None))
    return out

readers = {"yaml": parse_template_yaml, "dockerfile": parse_dockerfile}
print(json.dumps({
    "specs": [attempt(lambda: readers[kind](text)) for kind, text in req["specs"]],
    "keys": [keys(readers[kind](text)) for kind, text in req["built"]],
    "digests": [attempt(lambda: collect_copy(req["context"], src, "steps[0].copy.src").digest) for src in req["copies"]],
    "canonical": canonical_json(req["value"]),
    "paths": [[posix_normalize(p), posix_join(req["workdir"], p), posix_resolve(req["workdir"], p)] for p in req["paths"]],
    "changed": changed(req["scratch"]),
}))
`;

let dir: string;
let ctx: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'sg-py-drift-'));
  ctx = join(dir, 'ctx');
  const file = (rel: string, data: string | Buffer, mode = 0o644) => {
    mkdirSync(join(ctx, posix.dirname(rel)), { recursive: true });
    writeFileSync(join(ctx, rel), data);
    chmodSync(join(ctx, rel), mode);
  };
  file('app/index.html', '<h1>hi</h1>\n');
  file('app/run.sh', '#!/bin/sh\necho run\n', 0o755);
  file('app/secret.key', 'k', 0o600);
  file('app/readonly', 'r', 0o444);
  file('app/sub/data.bin', Buffer.from([0, 1, 2, 255]));
  // Past one read chunk and not a multiple of 512: the member's padding.
  file('app/sub/big.bin', Buffer.alloc(70_001, 7));
  file('app/ünïcødé-日本.txt', 'utf-8 name\n');
  // Astral and high-BMP names: JavaScript sorts by UTF-16 code units, where 😀 (d83d) comes before ｆ (ff46).
  file('app/😀.txt', 'emoji\n');
  file('app/ｆ.txt', 'fullwidth\n');
  // A name of 120 bytes in no directory: only a pax record holds it.
  file(`app/${'x'.repeat(120)}`, 'long\n');
  // Over 100 bytes but splittable into ustar's prefix and name.
  file(`app/${'d'.repeat(60)}/${'e'.repeat(60)}/f.txt`, 'deep\n');
  // Non-ASCII past 100 bytes, its pax header's name cut at 100 UTF-16 units inside a surrogate pair.
  file(`app/${'a'.repeat(88)}${'😀'.repeat(5)}`, 'cut\n');
  file(`app/${'é'.repeat(60)}`, 'accents\n');
  chmodSync(join(ctx, 'app/sub'), 0o750);
  mkdirSync(join(ctx, 'app/setgid'));
  chmodSync(join(ctx, 'app/setgid'), 0o2755);
  symlinkSync('index.html', join(ctx, 'app/link'));
  symlinkSync('..', join(ctx, 'app/sub/up'));
  symlinkSync(`./${'sub/../'.repeat(20)}index.html`, join(ctx, 'app/longlink'));
  symlinkSync('not-there-yet', join(ctx, 'app/dangling'));
  file('top.txt', 'top\n', 0o640);
  symlinkSync('app/run.sh', join(ctx, 'entry'));
  writeFileSync(join(dir, 'outside.txt'), 'secret\n');
  symlinkSync('../outside.txt', join(ctx, 'leak'));
  // Escapes deeper down: a link in a copied directory, a dangling one, a path through a symlinked directory.
  mkdirSync(join(ctx, 'esc/deep'), { recursive: true });
  symlinkSync('../../../outside.txt', join(ctx, 'esc/deep/link'));
  mkdirSync(join(ctx, 'esc2'));
  symlinkSync('../../nowhere', join(ctx, 'esc2/dangle'));
  symlinkSync(dir, join(ctx, 'up'));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

const YAML = `
name: web
from: base
memoryMib: 0x200
vcpus: 2.0
diskMib: 2048
envs: { APP_ENV: prod, FLAG: yes, WHEN: 2001-01-01, OCT: "0755", NUL_FREE: "ü 😀" }
user: app
workdir: /srv//app/./
network: { allow: [deb.debian.org] }
secrets: [NPM_TOKEN]
steps:
  - run: useradd -m app
  - copy: { src: app, dest: /srv/app/ }
    user: app
  - copy: { src: [app/sub, top.txt, entry], dest: /opt/ }
    user: "1000:1000"
  - copy: { src: app/index.html, dest: /srv/app/index.html }
  - run: [python3, -c, "print('it''s')", "ü 😀", "$HOME"]
    user: app
    workdir: /srv/app/../app
    envs: { PYTHONOPTIMIZE: '1', EMPTY: "" }
  - run: "echo \\"tab\\there\\" \\u2028 \\x1c; ${'😀'.repeat(120)}"
  - run: "true"
    name: a named step ✓
start:
  cmd: python3 -m http.server 8000
  ready: { cmd: curl -sf http://127.0.0.1:8000/, timeoutS: 1e1, intervalMs: 200 }
`;

const DOCKERFILE = `# the same kind of template as a Dockerfile
ARG V=1
FROM base AS build
ENV APP_ENV=prod B="two words" C='single $APP_ENV' D=\${APP_ENV}-x
ENV LEGACY value with  spaces
RUN useradd -m app
WORKDIR srv
WORKDIR ../srv/./app/
COPY --chown=app app ./
COPY ["app/sub", "top.txt", "entry", "/opt/"]
COPY app/index.html index.html
USER app
RUN python3 -c 'print(1)' \\
# a comment inside the continuation
    > out.txt
RUN ["touch", "/root/as root", "ü 😀"]
EXPOSE 8000
LABEL a=b
HEALTHCHECK --interval=1.5s --start-period=1m30.5s --retries=3 CMD ["curl", "-sf", "http://127.0.0.1:8000/"]
ENTRYPOINT ["python3", "-m"]
CMD ["http.server", "8000"]
`;

const ACCEPTED: Array<['yaml' | 'dockerfile', string]> = [
  ['yaml', YAML],
  ['dockerfile', DOCKERFILE],
  ['yaml', 'from: base\nenvs: {A: "1"}\nsteps: [{run: "true"}]\nstart: {cmd: srv, ready: {cmd: check}}\n'],
  ['yaml', 'from: base\nsteps: ~\nname: 2001-01-01\n'],
  // JavaScript's \`.\` stops at a line terminator: the trailing slashes of this workdir are not all removed.
  ['yaml', 'from: base\nworkdir: "/srv/a\\u2028//"\nsteps: [{run: "true", workdir: "/x\\r//"}]\n'],
  ['yaml', 'from: base\nsteps:\n  - run: >\n      folded\n      lines\n  - run: |\n      literal\n      lines\n'],
  ['dockerfile', 'FROM base\nENTRYPOINT srv -x\nCMD ["ignored"]\n'],
  ['dockerfile', 'FROM base\nCMD node app.js\nHEALTHCHECK NONE\n'],
  ['dockerfile', `FROM base\nENV A=$constructor B=x\${toString}y\nCOPY a$__proto__ /x\n`],
  ['dockerfile', 'FROM base\nWORKDIR /app\nRUN a && \\\n# a comment\n    b\nCOPY x y ./\nCOPY one.txt two.txt\n'],
  ['dockerfile', 'FROM base\r\nENV A=1\r\nRUN echo $A \\ \r\n  done\r\nHEALTHCHECK --start-period=0.4s CMD true\r\nCMD srv\r\n'],
];

const REFUSED: Array<['yaml' | 'dockerfile', string]> = [
  ...[
    'from: base\nsteps: [{apt: curl}]',
    'from: base\nsteps: [{run: a, copy: {src: a, dest: /a}}]',
    'from: base\nsteps: [{run: null}]',
    'from: base\nsteps: [{run: "true"}, {run: "true"}, {copy: {src: ../etc, dest: /x}}]',
    'from: base\nsteps: [{copy: {src: /etc/passwd, dest: /x}}]',
    'from: base\nsteps: [{copy: {src: "a/*", dest: /x}}]',
    'from: base\nsteps: [{copy: {src: [a, b], dest: /x}}]',
    'from: base\nsteps: [{copy: {src: [a, ../b], dest: /x/}}]',
    'from: base\nsteps: [{copy: {src: a, dest: rel}}]',
    'from: base\nsteps: [{copy: {src: a, dest: /a}, workdir: /x}]',
    'from: base\nsteps: [{copy: {src: a, dest: /a}, envs: {A: b}}]',
    'from: base\nsteps: [{copy: {src: a, dest: /a}, user: "a:b:c"}]',
    'from: base\nsteps: [{run: "true", user: "Bad User"}]',
    'from: base\nsteps: [{run: ""}]',
    'from: base\nsteps: [{run: "  \\u3000 "}]',
    'from: base\nsteps: [{run: [1, 2]}]',
    'from: base\nsteps: [{run: "true", envs: {"1BAD": x}}]',
    'from: base\nsteps: [{run: "true", name: "   "}]',
    `from: base\nsteps: [{run: "true", name: "${'n'.repeat(201)}"}]`,
    'from: base\nenvs: {A: 1}',
    'from: base\nenvs: {A: yes, B: true}',
    'from: base\nenvs: null',
    // JavaScript walks an object's index-like keys first: the second bad name is the one named.
    'from: base\nenvs: {"b-ad": x, "2": y}',
    'from: base\nsteps: [{nope: 1, "0": 2}]',
    'from: base\nstart: {cmd: srv, ready: {cmd: c, timeoutS: 601}}',
    'from: base\nstart: {cmd: srv, ready: {cmd: c, timeoutS: 0}}',
    'from: base\nstart: {cmd: srv, ready: {cmd: c, intervalMs: .inf}}',
    'from: base\nstart: {cmd: srv, ready: {cmd: c, retries: 3}}',
    'from: base\nstart: {}',
    'from: ubuntu:22.04',
    'from: docker.io/library/debian',
    'from: "-x"',
    'from: 1',
    'steps: []',
    'from: base\nmemoryMib: 1.5',
    'from: base\nmemoryMib: true',
    'from: base\ndiskMib: 100',
    'from: base\nnetwork: {allow: [a], block: [b]}',
    'from: base\nnetwork: {allow: a}',
    'from: base\nsecrets: [lower]',
    'from: base\nname: Web',
    'from: base\nworkdir: srv',
    'from: base\nuser: "1000"',
    'from: base\nbuild: x',
    'from: base\n1: x',
    'from: base\nfrom: other',
    'from: base\n<<: {vcpus: 2}',
    '- a\n- b',
    'just text',
    '',
    'from: base\nsteps:\n  - run: a\n   bad: indent',
    'from: "unclosed',
    'from: base\n---\nfrom: again',
  ].map((t): ['yaml', string] => ['yaml', t]),
  ...[
    'FROM ubuntu:22.04',
    'FROM e2bdev/code-interpreter',
    'FROM base@sha256:abc',
    'FROM base\nFROM base',
    'FROM --platform=linux/amd64 base',
    'FROM base AS',
    'RUN true',
    'FROM base\nADD https://example.com/x /x',
    'FROM base\n\n# c\nVOLUMES /x',
    'FROM base\nSHELL ["/bin/sh", "-c"]',
    'FROM base\nCOPY --from=build /a /b',
    'FROM base\nCOPY --chmod=755 a /b',
    'FROM base\nCOPY --chown=Bad a /b',
    'FROM base\nCOPY ../secret /x',
    'FROM base\nCOPY a',
    'FROM base\nCOPY a b /dir',
    'FROM base\nRUN --mount=type=cache,target=/x true',
    'FROM base\nRUN <<EOF\necho\nEOF',
    'FROM base\nRUN',
    'FROM base\nUSER app:staff',
    'FROM base\nUSER a b',
    'FROM base\nWORKDIR a b',
    'FROM base\nENV 1X=2',
    'FROM base\nENV =x',
    'FROM base\nENV A="open',
    'FROM base\nRUN ["a", 1]',
    'FROM base\nHEALTHCHECK CMD true',
    'FROM base\nHEALTHCHECK true',
    'FROM base\nHEALTHCHECK --interval=soon CMD true\nCMD srv',
    'FROM base\nHEALTHCHECK --interval=10ms CMD true\nCMD srv',
    'FROM base\nHEALTHCHECK --start-period=11m CMD true\nCMD srv',
    'FROM base\n!!!',
    'FROM base\nCMD',
    '# only a comment',
  ].map((t): ['dockerfile', string] => ['dockerfile', t]),
];

/** Copy sources, each read as one step's; the refused ones must be refused alike. */
const COPIES = [
  ['app'],
  ['app/index.html'],
  ['app/sub', 'top.txt', 'entry'],
  ['entry'],
  ['.'],
  ['leak'],
  ['../outside.txt'],
  ['nope'],
  ['app', 'nope'],
  ['esc'],
  ['esc2'],
  ['up/outside.txt'],
  ['/etc/hostname'],
];

const CANONICAL = {
  z: [1, 'two', null, true, { b: undefined, a: 0 }],
  é: '\u0000\u001f\u007f\b\f\n\r\t"\\ \u2028 😀 \ud800',
  '😀': 1,
  ｆ: 2,
  A: -3,
};

// Seeded, so a failure repeats: paths of the characters node's normalizing cares about.
function paths(count: number): string[] {
  let seed = 7;
  const out = ['', '.', '..', '/', '//', '///a//b/', 'a/..', './', 'a/../', '../a', '/..', '/a/../..', '.a/..b/...'];
  for (let i = 0; i < count; i++) {
    let p = '';
    const len = (seed = (seed * 1103515245 + 12345) % 2 ** 31) % 12;
    for (let j = 0; j < len; j++) p += ['a', '.', '/', 'b', '..'][(seed = (seed * 1103515245 + 12345) % 2 ** 31) % 5];
    out.push(p);
  }
  return out;
}

function attempt<T>(fn: () => T): { ok: T } | { error: { code: string; field: unknown; message: string } } {
  try {
    return { ok: fn() };
  } catch (err) {
    const e = err as SandglassError;
    if (!e.code) throw err;
    return { error: { code: e.code, field: e.details?.field ?? null, message: e.message } };
  }
}

async function attemptAsync<T>(fn: () => Promise<T>): Promise<{ ok: T } | { error: { code: string; field: unknown; message: string } }> {
  try {
    return { ok: await fn() };
  } catch (err) {
    const e = err as SandglassError;
    return { error: { code: e.code, field: e.details?.field ?? null, message: e.message } };
  }
}

const read = (kind: 'yaml' | 'dockerfile', text: string): ParsedTemplateFile => (kind === 'yaml' ? parseTemplateYaml(text) : parseDockerfile(text));

describe('the Python SDK template builder', () => {
  let py: {
    specs: unknown[];
    keys: string[][];
    digests: unknown[];
    canonical: string;
    paths: string[][];
    changed: unknown[];
  };
  const WORKDIR = '/srv/app';

  beforeAll(() => {
    const built: Array<['yaml' | 'dockerfile', string]> = [ACCEPTED[0]!, ACCEPTED[1]!, ACCEPTED[2]!];
    const request = {
      context: ctx,
      fromId: 'tpl_fixture',
      specs: [...ACCEPTED, ...REFUSED],
      built,
      copies: COPIES,
      value: CANONICAL,
      workdir: WORKDIR,
      paths: paths(3000),
      scratch: join(dir, 'py-scratch'),
    };
    const out = execFileSync(PYTHON, ['-c', PY_SCRIPT], {
      input: JSON.stringify(request),
      env: { PATH: process.env.PATH ?? '', PYTHONPATH: PYTHON_SRC, PYTHONDONTWRITEBYTECODE: '1' },
      maxBuffer: 64 * 1024 * 1024,
    });
    py = JSON.parse(out.toString('utf8'));
  });

  it('reads every spec into the same normalized spec, with the same notes', () => {
    const ts = ACCEPTED.map(([kind, text]) => attempt(() => read(kind, text)));
    expect(ts.filter((r) => !('ok' in r))).toEqual([]);
    expect(py.specs.slice(0, ACCEPTED.length)).toEqual(JSON.parse(JSON.stringify(ts)));
  });

  it('refuses what this SDK refuses, with the same code, field and message', () => {
    const ts = REFUSED.map(([kind, text]) => attempt(() => read(kind, text)));
    expect(ts.every((r) => 'error' in r)).toBe(true);
    const py_ = py.specs.slice(ACCEPTED.length) as Array<{ error: { message: string; field: string } }>;
    // YAML syntax errors name the same line; the parsers word their complaint each in its own way.
    const comparable = (r: { error: { message: string; field: string } }) =>
      /^line \d+$/.test(r.error.field) && r.error.message.includes('not valid YAML') ? { error: { ...r.error, message: 'not valid YAML' } } : r;
    expect(py_.map(comparable)).toEqual((ts as Array<{ error: { message: string; field: string } }>).map(comparable));
  });

  it('digests a copy to the same archive, and refuses the same sources', async () => {
    const ts = [];
    for (const src of COPIES) ts.push(await attemptAsync(async () => (await collectCopy(ctx, { src }, 'steps[0].copy.src')).digest));
    expect(ts.filter((r) => 'ok' in r)).toHaveLength(4);
    expect(py.digests).toEqual(ts);
  });

  it('stops an upload whose file changed since its check, as this SDK does', async () => {
    const ts = [];
    for (const change of ['replaced', 'symlink', 'grown', 'shrunk']) {
      const root = join(dir, 'ts-scratch', change);
      mkdirSync(join(root, 'd'), { recursive: true });
      writeFileSync(join(root, 'd/f'), 'one');
      writeFileSync(join(root, 'd/g'), 'two');
      const collected = await collectCopy(root, { src: ['d'] }, 's');
      const f = join(root, 'd/f');
      if (change === 'replaced') renameSync(join(root, 'd/g'), f);
      else if (change === 'symlink') {
        rmSync(f);
        symlinkSync('g', f);
      } else writeFileSync(f, change === 'grown' ? 'onemore' : '');
      ts.push(
        await attemptAsync(async () => {
          for await (const _ of tarStream(collected.entries));
          return null;
        }),
      );
    }
    expect(ts.every((r) => 'error' in r)).toBe(true);
    expect(JSON.stringify(py.changed).replaceAll(join(dir, 'py-scratch'), '<scratch>')).toBe(
      JSON.stringify(ts).replaceAll(join(dir, 'ts-scratch'), '<scratch>'),
    );
  });

  it('chains the same step keys, so either SDK finds the steps the other cached', async () => {
    const chains: string[][] = [];
    for (const [kind, text] of [ACCEPTED[0]!, ACCEPTED[1]!, ACCEPTED[2]!]) {
      const { spec } = read(kind, text);
      let key = baseKey(spec, 'tpl_fixture');
      const chain = [key];
      for (const [i, step] of spec.steps.entries()) {
        const digest = step.kind === 'copy' ? (await collectCopy(ctx, step, `steps[${i}].copy.src`)).digest : '';
        chain.push((key = stepKey(key, step, digest)));
      }
      if (spec.start) chain.push(startKey(key, spec.start, spec.envs));
      chains.push(chain);
    }
    expect(chains.map((c) => c.length)).toEqual([9, 8, 3]);
    expect(py.keys).toEqual(chains);
  });

  it('writes canonical JSON and normalizes paths as this SDK does', () => {
    expect(py.canonical).toBe(canonicalJson(CANONICAL));
    const ps = paths(3000);
    expect(py.paths).toEqual(ps.map((p) => [posix.normalize(p), posix.join(WORKDIR, p), posix.resolve(WORKDIR, p)]));
  });
});
