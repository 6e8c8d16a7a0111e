// The node's accelerator: the probe (packages/vmm accel.ts) run with the real guest image, its verdict cached in the home.
import { join } from 'node:path';
import type { HomeLayout, Logger } from '@sandglass/core';
import { kvmProbeAttempt } from '@sandglass/gateway';
import { defaultKernelArgs, ensureGuestImage, type GuestImage } from '@sandglass/images';
import { chooseAccel, probeCacheKey, qemuVersion, type AccelChoice } from '@sandglass/vmm';
import type { progressPrinter } from './progress.js';

/** Where the verdict is cached, keyed by host boot and QEMU version: beside the guest image it was proven with. */
export function accelCacheFile(layout: HomeLayout): string {
  return join(layout.artifacts, 'accel.json');
}

export function nodeAccel(layout: HomeLayout, image: GuestImage, kernelArgs: string): Promise<AccelChoice> {
  return chooseAccel({
    setting: process.env.SANDGLASS_ACCEL,
    attempt: kvmProbeAttempt(image, kernelArgs, layout.run),
    cacheFile: accelCacheFile(layout),
    cacheKey: probeCacheKey(qemuVersion()),
  });
}

/**
 * What every node needs before its first VM: the guest image (built the first time, with progress shown) and the
 * accelerator proven to boot it — a /dev/kvm that opens may still be unable to boot a 64-bit guest (incomplete
 * nested virtualization).
 */
export async function prepareNode(
  layout: HomeLayout,
  log: Logger,
  progress: ReturnType<typeof progressPrinter>,
): Promise<{ image: GuestImage; kernelArgs: string; accel: AccelChoice }> {
  const image = await ensureGuestImage({ home: layout.root, onProgress: (p) => progress.update(p) });
  progress.finish();
  const kernelArgs = defaultKernelArgs().join(' ');
  progress.update({ step: 'accelerator', message: 'checking which accelerator boots a guest' });
  const accel = await nodeAccel(layout, image, kernelArgs);
  progress.finish();
  log.info({ accel: accel.accel, cpu: accel.cpu }, accel.reason);
  process.stdout.write(`accelerator: ${accel.accel} (-cpu ${accel.cpu}): ${accel.reason}\n`);
  return { image, kernelArgs, accel };
}
