// A minimal qcow2 reader and writer: list and stream the clusters one overlay layer holds, and write a fresh overlay from clusters.
import { constants } from 'node:fs';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { invalidArgument, SandglassError } from '@sandglass/core';

export interface Qcow2Layer {
  sizeBytes: number;
  clusterBytes: number;
  backingFile?: string;
  backingFormat?: string;
  clusters: Array<{ guestOffset: number; hostOffset: number; zero: boolean }>;
}

export interface Qcow2OverlayOptions {
  sizeBytes: number;
  /** Both absent: a standalone image (a flattened disk); unwritten clusters read as zeros. */
  backingFile?: string;
  backingFormat?: 'raw' | 'qcow2';
  clusters: AsyncIterable<Qcow2Cluster> | Iterable<Qcow2Cluster>;
}

export interface Qcow2Cluster {
  guestOffset: number;
  data: Buffer | 'zero';
}

const MAGIC = 0x514649fb; // "QFI\xfb"
const EXT_END = 0;
const EXT_BACKING_FORMAT = 0xe2792aca;

const INCOMPAT_DIRTY = 1;
const INCOMPAT_CORRUPT = 2;
const INCOMPAT_DATA_FILE = 4;
const INCOMPAT_COMPRESSION_TYPE = 8;
const INCOMPAT_EXTL2 = 16;
// Dirty only means refcounts may be stale (lazy refcounts), and the compression type only matters for compressed clusters,
// which are refused one by one; neither affects which clusters a layer holds.
const INCOMPAT_UNDERSTOOD = INCOMPAT_DIRTY | INCOMPAT_COMPRESSION_TYPE;

// L1/L2 entries: bits 9-55 are the host offset, bit 62 marks a compressed cluster, bit 63 "copied" (refcount is exactly 1),
// bit 0 of an L2 entry (v3) "reads as zero". Entries are read as two 32-bit halves so no BigInt is needed per entry.
const HI_OFFSET_MASK = 0x00ffffff;
const LO_OFFSET_MASK = 0xfffffe00;
const HI_COMPRESSED = 0x40000000;
const HI_COPIED = 0x80000000;
const LO_ZERO = 1;

// What writeQcow2Overlay produces: 64 KiB clusters and 16-bit refcounts, QEMU's defaults.
const CLUSTER_BITS = 16;
const CLUSTER_BYTES = 1 << CLUSTER_BITS;
const L2_ENTRIES = CLUSTER_BYTES / 8;
const REFCOUNT_ORDER = 4;
const REFCOUNTS_PER_BLOCK = CLUSTER_BYTES / 2;
const V3_HEADER_BYTES = 112;
// QEMU refuses backing file names longer than this.
const MAX_BACKING_NAME_BYTES = 1023;

// Host runs are read in one call up to this size, so a long contiguous layer costs few syscalls and bounded memory.
const MAX_RUN_BYTES = 4 << 20;

function unsupported(path: string, what: string): SandglassError {
  return new SandglassError('internal', `qcow2 ${path}: ${what}`);
}

/**
 * How a layer is opened: the file itself, never through a symlink. A VM can write its own run directory, so a layer
 * that was checked as a plain file and then replaced by a link elsewhere fails the read instead of following it.
 */
const READ_LAYER = constants.O_RDONLY | constants.O_NOFOLLOW;

function hostOffsetOf(buf: Buffer, at: number): number {
  return (buf.readUInt32BE(at) & HI_OFFSET_MASK) * 2 ** 32 + ((buf.readUInt32BE(at + 4) & LO_OFFSET_MASK) >>> 0);
}

async function readExactly(fh: FileHandle, path: string, position: number, lengthBytes: number, what: string): Promise<Buffer> {
  const buf = Buffer.alloc(lengthBytes);
  const { bytesRead } = await fh.read(buf, 0, lengthBytes, position);
  if (bytesRead !== lengthBytes) throw unsupported(path, `${what} at offset ${position} lies past the end of the file`);
  return buf;
}

/** Lists the clusters allocated in this layer only (not its backing chain), sorted by guest offset. */
export async function readQcow2Layer(path: string): Promise<Qcow2Layer> {
  const fh = await open(path, READ_LAYER);
  try {
    const fixed = await readExactly(fh, path, 0, 104, 'header');
    if (fixed.readUInt32BE(0) !== MAGIC) throw unsupported(path, 'not a qcow2 image (bad magic)');
    const version = fixed.readUInt32BE(4);
    if (version !== 2 && version !== 3) throw unsupported(path, `qcow2 version ${version} is not supported (only 2 and 3)`);
    const backingFileOffset = Number(fixed.readBigUInt64BE(8));
    const backingFileBytes = fixed.readUInt32BE(16);
    const clusterBits = fixed.readUInt32BE(20);
    if (clusterBits < 9 || clusterBits > 21) throw unsupported(path, `cluster_bits ${clusterBits} is out of range`);
    const clusterBytes = 2 ** clusterBits;
    const sizeBytes = Number(fixed.readBigUInt64BE(24));
    if (fixed.readUInt32BE(32) !== 0) throw unsupported(path, 'encrypted images are not supported');
    const l1Size = fixed.readUInt32BE(36);
    const l1TableOffset = Number(fixed.readBigUInt64BE(40));

    let headerBytes = 72;
    if (version === 3) {
      const incompatible = fixed.readBigUInt64BE(72);
      if (incompatible & BigInt(INCOMPAT_CORRUPT)) throw unsupported(path, 'image is marked corrupt; run qemu-img check -r');
      if (incompatible & BigInt(INCOMPAT_DATA_FILE)) throw unsupported(path, 'external data files are not supported');
      if (incompatible & BigInt(INCOMPAT_EXTL2)) throw unsupported(path, 'extended L2 entries (subclusters) are not supported');
      const unknown = incompatible & ~BigInt(INCOMPAT_UNDERSTOOD);
      if (unknown) throw unsupported(path, `unknown incompatible features 0x${unknown.toString(16)}`);
      headerBytes = fixed.readUInt32BE(100);
    }

    const headerCluster = Buffer.alloc(clusterBytes);
    await fh.read(headerCluster, 0, clusterBytes, 0);
    let backingFormat: string | undefined;
    // Header extensions follow the header, each 8-byte aligned, up to an end marker, all inside the first cluster.
    for (let at = headerBytes; at + 8 <= clusterBytes; ) {
      const type = headerCluster.readUInt32BE(at);
      const lengthBytes = headerCluster.readUInt32BE(at + 4);
      if (type === EXT_END) break;
      if (at + 8 + lengthBytes > clusterBytes) throw unsupported(path, 'a header extension runs past the first cluster');
      if (type === EXT_BACKING_FORMAT) backingFormat = headerCluster.toString('utf8', at + 8, at + 8 + lengthBytes);
      at += 8 + Math.ceil(lengthBytes / 8) * 8;
    }
    let backingFile: string | undefined;
    if (backingFileOffset !== 0) {
      if (backingFileOffset + backingFileBytes > clusterBytes) throw unsupported(path, 'the backing file name runs past the first cluster');
      backingFile = headerCluster.toString('utf8', backingFileOffset, backingFileOffset + backingFileBytes);
    }

    const clusters: Qcow2Layer['clusters'] = [];
    const l2Entries = clusterBytes / 8;
    const l1 = l1Size === 0 ? Buffer.alloc(0) : await readExactly(fh, path, l1TableOffset, l1Size * 8, 'L1 table');
    for (let l1Index = 0; l1Index < l1Size; l1Index++) {
      const l2Offset = hostOffsetOf(l1, l1Index * 8);
      if (l2Offset === 0) continue;
      if (l2Offset % clusterBytes !== 0) throw unsupported(path, `L2 table offset ${l2Offset} is not cluster aligned`);
      const l2 = await readExactly(fh, path, l2Offset, clusterBytes, 'L2 table');
      for (let l2Index = 0; l2Index < l2Entries; l2Index++) {
        const guestOffset = (l1Index * l2Entries + l2Index) * clusterBytes;
        if (guestOffset >= sizeBytes) break;
        const hi = l2.readUInt32BE(l2Index * 8);
        const lo = l2.readUInt32BE(l2Index * 8 + 4);
        if (hi === 0 && lo === 0) continue;
        if (hi & HI_COMPRESSED) throw unsupported(path, `compressed cluster at guest offset ${guestOffset} is not supported`);
        if (version === 3 && lo & LO_ZERO) {
          clusters.push({ guestOffset, hostOffset: 0, zero: true });
          continue;
        }
        const hostOffset = hostOffsetOf(l2, l2Index * 8);
        if (hostOffset === 0) continue;
        if (hostOffset % clusterBytes !== 0) throw unsupported(path, `cluster at guest offset ${guestOffset} has unaligned host offset ${hostOffset}`);
        clusters.push({ guestOffset, hostOffset, zero: false });
      }
    }
    return {
      sizeBytes,
      clusterBytes,
      ...(backingFile === undefined ? {} : { backingFile }),
      ...(backingFormat === undefined ? {} : { backingFormat }),
      clusters,
    };
  } finally {
    await fh.close();
  }
}

/** Streams the layer's clusters in guest order, one read per run of clusters contiguous in both guest and host space. */
export async function readClusters(
  path: string,
  layer: Qcow2Layer,
  onCluster: (guestOffset: number, data: Buffer | 'zero') => Promise<void> | void,
): Promise<void> {
  const { clusterBytes, clusters } = layer;
  const maxRunClusters = Math.max(1, Math.floor(MAX_RUN_BYTES / clusterBytes));
  const fh = await open(path, READ_LAYER);
  try {
    for (let i = 0; i < clusters.length; ) {
      const first = clusters[i]!;
      if (first.zero) {
        await onCluster(first.guestOffset, 'zero');
        i++;
        continue;
      }
      let runClusters = 1;
      while (runClusters < maxRunClusters) {
        const next = clusters[i + runClusters];
        if (!next || next.zero) break;
        if (next.guestOffset !== first.guestOffset + runClusters * clusterBytes) break;
        if (next.hostOffset !== first.hostOffset + runClusters * clusterBytes) break;
        runClusters++;
      }
      // A short read leaves zeros: QEMU reads a data cluster that ends past the end of the file as zeros too.
      const run = Buffer.alloc(runClusters * clusterBytes);
      await fh.read(run, 0, run.length, first.hostOffset);
      for (let k = 0; k < runClusters; k++) {
        await onCluster(first.guestOffset + k * clusterBytes, run.subarray(k * clusterBytes, (k + 1) * clusterBytes));
      }
      i += runClusters;
    }
  } finally {
    await fh.close();
  }
}

function validateOverlay(opts: Qcow2OverlayOptions): void {
  const { sizeBytes, backingFile, backingFormat } = opts;
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0 || sizeBytes % 512 !== 0) {
    throw invalidArgument('sizeBytes', 'must be a positive multiple of 512');
  }
  if (backingFile === undefined) {
    if (backingFormat !== undefined) throw invalidArgument('backingFormat', 'must be absent when there is no backingFile');
    return;
  }
  if (typeof backingFile !== 'string' || backingFile.length === 0 || backingFile.includes('\0')) {
    throw invalidArgument('backingFile', 'must be a non-empty path without NUL bytes');
  }
  if (Buffer.byteLength(backingFile) > MAX_BACKING_NAME_BYTES) {
    throw invalidArgument('backingFile', `must be at most ${MAX_BACKING_NAME_BYTES} bytes`);
  }
  if (backingFormat !== 'raw' && backingFormat !== 'qcow2') throw invalidArgument('backingFormat', "must be 'raw' or 'qcow2'");
}

function setEntry(table: Buffer, index: number, hi: number, lo: number): void {
  table.writeUInt32BE(hi >>> 0, index * 8);
  table.writeUInt32BE(lo >>> 0, index * 8 + 4);
}

function setOffsetEntry(table: Buffer, index: number, hostOffset: number): void {
  setEntry(table, index, (HI_COPIED | Math.floor(hostOffset / 2 ** 32)) >>> 0, hostOffset % 2 ** 32);
}

function headerCluster(opts: Qcow2OverlayOptions, l1Size: number, l1TableOffset: number, refcountTableOffset: number, refcountTableClusters: number): Buffer {
  const h = Buffer.alloc(CLUSTER_BYTES);
  const backed = opts.backingFile !== undefined;
  const format = Buffer.from(opts.backingFormat ?? '');
  const extensionsBytes = (backed ? 8 + Math.ceil(format.length / 8) * 8 : 0) + 8;
  const backingFileOffset = V3_HEADER_BYTES + extensionsBytes;
  const backingName = Buffer.from(opts.backingFile ?? '');
  h.writeUInt32BE(MAGIC, 0);
  h.writeUInt32BE(3, 4);
  h.writeBigUInt64BE(BigInt(backed ? backingFileOffset : 0), 8);
  h.writeUInt32BE(backingName.length, 16);
  h.writeUInt32BE(CLUSTER_BITS, 20);
  h.writeBigUInt64BE(BigInt(opts.sizeBytes), 24);
  h.writeUInt32BE(0, 32); // no encryption
  h.writeUInt32BE(l1Size, 36);
  h.writeBigUInt64BE(BigInt(l1TableOffset), 40);
  h.writeBigUInt64BE(BigInt(refcountTableOffset), 48);
  h.writeUInt32BE(refcountTableClusters, 56);
  // nb_snapshots, snapshots_offset and the incompatible/compatible/autoclear feature bits all stay 0
  h.writeUInt32BE(REFCOUNT_ORDER, 96);
  h.writeUInt32BE(V3_HEADER_BYTES, 100);
  // byte 104: compression type 0 (zlib), then padding to 112
  let at = V3_HEADER_BYTES;
  if (backed) {
    h.writeUInt32BE(EXT_BACKING_FORMAT, at);
    h.writeUInt32BE(format.length, at + 4);
    format.copy(h, at + 8);
    at += 8 + Math.ceil(format.length / 8) * 8;
  }
  h.writeUInt32BE(EXT_END, at);
  h.writeUInt32BE(0, at + 4);
  backingName.copy(h, backingFileOffset);
  return h;
}

/**
 * Writes a fresh qcow2 v3 overlay over `backingFile` holding exactly the given 64 KiB clusters; 'zero' (and all-zero data)
 * becomes the v3 "reads as zero" flag so it shadows the backing without a data cluster. Data is streamed to disk as it
 * arrives and the metadata (L2 tables, L1, refcounts) is appended after it; the image appears at `path` only once
 * complete and synced, so bad input or a crash leaves nothing behind. QEMU resolves a relative `backingFile` against the
 * overlay's directory, not the working directory.
 */
export async function writeQcow2Overlay(path: string, opts: Qcow2OverlayOptions): Promise<void> {
  validateOverlay(opts);
  const { sizeBytes } = opts;
  const l1Size = Math.ceil(sizeBytes / (CLUSTER_BYTES * L2_ENTRIES));
  const guestClusters = Math.ceil(sizeBytes / CLUSTER_BYTES);
  const partialPath = `${path}.partial`;
  const fh = await open(partialPath, 'w');
  try {
    const l2Tables = new Map<number, Buffer>();
    const seen = new Set<number>();
    const zeroCluster = Buffer.alloc(CLUSTER_BYTES);
    let nextHostOffset = CLUSTER_BYTES; // cluster 0 is the header
    let index = 0;
    for await (const { guestOffset, data } of opts.clusters) {
      const field = `clusters[${index}]`;
      if (!Number.isSafeInteger(guestOffset) || guestOffset < 0 || guestOffset % CLUSTER_BYTES !== 0) {
        throw invalidArgument(`${field}.guestOffset`, `must be a non-negative multiple of ${CLUSTER_BYTES}`);
      }
      const guestCluster = guestOffset / CLUSTER_BYTES;
      if (guestCluster >= guestClusters) throw invalidArgument(`${field}.guestOffset`, `must be below sizeBytes (${sizeBytes})`);
      if (seen.has(guestCluster)) throw invalidArgument(`${field}.guestOffset`, `cluster ${guestOffset} is given twice`);
      if (data !== 'zero' && !(Buffer.isBuffer(data) && data.length === CLUSTER_BYTES)) {
        throw invalidArgument(`${field}.data`, `must be 'zero' or a Buffer of exactly ${CLUSTER_BYTES} bytes`);
      }
      seen.add(guestCluster);
      const l1Index = Math.floor(guestCluster / L2_ENTRIES);
      let l2 = l2Tables.get(l1Index);
      if (!l2) l2Tables.set(l1Index, (l2 = Buffer.alloc(CLUSTER_BYTES)));
      if (data === 'zero' || data.equals(zeroCluster)) {
        setEntry(l2, guestCluster % L2_ENTRIES, 0, LO_ZERO);
      } else {
        await fh.write(data, 0, CLUSTER_BYTES, nextHostOffset);
        setOffsetEntry(l2, guestCluster % L2_ENTRIES, nextHostOffset);
        nextHostOffset += CLUSTER_BYTES;
      }
      index++;
    }

    const l1 = Buffer.alloc(Math.ceil((l1Size * 8) / CLUSTER_BYTES) * CLUSTER_BYTES);
    for (const l1Index of [...l2Tables.keys()].sort((a, b) => a - b)) {
      await fh.write(l2Tables.get(l1Index)!, 0, CLUSTER_BYTES, nextHostOffset);
      setOffsetEntry(l1, l1Index, nextHostOffset);
      nextHostOffset += CLUSTER_BYTES;
    }
    const l1TableOffset = nextHostOffset;
    await fh.write(l1, 0, l1.length, l1TableOffset);
    nextHostOffset += l1.length;

    // The refcount blocks and table must count themselves too: grow them until the total stops changing.
    const usedClusters = nextHostOffset / CLUSTER_BYTES;
    let blocks = 0;
    let tableClusters = 0;
    for (;;) {
      const total = usedClusters + blocks + tableClusters;
      const needBlocks = Math.ceil(total / REFCOUNTS_PER_BLOCK);
      const needTableClusters = Math.ceil((needBlocks * 8) / CLUSTER_BYTES);
      if (needBlocks === blocks && needTableClusters === tableClusters) break;
      blocks = needBlocks;
      tableClusters = needTableClusters;
    }
    const totalClusters = usedClusters + blocks + tableClusters;
    const refcountBlocks = Buffer.alloc(blocks * CLUSTER_BYTES);
    for (let c = 0; c < totalClusters; c++) refcountBlocks.writeUInt16BE(1, c * 2);
    const refcountTable = Buffer.alloc(tableClusters * CLUSTER_BYTES);
    for (let b = 0; b < blocks; b++) refcountTable.writeBigUInt64BE(BigInt(nextHostOffset + b * CLUSTER_BYTES), b * 8);
    await fh.write(refcountBlocks, 0, refcountBlocks.length, nextHostOffset);
    nextHostOffset += refcountBlocks.length;
    const refcountTableOffset = nextHostOffset;
    await fh.write(refcountTable, 0, refcountTable.length, refcountTableOffset);

    await fh.write(headerCluster(opts, l1Size, l1TableOffset, refcountTableOffset, tableClusters), 0, CLUSTER_BYTES, 0);
    await fh.sync();
    await fh.close();
    await rename(partialPath, path);
  } catch (err) {
    await fh.close().catch(() => undefined);
    await rm(partialPath, { force: true });
    throw err;
  }
  // The rename itself is durable only once the directory is synced.
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
