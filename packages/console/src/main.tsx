// The console's pages: sign-in, the live sandbox list with the New sandbox form, and a sandbox's terminal, metrics,
// files, background commands, listening ports and snapshot timeline; its network policy, egress and the tenant's
// secrets; its event log with the chain verified; the tenant's templates with their versions and builds.
import { StrictMode, useCallback, useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { ApiError, type Approval, call, followEvents, type LogEvent, type Sandbox, type Snapshot, type SnapshotCadence } from './api.js';
import { BackgroundCommands } from './commands.tsx';
import { EventsPage } from './events.tsx';
import { FileBrowser } from './files.tsx';
import { forgetAccess } from './gateway.tsx';
import { NetworkPage, Secrets } from './network.tsx';
import { Ports } from './ports.tsx';
import { NewSandbox, TemplatePage, TemplatesPage } from './templates.tsx';
import { Terminal } from './terminal.tsx';
import { Metrics } from './metrics.tsx';
import { Timeline } from './timeline.tsx';
import './styles.css';

interface SessionInfo {
  tenantId: string;
  keyId: string;
  role: string;
}

function useRoute(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return hash.replace(/^#/, '') || '/';
}

function App() {
  const [session, setSession] = useState<SessionInfo | null | undefined>(undefined);
  useEffect(() => {
    call<SessionInfo>('GET', '/console/api/session').then(setSession, () => setSession(null));
  }, []);
  const route = useRoute();
  if (session === undefined) return <p>Loading…</p>;
  if (session === null) return <SignIn onSignedIn={setSession} />;
  const signOut = async () => {
    await call('DELETE', '/console/api/session');
    setSession(null);
  };
  const m = /^\/sandboxes\/([\w-]+)(?:\/(network|events))?$/.exec(route);
  const t = /^\/templates\/([a-z0-9][a-z0-9._-]*)(?:\/builds\/([\w-]+))?$/.exec(route);
  return (
    <>
      <header>
        <a href="#/">Sandglass</a>
        <nav aria-label="Console">
          <a href="#/">Sandboxes</a> <a href="#/templates">Templates</a> <a href="#/secrets">Secrets</a>
        </nav>
        <span>
          tenant <code>{session.tenantId}</code> ({session.role})
        </span>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main>
        {m ? (
          <SandboxPage id={m[1]!} tab={(m[2] as Tab | undefined) ?? 'overview'} />
        ) : t ? (
          <TemplatePage key={t[1]} name={t[1]!} {...(t[2] ? { buildId: t[2] } : {})} />
        ) : route === '/templates' ? (
          <TemplatesPage />
        ) : route === '/secrets' ? (
          <Secrets />
        ) : (
          <SandboxList />
        )}
      </main>
    </>
  );
}

function SignIn({ onSignedIn }: { onSignedIn: (s: SessionInfo) => void }) {
  const [error, setError] = useState('');
  const submit = async (e: React.FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const input = form.elements.namedItem('apiKey') as HTMLInputElement;
    try {
      const s = await call<SessionInfo>('POST', '/console/api/session', { apiKey: input.value });
      // The key leaves the page: only the HttpOnly cookie the answer set stands for it now.
      input.value = '';
      onSignedIn(s);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <main>
      <h1>Sign in to Sandglass</h1>
      <form onSubmit={submit}>
        <label htmlFor="apiKey">API key</label>
        <input id="apiKey" name="apiKey" type="password" autoComplete="off" required />
        <button type="submit">Sign in</button>
      </form>
      {error && <p role="alert">{error}</p>}
    </main>
  );
}

function age(iso: string): string {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 120 ? `${s} s` : s < 7200 ? `${Math.round(s / 60)} min` : `${Math.round(s / 3600)} h`;
}

function SandboxList() {
  const [sandboxes, setSandboxes] = useState<Sandbox[]>([]);
  const [filter, setFilter] = useState('');
  const [error, setError] = useState('');
  const load = useCallback(() => {
    call<{ sandboxes: Sandbox[] }>('GET', '/v1/sandboxes').then(
      (r) => setSandboxes(r.sandboxes),
      (e: Error) => setError(e.message),
    );
  }, []);
  useEffect(() => {
    load();
    // One stream for the page; each live sandbox event reloads the list once (the log's backlog only once, when ready).
    let live = false;
    return followEvents(
      {},
      (ev) => {
        if (live && ev.type.startsWith('sandbox.')) load();
      },
      () => {
        if (!live) load();
        live = true;
      },
    );
  }, [load]);
  const fail = useCallback((e: Error) => setError(e.message), []);
  const act = (fn: () => Promise<unknown>) => fn().then(load, fail);
  const shown = sandboxes.filter((s) => filter === '' || s.state === filter);
  return (
    <section aria-label="Sandboxes">
      <h1>Sandboxes</h1>
      <NewSandbox onCreated={load} fail={fail} />
      <div className="toolbar">
        <label>
          State{' '}
          <select value={filter} onChange={(e) => setFilter(e.target.value)}>
            <option value="">all</option>
            {['starting', 'running', 'paused', 'ended', 'failed'].map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
      </div>
      {error && <p role="alert">{error}</p>}
      <table>
        <thead>
          <tr>
            <th>Id</th>
            <th>State</th>
            <th>Template</th>
            <th>Age</th>
            <th>Memory</th>
            <th>vCPUs</th>
            <th>Node</th>
            <th>Actions</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((s) => (
            <tr key={s.id} data-testid="sandbox-row">
              <td>
                <a href={`#/sandboxes/${s.id}`}>{s.id}</a>
              </td>
              <td data-testid="sandbox-state">{s.state}</td>
              <td>{s.template}</td>
              <td>{age(s.createdAt)}</td>
              <td>{s.memoryMib} MiB</td>
              <td>{s.vcpus}</td>
              <td>{s.gatewayId ?? ''}</td>
              <td>
                {s.state === 'running' && (
                  <button type="button" onClick={() => act(() => call('POST', `/v1/sandboxes/${s.id}/pause`))}>
                    Pause
                  </button>
                )}
                {s.state === 'paused' && (
                  <button type="button" onClick={() => act(() => call('POST', `/v1/sandboxes/${s.id}/resume`, {}))}>
                    Resume
                  </button>
                )}
                {(s.state === 'running' || s.state === 'paused') && (
                  <button type="button" onClick={() => act(() => call('DELETE', `/v1/sandboxes/${s.id}`))}>
                    Kill
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

type Tab = 'overview' | 'network' | 'events';
const TABS: Array<[Tab, string, string]> = [
  ['overview', 'Overview', ''],
  ['network', 'Network & secrets', '/network'],
  ['events', 'Events', '/events'],
];

function SandboxPage({ id, tab }: { id: string; tab: Tab }) {
  const [sandbox, setSandbox] = useState<Sandbox>();
  const [snapshots, setSnapshots] = useState<Snapshot[]>([]);
  const [cadence, setCadence] = useState<SnapshotCadence>();
  const [events, setEvents] = useState<LogEvent[]>([]);
  const [approvals, setApprovals] = useState<Approval[]>([]);
  const [commandsVersion, setCommandsVersion] = useState(0);
  const [portsVersion, setPortsVersion] = useState(0);
  // The seq of the event that last put the sandbox on a new VM (resumed, moved): its shells and commands are gone then.
  const [vm, setVm] = useState(0);
  const [error, setError] = useState('');
  const fail = useCallback((e: Error) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : e.message), []);
  const load = useCallback(() => {
    call<Sandbox>('GET', `/v1/sandboxes/${id}`).then(setSandbox, fail);
    call<{ snapshots: Snapshot[]; cadence: SnapshotCadence }>('GET', `/v1/sandboxes/${id}/snapshots`).then((r) => {
      setSnapshots(r.snapshots);
      setCadence(r.cadence);
    }, fail);
  }, [id, fail]);
  const loadApprovals = useCallback(() => {
    call<{ approvals: Approval[] }>('GET', `/v1/sandboxes/${id}/approvals`).then(
      (r) => setApprovals(r.approvals),
      () => setApprovals([]),
    );
  }, [id]);
  const decide = (a: Approval, decision: 'approve' | 'deny', ttlS?: number) =>
    call('POST', `/v1/approvals/${encodeURIComponent(a.requestId)}`, { sandboxId: id, decision, ...(ttlS ? { ttlS } : {}) }).then(loadApprovals, fail);
  useEffect(() => {
    load();
    loadApprovals();
    setEvents([]);
    setVm(0);
    setError('');
    // The log's backlog fills the page's history; only live events make it reload or replace its terminal.
    let live = false;
    return followEvents(
      { sandboxId: id },
      (ev) => {
        setEvents((prev) => [...prev, ev]);
        if (!live) return;
        if (ev.type.startsWith('sandbox.') || ev.type.startsWith('snapshot.')) load();
        if (ev.type.startsWith('command.')) setCommandsVersion((v) => v + 1);
        if (ev.type === 'port.visibility') setPortsVersion((v) => v + 1);
        if (ev.type === 'sandbox.resumed' || ev.type === 'sandbox.moved') {
          forgetAccess(id);
          setVm(ev.seq);
        }
        // A request waiting for a human shows the moment its event is logged.
        if (ev.type.startsWith('secret.approval_')) loadApprovals();
      },
      () => {
        // What changed while the backlog streamed in is loaded once.
        if (!live) {
          load();
          loadApprovals();
        }
        live = true;
      },
    );
  }, [id, load, loadApprovals]);
  // Only once this page's sandbox is loaded: after a fork the previous one's state is still shown for a moment.
  const current = sandbox?.id === id ? sandbox : undefined;
  return (
    <>
      <h1>
        Sandbox <code>{id}</code> <small data-testid="sandbox-state">{current?.state}</small>
      </h1>
      <nav aria-label="Sandbox pages" className="tabs">
        {TABS.map(([t, label, suffix]) => (
          <a key={t} href={`#/sandboxes/${id}${suffix}`} aria-current={t === tab ? 'page' : undefined}>
            {label}
          </a>
        ))}
      </nav>
      {error && <p role="alert">{error}</p>}
      {/* On every page of the sandbox: a request waiting for a human must be seen wherever one is looking. */}
      {approvals.length > 0 && (
        <section aria-label="Pending approvals" className="approvals">
          <h2>Pending approvals</h2>
          <ul>
            {approvals.map((a) => (
              <li key={a.requestId} data-testid="approval">
                <code>{a.secret}</code> for {a.method} {a.host}:{a.port}
                {a.path}{' '}
                <button type="button" onClick={() => decide(a, 'approve')}>
                  Approve
                </button>
                <button type="button" onClick={() => decide(a, 'approve', 600)}>
                  Approve for 10 min
                </button>
                <button type="button" onClick={() => decide(a, 'deny')}>
                  Deny
                </button>
              </li>
            ))}
          </ul>
        </section>
      )}
      {tab === 'overview' && current?.state === 'running' && (
        <>
          <Terminal key={`${id}-${vm}`} sandboxId={id} vm={vm} />
          <Metrics key={`metrics-${id}-${vm}`} sandboxId={id} />
          <div className="columns">
            <FileBrowser key={`files-${id}-${vm}`} sandboxId={id} />
            <BackgroundCommands key={`commands-${id}-${vm}`} sandboxId={id} version={commandsVersion} />
          </div>
          <Ports key={`ports-${id}-${vm}`} sandboxId={id} version={portsVersion} />
        </>
      )}
      {tab === 'overview' && current && <Timeline sandbox={current} snapshots={snapshots} cadence={cadence} events={events} onChanged={load} fail={fail} />}
      {tab === 'network' && current && <NetworkPage sandbox={current} events={events} onChanged={load} />}
      {tab === 'events' && <EventsPage key={id} sandboxId={id} events={events} />}
    </>
  );
}

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
