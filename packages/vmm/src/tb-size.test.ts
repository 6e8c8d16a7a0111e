// QEMU's memory settings from the environment: the TCG translation-cache size, huge pages, glibc's tunables.
import { describe, expect, it } from 'vitest';
import { DEFAULT_TCG_TB_MIB, qemuEnv, qemuThp, tcgTbMib } from './qemu.js';

describe('tcgTbMib', () => {
  it('defaults, takes SANDGLASS_TCG_TB_MIB, and refuses what is not an integer from 1 to 1024', () => {
    expect(tcgTbMib({})).toBe(DEFAULT_TCG_TB_MIB);
    expect(tcgTbMib({ SANDGLASS_TCG_TB_MIB: '64' })).toBe(64);
    for (const bad of ['0', '1025', '8.5', 'big']) expect(() => tcgTbMib({ SANDGLASS_TCG_TB_MIB: bad })).toThrow(/SANDGLASS_TCG_TB_MIB/);
  });
});

describe('qemuThp and qemuEnv', () => {
  it('turn huge pages off and set no tunables unless told, and refuse what the jailer would', () => {
    expect(qemuThp({})).toBe(false);
    expect(qemuThp({ SANDGLASS_QEMU_THP: 'on' })).toBe(true);
    expect(() => qemuThp({ SANDGLASS_QEMU_THP: 'yes' })).toThrow(/SANDGLASS_QEMU_THP/);
    expect(qemuEnv({})).toEqual({});
    expect(qemuEnv({ SANDGLASS_QEMU_GLIBC_TUNABLES: 'glibc.malloc.arena_max=1' })).toEqual({ GLIBC_TUNABLES: 'glibc.malloc.arena_max=1' });
    expect(() => qemuEnv({ SANDGLASS_QEMU_GLIBC_TUNABLES: 'x=/tmp/y' })).toThrow(/SANDGLASS_QEMU_GLIBC_TUNABLES/);
  });
});
