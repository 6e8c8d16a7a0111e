// Canonical JSON and the chain hash: the same bytes on every machine, so a chain verifies anywhere.
import { createHash } from 'node:crypto';
import type { StoredEvent } from './types.js';

/** JSON with object keys sorted at every depth; undefined members are dropped, as JSON.stringify does. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    const s = JSON.stringify(value);
    if (s === undefined) throw new Error(`not representable as JSON: ${typeof value}`);
    return s;
  }
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return canonicalJson((value as { toJSON(): unknown }).toJSON());
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined && typeof v !== 'function')
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/**
 * hash = sha256(prevHash + canonical JSON of the event without seq and hash), hex. seq is left out because the
 * database assigns it after the hash is computed (and PostgreSQL may skip values); prevHash is what links the chain.
 * sandboxPrevHash is in the body when present, so both chains cover it; canonical JSON drops it when absent, which keeps
 * the hashes of events written before it existed.
 */
export function eventHash(event: Omit<StoredEvent, 'seq' | 'hash'>): string {
  const body = canonicalJson({
    id: event.id,
    type: event.type,
    tenantId: event.tenantId,
    sandboxId: event.sandboxId,
    at: event.at,
    data: event.data,
    prevHash: event.prevHash,
    sandboxPrevHash: event.sandboxPrevHash,
  });
  return createHash('sha256').update(event.prevHash).update(body).digest('hex');
}
