// Clock and Random as parameters, so code that must replay deterministically never reads the real ones directly.
import { randomBytes } from 'node:crypto';

export interface Clock {
  nowMs(): number;
}

export interface Random {
  bytes(n: number): Buffer;
}

export const systemClock: Clock = { nowMs: () => Date.now() };
export const systemRandom: Random = { bytes: (n) => randomBytes(n) };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private ms = 0) {}
  nowMs(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}
