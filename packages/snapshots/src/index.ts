// @sandglass/snapshots: the qcow2 layer reader and writer, the retention policy, and the per-node capture scheduler.
export * from './qcow2.js';
export * from './retention.js';
export * from './scheduler.js';
export * from './manifest.js';
export * from './capture.js';
export * from './materialize.js';
export * from './template.js';
