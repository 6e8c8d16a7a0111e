// Structured logging (pino). Secrets never reach a log: see Redacted.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(name: string, level = process.env.SANDGLASS_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: undefined });
}

/** A value that must never be printed: toString/toJSON/inspect show «redacted». */
export class Redacted<T = string> {
  readonly #value: T;
  constructor(value: T) {
    this.#value = value;
  }
  reveal(): T {
    return this.#value;
  }
  toString(): string {
    return '«redacted»';
  }
  toJSON(): string {
    return '«redacted»';
  }
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return '«redacted»';
  }
}
