// Offline verification of an audit export (spec/audit-export.md): hashes, the sandbox's chain, the count and the signature.
import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';

export const AUDIT_EXPORT_FORMAT = 'sandglass-audit/1';
/** The sandboxPrevHash of a sandbox's first event. */
const GENESIS_HASH = '0'.repeat(64);

/**
 * What failed, one name per check so that each kind of tampering is told apart:
 * - `header`: the first line is not this format's header.
 * - `trailer`: the last line is not a signed trailer (the export was cut off, or its trailer removed).
 * - `sandbox`: the trailer or an event names another sandbox or tenant than the header.
 * - `event`: a line is not an event.
 * - `hash`: an event's hash does not recompute from its fields (a field was edited).
 * - `link`: an event's sandboxPrevHash is not the previous line's hash (a line was swapped, inserted or removed).
 * - `count`: the header, the trailer and the lines disagree on how many events there are (events cut from the end).
 * - `head`: the trailer's head hash is not the last event's (the tail was rewritten).
 * - `key`: the trailer was signed by another key than the one given, or no key was given.
 * - `signature`: the signature does not verify over the trailer (the trailer was rewritten).
 */
export type AuditExportCheck = 'header' | 'trailer' | 'sandbox' | 'event' | 'hash' | 'link' | 'count' | 'head' | 'key' | 'signature';

export type AuditExportVerdict =
  | {
      ok: true;
      sandboxId: string;
      tenantId: string;
      exportedAt: string;
      count: number;
      headHash: string;
      keyId: string;
      /** Leading events written before the sandbox chain existed: their hashes are checked, their order only by the count. */
      unlinkedCount: number;
    }
  /** line: 1-based line of the file where the check failed. */
  | { ok: false; line: number; check: AuditExportCheck; problem: string };

/** The key id a trailer names: the first 32 hex digits of sha256 over the public key's SPKI DER. */
export function auditKeyId(publicKeyPem: string): string {
  return keyIdOf(createPublicKey(publicKeyPem));
}

/**
 * Verifies an export's text against the deployment's public key (PEM; `sandglass keys audit-public` prints it). Pure and
 * offline. With `publicKeyPem` null every other check still runs, and a file that passes them all fails at `key`: an
 * export is only proven by its signature, since anyone can recompute hashes and links after cutting or editing events.
 */
export function verifyAuditExport(text: string, publicKeyPem: string | null): AuditExportVerdict {
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const fail = (line: number, check: AuditExportCheck, problem: string): AuditExportVerdict => ({ ok: false, line, check, problem });

  const header = parseObject(lines[0]);
  if (
    !header ||
    header.format !== AUDIT_EXPORT_FORMAT ||
    !isString(header.sandboxId) ||
    !isString(header.tenantId) ||
    !isString(header.exportedAt) ||
    !isCount(header.count)
  ) {
    return fail(1, 'header', `the first line is not a ${AUDIT_EXPORT_FORMAT} header`);
  }
  const last = lines.length;
  const trailer = lines.length >= 2 ? parseObject(lines[last - 1]) : undefined;
  if (!trailer || !isString(trailer.signature) || 'hash' in trailer) {
    return fail(last, 'trailer', 'the last line is not a signed trailer: the export was cut off or its trailer removed');
  }
  if (
    trailer.format !== AUDIT_EXPORT_FORMAT ||
    !isCount(trailer.count) ||
    !isString(trailer.headHash) ||
    !isString(trailer.keyId) ||
    !isString(trailer.exportedAt)
  ) {
    return fail(last, 'trailer', 'the trailer lacks format, count, headHash, keyId or exportedAt');
  }
  for (const field of ['sandboxId', 'tenantId', 'exportedAt'] as const) {
    if (trailer[field] !== header[field]) {
      return fail(last, 'sandbox', `the trailer's ${field} ${JSON.stringify(trailer[field])} is not the header's ${JSON.stringify(header[field])}`);
    }
  }

  let prevHash = GENESIS_HASH;
  let unlinkedCount = 0;
  for (let i = 1; i < last - 1; i++) {
    const line = i + 1;
    const e = parseObject(lines[i]);
    if (!e || !isEvent(e)) return fail(line, 'event', 'not an event: id, type, tenantId, sandboxId, at, data, prevHash and hash are required');
    if (e.sandboxId !== header.sandboxId || e.tenantId !== header.tenantId) {
      return fail(line, 'sandbox', `the event belongs to ${e.tenantId}/${String(e.sandboxId)}, not to the header's ${header.tenantId}/${header.sandboxId}`);
    }
    if (eventHash(e) !== e.hash) return fail(line, 'hash', `the hash of event ${e.id} does not match its content: a field was edited`);
    if (e.sandboxPrevHash === undefined) {
      // Events from before the sandbox chain can only lead: once the chain starts, every later event carries its link.
      if (i !== unlinkedCount + 1) return fail(line, 'link', `event ${e.id} has no sandboxPrevHash but follows events that do: a line was inserted`);
      unlinkedCount++;
    } else if (e.sandboxPrevHash !== prevHash) {
      return fail(line, 'link', `event ${e.id} does not link to the previous line: a line was swapped, inserted or removed`);
    }
    prevHash = e.hash;
  }

  const events = last - 2;
  if (header.count !== trailer.count || events !== trailer.count) {
    return fail(last, 'count', `the header counts ${header.count} events, the trailer ${trailer.count}, the file holds ${events}: events were cut`);
  }
  const headHash = events === 0 ? GENESIS_HASH : prevHash;
  if (trailer.headHash !== headHash) return fail(last, 'head', "the trailer's headHash is not the last event's hash: the tail was rewritten");

  if (publicKeyPem === null) {
    return fail(last, 'key', 'no public key was given, so the signature is unchecked (every other check passed); pass the deployment’s public key');
  }
  let key: KeyObject;
  try {
    key = createPublicKey(publicKeyPem);
  } catch {
    return fail(last, 'key', 'the public key given is not a PEM public key');
  }
  if (key.asymmetricKeyType !== 'ed25519') return fail(last, 'key', `the public key given is ${key.asymmetricKeyType}, not ed25519`);
  const keyId = keyIdOf(key);
  if (trailer.keyId !== keyId) return fail(last, 'key', `the trailer was signed by key ${trailer.keyId}, not by the given key ${keyId}`);
  const message = signedMessage({
    sandboxId: header.sandboxId,
    tenantId: header.tenantId,
    exportedAt: header.exportedAt,
    count: events,
    headHash,
    keyId,
  });
  let valid: boolean;
  try {
    valid = verify(null, message, key, Buffer.from(trailer.signature, 'base64'));
  } catch {
    valid = false;
  }
  if (!valid) return fail(last, 'signature', 'the signature does not verify: the trailer or the header was rewritten');
  return { ok: true, sandboxId: header.sandboxId, tenantId: header.tenantId, exportedAt: header.exportedAt, count: events, headHash, keyId, unlinkedCount };
}

/** The one-line verdict `sandglass events verify` prints. */
export function formatAuditVerdict(v: AuditExportVerdict): string {
  if (!v.ok) return `FAILED line ${v.line} (${v.check}): ${v.problem}`;
  const unlinked = v.unlinkedCount === 0 ? '' : ` (${v.unlinkedCount} from before the sandbox chain: hashes and count checked)`;
  return `OK ${v.sandboxId}: ${v.count} events${unlinked}, head ${v.headHash.slice(0, 16)}, signed by key ${v.keyId} at ${v.exportedAt}`;
}

/**
 * The bytes the trailer's signature covers: canonical JSON of the format, the sandbox, its tenant, when, how many
 * events and the last one's hash (which the sandbox chain ties to every event before it), and the key.
 */
function signedMessage(t: { sandboxId: string; tenantId: string; exportedAt: string; count: number; headHash: string; keyId: string }): Buffer {
  return Buffer.from(canonicalJson({ format: AUDIT_EXPORT_FORMAT, ...t }));
}

interface ExportedEvent {
  id: string;
  type: string;
  tenantId: string;
  sandboxId: string | null;
  at: string;
  data: Record<string, unknown>;
  prevHash: string;
  sandboxPrevHash?: string;
  hash: string;
}

// The event hash of @sandglass/events (hash.ts), restated here because the SDK carries no runtime dependency on the
// platform's packages; packages/events/src/export.test.ts verifies the platform's exports with this code.
function eventHash(e: ExportedEvent): string {
  const body = canonicalJson({
    id: e.id,
    type: e.type,
    tenantId: e.tenantId,
    sandboxId: e.sandboxId,
    at: e.at,
    data: e.data,
    prevHash: e.prevHash,
    sandboxPrevHash: e.sandboxPrevHash,
  });
  return createHash('sha256').update(e.prevHash).update(body).digest('hex');
}

/** JSON with object keys sorted at every depth, undefined members dropped: the hashed form. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    const s = JSON.stringify(value);
    if (s === undefined) throw new Error(`not representable as JSON: ${typeof value}`);
    return s;
  }
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

function keyIdOf(key: KeyObject): string {
  return createHash('sha256')
    .update(key.export({ type: 'spki', format: 'der' }))
    .digest('hex')
    .slice(0, 32);
}

function parseObject(line: string | undefined): Record<string, unknown> | undefined {
  if (line === undefined) return undefined;
  try {
    const v: unknown = JSON.parse(line);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function isEvent(e: Record<string, unknown>): e is Record<string, unknown> & ExportedEvent {
  return (
    isString(e.id) &&
    isString(e.type) &&
    isString(e.tenantId) &&
    (isString(e.sandboxId) || e.sandboxId === null) &&
    isString(e.at) &&
    e.data !== null &&
    typeof e.data === 'object' &&
    !Array.isArray(e.data) &&
    isString(e.prevHash) &&
    isString(e.hash) &&
    (e.sandboxPrevHash === undefined || isString(e.sandboxPrevHash))
  );
}
