// The guest root filesystem: a cached debootstrap tarball, then an ext4 image with the agent, sized to its content plus free space.
import { chmod, copyFile, cp, lchown, mkdir, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandglassError } from '@sandglass/core';
import { cacheKey, ensureArtifact } from './cache.js';
import { requireOnline } from './offline.js';
import { exec } from './exec.js';

export const DEBIAN_SUITE = 'bookworm';
export const DEBOOTSTRAP_VARIANT = 'minbase';
export const ROOTFS_PACKAGES: readonly string[] = ['bash', 'coreutils', 'python3', 'git', 'curl', 'ca-certificates', 'procps'];
export const DEFAULT_MIRROR = 'http://deb.debian.org/debian';
/** Free space in the image beyond its content: room for the sandbox's own work. */
export const ROOTFS_FREE_BYTES = 1024 ** 3;
export const ROOTFS_LABEL = 'sandglass-root';

/** Paths dropped from the tree: nothing in a sandbox reads them, and they double its size. */
const PRUNE_DIRS = [
  'usr/share/doc',
  'usr/share/man',
  'usr/share/info',
  'usr/share/locale',
  'usr/share/lintian',
  'var/lib/apt/lists',
  'var/cache/apt',
  'var/cache/debconf',
  'var/log',
];

/** Keeps later `apt-get install`s in the sandbox from bringing docs back. */
const DPKG_NODOC = `path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
`;

/**
 * The Debian archive URI apt uses for `suite` (main archive, not security), from the contents
 * of sources.list files in one-line (`deb URI suite …`) or deb822 (`URIs:`/`Suites:`) form.
 */
export function parseAptMirror(sourceTexts: readonly string[], suite: string): string | undefined {
  for (const text of sourceTexts) {
    for (const line of text.split('\n')) {
      const m = line.trim().match(/^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/);
      if (m?.[1] && m[2] === suite) return m[1].replace(/\/+$/, '');
    }
    for (const stanza of text.split(/\n\s*\n/)) {
      const field = (name: string) =>
        stanza
          .match(new RegExp(`^${name}:\\s*(.+)$`, 'mi'))?.[1]
          ?.trim()
          .split(/\s+/) ?? [];
      if (!field('Types').includes('deb') || !field('Suites').includes(suite)) continue;
      const uri = field('URIs')[0];
      if (uri) return uri.replace(/\/+$/, '');
    }
  }
  return undefined;
}

export async function hostAptMirror(suite = DEBIAN_SUITE): Promise<string> {
  const texts: string[] = [];
  const read = async (p: string) => {
    try {
      texts.push(await readFile(p, 'utf8'));
    } catch {
      // absent file: apt does not need every location either
    }
  };
  await read('/etc/apt/sources.list');
  try {
    for (const f of (await readdir('/etc/apt/sources.list.d')).sort()) if (/\.(list|sources)$/.test(f)) await read(join('/etc/apt/sources.list.d', f));
  } catch {
    // no sources.list.d
  }
  return parseAptMirror(texts, suite) ?? DEFAULT_MIRROR;
}

export function debootstrapKey(): string {
  // The mirror is left out on purpose: any mirror of the suite yields the same system.
  return cacheKey('debootstrap', { suite: DEBIAN_SUITE, variant: DEBOOTSTRAP_VARIANT, packages: [...ROOTFS_PACKAGES], prune: PRUNE_DIRS, nodoc: DPKG_NODOC });
}

function requireRoot(what: string): void {
  if (process.getuid?.() !== 0) {
    throw new SandglassError(
      'internal',
      `${what} needs root (debootstrap, and file ownership inside the image): run the image build once as root; the result is cached and later runs need no root`,
    );
  }
}

/** Unmounts whatever a failed debootstrap left mounted inside `dir` (proc, sys, dev binds) so removing it cannot reach the host's. */
async function unmountUnder(dir: string): Promise<void> {
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const mounts = mountinfo
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => p !== undefined && (p === dir || p.startsWith(`${dir}/`)))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await exec('umount', ['-l', m]);
}

export interface DebootstrapArtifact {
  key: string;
  tarballPath: string;
}

export async function ensureDebootstrap(artifactsDir: string, onMessage: (m: string) => void): Promise<DebootstrapArtifact> {
  const key = debootstrapKey();
  const { dir } = await ensureArtifact(artifactsDir, 'debootstrap', key, async (tmp) => {
    requireRoot('building the guest root filesystem');
    requireOnline(`the guest root filesystem (debootstrap ${DEBIAN_SUITE})`);
    const mirror = await hostAptMirror();
    const root = join(tmp, 'root');
    onMessage(`debootstrap ${DEBIAN_SUITE} from ${mirror}`);
    try {
      await exec('debootstrap', [`--variant=${DEBOOTSTRAP_VARIANT}`, `--include=${ROOTFS_PACKAGES.join(',')}`, DEBIAN_SUITE, root, mirror], {
        onLine: onMessage,
      });
    } finally {
      await unmountUnder(root);
    }
    onMessage('pruning docs, man pages, locales and apt lists');
    for (const d of PRUNE_DIRS) {
      await rm(join(root, d), { recursive: true, force: true });
      await mkdir(join(root, d), { recursive: true });
    }
    await mkdir(join(root, 'var/cache/apt/archives/partial'), { recursive: true });
    await mkdir(join(root, 'var/lib/apt/lists/partial'), { recursive: true });
    await writeFile(join(root, 'etc/dpkg/dpkg.cfg.d/sandglass-nodoc'), DPKG_NODOC);
    onMessage('packing the tree');
    await exec('tar', ['--numeric-owner', '--xattrs', '-I', 'zstd -T0 -3', '-cf', join(tmp, 'rootfs.tar.zst'), '-C', root, '.']);
    await rm(root, { recursive: true, force: true });
  });
  return { key, tarballPath: join(dir, 'rootfs.tar.zst') };
}

/**
 * The unprivileged account clients run programs and own files as by default (E2B's SDK assumes `user`). Added to
 * the unpacked tree rather than by debootstrap so that changing it does not re-run debootstrap; its fields are part
 * of the rootfs cache key. No sudo: the package would change the debootstrap set.
 */
export const GUEST_USER = { name: 'user', uid: 1000, gid: 1000, home: '/home/user', shell: '/bin/bash' } as const;

export interface AccountFiles {
  passwd: string;
  shadow: string;
  group: string;
  /** Absent when the tree has no /etc/gshadow. */
  gshadow?: string;
}

/**
 * The account database with GUEST_USER and its group added; an existing entry of that name is kept. Its password is
 * locked (`!`): nobody logs in as it, programs are started as it by the agent.
 */
export function withGuestUser(files: AccountFiles): AccountFiles {
  const u = GUEST_USER;
  const add = (text: string, line: string) => {
    if (text.split('\n').some((l) => l.startsWith(`${u.name}:`))) return text;
    return `${text}${text === '' || text.endsWith('\n') ? '' : '\n'}${line}\n`;
  };
  const out: AccountFiles = {
    passwd: add(files.passwd, `${u.name}:x:${u.uid}:${u.gid}::${u.home}:${u.shell}`),
    shadow: add(files.shadow, `${u.name}:!::0:99999:7:::`),
    group: add(files.group, `${u.name}:x:${u.gid}:`),
  };
  if (files.gshadow !== undefined) out.gshadow = add(files.gshadow, `${u.name}:!::`);
  return out;
}

/** Adds GUEST_USER to the tree at `root`: account files (modes kept), and a home from /etc/skel owned by it. */
async function addGuestUser(root: string): Promise<void> {
  const etc = (f: string) => join(root, 'etc', f);
  const readOptional = async (f: string) => readFile(etc(f), 'utf8').catch(() => undefined);
  const files = withGuestUser({
    passwd: (await readOptional('passwd')) ?? '',
    shadow: (await readOptional('shadow')) ?? '',
    group: (await readOptional('group')) ?? '',
    gshadow: await readOptional('gshadow'),
  });
  // writeFile on an existing file keeps its mode and owner (shadow stays 0640 root:shadow).
  await writeFile(etc('passwd'), files.passwd);
  await writeFile(etc('shadow'), files.shadow, { mode: 0o640 });
  await writeFile(etc('group'), files.group);
  if (files.gshadow !== undefined) await writeFile(etc('gshadow'), files.gshadow);
  const home = join(root, GUEST_USER.home);
  await mkdir(home, { recursive: true });
  await cp(etc('skel'), home, { recursive: true, force: false, errorOnExist: false }).catch(() => undefined);
  for (const entry of ['', ...(await readdir(home, { recursive: true }))]) {
    await lchown(join(home, entry), GUEST_USER.uid, GUEST_USER.gid);
  }
  await chmod(home, 0o755);
}

export interface RootfsArtifact {
  key: string;
  path: string;
}

/** Image size for `contentBytes` of files: ext4 metadata (~10 %) plus ROOTFS_FREE_BYTES, in whole MiB. */
export function rootfsSizeBytes(contentBytes: number): number {
  const mib = 1024 ** 2;
  return Math.ceil((contentBytes * 1.1 + ROOTFS_FREE_BYTES) / mib) * mib;
}

export async function ensureRootfs(
  artifactsDir: string,
  debootstrap: DebootstrapArtifact,
  agent: { sha256: string; path: string },
  onMessage: (m: string) => void,
): Promise<RootfsArtifact> {
  const key = cacheKey('rootfs', {
    debootstrap: debootstrap.key,
    agent: agent.sha256,
    freeBytes: ROOTFS_FREE_BYTES,
    label: ROOTFS_LABEL,
    // Bump accounts.version when addGuestUser changes what it writes.
    accounts: { version: 1, user: GUEST_USER },
  });
  const { dir } = await ensureArtifact(artifactsDir, 'rootfs', key, async (tmp) => {
    requireRoot('assembling the guest root filesystem');
    const root = join(tmp, 'root');
    await mkdir(root);
    onMessage('unpacking the debootstrap tree');
    await exec('tar', ['--numeric-owner', '--xattrs', '-I', 'zstd -T0', '-xpf', debootstrap.tarballPath, '-C', root]);
    await copyFile(agent.path, join(root, 'sbin/sandglass-agent'));
    await chmod(join(root, 'sbin/sandglass-agent'), 0o755);
    await writeFile(join(root, 'etc/hostname'), 'sandglass\n');
    await writeFile(join(root, 'etc/hosts'), '127.0.0.1\tlocalhost\n127.0.1.1\tsandglass\n::1\tlocalhost ip6-localhost ip6-loopback\n');
    // Empty: the platform decides the guest's DNS (egress gateway), never the build host.
    await rm(join(root, 'etc/resolv.conf'), { force: true });
    await writeFile(join(root, 'etc/resolv.conf'), '');
    await mkdir(join(root, 'root'), { recursive: true, mode: 0o700 });
    await addGuestUser(root);
    const contentBytes = Number((await exec('du', ['-sb', root])).stdout.split(/\s/)[0]);
    const sizeBytes = rootfsSizeBytes(contentBytes);
    const image = join(tmp, 'rootfs.ext4');
    const fh = await open(image, 'w');
    await fh.truncate(sizeBytes); // sparse: only written blocks take disk space
    await fh.close();
    onMessage(`mkfs.ext4 (${Math.round(contentBytes / 1024 ** 2)} MiB of files, ${Math.round(sizeBytes / 1024 ** 2)} MiB image)`);
    // Inode tables and journal zeroed now, not lazily by every booted guest; no blocks reserved for root in a single-user VM.
    await exec('mkfs.ext4', ['-q', '-F', '-b', '4096', '-m', '0', '-L', ROOTFS_LABEL, '-E', 'lazy_itable_init=0,lazy_journal_init=0', '-d', root, image]);
    await rm(root, { recursive: true, force: true });
  });
  return { key, path: join(dir, 'rootfs.ext4') };
}
