// @sandglass/chunkstore: content-addressed, per-tenant encrypted chunks and snapshot manifests, verified reads, crash-safe GC.
export type { BackendEntry, ChunkBackend } from './backend.js';
export { LocalDiskBackend } from './local-disk.js';
export { S3Backend, type S3BackendOptions } from './s3.js';
export { openChunkBackend, type OpenChunkBackendOptions } from './open.js';
export {
  ChunkStore,
  type CaptureLease,
  type ChunkStoreOptions,
  type GcResult,
  type Manifest,
  type PutResult,
  type TenantStore,
} from './chunk-store.js';
export { isZeroChunk } from './zero.js';
