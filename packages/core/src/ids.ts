// Resource ids: a short type prefix and 20 random base32 characters (100 bits), e.g. sbx_k3jz….
import { randomBytes } from 'node:crypto';

export const ID_PREFIXES = ['sbx', 'tpl', 'cmd', 'ten', 'key', 'evt', 'req', 'snap', 'node'] as const;
export type IdPrefix = (typeof ID_PREFIXES)[number];

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

export function newId(prefix: IdPrefix, random: (n: number) => Buffer = randomBytes): string {
  const bytes = random(20);
  let out = '';
  for (let i = 0; i < 20; i++) out += ALPHABET[bytes[i]! & 31];
  return `${prefix}_${out}`;
}

export function isId(prefix: IdPrefix, value: unknown): value is string {
  return typeof value === 'string' && new RegExp(`^${prefix}_[a-z2-7]{20}$`).test(value);
}
