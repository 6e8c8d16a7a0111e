// The initramfs: the agent as /init plus the kernel modules it loads before mounting the root disk (layout: spec/agent-protocol.md, "Guest boot").
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cacheKey, ensureArtifact } from './cache.js';
import { writeCpio, type CpioEntry } from './cpio.js';
import type { KernelArtifact } from './kernel.js';

export interface InitramfsArtifact {
  key: string;
  path: string;
}

/** The archive's entries; uncompressed because decompressing in the guest under TCG costs more than reading the extra bytes. */
export async function initramfsEntries(kernel: KernelArtifact, agentPath: string): Promise<CpioEntry[]> {
  const entries: CpioEntry[] = [
    { type: 'dir', path: 'dev' },
    // The kernel opens /dev/console for init's stdio before init can mount devtmpfs.
    { type: 'char', path: 'dev/console', major: 5, minor: 1 },
    { type: 'dir', path: 'proc' },
    { type: 'dir', path: 'sys' },
    { type: 'dir', path: 'newroot' },
    { type: 'dir', path: 'modules' },
  ];
  for (const m of kernel.modules) entries.push({ type: 'file', path: `modules/${m}`, data: await readFile(join(kernel.dir, 'modules', m)) });
  entries.push({ type: 'file', path: 'modules.order', data: Buffer.from(kernel.modules.map((m) => `${m}\n`).join('')) });
  entries.push({ type: 'file', path: 'init', data: await readFile(agentPath), mode: 0o755 });
  return entries;
}

export async function ensureInitramfs(artifactsDir: string, kernel: KernelArtifact, agentSha256: string, agentPath: string): Promise<InitramfsArtifact> {
  const key = cacheKey('initramfs', { kernel: kernel.key, agent: agentSha256, modules: kernel.modules });
  const { dir } = await ensureArtifact(artifactsDir, 'initramfs', key, async (tmp) => {
    await writeFile(join(tmp, 'initramfs.cpio'), writeCpio(await initramfsEntries(kernel, agentPath)));
  });
  return { key, path: join(dir, 'initramfs.cpio') };
}
