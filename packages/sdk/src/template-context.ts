// A template build's context: a copy step's sources read from under the context directory (never outside it), their digest, and the deterministic tar that uploads them.
import { createHash } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { lstat, open, readdir, readlink, realpath, stat } from 'node:fs/promises';
import { basename, isAbsolute, join, posix, relative, resolve, sep } from 'node:path';
import { invalidField } from './envs.js';
import type { CopyStep } from './template-spec.js';

/** One archive member: a path relative to where the archive is extracted, and where its bytes come from on this machine. */
export interface TarEntry {
  path: string;
  type: 'file' | 'dir' | 'symlink';
  /** Permission bits (and setuid/setgid/sticky), as the context has them. */
  mode: number;
  sizeBytes: number;
  /** The file to read (files only), and its identity when it was checked: what is read later must be that same file. */
  source?: string;
  inode?: { dev: number; ino: number };
  /** The link's target as written (symlinks only). */
  linkTarget?: string;
}

/** A copy step's sources, read: the entries as they go into a directory, and the digest of their archive. */
export interface CollectedCopy {
  entries: TarEntry[];
  /** sha256 (hex) of the deterministic archive: sorted paths, types, modes, contents and link targets, nothing else. */
  digest: string;
  /** The step copies one file (not into a directory): its dest may name the file itself. */
  singleFile: boolean;
}

/** Where a copy lands: the directory the archive is extracted into and the top-level names it writes there. */
export interface CopyPlan {
  targetDir: string;
  entries: TarEntry[];
  roots: string[];
}

// The gateway's PUT files/tar limit.
const MAX_ENTRIES = 1_000_000;
const BLOCK = 512;

const inside = (root: string, p: string) => {
  const rel = relative(root, p);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
};

/**
 * Reads a copy step's sources under `context`: anything that resolves outside it (a `..`, an absolute path, a
 * symlink whose target leaves it, a path through such a symlink) is invalid_argument naming `field`.
 */
export async function collectCopy(context: string, step: Pick<CopyStep, 'src'>, field: string): Promise<CollectedCopy> {
  const root = await realpath(context).catch(() => {
    throw invalidField('context', `'${context}' is not a directory that can be read`);
  });
  if (!(await stat(root)).isDirectory()) throw invalidField('context', `'${context}' is not a directory`);
  const byPath = new Map<string, TarEntry>();
  let singleFile = step.src.length === 1;
  for (const [i, src] of step.src.entries()) {
    const where = step.src.length === 1 ? field : `${field}[${i}]`;
    const lexical = resolve(root, src);
    if (isAbsolute(src) || !inside(root, lexical)) throw invalidField(where, `'${src}' is outside the build context`);
    const real = await realpath(lexical).catch((err: NodeJS.ErrnoException) => {
      throw invalidField(where, err.code === 'ENOENT' ? `'${src}' does not exist in the build context` : `'${src}' cannot be read (${err.code})`);
    });
    if (!inside(root, real)) throw invalidField(where, `'${src}' resolves to ${real}, outside the build context`);
    const st = await stat(real);
    const add = (e: TarEntry) => {
      byPath.set(e.path, e);
      if (byPath.size > MAX_ENTRIES) throw invalidField(where, `copies more than ${MAX_ENTRIES} entries`);
    };
    if (st.isDirectory()) {
      singleFile = false;
      await walk(root, real, '', add, where);
    } else if (st.isFile())
      add({ path: basename(lexical), type: 'file', mode: st.mode & 0o7777, sizeBytes: st.size, source: real, inode: { dev: st.dev, ino: st.ino } });
    else throw invalidField(where, `'${src}' is not a file or directory`);
  }
  const entries = [...byPath.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const hash = createHash('sha256');
  for await (const chunk of tarStream(entries)) hash.update(chunk);
  return { entries, digest: hash.digest('hex'), singleFile };
}

async function walk(root: string, dir: string, prefix: string, add: (e: TarEntry) => void, field: string): Promise<void> {
  const names = (await readdir(dir)).sort();
  for (const name of names) {
    const abs = join(dir, name);
    const path = prefix === '' ? name : `${prefix}/${name}`;
    const st = await lstat(abs);
    if (st.isSymbolicLink()) {
      const target = await readlink(abs);
      // A dangling link resolves as written; either way its target must stay inside the context.
      const resolved = await realpath(abs).catch(() => resolve(dir, target));
      if (!inside(root, resolved)) throw invalidField(field, `'${relative(root, abs)}' is a symlink to ${target}, outside the build context`);
      add({ path, type: 'symlink', mode: 0o777, sizeBytes: 0, linkTarget: target });
    } else if (st.isDirectory()) {
      add({ path, type: 'dir', mode: st.mode & 0o7777, sizeBytes: 0 });
      await walk(root, abs, path, add, field);
    } else if (st.isFile()) add({ path, type: 'file', mode: st.mode & 0o7777, sizeBytes: st.size, source: abs, inode: { dev: st.dev, ino: st.ino } });
    else throw invalidField(field, `'${relative(root, abs)}' is not a file, directory or symlink`);
  }
}

/**
 * Where a copy lands, as Docker places it: a single file goes to `dest` itself unless dest ends in '/' or is a
 * directory in the sandbox already (`destIsDir`), in which case it goes into it; a directory's contents go into dest.
 */
export function planCopy(collected: CollectedCopy, dest: string, destIsDir: boolean): CopyPlan {
  if (collected.singleFile && !dest.endsWith('/') && !destIsDir) {
    const entry = collected.entries[0]!;
    const name = posix.basename(dest);
    return { targetDir: posix.dirname(dest), entries: [{ ...entry, path: name }], roots: [name] };
  }
  const targetDir = dest.length > 1 ? dest.replace(/\/+$/, '') : '/';
  const roots = [...new Set(collected.entries.map((e) => e.path.split('/')[0]!))];
  return { targetDir, entries: collected.entries, roots };
}

// ---- the tar writer: POSIX ustar, with pax records for what ustar cannot hold ----

function octal(buf: Buffer, offset: number, length: number, value: number): void {
  buf.write(value.toString(8).padStart(length - 1, '0'), offset, length - 1, 'ascii');
  buf[offset + length - 1] = 0;
}

/** A name split into ustar's prefix (≤155 bytes) and name (≤100 bytes) at a '/', or undefined when it cannot be. */
function splitName(name: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', name };
  for (let i = name.indexOf('/'); i > 0; i = name.indexOf('/', i + 1)) {
    const prefix = name.slice(0, i);
    const rest = name.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(rest) <= 100 && rest !== '') return { prefix, name: rest };
  }
  return undefined;
}

function header(name: string, type: string, mode: number, size: number, linkName = ''): Buffer {
  // A name ustar cannot hold is in the pax record before this header; the header keeps what fits.
  const split = splitName(name) ?? { prefix: '', name };
  const h = Buffer.alloc(BLOCK);
  Buffer.from(split.name, 'utf8').copy(h, 0, 0, 100);
  octal(h, 100, 8, mode);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size < 0o77777777777 ? size : 0);
  // A fixed mtime: the archive, and so the step's key, depends on contents only.
  octal(h, 136, 12, 0);
  h.write('        ', 148, 8, 'ascii');
  h.write(type, 156, 1, 'ascii');
  Buffer.from(linkName, 'utf8').copy(h, 157, 0, 100);
  h.write('ustar\u000000', 257, 8, 'latin1');
  Buffer.from(split.prefix, 'utf8').copy(h, 345, 0, 155);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\u0000 `, 148, 8, 'ascii');
  return h;
}

/** A pax record, `<len> key=value\n`, whose length counts its own digits. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

const padding = (size: number) => Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);

/** The archive of `entries` in their order, as chunks; file contents are read as it is consumed, never held whole. */
export async function* tarStream(entries: TarEntry[]): AsyncGenerator<Buffer> {
  for (const e of entries) {
    const name = e.type === 'dir' ? `${e.path}/` : e.path;
    const link = e.linkTarget ?? '';
    const pax = [
      splitName(name) === undefined ? paxRecord('path', name) : '',
      Buffer.byteLength(link) > 100 ? paxRecord('linkpath', link) : '',
      e.sizeBytes >= 0o77777777777 ? paxRecord('size', String(e.sizeBytes)) : '',
    ].join('');
    if (pax !== '') {
      const body = Buffer.from(pax, 'utf8');
      yield header(`PaxHeaders/${posix.basename(e.path)}`.slice(0, 100), 'x', 0o644, body.length);
      yield body;
      yield padding(body.length);
    }
    const type = e.type === 'file' ? '0' : e.type === 'dir' ? '5' : '2';
    if (e.type !== 'file') {
      yield header(name, type, e.mode, 0, link);
      continue;
    }
    // Not followed if it became a symlink, and refused if another file took its place since it was checked.
    const handle = await open(e.source!, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW).catch((err: NodeJS.ErrnoException) => {
      throw invalidField('context', `${e.source} cannot be read any more (${err.code})`);
    });
    try {
      const now = await handle.stat();
      if (e.inode && (now.dev !== e.inode.dev || now.ino !== e.inode.ino))
        throw invalidField('context', `${e.source} was replaced while the build read the context`);
      yield header(name, type, e.mode, e.sizeBytes, link);
      let sent = 0;
      for await (const chunk of handle.createReadStream({ autoClose: false })) {
        const buf = chunk as Buffer;
        sent += buf.length;
        if (sent > e.sizeBytes) break;
        yield buf;
      }
      // The header promised this size: a file that changed since it was read would corrupt the archive.
      if (sent !== e.sizeBytes) throw invalidField('context', `${e.source} changed while the build read it (${e.sizeBytes} bytes, now ${sent})`);
    } finally {
      await handle.close();
    }
    yield padding(e.sizeBytes);
  }
  yield Buffer.alloc(BLOCK * 2);
}
