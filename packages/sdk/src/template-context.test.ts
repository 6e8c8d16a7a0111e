// The build context: copy sources stay inside it (symlinks included), their digest follows contents only, and the archive is one GNU tar reads back exactly.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SandglassError } from './errors.js';
import { collectCopy, planCopy, tarStream, type TarEntry } from './template-context.js';

let dir: string;
let ctx: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'sg-context-'));
  ctx = join(dir, 'ctx');
  mkdirSync(join(ctx, 'app/sub'), { recursive: true });
  writeFileSync(join(ctx, 'app/index.html'), '<h1>hi</h1>\n');
  writeFileSync(join(ctx, 'app/run.sh'), '#!/bin/sh\necho run\n');
  chmodSync(join(ctx, 'app/run.sh'), 0o755);
  writeFileSync(join(ctx, 'app/sub/data.bin'), Buffer.from([0, 1, 2, 255]));
  symlinkSync('index.html', join(ctx, 'app/link'));
  writeFileSync(join(dir, 'outside.txt'), 'secret\n');
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function refusal(p: Promise<unknown>): Promise<{ code: string; field: unknown; message: string }> {
  const err = (await p.then(
    () => {
      throw new Error('expected a refusal');
    },
    (e: unknown) => e,
  )) as SandglassError;
  return { code: err.code, field: err.details?.field, message: err.message };
}

async function archive(entries: TarEntry[]): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of tarStream(entries)) chunks.push(c);
  return Buffer.concat(chunks);
}

describe('collectCopy', () => {
  it('reads a directory as sorted entries with modes and link targets', async () => {
    const { entries, singleFile } = await collectCopy(ctx, { src: ['app'] }, 'steps[0].copy.src');
    expect(singleFile).toBe(false);
    expect(entries.map((e) => [e.path, e.type, e.mode.toString(8), e.linkTarget])).toEqual([
      ['index.html', 'file', '644', undefined],
      ['link', 'symlink', '777', 'index.html'],
      ['run.sh', 'file', '755', undefined],
      ['sub', 'dir', (statSync(join(ctx, 'app/sub')).mode & 0o7777).toString(8), undefined],
      ['sub/data.bin', 'file', '644', undefined],
    ]);
  });

  it.each([
    [
      'a symlink out of the context',
      () => symlinkSync('../../outside.txt', join(ctx, 'app/escape')),
      ['app'],
      /symlink to \.\.\/\.\.\/outside\.txt, outside the build context/,
    ],
    ['an absolute symlink out of it', () => symlinkSync(join(dir, 'outside.txt'), join(ctx, 'app/escape')), ['app'], /outside the build context/],
    ['a dangling symlink out of it', () => symlinkSync('../../nowhere', join(ctx, 'app/escape')), ['app'], /outside the build context/],
    [
      'a source that is a symlink out of it',
      () => symlinkSync(join(dir, 'outside.txt'), join(ctx, 'leak')),
      ['leak'],
      /resolves to .*outside the build context/,
    ],
    ['a path through a symlinked directory', () => symlinkSync(dir, join(ctx, 'up')), ['up/outside.txt'], /resolves to .*outside the build context/],
    ['..', () => undefined, ['../outside.txt'], /outside the build context/],
    ['an absolute path', () => undefined, ['/etc/hostname'], /outside the build context/],
    ['a missing source', () => undefined, ['nope'], /does not exist/],
  ])('refuses %s naming the step', async (_what, setup, src, message) => {
    setup();
    const r = await refusal(collectCopy(ctx, { src }, 'steps[3].copy.src'));
    expect(r).toMatchObject({ code: 'invalid_argument', field: 'steps[3].copy.src' });
    expect(r.message).toMatch(message);
  });

  it('names the source among several', async () => {
    const r = await refusal(collectCopy(ctx, { src: ['app', '../outside.txt'] }, 'steps[1].copy.src'));
    expect(r.field).toBe('steps[1].copy.src[1]');
  });

  it('follows a symlink source that stays inside', async () => {
    symlinkSync('app/run.sh', join(ctx, 'entry'));
    const { entries, singleFile } = await collectCopy(ctx, { src: ['entry'] }, 'f');
    expect(singleFile).toBe(true);
    expect(entries).toMatchObject([{ path: 'entry', type: 'file', mode: 0o755, sizeBytes: 19 }]);
  });

  it('digests contents, modes and links, not times or owners', async () => {
    const before = (await collectCopy(ctx, { src: ['app'] }, 'f')).digest;
    expect(before).toMatch(/^[0-9a-f]{64}$/);
    utimesSync(join(ctx, 'app/index.html'), 1, 1);
    expect((await collectCopy(ctx, { src: ['app'] }, 'f')).digest).toBe(before);
    for (const change of [
      () => writeFileSync(join(ctx, 'app/index.html'), '<h1>ho</h1>\n'),
      () => chmodSync(join(ctx, 'app/run.sh'), 0o700),
      () => {
        rmSync(join(ctx, 'app/link'));
        symlinkSync('run.sh', join(ctx, 'app/link'));
      },
      () => writeFileSync(join(ctx, 'app/sub/new'), ''),
    ]) {
      const prev = (await collectCopy(ctx, { src: ['app'] }, 'f')).digest;
      change();
      expect((await collectCopy(ctx, { src: ['app'] }, 'f')).digest).not.toBe(prev);
    }
  });
});

describe('planCopy', () => {
  it('places a file at dest, or into a directory dest, and a directory into dest', async () => {
    const file = await collectCopy(ctx, { src: ['app/run.sh'] }, 'f');
    expect(planCopy(file, '/usr/local/bin/run', false)).toMatchObject({ targetDir: '/usr/local/bin', roots: ['run'], entries: [{ path: 'run' }] });
    expect(planCopy(file, '/usr/local/bin', true)).toMatchObject({ targetDir: '/usr/local/bin', roots: ['run.sh'] });
    expect(planCopy(file, '/opt/', false)).toMatchObject({ targetDir: '/opt', roots: ['run.sh'] });
    const tree = await collectCopy(ctx, { src: ['app'] }, 'f');
    expect(planCopy(tree, '/srv/app', false)).toMatchObject({ targetDir: '/srv/app', roots: ['index.html', 'link', 'run.sh', 'sub'] });
  });
});

describe('tarStream', () => {
  it('is the same bytes for the same contents, wherever and whenever they were written', async () => {
    const a = await archive((await collectCopy(ctx, { src: ['app'] }, 'f')).entries);
    const other = join(dir, 'ctx2');
    execFileSync('cp', ['-a', ctx, other]);
    utimesSync(join(other, 'app/run.sh'), 12345, 12345);
    const b = await archive((await collectCopy(other, { src: ['app'] }, 'f')).entries);
    expect(b.equals(a)).toBe(true);
    expect(a.length % 512).toBe(0);
  });

  it('is read back by GNU tar exactly, long names and link targets included', async () => {
    const deep = join(ctx, 'app', 'd'.repeat(90), 'e'.repeat(90));
    mkdirSync(deep, { recursive: true });
    const longName = 'f'.repeat(120);
    writeFileSync(join(deep, longName), 'deep\n');
    symlinkSync(`../${'x'.repeat(150)}`, join(ctx, 'app/longlink'));
    writeFileSync(join(ctx, 'app/ünïcode.txt'), 'u\n');
    // The long link dangles: it resolves as written, inside the context, so it is copied.
    const { entries } = await collectCopy(ctx, { src: ['app'] }, 'f');
    const tarFile = join(dir, 'out.tar');
    writeFileSync(tarFile, await archive(entries));
    const listed = execFileSync('tar', ['-tf', tarFile], { encoding: 'utf8' }).trim().split('\n');
    expect(listed).toEqual(entries.map((e) => (e.type === 'dir' ? `${e.path}/` : e.path)));
    const out = join(dir, 'x');
    mkdirSync(out);
    execFileSync('tar', ['-xf', tarFile, '-C', out]);
    const rel = `${'d'.repeat(90)}/${'e'.repeat(90)}/${longName}`;
    expect(readFileSync(join(out, rel), 'utf8')).toBe('deep\n');
    expect(readFileSync(join(out, 'sub/data.bin'))).toEqual(Buffer.from([0, 1, 2, 255]));
    expect(readFileSync(join(out, 'ünïcode.txt'), 'utf8')).toBe('u\n');
    expect(readlinkSync(join(out, 'link'))).toBe('index.html');
    expect(readlinkSync(join(out, 'longlink'))).toBe(`../${'x'.repeat(150)}`);
    expect(statSync(join(out, 'run.sh')).mode & 0o777).toBe(0o755);
    // The fixed mtime: nothing of when the context was written gets in.
    expect(statSync(join(out, 'index.html')).mtimeMs).toBe(0);
  });
});

describe('tarStream and a context that changes under it', () => {
  it('refuses a file swapped for a symlink out of the context after it was checked', async () => {
    const { entries } = await collectCopy(ctx, { src: ['app'] }, 'f');
    rmSync(join(ctx, 'app/index.html'));
    symlinkSync(join(dir, 'outside.txt'), join(ctx, 'app/index.html'));
    const r = await refusal(archive(entries));
    expect(r).toMatchObject({ code: 'invalid_argument', field: 'context' });
    expect(r.message).toMatch(/cannot be read any more \(ELOOP\)/);
  });

  it('refuses a file replaced by another one', async () => {
    const { entries } = await collectCopy(ctx, { src: ['app'] }, 'f');
    // Written beside it and renamed over it, so the new file cannot reuse the old one's inode number.
    writeFileSync(join(ctx, 'app/new'), '<h1>hi</h1>\n');
    renameSync(join(ctx, 'app/new'), join(ctx, 'app/index.html'));
    const r = await refusal(archive(entries));
    expect(r).toMatchObject({ code: 'invalid_argument', field: 'context' });
    expect(r.message).toMatch(/was replaced/);
  });
});
