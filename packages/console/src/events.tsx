// A sandbox's event log, filterable, with its chain verified in the page from the signed audit export.
import { useCallback, useEffect, useState } from 'react';
import { ApiError, type LogEvent } from './api.js';
import { type Verdict, verifyExport } from './verify.js';

const CSRF = { 'x-sandglass-console': '1' };

async function fetchText(path: string): Promise<string> {
  const res = await fetch(path, { credentials: 'same-origin', headers: CSRF });
  const text = await res.text();
  if (!res.ok) {
    const err = (JSON.parse(text || '{}') as { error?: { code?: string; message?: string } }).error;
    throw new ApiError(res.status, err?.code ?? 'error', err?.message ?? res.statusText);
  }
  return text;
}

export function EventsPage({ sandboxId, events }: { sandboxId: string; events: LogEvent[] }) {
  const [typeFilter, setTypeFilter] = useState('');
  const [verdict, setVerdict] = useState<Verdict | { error: string }>();
  const [checking, setChecking] = useState(false);
  const verify = useCallback(async () => {
    setChecking(true);
    try {
      // The export is signed by the deployment's audit key; the page checks it with the published public key.
      const [text, key] = await Promise.all([fetchText(`/v1/sandboxes/${sandboxId}/audit/export`), fetchText('/v1/audit/public-key')]);
      setVerdict(await verifyExport(text, (JSON.parse(key) as { publicKeyPem: string }).publicKeyPem));
    } catch (e) {
      setVerdict({ error: e instanceof ApiError ? `${e.code}: ${e.message}` : (e as Error).message });
    } finally {
      setChecking(false);
    }
  }, [sandboxId]);
  useEffect(() => {
    void verify();
  }, [verify]);
  const shown = events.filter((e) => typeFilter === '' || e.type.startsWith(typeFilter));
  return (
    <section aria-label="Events">
      <h2>Events</h2>
      <div className="toolbar">
        <label>
          Type starts with <input value={typeFilter} onChange={(e) => setTypeFilter(e.target.value)} placeholder="egress" />
        </label>
        <button type="button" onClick={() => void verify()} disabled={checking}>
          Verify the chain
        </button>
      </div>
      <p role="status" data-testid="chain" className={verdict && 'ok' in verdict && verdict.ok ? 'allowed' : 'refused'}>
        {checking
          ? 'Verifying the chain…'
          : !verdict
            ? ''
            : 'error' in verdict
              ? `Could not verify the chain: ${verdict.error}`
              : verdict.ok
                ? `Chain verified: ${verdict.count} events, head ${verdict.headHash.slice(0, 16)}, signed by key ${verdict.keyId} at ${verdict.exportedAt}`
                : `Chain FAILED at line ${verdict.line} (${verdict.check}): ${verdict.problem}`}
      </p>
      <table>
        <thead>
          <tr>
            <th>Seq</th>
            <th>At</th>
            <th>Type</th>
            <th>Data</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((e) => (
            <tr key={e.seq} data-testid="event-row">
              <td>{e.seq}</td>
              <td>{e.at}</td>
              <td>{e.type}</td>
              <td>
                <code>{JSON.stringify(e.data)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
