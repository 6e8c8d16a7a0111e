// Network and secrets: a sandbox's egress policy (shown and replaced), every egress decision as it is logged, and the
// tenant's secrets by name and scope with add, rotate and remove. A secret's value only ever leaves the page: the API
// never returns one, and the inputs that held one are emptied once it is sent.
import { useCallback, useEffect, useState } from 'react';
import { ApiError, call, type LogEvent, type Sandbox } from './api.js';
import { egressDecision } from './digest.js';

interface SecretInfo {
  name: string;
  hosts: string[];
  header: string | null;
  format: string | null;
  bodyContentTypes: string[];
  approval: 'none' | 'required';
  allowPlaintext: boolean;
  allowUpgrade: boolean;
  createdAt: string;
  updatedAt: string;
}

const lines = (s: string): string[] =>
  s
    .split(/[\n,]/)
    .map((x) => x.trim())
    .filter((x) => x !== '');

export function NetworkPage({ sandbox, events, onChanged }: { sandbox: Sandbox; events: LogEvent[]; onChanged: () => void }) {
  return (
    <>
      <Policy sandbox={sandbox} onChanged={onChanged} />
      <EgressLog events={events} />
      <Secrets />
    </>
  );
}

function Policy({ sandbox, onChanged }: { sandbox: Sandbox; onChanged: () => void }) {
  const [allow, setAllow] = useState('');
  const [deny, setDeny] = useState('');
  const [error, setError] = useState('');
  const [status, setStatus] = useState('');
  const network = sandbox.network;
  const shown = JSON.stringify(network ?? null);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the form resets when the policy in force changes, not on every render.
  useEffect(() => {
    setAllow((network?.allow ?? []).join('\n'));
    setDeny((network?.deny ?? []).join('\n'));
  }, [shown]);
  const apply = async (e: React.FormEvent) => {
    e.preventDefault();
    setError('');
    try {
      await call('PUT', `/v1/sandboxes/${sandbox.id}/network`, { allow: lines(allow), deny: lines(deny) });
      setStatus('Policy applied to new connections.');
      onChanged();
    } catch (err) {
      setError(err instanceof ApiError ? `${err.code}: ${err.message}` : (err as Error).message);
    }
  };
  return (
    <section aria-label="Egress policy">
      <h2>Egress policy</h2>
      {network === null ? (
        <p>This sandbox has no network at all.</p>
      ) : (
        <form onSubmit={apply} className="policy">
          <p>Deny rules win; a destination no allow rule names is denied.</p>
          <label>
            Allow (one rule a line)
            <textarea value={allow} onChange={(e) => setAllow(e.target.value)} rows={4} spellCheck={false} />
          </label>
          <label>
            Deny (one rule a line)
            <textarea value={deny} onChange={(e) => setDeny(e.target.value)} rows={4} spellCheck={false} />
          </label>
          <button type="submit" disabled={sandbox.state !== 'running'}>
            Apply policy
          </button>
          <span aria-live="polite">{status}</span>
        </form>
      )}
      {error && <p role="alert">{error}</p>}
    </section>
  );
}

function EgressLog({ events }: { events: LogEvent[] }) {
  const decisions = events.map(egressDecision).filter((d) => d !== undefined);
  return (
    <section aria-label="Egress decisions">
      <h2>Egress decisions ({decisions.length})</h2>
      <table data-testid="egress">
        <thead>
          <tr>
            <th>At</th>
            <th>Request</th>
            <th>Decision</th>
            <th>Why</th>
            <th>Secrets</th>
            <th>Status</th>
          </tr>
        </thead>
        <tbody>
          {[...decisions].reverse().map((d) => (
            <tr key={d.seq} data-testid="egress-row">
              <td>{d.at}</td>
              <td>
                <code>
                  {d.method} {d.host}
                  {d.port ? `:${d.port}` : ''}
                  {d.path}
                </code>
              </td>
              <td className={d.allowed ? 'allowed' : 'refused'}>{d.allowed ? 'allowed' : 'refused'}</td>
              <td>{d.reason}</td>
              <td>{d.secrets.join(', ')}</td>
              <td>{d.status ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

export function Secrets() {
  const [secrets, setSecrets] = useState<SecretInfo[]>([]);
  const [rotating, setRotating] = useState<string>();
  const [removing, setRemoving] = useState<string>();
  const [error, setError] = useState('');
  const [status, setStatus] = useState('');
  const fail = useCallback((e: Error) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : e.message), []);
  const load = useCallback(() => {
    call<{ secrets: SecretInfo[] }>('GET', '/v1/secrets').then((r) => setSecrets(r.secrets), fail);
  }, [fail]);
  useEffect(load, [load]);

  const add = async (e: React.FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const field = (n: string) => form.elements.namedItem(n) as HTMLInputElement;
    const name = field('name').value.trim();
    const header = field('header').value.trim();
    const format = field('format').value.trim();
    setError('');
    try {
      await call('PUT', `/v1/secrets/${encodeURIComponent(name)}`, {
        value: field('value').value,
        hosts: lines(field('hosts').value),
        ...(header ? { header, ...(format ? { format } : {}) } : {}),
        approval: field('approval').checked ? 'required' : 'none',
      });
      // The value is sealed server-side now; the page keeps no copy of it.
      form.reset();
      setStatus(`Secret ${name} saved.`);
      load();
    } catch (err) {
      field('value').value = '';
      fail(err as Error);
    }
  };

  const rotate = async (s: SecretInfo, e: React.FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const input = e.currentTarget.elements.namedItem('value') as HTMLInputElement;
    setError('');
    try {
      // Same scope and settings, a new value: what PUT replaces is the whole secret.
      await call('PUT', `/v1/secrets/${encodeURIComponent(s.name)}`, {
        value: input.value,
        hosts: s.hosts,
        ...(s.header ? { header: s.header, ...(s.format ? { format: s.format } : {}) } : {}),
        ...(s.bodyContentTypes.length > 0 ? { bodyContentTypes: s.bodyContentTypes } : {}),
        approval: s.approval,
        allowPlaintext: s.allowPlaintext,
        allowUpgrade: s.allowUpgrade,
      });
      setRotating(undefined);
      setStatus(`Secret ${s.name} rotated.`);
      load();
    } catch (err) {
      fail(err as Error);
    } finally {
      input.value = '';
    }
  };

  const remove = (s: SecretInfo) =>
    call('DELETE', `/v1/secrets/${encodeURIComponent(s.name)}`).then(() => {
      setRemoving(undefined);
      setStatus(`Secret ${s.name} removed.`);
      load();
    }, fail);

  return (
    <section aria-label="Secrets">
      <h2>Secrets of the tenant</h2>
      <p>Names and scopes only: a value is never shown again once saved.</p>
      {error && <p role="alert">{error}</p>}
      <p aria-live="polite" data-testid="secrets-status">
        {status}
      </p>
      <table data-testid="secrets">
        <thead>
          <tr>
            <th>Name</th>
            <th>Hosts</th>
            <th>Header</th>
            <th>Approval</th>
            <th>Updated</th>
            <th>Actions</th>
          </tr>
        </thead>
        <tbody>
          {secrets.map((s) => (
            <tr key={s.name} data-testid="secret-row">
              <td>
                <code>{s.name}</code>
              </td>
              <td>{s.hosts.join(', ')}</td>
              <td>{s.header ? `${s.header}: ${s.format ?? '{value}'}` : ''}</td>
              <td>{s.approval}</td>
              <td>{s.updatedAt}</td>
              <td>
                {rotating === s.name ? (
                  <form onSubmit={(e) => rotate(s, e)} className="inline">
                    <label>
                      New value for {s.name} <input name="value" type="password" autoComplete="off" minLength={4} required />
                    </label>
                    <button type="submit">Save new value</button>
                    <button type="button" onClick={() => setRotating(undefined)}>
                      Cancel
                    </button>
                  </form>
                ) : removing === s.name ? (
                  <>
                    <button type="button" onClick={() => remove(s)}>
                      Confirm remove {s.name}
                    </button>
                    <button type="button" onClick={() => setRemoving(undefined)}>
                      Keep it
                    </button>
                  </>
                ) : (
                  <>
                    <button type="button" onClick={() => setRotating(s.name)} aria-label={`Rotate ${s.name}`}>
                      Rotate
                    </button>
                    <button type="button" onClick={() => setRemoving(s.name)} aria-label={`Remove ${s.name}`}>
                      Remove
                    </button>
                  </>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form onSubmit={add} className="secret-form" aria-label="Add a secret">
        <h3>Add a secret</h3>
        <label>
          Name{' '}
          <input name="name" required pattern="[A-Z_][A-Z0-9_]{0,63}" title="Capital letters, digits and _ (an environment variable name)" autoComplete="off" />
        </label>
        <label>
          Value <input name="value" type="password" required minLength={4} autoComplete="off" />
        </label>
        <label>
          Hosts (comma-separated) <input name="hosts" required placeholder="api.example.com" />
        </label>
        <label>
          Header <input name="header" placeholder="authorization" />
        </label>
        <label>
          Format <input name="format" placeholder="Bearer {value}" />
        </label>
        <label>
          <input name="approval" type="checkbox" /> Each use needs approval
        </label>
        <button type="submit">Add secret</button>
      </form>
    </section>
  );
}
