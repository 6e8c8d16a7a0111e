// @sandglass/images: builds and caches the guest kernel, initramfs, root filesystem and agent; the kernel arguments to boot them.
export { ensureGuestImage, type GuestImage, type ImageProgress, type ImageStep, type EnsureGuestImageOptions } from './guest-image.js';
export { defaultKernelArgs, hostTscKhz } from './kernel-args.js';
