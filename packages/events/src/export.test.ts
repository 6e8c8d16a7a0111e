// Audit exports on SQLite and PostgreSQL, verified by the SDK's offline verifier: each tampering fails its own check.
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ManualClock } from '@sandglass/core';
import { GENESIS_HASH, isPostgres, toIso, type Database } from '@sandglass/db';
import { type AuditExportCheck, verifyAuditExport } from '@sandglass/sdk';
import { type AppendInput, auditExport, auditKeyId, canonicalJson, type EventLog, eventHash, type AuditExportSigner } from './index.js';
import { created, dialects, openTestLog } from './test-support.js';

function signerOf(privateKey: KeyObject, publicKey: KeyObject): AuditExportSigner & { publicKeyPem: string } {
  const publicKeyPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  return { publicKeyPem, auditPublicKeyPem: async () => publicKeyPem, signAudit: async (m) => sign(null, m, privateKey) };
}
const newSigner = () => {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return signerOf(privateKey, publicKey);
};

async function text(lines: AsyncIterable<string>): Promise<string> {
  let out = '';
  for await (const line of lines) out += line;
  return out;
}

/** The lines of an export, as parsed objects, and back. */
const parse = (t: string) =>
  t
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
const unparse = (objs: unknown[]) => `${objs.map((o) => JSON.stringify(o)).join('\n')}\n`;

describe.each(dialects('export_test'))('audit export on $dialect', ({ fresh }) => {
  let database: Database;
  let log: EventLog;
  let clock: ManualClock;
  const signer = newSigner();

  beforeEach(async () => {
    ({ database, log, clock } = await openTestLog(await fresh()));
  });
  afterEach(() => database.close());

  /** sbx_1's session, interleaved with another tenant's sandbox and tenant events, as the one chain has them. */
  async function session(): Promise<void> {
    const steps: AppendInput[] = [
      created('sbx_1'),
      created('sbx_2', 'ten_b'),
      { type: 'sandbox.started', tenantId: 'ten_a', sandboxId: 'sbx_1', data: {} },
      { type: 'command.started', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { commandId: 'cmd_1', argv: ['ls'] } },
      { type: 'sandbox.started', tenantId: 'ten_b', sandboxId: 'sbx_2', data: {} },
      { type: 'tenant.created', tenantId: 'ten_c', data: { name: 'c' } },
      { type: 'command.exited', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { commandId: 'cmd_1', exitCode: 0 } },
      { type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { path: '/root/a.txt', sizeBytes: 12 } },
      { type: 'command.started', tenantId: 'ten_b', sandboxId: 'sbx_2', data: { commandId: 'cmd_9' } },
      { type: 'sandbox.killed', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { reason: 'killed' } },
    ];
    for (const step of steps) {
      await log.append(step, { clock });
      clock.advance(1_000);
    }
  }

  const exportOf = async (sandboxId = 'sbx_1', tenantId = 'ten_a', by: AuditExportSigner = signer) =>
    text(await auditExport(log, { tenantId, sandboxId }, { clock, signer: by }));
  const failsAt = (t: string, check: AuditExportCheck, line?: number) =>
    expect(verifyAuditExport(t, signer.publicKeyPem)).toMatchObject({ ok: false, check, ...(line === undefined ? {} : { line }) });

  it("holds a header, the sandbox's events only, as stored, and a signed trailer; it verifies", async () => {
    await session();
    const t = await exportOf();
    const [header, ...rest] = parse(t);
    const trailer = rest.pop()!;
    const stored = await log.list({ sandboxId: 'sbx_1', tenantId: 'ten_a' });
    expect(header).toEqual({ format: 'sandglass-audit/1', sandboxId: 'sbx_1', tenantId: 'ten_a', exportedAt: toIso(clock.nowMs()), count: 6 });
    expect(rest).toEqual(JSON.parse(JSON.stringify(stored)));
    expect(trailer).toMatchObject({ count: 6, headHash: stored.at(-1)!.hash, keyId: auditKeyId(signer.publicKeyPem), signature: expect.any(String) });
    expect(verifyAuditExport(t, signer.publicKeyPem)).toEqual({
      ok: true,
      sandboxId: 'sbx_1',
      tenantId: 'ten_a',
      exportedAt: header!.exportedAt,
      count: 6,
      headHash: stored.at(-1)!.hash,
      keyId: auditKeyId(signer.publicKeyPem),
      unlinkedCount: 0,
    });
    // The other tenant's sandbox exports and verifies on its own too.
    expect(verifyAuditExport(await exportOf('sbx_2', 'ten_b'), signer.publicKeyPem)).toMatchObject({ ok: true, count: 3 });
  });

  it('an edited field fails the hash check at its line', async () => {
    await session();
    const lines = parse(await exportOf());
    (lines[3]!.data as Record<string, unknown>).argv = ['rm', '-rf', '/'];
    failsAt(unparse(lines), 'hash', 4);
  });

  it('an edited event whose hash was recomputed fails the link check at the next line', async () => {
    await session();
    const lines = parse(await exportOf());
    const edited = { ...lines[3]!, at: toIso(0) } as Parameters<typeof eventHash>[0] & { hash: string };
    lines[3] = { ...edited, hash: eventHash(edited) };
    failsAt(unparse(lines), 'link', 5);
  });

  it('two swapped lines, an inserted line and a removed line each fail the link check', async () => {
    await session();
    const lines = parse(await exportOf());
    const swapped = [...lines];
    [swapped[3], swapped[4]] = [swapped[4]!, swapped[3]!];
    failsAt(unparse(swapped), 'link', 4);
    failsAt(unparse([...lines.slice(0, 3), lines[2], ...lines.slice(3)]), 'link', 4);
    failsAt(unparse([...lines.slice(0, 3), ...lines.slice(4)]), 'link', 4);
    // The first event removed: the next one does not start the chain.
    failsAt(unparse([lines[0], ...lines.slice(2)]), 'link', 2);
  });

  it('an event of another sandbox inserted fails the sandbox check', async () => {
    await session();
    const lines = parse(await exportOf());
    const foreign = parse(await exportOf('sbx_2', 'ten_b'))[2]!;
    failsAt(unparse([...lines.slice(0, 3), foreign, ...lines.slice(3)]), 'sandbox', 4);
  });

  it('a truncated export fails the count check, then the head check, then the signature', async () => {
    await session();
    const lines = parse(await exportOf());
    const cut = [...lines.slice(0, -2), lines.at(-1)!];
    failsAt(unparse(cut), 'count', cut.length);
    // Counts fixed to match: the trailer still names the removed event's hash as the head.
    const counted = [{ ...cut[0]!, count: 5 }, ...cut.slice(1, -1), { ...cut.at(-1)!, count: 5 }];
    failsAt(unparse(counted), 'head', counted.length);
    // Head fixed too: only the signature is left to tell, and it does.
    const headed = [...counted.slice(0, -1), { ...counted.at(-1)!, headHash: (counted.at(-2) as { hash: string }).hash }];
    failsAt(unparse(headed), 'signature', headed.length);
  });

  it('a missing trailer fails the trailer check, a missing header the header check', async () => {
    await session();
    const lines = parse(await exportOf());
    failsAt(unparse(lines.slice(0, -1)), 'trailer', lines.length - 1);
    failsAt(unparse(lines.slice(1)), 'header', 1);
    failsAt('', 'header', 1);
  });

  it('an export re-signed with another key fails the key check; one naming our key, the signature', async () => {
    await session();
    const other = newSigner();
    failsAt(await exportOf('sbx_1', 'ten_a', other), 'key');
    // Signed by the other key while claiming ours: the key id matches, the signature does not.
    const claiming: AuditExportSigner = { auditPublicKeyPem: async () => signer.publicKeyPem, signAudit: other.signAudit };
    failsAt(await exportOf('sbx_1', 'ten_a', claiming), 'signature');
    // And without a key at all nothing is proven, though every other check passes.
    expect(verifyAuditExport(await exportOf(), null)).toMatchObject({ ok: false, check: 'key', problem: expect.stringMatching(/every other check passed/) });
  });

  it('a header and trailer naming different sandboxes fail the sandbox check', async () => {
    await session();
    const lines = parse(await exportOf());
    failsAt(unparse([...lines.slice(0, -1), { ...lines.at(-1)!, sandboxId: 'sbx_2' }]), 'sandbox', lines.length);
    // Relabelled in the header as well: the events then name another sandbox than the header.
    const relabelled = [{ ...lines[0]!, sandboxId: 'sbx_9' }, ...lines.slice(1, -1), { ...lines.at(-1)!, sandboxId: 'sbx_9' }];
    failsAt(unparse(relabelled), 'sandbox', 2);
  });

  it("leaves out, and links around, an event recorded under another tenant for the sandbox's id", async () => {
    await session();
    await log.append({ type: 'file.written', tenantId: 'ten_b', sandboxId: 'sbx_1', data: { path: '/planted' } }, { clock });
    await log.append({ type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { path: '/root/b.txt' } }, { clock });
    const t = await exportOf();
    expect(t).not.toContain('/planted');
    expect(verifyAuditExport(t, signer.publicKeyPem)).toMatchObject({ ok: true, count: 7 });
    expect(await log.verifyChain()).toMatchObject({ ok: true });
  });

  it('leaves out events appended while it streams', async () => {
    await session();
    const lines = await auditExport(log, { tenantId: 'ten_a', sandboxId: 'sbx_1' }, { clock, signer });
    await log.append({ type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { path: '/late' } }, { clock });
    expect(verifyAuditExport(await text(lines), signer.publicKeyPem)).toMatchObject({ ok: true, count: 6 });
  });

  it('verifies events from before the sandbox chain by hash and count, and the chain from where it starts', async () => {
    // Two events as an earlier version wrote them: no sandbox_prev_hash, hashed without it.
    const overriding = isPostgres(database.db) ? sql`overriding system value` : sql``;
    let prevHash = GENESIS_HASH;
    for (const seq of [1, 2]) {
      const body = { id: `evt_old_${seq}`, type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_1', at: toIso(seq), data: { seq }, prevHash };
      const hash = eventHash(body);
      await sql`insert into events (seq, id, type, tenant_id, sandbox_id, at, data, prev_hash, hash) ${overriding} values (${seq}, ${body.id}, ${body.type}, ${'ten_a'}, ${'sbx_1'}, ${body.at}, ${canonicalJson(body.data)}, ${prevHash}, ${hash})`.execute(
        database.db,
      );
      prevHash = hash;
    }
    await database.db.updateTable('event_chain_head').set({ seq: 2, hash: prevHash }).execute();
    if (isPostgres(database.db)) await sql`select setval(pg_get_serial_sequence('events', 'seq'), 2)`.execute(database.db);
    await log.append({ type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { seq: 3 } }, { clock });

    const lines = parse(await exportOf());
    expect(verifyAuditExport(unparse(lines), signer.publicKeyPem)).toMatchObject({ ok: true, count: 3, unlinkedCount: 2 });
    // The two unlinked events swapped: the linked one after them no longer points at the line before it.
    failsAt(unparse([lines[0], lines[2], lines[1], ...lines.slice(3)]), 'link', 4);
    // An unlinked event may only lead the chain, never follow a linked one.
    failsAt(unparse([lines[0], lines[1], lines[2], lines[3], lines[1], lines.at(-1)]), 'link', 5);
  });
});
