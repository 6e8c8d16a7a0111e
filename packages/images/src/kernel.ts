// The guest kernel: Debian's linux-image-cloud-amd64 resolved to its real package, downloaded, unpacked without root; keeps the kernel and the modules the guest loads.
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandglassError } from '@sandglass/core';
import { artifactDir, cacheKey, ensureArtifact, exists, sha256Hex } from './cache.js';
import { exec } from './exec.js';
import { isOffline, requireOnline } from './offline.js';
import { GUEST_MODULES, readModuleFile, resolveModules } from './modules.js';
import { extractVmlinux } from './vmlinux.js';

export const KERNEL_METAPACKAGE = 'linux-image-cloud-amd64';

export interface KernelPackage {
  name: string;
  version: string;
  filename: string;
  sha256: string;
}

export interface KernelArtifact {
  key: string;
  dir: string;
  /** The uncompressed vmlinux when it could be extracted (faster boot), else the bzImage. */
  kernelPath: string;
  bzImagePath: string;
  /** `uname -r` of the guest. */
  version: string;
  /** Module file names under `<dir>/modules/`, in load order. */
  modules: string[];
}

/** Fields of the first stanza of `apt-cache show` output. */
export function parseAptStanza(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\n\n')[0]?.split('\n') ?? []) {
    const m = line.match(/^([A-Za-z0-9-]+):\s*(.*)$/);
    if (m?.[1] && m[2] !== undefined) fields.set(m[1], m[2]);
  }
  return fields;
}

async function aptShow(pkg: string): Promise<Map<string, string>> {
  try {
    return parseAptStanza((await exec('apt-cache', ['show', '--no-all-versions', pkg])).stdout);
  } catch (e) {
    throw new SandglassError('internal', `cannot find Debian package ${pkg} (run \`apt-get update\` as root): ${(e as Error).message}`, {
      cause: e,
    });
  }
}

/** The versioned kernel package the metapackage currently points at (apt's candidate). */
export async function resolveKernelPackage(): Promise<KernelPackage> {
  const meta = await aptShow(KERNEL_METAPACKAGE);
  const dep = (meta.get('Depends') ?? '')
    .split(',')
    .map((d) => d.trim().split(/\s/)[0] ?? '')
    .find((d) => /^linux-image-\d.*-cloud-amd64$/.test(d));
  if (!dep) throw new SandglassError('internal', `${KERNEL_METAPACKAGE} does not depend on a linux-image-<version>-cloud-amd64 package`);
  const real = await aptShow(dep);
  const version = real.get('Version');
  const filename = real.get('Filename');
  if (!version || !filename) throw new SandglassError('internal', `apt-cache show ${dep} gave no Version/Filename`);
  return { name: dep, version, filename, sha256: real.get('SHA256') ?? '' };
}

/** What apt's answer depends on: the package lists and apt's configuration, by name, size and mtime. */
async function aptStateFingerprint(): Promise<string> {
  const entries: string[] = [];
  for (const dir of ['/var/lib/apt/lists', '/etc/apt', '/etc/apt/sources.list.d', '/etc/apt/preferences.d']) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    for (const n of names.sort()) {
      try {
        const st = await stat(join(dir, n));
        if (st.isFile()) entries.push(`${dir}/${n}:${st.size}:${st.mtimeMs}`);
      } catch {
        // vanished while listing (apt-get update running): the next call sees the new state
      }
    }
  }
  return sha256Hex(entries.join('\n'));
}

/**
 * resolveKernelPackage, remembered in `<artifacts>/kernel-package.json` until apt's lists or
 * configuration change: apt-cache takes 1–2 s here, too slow for the cached path of ensureGuestImage.
 */
export async function resolveKernelPackageCached(artifactsDir: string): Promise<KernelPackage> {
  const memo = join(artifactsDir, 'kernel-package.json');
  const fingerprint = await aptStateFingerprint();
  let saved: { fingerprint: string; package: KernelPackage } | undefined;
  try {
    saved = JSON.parse(await readFile(memo, 'utf8')) as { fingerprint: string; package: KernelPackage };
    if (saved.fingerprint === fingerprint) return saved.package;
  } catch {
    // no memo yet, or unreadable: ask apt
  }
  // The kernel the artifacts were built from, already unpacked beside this memo.
  const unpacked = saved && (await exists(artifactDir(artifactsDir, 'kernel', kernelKey(saved.package)))) ? saved.package : undefined;
  // An offline host keeps the kernel its bundle carries, whatever its own apt lists (if any) name.
  if (unpacked && isOffline()) return unpacked;
  let pkg: KernelPackage;
  try {
    pkg = await resolveKernelPackage();
  } catch (err) {
    // No package lists to ask (a host that never ran apt-get update): the unpacked kernel serves.
    if (unpacked) return unpacked;
    throw err;
  }
  await mkdir(artifactsDir, { recursive: true });
  const tmp = `${memo}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify({ fingerprint, package: pkg }, null, 2)}\n`);
  await rename(tmp, memo);
  return pkg;
}

export function kernelKey(pkg: KernelPackage): string {
  return cacheKey('kernel', { package: pkg.name, version: pkg.version, filename: pkg.filename, sha256: pkg.sha256, modules: [...GUEST_MODULES] });
}

interface KernelManifest {
  version: string;
  modules: string[];
  vmlinux: boolean;
}

export async function ensureKernel(artifactsDir: string, pkg: KernelPackage, onMessage: (m: string) => void): Promise<KernelArtifact> {
  const key = kernelKey(pkg);
  const { dir } = await ensureArtifact(artifactsDir, 'kernel', key, async (tmp) => {
    const work = join(tmp, 'work');
    await mkdir(work);
    requireOnline(`the guest kernel (${pkg.name} ${pkg.version})`);
    onMessage(`downloading ${pkg.name} ${pkg.version}`);
    // apt drops to user _apt for downloads, which cannot write into our private temp dir.
    const sandbox = process.getuid?.() === 0 ? ['-o', 'APT::Sandbox::User=root'] : [];
    await exec('apt-get', [...sandbox, 'download', `${pkg.name}=${pkg.version}`], { cwd: work });
    const deb = (await readdir(work)).find((f) => f.endsWith('.deb'));
    if (!deb) throw new SandglassError('internal', `apt-get download ${pkg.name} produced no .deb`);
    onMessage(`unpacking ${deb}`);
    const tree = join(work, 'tree');
    await exec('dpkg-deb', ['-x', join(work, deb), tree]);
    const versions = await readdir(join(tree, 'lib/modules'));
    const version = versions[0];
    if (versions.length !== 1 || !version) throw new SandglassError('internal', `${deb} holds ${versions.length} module trees, expected 1`);
    const bzImage = await readFile(join(tree, 'boot', `vmlinuz-${version}`));
    await writeFile(join(tmp, 'vmlinuz'), bzImage);
    const vmlinux = extractVmlinux(bzImage);
    if (vmlinux) await writeFile(join(tmp, 'vmlinux'), vmlinux);
    const modules = await resolveModules(join(tree, 'lib/modules', version), GUEST_MODULES);
    await mkdir(join(tmp, 'modules'));
    for (const m of modules) await writeFile(join(tmp, 'modules', `${m.name}.ko`), await readModuleFile(m.path));
    const manifest: KernelManifest = { version, modules: modules.map((m) => `${m.name}.ko`), vmlinux: vmlinux !== null };
    await writeFile(join(tmp, 'kernel.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    await rm(work, { recursive: true, force: true });
  });
  const manifest = JSON.parse(await readFile(join(dir, 'kernel.json'), 'utf8')) as KernelManifest;
  const bzImagePath = join(dir, 'vmlinuz');
  return {
    key,
    dir,
    kernelPath: manifest.vmlinux ? join(dir, 'vmlinux') : bzImagePath,
    bzImagePath,
    version: manifest.version,
    modules: manifest.modules,
  };
}
