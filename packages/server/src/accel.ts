// The node's accelerator: the probe (packages/vmm accel.ts) run with the real guest image, its verdict cached in the home.
import { join } from 'node:path';
import type { HomeLayout } from '@sandglass/core';
import { kvmProbeAttempt } from '@sandglass/gateway';
import type { GuestImage } from '@sandglass/images';
import { chooseAccel, probeCacheKey, qemuVersion, type AccelChoice } from '@sandglass/vmm';

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
