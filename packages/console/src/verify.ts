// Verifies a sandbox's signed audit export in the browser (spec/audit-export.md): every event's hash, the sandbox chain's
// links, the count, the head and the Ed25519 signature, with WebCrypto. The checks are those of the SDK's
// verifyAuditExport, restated because that one runs on node:crypto; the browser test also shows an edited export failing.

const FORMAT = 'sandglass-audit/1';
const GENESIS_HASH = '0'.repeat(64);

export type Verdict =
  | { ok: true; count: number; headHash: string; keyId: string; exportedAt: string }
  | { ok: false; line: number; check: string; problem: string };

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

/** JSON with object keys sorted at every depth, undefined members dropped: the hashed form. */
export function canonicalJson(value: unknown): string {
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

const hex = (b: ArrayBuffer): string => [...new Uint8Array(b)].map((x) => x.toString(16).padStart(2, '0')).join('');
const sha256 = async (bytes: Uint8Array<ArrayBuffer>): Promise<string> => hex(await crypto.subtle.digest('SHA-256', bytes));
const utf8 = (s: string): Uint8Array<ArrayBuffer> => new TextEncoder().encode(s);

function eventHash(e: ExportedEvent): Promise<string> {
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
  return sha256(utf8(e.prevHash + body));
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

function pemToDer(pem: string): Uint8Array<ArrayBuffer> {
  const b64 = pem.replace(/-----(BEGIN|END) PUBLIC KEY-----/g, '').replace(/\s+/g, '');
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

/** The export's verdict against the deployment's public key (SPKI PEM). */
export async function verifyExport(text: string, publicKeyPem: string): Promise<Verdict> {
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const fail = (line: number, check: string, problem: string): Verdict => ({ ok: false, line, check, problem });
  const header = parseObject(lines[0]);
  if (
    !header ||
    header.format !== FORMAT ||
    !isString(header.sandboxId) ||
    !isString(header.tenantId) ||
    !isString(header.exportedAt) ||
    !isCount(header.count)
  ) {
    return fail(1, 'header', `the first line is not a ${FORMAT} header`);
  }
  const last = lines.length;
  const trailer = last >= 2 ? parseObject(lines[last - 1]) : undefined;
  if (!trailer || !isString(trailer.signature) || 'hash' in trailer) return fail(last, 'trailer', 'the last line is not a signed trailer');
  if (
    trailer.format !== FORMAT ||
    !isCount(trailer.count) ||
    !isString(trailer.headHash) ||
    !isString(trailer.keyId) ||
    trailer.exportedAt !== header.exportedAt
  ) {
    return fail(last, 'trailer', 'the trailer does not match the header');
  }
  if (trailer.sandboxId !== header.sandboxId || trailer.tenantId !== header.tenantId) return fail(last, 'sandbox', 'the trailer names another sandbox');

  let prevHash = GENESIS_HASH;
  let unlinked = 0;
  for (let i = 1; i < last - 1; i++) {
    const e = parseObject(lines[i]);
    if (!e || !isEvent(e)) return fail(i + 1, 'event', 'not an event');
    if (e.sandboxId !== header.sandboxId || e.tenantId !== header.tenantId) return fail(i + 1, 'sandbox', `event ${e.id} belongs to another sandbox`);
    if ((await eventHash(e)) !== e.hash) return fail(i + 1, 'hash', `the hash of event ${e.id} does not match its content`);
    if (e.sandboxPrevHash === undefined) {
      if (i !== unlinked + 1) return fail(i + 1, 'link', `event ${e.id} has no link but follows events that do`);
      unlinked++;
    } else if (e.sandboxPrevHash !== prevHash) return fail(i + 1, 'link', `event ${e.id} does not link to the previous one`);
    prevHash = e.hash;
  }
  const count = last - 2;
  if (header.count !== count || trailer.count !== count)
    return fail(last, 'count', `the header counts ${header.count}, the trailer ${trailer.count}, the file ${count}`);
  const headHash = count === 0 ? GENESIS_HASH : prevHash;
  if (trailer.headHash !== headHash) return fail(last, 'head', "the trailer's head hash is not the last event's");

  const der = pemToDer(publicKeyPem);
  const keyId = (await sha256(der)).slice(0, 32);
  if (trailer.keyId !== keyId) return fail(last, 'key', `signed by key ${trailer.keyId}, not by the deployment's ${keyId}`);
  const message = canonicalJson({
    format: FORMAT,
    sandboxId: header.sandboxId,
    tenantId: header.tenantId,
    exportedAt: header.exportedAt,
    count,
    headHash,
    keyId,
  });
  let valid = false;
  try {
    const key = await crypto.subtle.importKey('spki', der, { name: 'Ed25519' }, false, ['verify']);
    valid = await crypto.subtle.verify(
      { name: 'Ed25519' },
      key,
      Uint8Array.from(atob(trailer.signature), (c) => c.charCodeAt(0)),
      utf8(message),
    );
  } catch {
    valid = false;
  }
  if (!valid) return fail(last, 'signature', 'the signature does not verify');
  return { ok: true, count, headHash, keyId, exportedAt: header.exportedAt };
}
