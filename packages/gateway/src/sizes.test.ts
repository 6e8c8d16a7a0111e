// Which sizes a node serves, and how a size outside them is refused.
import { describe, expect, it } from 'vitest';
import { SandglassError } from '@sandglass/core';
import { checkSize, nodeSizes } from './sizes.js';

describe('nodeSizes', () => {
  it('offers the default sizes up to the guest memory budget, and vCPU counts up to the cores', () => {
    expect(nodeSizes({ budgetMib: 3000, cores: 2 }, {})).toEqual({ memoryMib: [256, 512, 1024, 2048], vcpus: [1, 2] });
    expect(nodeSizes({ budgetMib: 100_000, cores: 1 }, {})).toEqual({ memoryMib: [256, 512, 1024, 2048, 4096, 8192, 16384], vcpus: [1] });
  });

  it('takes the operator’s lists, sorted and without repeats, and refuses a malformed one', () => {
    const env = { SANDGLASS_MEMORY_SIZES_MIB: '1024, 256,256', SANDGLASS_VCPU_COUNTS: '2,1' };
    expect(nodeSizes({ budgetMib: 3000, cores: 4 }, env)).toEqual({ memoryMib: [256, 1024], vcpus: [1, 2] });
    for (const bad of ['lots', '64', '256,,512', '20000']) {
      expect(() => nodeSizes({ budgetMib: 3000, cores: 4 }, { SANDGLASS_MEMORY_SIZES_MIB: bad })).toThrow(/SANDGLASS_MEMORY_SIZES_MIB/);
    }
  });
});

describe('checkSize', () => {
  const sizes = { memoryMib: [256, 512], vcpus: [1, 2] };

  it('passes a served size and refuses another with size_unsupported naming the field and what is served', () => {
    expect(() => checkSize(sizes, 512, 2)).not.toThrow();
    for (const [memoryMib, vcpus, field, allowed] of [
      [384, 1, 'memoryMib', [256, 512]],
      [256, 3, 'vcpus', [1, 2]],
    ] as const) {
      let caught: unknown;
      try {
        checkSize(sizes, memoryMib, vcpus);
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(SandglassError);
      expect(caught).toMatchObject({ code: 'size_unsupported', details: { field, allowed } });
    }
  });
});
