// @sandglass/vmm: the VMM driver (QEMU microvm, KVM or TCG), its QMP client and per-VM cgroups.
export * from './qemu.js';
export * from './qmp.js';
export * from './cgroup.js';
export * from './host.js';
export * from './jail.js';
export * from './accel.js';
export { ConsoleRing, CONSOLE_RING_BYTES } from './console.js';
