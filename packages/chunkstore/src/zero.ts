// All-zero chunks dominate fresh memory and disk images; snapshot code stores a sentinel for them instead of a chunk.

/** Shared and never written: comparing against it is a memcmp, far faster than a byte loop in JavaScript. */
const ZEROS = Buffer.alloc(1024 * 1024);

/** True when every byte is zero (vacuously for an empty buffer). */
export function isZeroChunk(data: Buffer): boolean {
  for (let offset = 0; offset < data.length; offset += ZEROS.length) {
    const end = Math.min(offset + ZEROS.length, data.length);
    if (!data.subarray(offset, end).equals(ZEROS.subarray(0, end - offset))) return false;
  }
  return true;
}
