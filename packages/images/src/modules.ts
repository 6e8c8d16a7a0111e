// Which kernel modules the initramfs loads, and in what order: dependencies read from each module's .modinfo, built-ins left out.
import { access, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandglassError } from '@sandglass/core';
import { exec } from './exec.js';

/**
 * What the guest needs before it can mount its root and reach the host: the virtio-mmio
 * transport, the root disk, the agent's virtio-serial port, the network device the egress
 * gateway will use, and ext4. Their dependencies are added automatically.
 */
export const GUEST_MODULES: readonly string[] = ['virtio_mmio', 'virtio_blk', 'virtio_console', 'virtio_net', 'ext4'];

/** Module names treat `-` and `_` alike (`virtio-rng.ko` is module `virtio_rng`). */
export function moduleName(fileOrName: string): string {
  const base = fileOrName.slice(fileOrName.lastIndexOf('/') + 1);
  return base.replace(/\.ko(\.(xz|zst|gz))?$/, '').replace(/-/g, '_');
}

/** Names of the modules compiled into the kernel, from `modules.builtin` (one path per line). */
export function parseModulesBuiltin(text: string): Set<string> {
  return new Set(
    text
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '')
      .map(moduleName),
  );
}

/** The key=value strings of an ELF module's `.modinfo` section. */
export function readModinfo(elf: Buffer): Map<string, string[]> {
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2) throw new Error('not a 64-bit ELF module');
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const shstrndx = elf.readUInt16LE(0x3e);
  const section = (i: number) => {
    const at = shoff + i * shentsize;
    return { name: elf.readUInt32LE(at), offset: Number(elf.readBigUInt64LE(at + 24)), size: Number(elf.readBigUInt64LE(at + 32)) };
  };
  const strtab = section(shstrndx);
  const info = new Map<string, string[]>();
  for (let i = 0; i < shnum; i++) {
    const s = section(i);
    const nameEnd = elf.indexOf(0, strtab.offset + s.name);
    if (elf.toString('latin1', strtab.offset + s.name, nameEnd) !== '.modinfo') continue;
    for (const entry of elf.toString('utf8', s.offset, s.offset + s.size).split('\0')) {
      const eq = entry.indexOf('=');
      if (eq <= 0) continue;
      const key = entry.slice(0, eq);
      info.set(key, [...(info.get(key) ?? []), entry.slice(eq + 1)]);
    }
    return info;
  }
  throw new Error('module has no .modinfo section');
}

export function modinfoDepends(info: Map<string, string[]>): string[] {
  return (info.get('depends') ?? [])
    .flatMap((d) => d.split(','))
    .map((d) => d.trim())
    .filter((d) => d !== '')
    .map(moduleName);
}

/**
 * Load order for `wanted`: every module after all of its dependencies, built-ins dropped, each
 * once. Ties keep the order of `wanted` so the result is stable. `depends` must hold every
 * non-built-in module reachable from `wanted`.
 */
export function computeModuleOrder(wanted: readonly string[], depends: ReadonlyMap<string, readonly string[]>, builtin: ReadonlySet<string>): string[] {
  const order: string[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (raw: string, chain: string[]) => {
    const name = moduleName(raw);
    if (builtin.has(name) || state.get(name) === 'done') return;
    if (state.get(name) === 'visiting') throw new Error(`module dependency cycle: ${[...chain, name].join(' → ')}`);
    const deps = depends.get(name);
    if (!deps) throw new Error(`kernel module ${name} is neither built in nor available (needed by ${chain.join(' → ') || 'the guest'})`);
    state.set(name, 'visiting');
    for (const d of deps) visit(d, [...chain, name]);
    state.set(name, 'done');
    order.push(name);
  };
  for (const w of wanted) visit(w, []);
  return order;
}

export interface ResolvedModule {
  name: string;
  /** Absolute path of the module file in the extracted kernel package. */
  path: string;
}

/** Reads a module file, decompressing .ko.xz / .ko.zst so the guest can finit_module it without decompressors. */
export async function readModuleFile(path: string): Promise<Buffer> {
  if (path.endsWith('.ko')) return readFile(path);
  if (path.endsWith('.ko.zst')) return (await exec('zstd', ['-dc', path])).stdoutBytes;
  if (path.endsWith('.ko.xz')) return (await exec('xz', ['-dc', path])).stdoutBytes;
  throw new Error(`unsupported module file ${path}`);
}

/**
 * Resolves `wanted` against an extracted `lib/modules/<version>` directory: finds each module
 * through `modules.order`, follows `depends=` transitively, and returns the load order.
 */
export async function resolveModules(moduleDir: string, wanted: readonly string[]): Promise<ResolvedModule[]> {
  const builtin = parseModulesBuiltin(await readFile(join(moduleDir, 'modules.builtin'), 'utf8'));
  const paths = new Map<string, string>();
  for (const rel of (await readFile(join(moduleDir, 'modules.order'), 'utf8')).split('\n')) {
    if (rel.trim() === '') continue;
    paths.set(moduleName(rel), join(moduleDir, rel.trim()));
  }
  const depends = new Map<string, string[]>();
  const files = new Map<string, string>();
  const queue = wanted.map(moduleName);
  while (queue.length > 0) {
    const name = queue.shift() as string;
    if (builtin.has(name) || depends.has(name)) continue;
    const base = paths.get(name);
    if (!base) continue; // computeModuleOrder reports it with the chain that needed it
    const path = await firstExisting([base, `${base}.xz`, `${base}.zst`, base.replace(/\.ko\.(xz|zst)$/, '.ko')]);
    if (!path) throw new SandglassError('internal', `kernel module ${name} is listed in modules.order but ${base} is missing`);
    const deps = modinfoDepends(readModinfo(await readModuleFile(path)));
    depends.set(name, deps);
    files.set(name, path);
    queue.push(...deps);
  }
  try {
    return computeModuleOrder(wanted, depends, builtin).map((name) => ({ name, path: files.get(name) as string }));
  } catch (e) {
    throw new SandglassError('internal', (e as Error).message, { cause: e });
  }
}

async function firstExisting(candidates: string[]): Promise<string | undefined> {
  for (const c of candidates) {
    try {
      await access(c);
      return c;
    } catch {
      // try the next spelling
    }
  }
  return undefined;
}
