// The snapshot timeline: snapshots on a time axis, a scrubber that shows what changed between two of them, and what
// can be done from one (name or rename it, fork with a count, resume the sandbox there, delete it) or now (take one,
// named or not).
import { useState } from 'react';
import { call, type LogEvent, type Sandbox, type Snapshot, type SnapshotCadence } from './api.js';
import { digest } from './digest.js';
import { formatSize } from './files.tsx';

const MAX_FORKS = 16;
/** Arrow keys on the scrubber move by this share of the whole axis. */
const SCRUB_STEPS = 200;

interface Props {
  sandbox: Sandbox;
  snapshots: Snapshot[];
  cadence?: SnapshotCadence;
  events: LogEvent[];
  /** After an action: reload the sandbox and its snapshots. */
  onChanged: () => void;
  fail: (e: Error) => void;
}

export function Timeline({ sandbox, snapshots, cadence, events, onChanged, fail }: Props) {
  const [atMs, setAtMs] = useState<number>();
  const [name, setName] = useState('');
  const [count, setCount] = useState(1);
  const [busy, setBusy] = useState('');
  const [forks, setForks] = useState<Sandbox[]>([]);
  const [confirmDelete, setConfirmDelete] = useState<string>();
  // The name being edited, for the snapshot it was typed for: selecting another one shows that one's name.
  const [draft, setDraft] = useState<{ snapshotId: string; name: string }>();

  const times = snapshots.map((s) => Date.parse(s.takenAt));
  const lastEventMs = events.length > 0 ? Date.parse(events[events.length - 1]!.at) : 0;
  const startMs = Math.min(Date.parse(sandbox.createdAt), ...times);
  const endMs = Math.max(startMs + 1, lastEventMs, ...times);
  const span = endMs - startMs;
  // Unscrubbed, the point is the latest snapshot: what the sandbox did since it.
  const pointMs = atMs ?? (times.length > 0 ? times[times.length - 1]! : startMs);
  let index = -1;
  for (let i = 0; i < times.length; i++) if (times[i]! <= pointMs) index = i;
  const selected = index >= 0 ? snapshots[index] : undefined;
  const fromMs = index >= 0 ? times[index]! : startMs;
  const next = snapshots[index + 1];
  const toMs = next ? Date.parse(next.takenAt) : Number.POSITIVE_INFINITY;
  const changed = digest(events, fromMs, toMs);

  const run = async (what: string, fn: () => Promise<void>) => {
    setBusy(what);
    try {
      await fn();
    } catch (e) {
      fail(e as Error);
    } finally {
      setBusy('');
      onChanged();
    }
  };
  const take = () =>
    run('Taking a snapshot…', async () => {
      await call('POST', `/v1/sandboxes/${sandbox.id}/snapshots`, name.trim() ? { name: name.trim() } : {});
      setName('');
    });
  const fork = (s: Snapshot) =>
    run(`Forking ${count}…`, async () => {
      const r = await call<{ sandboxes: Sandbox[] }>('POST', '/v1/forks', { snapshotId: s.id, count });
      setForks(r.sandboxes);
      if (r.sandboxes.length === 1) location.hash = `#/sandboxes/${r.sandboxes[0]!.id}`;
    });
  const resumeAt = (s: Snapshot) =>
    run('Resuming…', async () => {
      // Resume is for a paused sandbox: a running one is paused first (which snapshots it, so nothing is lost).
      if (sandbox.state === 'running') await call('POST', `/v1/sandboxes/${sandbox.id}/pause`);
      await call('POST', `/v1/sandboxes/${sandbox.id}/resume`, { snapshotId: s.id });
    });
  const remove = (s: Snapshot) =>
    run('Deleting…', async () => {
      setConfirmDelete(undefined);
      await call('DELETE', `/v1/snapshots/${s.id}`);
      setAtMs(undefined);
    });
  // An empty name removes it (and the pin); the stream's snapshot.named reloads the timeline for every open page.
  const rename = (s: Snapshot, newName: string) =>
    run('Naming…', async () => {
      await call('PATCH', `/v1/snapshots/${s.id}`, { name: newName.trim() === '' ? null : newName.trim() });
      setDraft(undefined);
    });
  const jump = (i: number) => {
    const t = times[i];
    if (t !== undefined) setAtMs(t);
  };

  return (
    <section aria-label="Snapshot timeline">
      <h2>Timeline</h2>
      {cadence && <CadenceLine cadence={cadence} />}
      <form
        className="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          void take();
        }}
      >
        <label>
          Snapshot name (pins it) <input value={name} onChange={(e) => setName(e.target.value)} maxLength={128} placeholder="optional" />
        </label>
        <button type="submit" disabled={sandbox.state !== 'running' || busy !== ''}>
          Take snapshot
        </button>
        <span aria-live="polite">{busy}</span>
      </form>
      <fieldset className="axis" aria-label="Snapshots on a time axis">
        {snapshots.map((s, i) => (
          <button
            type="button"
            key={s.id}
            className={`tick ${s.reason}${i === index ? ' selected' : ''}`}
            style={{ left: `${(((times[i] ?? startMs) - startMs) / span) * 98}%` }}
            title={`${s.reason} ${s.name ?? ''} ${s.takenAt}`}
            onClick={() => jump(i)}
            aria-pressed={i === index}
            aria-label={`Snapshot ${s.name ?? s.id} (${s.reason}) taken ${s.takenAt}`}
            data-testid="timeline-tick"
          />
        ))}
        <span className="cursor" style={{ left: `${((pointMs - startMs) / span) * 98}%` }} aria-hidden="true" />
      </fieldset>
      <div className="toolbar">
        <button type="button" onClick={() => jump(index - 1)} disabled={index <= 0}>
          Previous snapshot
        </button>
        <label className="scrub">
          Scrub the timeline{' '}
          <input
            type="range"
            min={startMs}
            max={endMs}
            step={Math.max(1, Math.round(span / SCRUB_STEPS))}
            value={pointMs}
            onChange={(e) => setAtMs(Number(e.target.value))}
            aria-valuetext={new Date(pointMs).toISOString()}
          />
        </label>
        <button type="button" onClick={() => jump(index + 1)} disabled={index >= snapshots.length - 1}>
          Next snapshot
        </button>
      </div>
      <div className="scrubbed" data-testid="scrubbed" aria-live="polite">
        <h3>
          {new Date(pointMs).toISOString()}:{' '}
          {selected ? (
            <>
              snapshot <code data-testid="selected-snapshot">{selected.id}</code> ({selected.reason}
              {selected.name ? `, "${selected.name}"` : ''}, {formatSize(selected.sizeAddedBytes)} added)
            </>
          ) : (
            'before the first snapshot'
          )}
        </h3>
        <p>
          What changed from {new Date(fromMs).toISOString()} to {next ? `the next snapshot, ${next.takenAt}` : 'now'}:
        </p>
        <div className="digest">
          <section aria-label="Files changed">
            <h4>Files changed ({changed.files.length})</h4>
            <ul data-testid="changed-files">
              {changed.files.map((f) => (
                <li key={f.seq}>
                  {f.what} <code>{f.path}</code>
                </li>
              ))}
            </ul>
          </section>
          <section aria-label="Commands run">
            <h4>Commands run ({changed.commands.length})</h4>
            <ul data-testid="changed-commands">
              {changed.commands.map((c) => (
                <li key={c.seq}>
                  <code>{c.argv.join(' ')}</code>
                </li>
              ))}
            </ul>
          </section>
          <section aria-label="Egress">
            <h4>Egress ({changed.egress.length})</h4>
            <ul data-testid="changed-egress">
              {changed.egress.map((g) => (
                <li key={g.seq}>
                  {g.allowed ? 'allowed' : 'refused'} {g.method} {g.host}
                  {g.port ? `:${g.port}` : ''}
                  {g.path} {g.reason && `(${g.reason})`}
                </li>
              ))}
            </ul>
          </section>
        </div>
        {selected && (
          <form
            className="toolbar"
            aria-label="Name this snapshot"
            onSubmit={(e) => {
              e.preventDefault();
              void rename(selected, draft?.snapshotId === selected.id ? draft.name : (selected.name ?? ''));
            }}
          >
            <label>
              Name of this snapshot (pins it; empty unpins it){' '}
              <input
                value={draft?.snapshotId === selected.id ? draft.name : (selected.name ?? '')}
                onChange={(e) => setDraft({ snapshotId: selected.id, name: e.target.value })}
                maxLength={128}
                placeholder="unnamed"
              />
            </label>
            <button type="submit" disabled={busy !== ''}>
              Save name
            </button>
          </form>
        )}
        {selected && (
          <div className="toolbar" data-testid="snapshot-actions">
            <label>
              Forks{' '}
              <input
                type="number"
                min={1}
                max={MAX_FORKS}
                value={count}
                onChange={(e) => setCount(Math.min(MAX_FORKS, Math.max(1, Number(e.target.value) || 1)))}
              />
            </label>
            <button type="button" onClick={() => fork(selected)} disabled={busy !== ''}>
              Fork from this snapshot
            </button>
            <button type="button" onClick={() => resumeAt(selected)} disabled={busy !== '' || (sandbox.state !== 'running' && sandbox.state !== 'paused')}>
              Resume the sandbox here
            </button>
            {confirmDelete === selected.id ? (
              <>
                <button type="button" onClick={() => remove(selected)}>
                  Confirm delete
                </button>
                <button type="button" onClick={() => setConfirmDelete(undefined)}>
                  Keep it
                </button>
              </>
            ) : (
              <button type="button" onClick={() => setConfirmDelete(selected.id)} disabled={busy !== ''}>
                Delete snapshot
              </button>
            )}
          </div>
        )}
        {forks.length > 1 && (
          <ul aria-label="Forks started">
            {forks.map((f) => (
              <li key={f.id}>
                <a href={`#/sandboxes/${f.id}`}>{f.id}</a>
              </li>
            ))}
          </ul>
        )}
      </div>
      <ol data-testid="snapshots">
        {snapshots.map((s, i) => (
          <li key={s.id}>
            <button type="button" className="link" onClick={() => jump(i)} aria-label={`Select snapshot ${s.id}`}>
              {s.takenAt}
            </button>{' '}
            {s.reason} {s.name ?? ''} <code>{s.id}</code>
          </li>
        ))}
      </ol>
    </section>
  );
}

/** Asked against achieved: a user who set 5 s must see when the node does not keep it. */
function CadenceLine({ cadence: c }: { cadence: SnapshotCadence }) {
  let achieved: string;
  if (c.windowS === 0) achieved = 'not running';
  else if (c.achievedIntervalS !== null) achieved = `one every ${c.achievedIntervalS} s over the last ${c.windowS} s`;
  else achieved = c.windowS < c.intervalS ? 'not measured yet' : `none in the last ${c.windowS} s`;
  return (
    <p data-testid="snapshot-cadence" role={c.behind ? 'status' : undefined}>
      Snapshots: every {c.intervalS} s asked, {achieved}
      {c.behind && <strong> — behind: the node cannot keep this interval now (see Events for why)</strong>}
    </p>
  );
}
