// Which kernel package the guest image uses when apt cannot be asked (an air-gapped host unpacked from a bundle).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { artifactDir } from './cache.js';
import { type KernelPackage, kernelKey, resolveKernelPackageCached } from './kernel.js';

const dirs: string[] = [];
const path = process.env.PATH;
afterEach(() => {
  process.env.PATH = path;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const pkg: KernelPackage = { name: 'linux-image-6.1.0-99-cloud-amd64', version: '6.1.999-1', filename: 'pool/x.deb', sha256: 'ab' };

function memoDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sg-kernel-'));
  dirs.push(dir);
  // Remembered under another apt state: the cached answer alone would be stale.
  writeFileSync(join(dir, 'kernel-package.json'), JSON.stringify({ fingerprint: 'another host', package: pkg }));
  return dir;
}

it('uses the kernel already unpacked beside the memo when apt cannot answer', async () => {
  const dir = memoDir();
  mkdirSync(artifactDir(dir, 'kernel', kernelKey(pkg)), { recursive: true });
  process.env.PATH = '/nonexistent';
  await expect(resolveKernelPackageCached(dir)).resolves.toEqual(pkg);
});

it('fails when apt cannot answer and that kernel is not there', async () => {
  const dir = memoDir();
  process.env.PATH = '/nonexistent';
  await expect(resolveKernelPackageCached(dir)).rejects.toThrow();
});

it('offline, keeps the unpacked kernel without asking apt at all', async () => {
  const dir = memoDir();
  mkdirSync(artifactDir(dir, 'kernel', kernelKey(pkg)), { recursive: true });
  process.env.SANDGLASS_OFFLINE = '1';
  try {
    // apt is there and would name the host's current kernel; offline, the bundle's wins.
    await expect(resolveKernelPackageCached(dir)).resolves.toEqual(pkg);
  } finally {
    delete process.env.SANDGLASS_OFFLINE;
  }
});
