// Guest RAM files on tmpfs: every VM maps its own file shared, so a live snapshot reads guest memory straight from it.
import { createHash } from 'node:crypto';
import { closeSync, constants as fsc, existsSync, openSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { chownToVm, copyCompacting, copySparse, ensurePrivateDir, warmCopier } from '@sandglass/vmm';

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
    warmCopier();
  }

  /** The RAM file of VM `vmId`. */
  pathFor(vmId: string): string {
    return join(this.root, `${vmId}.mem`);
  }

  /** Makes VM `vmId`'s RAM file a sparse copy of `image`, owned by the VM's uid. */
  async createFrom(vmId: string, image: string): Promise<string> {
    const path = this.pathFor(vmId);
    rmSync(path, { force: true });
    // Created here, exclusively and not through a symlink; the copy then fills the file we made.
    closeSync(openSync(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600));
    await copySparse(image, path);
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

  /** Drops RAM files of VMs a previous gateway left behind (their QEMUs were killed first). */
  removeStale(keep: (name: string) => boolean = () => false): void {
    for (const name of readdirSync(this.root)) if (!keep(name)) rmSync(join(this.root, name), { force: true, recursive: true });
  }
}
