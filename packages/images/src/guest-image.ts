// ensureGuestImage: agent, kernel, initramfs and root filesystem, each built once and cached under the hash of its inputs.
import { fileURLToPath } from 'node:url';
import { homeLayout } from '@sandglass/core';
import { ensureAgent } from './agent.js';
import { cacheKey } from './cache.js';
import { ensureInitramfs } from './initramfs.js';
import { ensureKernel, resolveKernelPackageCached } from './kernel.js';
import { ensureDebootstrap, ensureRootfs } from './rootfs.js';

export interface GuestImage {
  key: string;
  kernelPath: string;
  initramfsPath: string;
  rootfsPath: string;
  agentPath: string;
  /** `uname -r` in the guest. */
  kernelVersion: string;
}

export type ImageStep = 'agent' | 'kernel' | 'initramfs' | 'debootstrap' | 'rootfs';

export interface ImageProgress {
  step: ImageStep;
  /** Steps finished so far, out of `total`. */
  done?: number;
  total?: number;
  message?: string;
}

export interface EnsureGuestImageOptions {
  /** Sandglass home (default $SANDGLASS_HOME or ~/.sandglass); artifacts go under its `artifacts/`. */
  home?: string;
  onProgress?: (p: ImageProgress) => void;
  /** The agent's Go sources (default: `agent/` of this repository). */
  agentDir?: string;
}

const REPO_AGENT_DIR = fileURLToPath(new URL('../../../agent/', import.meta.url));
const STEPS: readonly ImageStep[] = ['agent', 'kernel', 'initramfs', 'debootstrap', 'rootfs'];

const inFlight = new Map<string, Promise<GuestImage>>();

/**
 * Builds whatever part of the guest image is missing and returns the paths of all parts.
 * Idempotent; when everything is cached it only hashes the agent sources and asks apt which
 * kernel is current (remembered until apt's lists change). Concurrent calls for one home share one build.
 */
export function ensureGuestImage(opts: EnsureGuestImageOptions = {}): Promise<GuestImage> {
  const artifactsDir = homeLayout(opts.home).artifacts;
  const agentDir = opts.agentDir ?? REPO_AGENT_DIR;
  const id = `${artifactsDir}\0${agentDir}`;
  const running = inFlight.get(id);
  if (running) return running;
  const p = build(artifactsDir, agentDir, opts.onProgress).finally(() => inFlight.delete(id));
  inFlight.set(id, p);
  return p;
}

async function build(artifactsDir: string, agentDir: string, onProgress?: (p: ImageProgress) => void): Promise<GuestImage> {
  const total = STEPS.length;
  const progress = (step: ImageStep) => (message: string) => onProgress?.({ step, done: STEPS.indexOf(step), total, message });
  const agent = await ensureAgent(artifactsDir, agentDir, progress('agent'));
  const kernel = await ensureKernel(artifactsDir, await resolveKernelPackageCached(artifactsDir), progress('kernel'));
  const initramfs = await ensureInitramfs(artifactsDir, kernel, agent.sha256, agent.path);
  const debootstrap = await ensureDebootstrap(artifactsDir, progress('debootstrap'));
  const rootfs = await ensureRootfs(artifactsDir, debootstrap, agent, progress('rootfs'));
  onProgress?.({ step: 'rootfs', done: total, total, message: 'guest image ready' });
  return {
    key: cacheKey('image', { kernel: kernel.key, initramfs: initramfs.key, rootfs: rootfs.key, agent: agent.key }),
    kernelPath: kernel.kernelPath,
    initramfsPath: initramfs.path,
    rootfsPath: rootfs.path,
    agentPath: agent.path,
    kernelVersion: kernel.version,
  };
}
