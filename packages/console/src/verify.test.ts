// The console's in-page audit export check against exports built and signed here with node:crypto: one that verifies,
// and each kind of tampering failing at its own check.
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { verifyExport } from './verify.js';

const FORMAT = 'sandglass-audit/1';
const GENESIS = '0'.repeat(64);
const keys = generateKeyPairSync('ed25519');
const publicKeyPem = keys.publicKey.export({ type: 'spki', format: 'pem' }).toString();
const keyId = createHash('sha256')
  .update(keys.publicKey.export({ type: 'spki', format: 'der' }))
  .digest('hex')
  .slice(0, 32);

/** An export of `n` events; the JSON is written with its keys in sorted order by hand, so the hashes do not rest on the code under test. */
function makeExport(n: number, signer = keys.privateKey): string[] {
  const head = { sandboxId: 'sbx_a', tenantId: 'ten_a', exportedAt: '2026-12-01T10:00:00.000Z' };
  const lines = [JSON.stringify({ format: FORMAT, ...head, count: n })];
  let prev = GENESIS;
  for (let i = 0; i < n; i++) {
    const at = `2026-12-01T09:00:0${i}.000Z`;
    const data = { path: `/root/f${i}`, sizeBytes: i };
    // Sorted keys: at, data{path,sizeBytes}, id, prevHash, sandboxId, sandboxPrevHash, tenantId, type.
    const body = JSON.stringify({
      at,
      data,
      id: `evt_${i}`,
      prevHash: `p${i}`,
      sandboxId: 'sbx_a',
      sandboxPrevHash: prev,
      tenantId: 'ten_a',
      type: 'file.written',
    });
    const hash = createHash('sha256').update(`p${i}`).update(body).digest('hex');
    lines.push(
      JSON.stringify({
        seq: i + 1,
        id: `evt_${i}`,
        type: 'file.written',
        tenantId: 'ten_a',
        sandboxId: 'sbx_a',
        at,
        data,
        prevHash: `p${i}`,
        sandboxPrevHash: prev,
        hash,
      }),
    );
    prev = hash;
  }
  const headHash = prev;
  // Sorted keys: count, exportedAt, format, headHash, keyId, sandboxId, tenantId.
  const message = JSON.stringify({ count: n, exportedAt: head.exportedAt, format: FORMAT, headHash, keyId, sandboxId: 'sbx_a', tenantId: 'ten_a' });
  const signature = sign(null, Buffer.from(message), signer).toString('base64');
  lines.push(JSON.stringify({ format: FORMAT, ...head, count: n, headHash, keyId, signature }));
  return lines;
}

const verdict = (lines: string[]) => verifyExport(`${lines.join('\n')}\n`, publicKeyPem);

describe('verifyExport', () => {
  it('accepts an untouched export', async () => {
    expect(await verdict(makeExport(3))).toMatchObject({ ok: true, count: 3, keyId });
    expect(await verdict(makeExport(0))).toMatchObject({ ok: true, count: 0, headHash: GENESIS });
  });

  it('tells each kind of tampering apart', async () => {
    const edited = makeExport(3);
    edited[2] = edited[2]!.replace('/root/f1', '/root/f9');
    expect(await verdict(edited)).toMatchObject({ ok: false, line: 3, check: 'hash' });

    const swapped = makeExport(3);
    [swapped[1], swapped[2]] = [swapped[2]!, swapped[1]!];
    expect(await verdict(swapped)).toMatchObject({ ok: false, line: 2, check: 'link' });

    const cut = makeExport(3);
    cut.splice(3, 1);
    expect(await verdict(cut)).toMatchObject({ ok: false, check: 'count' });

    const noTrailer = makeExport(3).slice(0, -1);
    expect(await verdict(noTrailer)).toMatchObject({ ok: false, check: 'trailer' });

    const rewritten = makeExport(3);
    const trailer = JSON.parse(rewritten[4]!);
    rewritten[4] = JSON.stringify({ ...trailer, exportedAt: '2026-12-01T11:00:00.000Z' });
    rewritten[0] = rewritten[0]!.replace('10:00:00', '11:00:00');
    expect(await verdict(rewritten)).toMatchObject({ ok: false, check: 'signature' });

    const other = generateKeyPairSync('ed25519');
    const foreign = makeExport(2, other.privateKey);
    expect(await verdict(foreign)).toMatchObject({ ok: false, check: 'signature' });
    expect(await verifyExport(makeExport(2).join('\n'), other.publicKey.export({ type: 'spki', format: 'pem' }).toString())).toMatchObject({
      ok: false,
      check: 'key',
    });
  });
});
