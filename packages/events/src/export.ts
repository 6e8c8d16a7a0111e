// A sandbox's audit export (spec/audit-export.md): a header, the tenant's events of the sandbox as stored, a signed trailer.
import { createHash, createPublicKey } from 'node:crypto';
import type { Clock } from '@sandglass/core';
import { GENESIS_HASH, toIso } from '@sandglass/db';
import { canonicalJson } from './hash.js';
import type { EventLog } from './log.js';

export const AUDIT_EXPORT_FORMAT = 'sandglass-audit/1';
/** Events read per query while streaming: an export of a long session never sits in memory whole. */
const PAGE_EVENTS = 1000;

/** The deployment's audit key (the keyring's, in @sandglass/kms): signs without handing out the private key. */
export interface AuditExportSigner {
  signAudit(message: Buffer): Promise<Buffer>;
  auditPublicKeyPem(): Promise<string>;
}

/** The key id a trailer names: the first 32 hex digits of sha256 over the public key's SPKI DER. */
export function auditKeyId(publicKeyPem: string): string {
  return createHash('sha256')
    .update(createPublicKey(publicKeyPem).export({ type: 'spki', format: 'der' }))
    .digest('hex')
    .slice(0, 32);
}

/**
 * The export's lines, each ending in a newline. The key and the export's extent are settled before the first line, so a
 * missing key is an error answer rather than a cut stream; events appended while it streams are not in it (their seq is
 * past the extent's). The caller has checked that the tenant owns the sandbox.
 */
export async function auditExport(
  log: EventLog,
  scope: { tenantId: string; sandboxId: string },
  opts: { clock: Clock; signer: AuditExportSigner },
): Promise<AsyncIterable<string>> {
  const keyId = auditKeyId(await opts.signer.auditPublicKeyPem());
  const { count, lastSeq } = await log.sandboxExtent(scope.tenantId, scope.sandboxId);
  const exportedAt = toIso(opts.clock.nowMs());
  const { tenantId, sandboxId } = scope;
  return (async function* () {
    yield `${JSON.stringify({ format: AUDIT_EXPORT_FORMAT, sandboxId, tenantId, exportedAt, count })}\n`;
    let headHash = GENESIS_HASH;
    let written = 0;
    for (let afterSeq = 0; written < count; ) {
      const page = await log.list({ sandboxId, tenantId, afterSeq, untilSeq: lastSeq, limit: PAGE_EVENTS });
      if (page.length === 0) break;
      for (const event of page) {
        yield `${JSON.stringify(event)}\n`;
        headHash = event.hash;
        written++;
      }
      afterSeq = page.at(-1)!.seq;
    }
    // What was written, not what was counted: should they ever differ, the export fails its count check, never passes.
    const signed = { format: AUDIT_EXPORT_FORMAT, sandboxId, tenantId, exportedAt, count: written, headHash, keyId };
    const signature = await opts.signer.signAudit(Buffer.from(canonicalJson(signed)));
    yield `${JSON.stringify({ ...signed, signature: signature.toString('base64') })}\n`;
  })();
}
