// Guest RAM files on tmpfs: every VM maps its own file shared, so a live snapshot reads guest memory straight from it.
import { createHash } from 'node:crypto';
import {
  closeSync,
  constants as fsc,
  existsSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { homeLockHeld, processRecordAlive, processStartTime } from '@sandglass/core';
import { chownToVm, copyCompacting, copySparse, ensurePrivateDir, warmCopier } from '@sandglass/vmm';

/** Who made a RAM directory: its server process (pid and start time) and home, so a later one can tell it is orphaned. */
interface RamOwner {
  pid: number;
  startTime: string;
  home: string;
}

const OWNER_FILE = 'owner.json';

/**
 * The default ceiling on the node's tmpfs caches (template RAM images and snapshot RAM images kept for forks and
 * resumes): a sixteenth of the host's memory, between 256 MiB and 2 GiB. Tmpfs pages are host memory that no guest
 * owns, so the gateway takes this much off the guest memory budget up front.
 */
export function defaultImageCacheBytes(hostBytes = totalmem()): number {
  return Math.min(2 * 1024 ** 3, Math.max(256 * 1024 ** 2, Math.floor(hostBytes / 16)));
}

/** Bytes of tmpfs a file really holds (holes are free). */
export function heldBytes(path: string): number {
  try {
    return statSync(path).blocks * 512;
  } catch {
    return 0;
  }
}

/**
 * Marks a cache file used now, for eviction by least recent use. The time is the file system's, not a Clock's:
 * eviction compares it with the mtimes the kernel gave freshly written files, so it must be on the same clock.
 */
export function markUsed(path: string): void {
  const now = new Date();
  utimesSync(path, now, now);
}

function readJson(path: string): { pid?: unknown; startTime?: unknown; home?: unknown } | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as { pid?: unknown; startTime?: unknown; home?: unknown };
  } catch {
    return undefined;
  }
}

/**
 * Removes the RAM directories under `shmRoot` that servers of other homes left when they died: each names its owner
 * process and home in owner.json, and one whose owner is dead (or whose pid now names a later process) is orphaned —
 * unless its home's lock is held by a live process, which is that home's next server starting up and about to
 * claim the directory. Only directories this user owns, that are real directories, and that carry a readable owner
 * file are touched: a directory without one may belong to a running server of an older version, and is left alone.
 */
export function reapOrphanRamDirs(shmRoot = '/dev/shm', except?: string): string[] {
  const uid = process.getuid?.();
  const reaped: string[] = [];
  let names: string[];
  try {
    names = readdirSync(shmRoot);
  } catch {
    return reaped;
  }
  for (const name of names) {
    if (!/^sandglass-[0-9a-f]{12}$/.test(name)) continue;
    const dir = join(shmRoot, name);
    if (dir === except) continue;
    try {
      const st = lstatSync(dir);
      if (!st.isDirectory() || (uid !== undefined && st.uid !== uid)) continue;
    } catch {
      continue;
    }
    const owner = readJson(join(dir, OWNER_FILE));
    if (!owner || typeof owner.home !== 'string' || processRecordAlive(owner)) continue;
    if (homeLockHeld(owner.home)) continue;
    // Read again right before removing: a server that claimed the directory meanwhile has rewritten it.
    if (JSON.stringify(readJson(join(dir, OWNER_FILE))) !== JSON.stringify(owner)) continue;
    rmSync(dir, { recursive: true, force: true });
    reaped.push(dir);
  }
  return reaped;
}

/**
 * One directory per Sandglass home under /dev/shm. Guest RAM is RAM either way; on tmpfs it is never written back
 * to disk, and a sparse copy of it (tmpfs to tmpfs, holes skipped) is what a live snapshot costs the guest.
 * /dev/shm is writable by every local user and the directory's name is predictable, so one made by anyone else
 * (another owner, a group- or world-writable mode, a symlink) is refused rather than used.
 */
export class RamFiles {
  readonly root: string;
  /** Template images being copied to tmpfs, by template key. */
  readonly #making = new Map<string, Promise<string>>();

  constructor(homeRoot: string, shmRoot = '/dev/shm') {
    const tag = createHash('sha256').update(homeRoot).digest('hex').slice(0, 12);
    this.root = join(shmRoot, `sandglass-${tag}`);
    ensurePrivateDir(this.root, [0o711, 0o700]);
    const owner: RamOwner = { pid: process.pid, startTime: processStartTime(process.pid) ?? '', home: homeRoot };
    writeFileSync(join(this.root, OWNER_FILE), `${JSON.stringify(owner)}\n`, { mode: 0o600 });
    warmCopier();
  }

  /** Tmpfs bytes held by the node's caches: template images and snapshot images (not the running VMs' RAM). */
  cacheBytes(): number {
    let total = 0;
    for (const name of readdirSync(this.root)) if (name.endsWith('.img')) total += heldBytes(join(this.root, name));
    return total;
  }

  /** Gives every byte back to the host: the whole directory goes (called once every VM has stopped). */
  release(): void {
    rmSync(this.root, { recursive: true, force: true });
  }

  /** The RAM file of VM `vmId`. */
  pathFor(vmId: string): string {
    return join(this.root, `${vmId}.mem`);
  }

  /** Starts VM `vmId`'s RAM file as a sparse copy of `image`, owned by the VM's uid; `filled` settles with the copy. */
  createFrom(vmId: string, image: string): { path: string; filled: Promise<void> } {
    const path = this.pathFor(vmId);
    rmSync(path, { force: true });
    // Created here, exclusively and not through a symlink; the copy then fills the file we made. Handed to the VM
    // now: its jail binds this file while the copy runs, and QEMU starts only once `filled` resolves.
    closeSync(openSync(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600));
    chownToVm(path, vmId);
    return { path, filled: copySparse(image, path) };
  }

  /** Makes VM `vmId`'s RAM file empty (a cold boot): QEMU sizes it to the guest's memory. */
  createEmpty(vmId: string): string {
    const path = this.pathFor(vmId);
    rmSync(path, { force: true });
    closeSync(openSync(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600));
    chownToVm(path, vmId);
    return path;
  }

  /**
   * A tmpfs copy of a template's RAM file, made once per process: restores then copy tmpfs to tmpfs.
   * Written under a temporary name and renamed, so a crash never leaves a half copy that looks whole.
   */
  async templateImage(key: string, artifactMem: string): Promise<string> {
    const path = join(this.root, `template-${key}.img`);
    if (existsSync(path)) return path;
    // Concurrent restores of one template (a burst of creates on a node with no warm pool) share one copy: each
    // making its own under the same temporary name would rename it away from under the others.
    let making = this.#making.get(key);
    if (!making) {
      making = (async () => {
        const tmp = `${path}.tmp-${process.pid}`;
        // Once per template: zero-filled pages become holes, so every VM restored from it copies (and holds) less.
        await copyCompacting(artifactMem, tmp);
        renameSync(tmp, path);
        return path;
      })().finally(() => this.#making.delete(key));
      this.#making.set(key, making);
    }
    return making;
  }

  /** Drops the tmpfs copy of a template's RAM (the template's files were replaced). */
  removeTemplateImage(key: string): void {
    rmSync(join(this.root, `template-${key}.img`), { force: true });
  }

  remove(path: string): void {
    rmSync(path, { force: true });
  }

  /**
   * Drops everything a previous gateway of this home left behind (its QEMUs were killed first): RAM files, half
   * copies and its caches, which are rebuilt on demand rather than trusted to still be wanted.
   */
  removeStale(): void {
    for (const name of readdirSync(this.root)) if (name !== OWNER_FILE) rmSync(join(this.root, name), { force: true, recursive: true });
  }
}
