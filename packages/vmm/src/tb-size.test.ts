// The TCG translation-cache size: its default and the environment override's rule.
import { describe, expect, it } from 'vitest';
import { DEFAULT_TCG_TB_MIB, tcgTbMib } from './qemu.js';

describe('tcgTbMib', () => {
  it('defaults, takes SANDGLASS_TCG_TB_MIB, and refuses what is not an integer from 1 to 1024', () => {
    expect(tcgTbMib({})).toBe(DEFAULT_TCG_TB_MIB);
    expect(tcgTbMib({ SANDGLASS_TCG_TB_MIB: '64' })).toBe(64);
    for (const bad of ['0', '1025', '8.5', 'big']) expect(() => tcgTbMib({ SANDGLASS_TCG_TB_MIB: bad })).toThrow(/SANDGLASS_TCG_TB_MIB/);
  });
});
