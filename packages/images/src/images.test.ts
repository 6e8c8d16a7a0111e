// Unit tests of the pure parts of image building: cache keys, module load order, cpio layout, kernel extraction, kernel arguments.
import { describe, expect, it } from 'vitest';
import { cacheKey } from './cache.js';
import { writeCpio } from './cpio.js';
import { parseAptStanza } from './kernel.js';
import { defaultKernelArgs, parseTscKhz } from './kernel-args.js';
import { computeModuleOrder, modinfoDepends, moduleName, parseModulesBuiltin, readModinfo } from './modules.js';
import { parseAptMirror, rootfsSizeBytes, withGuestUser } from './rootfs.js';
import { lz4LegacyDecompress } from './vmlinux.js';

describe('cacheKey', () => {
  it('is 16 hex digits and ignores object key order', () => {
    const a = cacheKey('kernel', { version: '6.1', modules: ['virtio', 'virtio_ring'], sha256: 'ab' });
    const b = cacheKey('kernel', { sha256: 'ab', modules: ['virtio', 'virtio_ring'], version: '6.1' });
    expect(a).toMatch(/^[0-9a-f]{16}$/);
    expect(a).toBe(b);
  });

  it('changes with any input, list order and the artifact name', () => {
    const base = cacheKey('kernel', { version: '6.1', modules: ['a', 'b'] });
    expect(cacheKey('kernel', { version: '6.2', modules: ['a', 'b'] })).not.toBe(base);
    expect(cacheKey('kernel', { version: '6.1', modules: ['b', 'a'] })).not.toBe(base);
    expect(cacheKey('rootfs', { version: '6.1', modules: ['a', 'b'] })).not.toBe(base);
    expect(cacheKey('kernel', { version: '6.1', modules: ['a', 'b'], extra: null })).not.toBe(base);
  });

  it('does not confuse a string with the number it spells', () => {
    expect(cacheKey('x', { v: '1' })).not.toBe(cacheKey('x', { v: 1 }));
  });
});

describe('module order', () => {
  // The shape of Debian's 6.1 cloud kernel: ext4, jbd2, crc16 … built in; virtio as modules.
  const builtin = parseModulesBuiltin('kernel/fs/ext4/ext4.ko\nkernel/fs/jbd2/jbd2.ko\nkernel/fs/mbcache.ko\nkernel/lib/crc16.ko\n');
  const depends = new Map<string, string[]>([
    ['virtio_mmio', ['virtio', 'virtio_ring']],
    ['virtio_blk', ['virtio', 'virtio_ring']],
    ['virtio_console', ['virtio', 'virtio_ring']],
    ['virtio_net', ['net_failover', 'virtio', 'virtio_ring']],
    ['net_failover', ['failover']],
    ['failover', []],
    ['virtio', []],
    ['virtio_ring', []],
  ]);

  it('puts every module after its dependencies, once, and drops built-ins', () => {
    const order = computeModuleOrder(['virtio_mmio', 'virtio_blk', 'virtio_console', 'virtio_net', 'ext4'], depends, builtin);
    expect(order).toEqual(['virtio', 'virtio_ring', 'virtio_mmio', 'virtio_blk', 'virtio_console', 'failover', 'net_failover', 'virtio_net']);
  });

  it('treats - and _ alike', () => {
    expect(moduleName('kernel/drivers/char/hw_random/virtio-rng.ko.xz')).toBe('virtio_rng');
    expect(computeModuleOrder(['virtio-mmio'], depends, builtin)).toEqual(['virtio', 'virtio_ring', 'virtio_mmio']);
  });

  it('names the chain that needed a missing module', () => {
    const broken = new Map(depends);
    broken.delete('failover');
    expect(() => computeModuleOrder(['virtio_net'], broken, builtin)).toThrow(/failover.*virtio_net → net_failover/);
  });

  it('refuses cycles', () => {
    const cyclic = new Map([
      ['a', ['b']],
      ['b', ['a']],
    ]);
    expect(() => computeModuleOrder(['a'], cyclic, new Set())).toThrow(/cycle: a → b → a/);
  });

  it('reads depends= from an ELF .modinfo section', () => {
    const elf = fakeModule(['license=GPL', 'depends=virtio,virtio_ring', 'name=virtio_blk']);
    const info = readModinfo(elf);
    expect(info.get('name')).toEqual(['virtio_blk']);
    expect(modinfoDepends(info)).toEqual(['virtio', 'virtio_ring']);
    expect(modinfoDepends(readModinfo(fakeModule(['depends=', 'name=virtio'])))).toEqual([]);
  });
});

describe('writeCpio', () => {
  it('writes newc headers, 4-byte alignment, a char device and the trailer', () => {
    const cpio = writeCpio([
      { type: 'dir', path: '/dev' },
      { type: 'char', path: 'dev/console', major: 5, minor: 1 },
      { type: 'file', path: 'init', data: Buffer.from('abc'), mode: 0o755 },
    ]);
    expect(cpio.length % 4).toBe(0);
    const text = cpio.toString('latin1');
    expect(text.startsWith('070701')).toBe(true);
    expect(text).toContain('dev\0');
    expect(text).not.toContain('/dev\0');
    const console = text.indexOf('dev/console\0');
    const header = text.slice(console - 110, console);
    expect(parseInt(header.slice(6 + 8, 6 + 16), 16)).toBe(0o020600); // mode: char device
    expect(parseInt(header.slice(6 + 9 * 8, 6 + 10 * 8), 16)).toBe(5); // rdevmajor
    expect(parseInt(header.slice(6 + 10 * 8, 6 + 11 * 8), 16)).toBe(1); // rdevminor
    const init = text.indexOf('init\0');
    expect(parseInt(text.slice(init - 110 + 6 + 6 * 8, init - 110 + 6 + 7 * 8), 16)).toBe(3); // filesize
    expect((init - 110) % 4).toBe(0); // each header starts aligned
    expect(text.slice(init + 5, init + 6)).toBe('\0'); // 110 + 5 name bytes padded to 116: data starts aligned
    expect(text.slice(init + 6, init + 9)).toBe('abc');
    expect(text).toContain('TRAILER!!!\0');
  });
});

describe('lz4LegacyDecompress', () => {
  it('decodes literals and overlapping matches', () => {
    // One block: literal "ab", then a match of 6 at offset 2 ("ababab"), then final literal "z".
    const block = Buffer.from([0x22, 0x61, 0x62, 0x02, 0x00, 0x10, 0x7a]);
    const frame = Buffer.alloc(8);
    frame.writeUInt32LE(0x184c2102, 0);
    frame.writeUInt32LE(block.length, 4);
    expect(lz4LegacyDecompress(Buffer.concat([frame, block]), 9).toString()).toBe('abababab' + 'z');
  });
});

describe('apt parsing', () => {
  it('finds the main archive mirror for the suite in deb822 and one-line sources', () => {
    const deb822 = `Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n`;
    expect(parseAptMirror([deb822], 'bookworm')).toBe('http://deb.debian.org/debian');
    expect(parseAptMirror(['deb [arch=amd64] http://mirror.example/debian/ bookworm main\n'], 'bookworm')).toBe('http://mirror.example/debian');
    expect(parseAptMirror(['deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n'], 'bookworm')).toBeUndefined();
  });

  it('reads fields of the first stanza', () => {
    const f = parseAptStanza(
      'Package: linux-image-cloud-amd64\nVersion: 6.1.192-3\nDepends: linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)\n\nPackage: other\n',
    );
    expect(f.get('Version')).toBe('6.1.192-3');
    expect(f.get('Depends')).toBe('linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)');
    expect(f.has('other')).toBe(false);
  });
});

describe('kernel arguments', () => {
  it('prefers sysfs, then the refined kernel-log figure, then cpuinfo', () => {
    const log = '[0.0] tsc: Detected 2096.021 MHz processor\n[1.2] tsc: Refined TSC clocksource calibration: 2095.999 MHz\n';
    expect(parseTscKhz({ sysfs: '2100000\n', kernelLog: log })).toBe(2100000);
    expect(parseTscKhz({ kernelLog: log })).toBe(2095999);
    expect(parseTscKhz({ kernelLog: '[0.0] tsc: Detected 2096.021 MHz processor' })).toBe(2096021);
    expect(parseTscKhz({ cpuinfo: 'processor\t: 0\ncpu MHz\t\t: 2096.021\n' })).toBe(2096021);
    expect(parseTscKhz({})).toBeUndefined();
  });

  it('carries the TSC frequency and the root device', () => {
    const args = defaultKernelArgs({ tscKhz: 2096021 });
    expect(args).toContain('tsc_early_khz=2096021');
    expect(args).toContain('sandglass.root=/dev/vda');
    expect(args[0]).toBe('console=ttyS0');
  });
});

it('sizes the root image as content plus 1 GiB, in whole MiB', () => {
  expect(rootfsSizeBytes(0)).toBe(1024 ** 3);
  expect(rootfsSizeBytes(200 * 1024 ** 2) % 1024 ** 2).toBe(0);
  expect(rootfsSizeBytes(200 * 1024 ** 2)).toBeGreaterThan(1024 ** 3 + 200 * 1024 ** 2);
});

it('adds the guest account user (1000:1000, locked password) once', () => {
  const debian = {
    passwd: 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
    shadow: 'root:*:19000:0:99999:7:::',
    group: 'root:x:0:\n',
    gshadow: 'root:*::\n',
  };
  const out = withGuestUser(debian);
  expect(out.passwd.split('\n')).toContain('user:x:1000:1000::/home/user:/bin/bash');
  expect(out.passwd.startsWith(debian.passwd)).toBe(true);
  expect(out.shadow).toBe('root:*:19000:0:99999:7:::\nuser:!::0:99999:7:::\n');
  expect(out.group).toBe('root:x:0:\nuser:x:1000:\n');
  expect(out.gshadow).toBe('root:*::\nuser:!::\n');
  expect(withGuestUser(out)).toEqual(out);
  expect(withGuestUser({ passwd: '', shadow: '', group: '' }).gshadow).toBeUndefined();
});

/** A minimal ELF64 with a section-name table and a .modinfo section: enough for readModinfo. */
function fakeModule(modinfo: string[]): Buffer {
  const shstrtab = Buffer.from('\0.shstrtab\0.modinfo\0');
  const info = Buffer.from(modinfo.map((e) => `${e}\0`).join(''));
  const shoff = 64 + shstrtab.length + info.length;
  const elf = Buffer.alloc(shoff + 3 * 64);
  elf.writeUInt32BE(0x7f454c46, 0);
  elf[4] = 2;
  elf.writeBigUInt64LE(BigInt(shoff), 0x28);
  elf.writeUInt16LE(64, 0x3a);
  elf.writeUInt16LE(3, 0x3c);
  elf.writeUInt16LE(1, 0x3e);
  shstrtab.copy(elf, 64);
  info.copy(elf, 64 + shstrtab.length);
  const section = (i: number, name: number, offset: number, size: number) => {
    const at = shoff + i * 64;
    elf.writeUInt32LE(name, at);
    elf.writeBigUInt64LE(BigInt(offset), at + 24);
    elf.writeBigUInt64LE(BigInt(size), at + 32);
  };
  section(1, 1, 64, shstrtab.length);
  section(2, 11, 64 + shstrtab.length, info.length);
  return elf;
}
