// Writes newc cpio archives (the initramfs format) in-process, so device nodes need no root and the bytes are reproducible.

export type CpioEntry =
  | { type: 'dir'; path: string; mode?: number }
  | { type: 'file'; path: string; data: Buffer; mode?: number }
  | { type: 'char'; path: string; major: number; minor: number; mode?: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFCHR = 0o020000;

function pad4(n: number): number {
  return (4 - (n % 4)) % 4;
}

function header(fields: { ino: number; mode: number; nlink: number; size: number; rdevMajor: number; rdevMinor: number; nameBytes: number }): string {
  // uid, gid, mtime, devmajor, devminor and check stay 0: root-owned, reproducible archives.
  const hex = (n: number) => n.toString(16).padStart(8, '0');
  return (
    '070701' + [fields.ino, fields.mode, 0, 0, fields.nlink, 0, fields.size, 0, 0, fields.rdevMajor, fields.rdevMinor, fields.nameBytes, 0].map(hex).join('')
  );
}

/** A newc archive of `entries` (paths without a leading slash), in the given order, with the trailer. */
export function writeCpio(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  const push = (b: Buffer) => {
    parts.push(b);
    offset += b.length;
  };
  const emit = (ino: number, mode: number, nlink: number, name: string, data: Buffer, rdevMajor = 0, rdevMinor = 0) => {
    const nameBuf = Buffer.from(`${name}\0`, 'utf8');
    push(Buffer.from(header({ ino, mode, nlink, size: data.length, rdevMajor, rdevMinor, nameBytes: nameBuf.length }), 'ascii'));
    push(nameBuf);
    push(Buffer.alloc(pad4(offset)));
    push(data);
    push(Buffer.alloc(pad4(offset)));
  };
  let ino = 1;
  for (const e of entries) {
    const path = e.path.replace(/^\/+/, '');
    if (e.type === 'dir') emit(ino++, S_IFDIR | (e.mode ?? 0o755), 2, path, Buffer.alloc(0));
    else if (e.type === 'file') emit(ino++, S_IFREG | (e.mode ?? 0o644), 1, path, e.data);
    else emit(ino++, S_IFCHR | (e.mode ?? 0o600), 1, path, Buffer.alloc(0), e.major, e.minor);
  }
  emit(0, 0, 1, 'TRAILER!!!', Buffer.alloc(0));
  return Buffer.concat(parts);
}
