// The VM sizes a node serves: each one is a template of its own, so the set is finite, stated and checked up front.
import { availableParallelism, totalmem } from 'node:os';
import { SandglassError } from '@sandglass/core';
import { defaultImageCacheBytes } from './ram.js';

export interface NodeSizes {
  memoryMib: number[];
  vcpus: number[];
}

/** The sizes offered by default, before the node's limits cut them: powers of two, as cloud VM shapes go. */
const DEFAULT_MEMORY_MIB = [256, 512, 1024, 2048, 4096, 8192, 16384];
const DEFAULT_VCPUS = [1, 2, 4, 8];

/**
 * What a node serves: `SANDGLASS_MEMORY_SIZES_MIB` / `SANDGLASS_VCPU_COUNTS` (comma-separated) or the defaults,
 * less the memory sizes above the node's guest memory budget and vCPU counts above its cores (one vCPU more than
 * the host has cores only queues on the same cores). Every size is one template (a cold boot, then reused), so an
 * open range would let any client make the node build and keep templates without end.
 */
export function nodeSizes(limits: { budgetMib: number; cores: number }, env: NodeJS.ProcessEnv = process.env): NodeSizes {
  const memory = listFromEnv(env, 'SANDGLASS_MEMORY_SIZES_MIB', DEFAULT_MEMORY_MIB, 128, 16384);
  const vcpus = listFromEnv(env, 'SANDGLASS_VCPU_COUNTS', DEFAULT_VCPUS, 1, 8);
  return {
    memoryMib: memory.filter((m) => m <= limits.budgetMib),
    vcpus: vcpus.filter((v) => v === 1 || v <= limits.cores),
  };
}

/** Host memory a node gives guests unless told otherwise: 75% of RAM less the tmpfs image caches' ceiling. */
export function defaultGuestBudgetMib(imageCacheBytes = defaultImageCacheBytes()): number {
  return Math.floor((totalmem() / 1024 / 1024) * 0.75 - imageCacheBytes / 1024 ** 2);
}

/** The sizes this host would serve with the node's defaults (`sandglass doctor`). */
export function hostSizes(env: NodeJS.ProcessEnv = process.env): NodeSizes {
  return nodeSizes({ budgetMib: defaultGuestBudgetMib(), cores: availableParallelism() }, env);
}

function listFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number[], min: number, max: number): number[] {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const values = raw.split(',').map((v) => Number(v.trim()));
  if (values.some((v) => !Number.isInteger(v) || v < min || v > max)) {
    throw new SandglassError('invalid_argument', `${name} must be a comma-separated list of integers from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  }
  return [...new Set(values)].sort((a, b) => a - b);
}

/** Refuses a shape the node does not serve, naming the field and what it does serve; changes nothing. */
export function checkSize(sizes: NodeSizes, memoryMib: number, vcpus: number): void {
  for (const [field, value, allowed] of [
    ['memoryMib', memoryMib, sizes.memoryMib],
    ['vcpus', vcpus, sizes.vcpus],
  ] as const) {
    if (!allowed.includes(value)) {
      throw new SandglassError('size_unsupported', `${field} ${value} is not a size this node serves; it serves ${allowed.join(', ')}.`, {
        details: { field, allowed: [...allowed] },
      });
    }
  }
}
