// Templates in the console: the picker of the New sandbox form, the Templates page (platform and custom templates,
// the builds of the tenant), and a template's own page (its versions, its builds' steps and logs, deleting it).
import { useCallback, useEffect, useState } from 'react';
import { ApiError, call, followEvents, type Sandbox, type Template, type TemplateBuild, type TemplateBuildLine, type TemplateVersion } from './api.js';

/** How often a running build's log and steps are asked for again: the log route is read, not streamed. */
const POLL_MS = 1000;
/** The most lines one answer of the log route carries: a full page may have more behind it. */
const LOG_PAGE = 1000;

const message = (e: Error) => (e instanceof ApiError ? `${e.code}: ${e.message}` : e.message);

/** Whose a template is: the platform's, the tenant's own (public when it published it), or published to every tenant. */
function kindOf(t: Template): string {
  if (!t.custom) return 'platform';
  if (t.readOnly) return 'published by the platform';
  return t.public ? 'custom, public' : 'custom';
}

/** A template's or version's size in words; a disk of null is the base image's own. */
export function sizeOf(t: { memoryMib: number; vcpus?: number; diskMib?: number | null }): string {
  const parts = [`${t.memoryMib} MiB`];
  if (t.vcpus !== undefined) parts.push(`${t.vcpus} vCPU${t.vcpus === 1 ? '' : 's'}`);
  if (t.diskMib !== undefined) parts.push(t.diskMib === null ? 'base disk' : `${t.diskMib} MiB disk`);
  return parts.join(', ');
}

function useTemplates(fail: (e: Error) => void): [Template[], () => void] {
  const [templates, setTemplates] = useState<Template[]>([]);
  const load = useCallback(() => {
    call<{ templates: Template[] }>('GET', '/v1/templates').then((r) => setTemplates(r.templates), fail);
  }, [fail]);
  useEffect(load, [load]);
  return [templates, load];
}

/** A number field left empty sends nothing: the API's default (or the template's) applies. */
function NumberField({
  label,
  value,
  onChange,
  min,
  max,
  placeholder,
}: {
  label: string;
  value: string;
  onChange: (v: string) => void;
  min: number;
  max: number;
  placeholder: string;
}) {
  return (
    <label>
      {label} <input type="number" min={min} max={max} value={value} placeholder={placeholder} onChange={(e) => onChange(e.target.value)} />
    </label>
  );
}

/**
 * The New sandbox form: a template picker with each template's size and version. A custom template's memory, vCPUs and
 * disk are the ones it was built with (the API refuses others), so for one the form shows them and sends none.
 */
export function NewSandbox({ onCreated, fail }: { onCreated: () => void; fail: (e: Error) => void }) {
  const [templates] = useTemplates(fail);
  const [name, setName] = useState('base');
  const [memoryMib, setMemoryMib] = useState('');
  const [vcpus, setVcpus] = useState('');
  const [diskMib, setDiskMib] = useState('');
  const [busy, setBusy] = useState(false);
  const [created, setCreated] = useState<Sandbox>();
  const chosen = templates.find((t) => t.name === name);
  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setBusy(true);
    const size = chosen?.custom
      ? {}
      : {
          ...(memoryMib ? { memoryMib: Number(memoryMib) } : {}),
          ...(vcpus ? { vcpus: Number(vcpus) } : {}),
          ...(diskMib ? { diskMib: Number(diskMib) } : {}),
        };
    try {
      setCreated(await call<Sandbox>('POST', '/v1/sandboxes', { template: name, ...size }));
    } catch (err) {
      fail(err as Error);
    } finally {
      setBusy(false);
      onCreated();
    }
  };
  return (
    <form className="toolbar" aria-label="New sandbox" onSubmit={submit}>
      <label>
        Template{' '}
        <select value={name} onChange={(e) => setName(e.target.value)}>
          {/* Before the list arrives, the default the API takes anyway. */}
          {templates.length === 0 && <option value="base">base</option>}
          {templates.map((t) => (
            <option key={t.id} value={t.name} disabled={t.status !== 'ready'}>
              {t.custom ? `${t.name} v${t.version} (${t.readOnly ? 'published' : 'custom'}, ${sizeOf(t)})` : `${t.name} (platform, ${t.memoryMib} MiB)`}
              {t.status === 'ready' ? '' : ` — ${t.status}`}
            </option>
          ))}
        </select>
      </label>
      {chosen?.custom ? (
        <span data-testid="template-size">Memory, vCPUs and disk are fixed by the template: {sizeOf(chosen)}.</span>
      ) : (
        <>
          <NumberField label="Memory (MiB)" value={memoryMib} onChange={setMemoryMib} min={128} max={16384} placeholder="256" />
          <NumberField label="vCPUs" value={vcpus} onChange={setVcpus} min={1} max={8} placeholder="1" />
          <NumberField label="Disk (MiB)" value={diskMib} onChange={setDiskMib} min={1024} max={65536} placeholder="template's" />
        </>
      )}
      <button type="submit" disabled={busy}>
        New sandbox
      </button>
      <span aria-live="polite" data-testid="created">
        {busy ? 'Creating…' : created && <a href={`#/sandboxes/${created.id}`}>{created.id}</a>}
      </span>
    </form>
  );
}

function StepList({ build }: { build: TemplateBuild }) {
  return (
    <ol start={0} className="steps">
      {build.steps.map((s) => (
        <li key={s.index} className={s.status}>
          <code>{s.name}</code> {s.status}
          {s.durationMs === undefined ? '' : ` (${(s.durationMs / 1000).toFixed(1)} s)`}
        </li>
      ))}
    </ol>
  );
}

/** A build's progress in one line: its steps by status, the one running, and where it failed. */
function progressOf(build: TemplateBuild): string {
  const count = (status: string) => build.steps.filter((s) => s.status === status).length;
  const running = build.steps.find((s) => s.status === 'running');
  const parts = [`${build.steps.length} step${build.steps.length === 1 ? '' : 's'}`, `${count('done')} done`, `${count('cached')} cached`];
  if (running) parts.push(`running step ${running.index}: ${running.name}`);
  if (build.error) parts.push(`failed${build.error.step === undefined ? '' : ` at step ${build.error.step}`}: ${build.error.message}`);
  return parts.join(', ');
}

function BuildTable({ builds, linkTo }: { builds: TemplateBuild[]; linkTo: (b: TemplateBuild) => string }) {
  return (
    <table>
      <thead>
        <tr>
          <th>Build</th>
          <th>Template</th>
          <th>Status</th>
          <th>Steps</th>
          <th>Started</th>
          <th>Finished</th>
          <th>Version</th>
        </tr>
      </thead>
      <tbody>
        {builds.map((b) => (
          <tr key={b.id} data-testid="build-row">
            <td>
              <a href={linkTo(b)} aria-label={`Log of build ${b.id}`}>
                {b.id}
              </a>
            </td>
            <td>{b.name}</td>
            <td data-testid="build-status">{b.status}</td>
            <td>
              {progressOf(b)}
              <StepList build={b} />
            </td>
            <td>{b.startedAt}</td>
            <td>{b.finishedAt ?? ''}</td>
            <td>{b.versionId ? <code>{b.versionId}</code> : ''}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** The tenant's builds (of one name, or all), asked for again while one of them runs. */
function useBuilds(name: string | undefined, fail: (e: Error) => void): [TemplateBuild[], () => void] {
  const [builds, setBuilds] = useState<TemplateBuild[]>([]);
  const load = useCallback(() => {
    const query = name === undefined ? '' : `?name=${encodeURIComponent(name)}`;
    call<{ builds: TemplateBuild[] }>('GET', `/v1/template-builds${query}`).then((r) => setBuilds(r.builds), fail);
  }, [name, fail]);
  useEffect(load, [load]);
  // Each answer while a build runs schedules the next: its steps move on with no event in the log.
  useEffect(() => {
    if (!builds.some((b) => b.status === 'running')) return;
    const timer = setTimeout(load, POLL_MS);
    return () => clearTimeout(timer);
  }, [builds, load]);
  return [builds, load];
}

/** Reloads on the tenant's live template events (a version published or deleted, by this page or anyone). */
function useTemplateEvents(reload: () => void): void {
  useEffect(() => {
    let live = false;
    return followEvents(
      {},
      (ev) => {
        if (live && ev.type.startsWith('template.')) reload();
      },
      () => {
        live = true;
      },
    );
  }, [reload]);
}

export function TemplatesPage() {
  const [error, setError] = useState('');
  const fail = useCallback((e: Error) => setError(message(e)), []);
  const [templates, loadTemplates] = useTemplates(fail);
  const [builds, loadBuilds] = useBuilds(undefined, fail);
  const reload = useCallback(() => {
    loadTemplates();
    loadBuilds();
  }, [loadTemplates, loadBuilds]);
  useTemplateEvents(reload);
  return (
    <section aria-label="Templates">
      <h1>Templates</h1>
      {error && <p role="alert">{error}</p>}
      <table>
        <thead>
          <tr>
            <th>Name</th>
            <th>Kind</th>
            <th>Version</th>
            <th>Size</th>
            <th>Status</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          {templates.map((t) => (
            <tr key={t.id} data-testid="template-row">
              <td>
                <a href={`#/templates/${t.name}`}>{t.name}</a>
              </td>
              <td>{kindOf(t)}</td>
              <td>{t.version === undefined ? '' : `v${t.version}`}</td>
              <td>{sizeOf(t)}</td>
              <td>{t.status}</td>
              <td>{t.createdAt}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Builds</h2>
      {builds.length === 0 ? (
        <p>
          No builds yet: <code>sandglass template build</code> makes one.
        </p>
      ) : (
        <BuildTable builds={builds} linkTo={(b) => `#/templates/${b.name}/builds/${b.id}`} />
      )}
    </section>
  );
}

/** A build's log, from its first line; while the build runs, read again from `nextLine` until it ends. */
function BuildLog({ buildId, onEnded }: { buildId: string; onEnded: () => void }) {
  const [lines, setLines] = useState<TemplateBuildLine[]>([]);
  const [status, setStatus] = useState('');
  const [error, setError] = useState('');
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let nextLine = 0;
    let wasRunning = false;
    setLines([]);
    setStatus('');
    setError('');
    const read = async (): Promise<void> => {
      try {
        const r = await call<{ lines: TemplateBuildLine[]; nextLine: number; status: string }>(
          'GET',
          `/v1/template-builds/${encodeURIComponent(buildId)}/log?fromLine=${nextLine}`,
        );
        if (stopped) return;
        nextLine = r.nextLine;
        if (r.lines.length > 0) setLines((prev) => [...prev, ...r.lines]);
        setStatus(r.status);
        // The answer's status was read before its lines: an ended build's log is whole once a page comes back short.
        if (r.lines.length >= LOG_PAGE) return read();
        if (r.status === 'running') {
          wasRunning = true;
          timer = setTimeout(read, POLL_MS);
        } else if (wasRunning) onEnded();
      } catch (e) {
        if (!stopped) setError(message(e as Error));
      }
    };
    void read();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [buildId, onEnded]);
  return (
    <section aria-label="Build log" className="output">
      <h3>
        Log of <code>{buildId}</code> <small data-testid="build-log-status">{status === 'running' ? 'running, following…' : status}</small>
      </h3>
      {error && <p role="alert">{error}</p>}
      <pre data-testid="build-log">
        {lines.map((l) => (
          <span key={l.n} className={l.stream === 'stderr' ? 'refused' : undefined}>
            {l.text.endsWith('\n') ? l.text : `${l.text}\n`}
          </span>
        ))}
      </pre>
    </section>
  );
}

export function TemplatePage({ name, buildId }: { name: string; buildId?: string }) {
  const [template, setTemplate] = useState<Template | null>();
  const [versions, setVersions] = useState<TemplateVersion[]>([]);
  const [confirm, setConfirm] = useState<number | 'all'>();
  const [busy, setBusy] = useState('');
  const [error, setError] = useState('');
  const fail = useCallback((e: Error) => setError(message(e)), []);
  const load = useCallback(() => {
    call<{ template: Template; versions: TemplateVersion[] }>('GET', `/v1/templates/${encodeURIComponent(name)}`).then(
      (r) => {
        setTemplate(r.template);
        setVersions(r.versions);
      },
      (e: Error) => {
        // A name with builds but no version (yet, or any more) still has its builds to show.
        if (e instanceof ApiError && e.code === 'template_not_found') {
          setTemplate(null);
          setVersions([]);
        } else fail(e);
      },
    );
  }, [name, fail]);
  const [builds, loadBuilds] = useBuilds(name, fail);
  const reload = useCallback(() => {
    load();
    loadBuilds();
  }, [load, loadBuilds]);
  useEffect(load, [load]);
  useTemplateEvents(reload);
  const remove = async (version?: number) => {
    setConfirm(undefined);
    setBusy('Deleting…');
    try {
      await call('DELETE', `/v1/templates/${encodeURIComponent(name)}${version === undefined ? '' : `?version=${version}`}`);
      if (version === undefined || versions.length === 1) location.hash = '#/templates';
    } catch (e) {
      fail(e as Error);
    } finally {
      setBusy('');
      load();
    }
  };
  return (
    <section aria-label={`Template ${name}`}>
      <h1>
        Template <code>{name}</code> <small>{template === null ? 'no published version' : template ? kindOf(template) : ''}</small>
      </h1>
      <p>
        <a href="#/templates">All templates</a>
      </p>
      {error && <p role="alert">{error}</p>}
      {template?.custom && !template.readOnly && (
        <div className="toolbar">
          {confirm === 'all' ? (
            <>
              <button type="button" onClick={() => remove()}>
                Confirm delete template {name}
              </button>
              <button type="button" onClick={() => setConfirm(undefined)}>
                Keep it
              </button>
            </>
          ) : (
            <button type="button" onClick={() => setConfirm('all')} disabled={busy !== ''}>
              Delete template
            </button>
          )}
          <span aria-live="polite">{busy}</span>
        </div>
      )}
      {versions.length > 0 && (
        <>
          <h2>Versions</h2>
          <table>
            <thead>
              <tr>
                <th>Version</th>
                <th>Id</th>
                <th>Created</th>
                <th>Size</th>
                <th>Snapshot</th>
                <th>Build</th>
                <th>Actions</th>
              </tr>
            </thead>
            <tbody>
              {versions.map((v) => (
                <tr key={v.id} data-testid="version-row">
                  <td>v{v.version}</td>
                  <td>
                    <code>{v.id}</code>
                  </td>
                  <td>{v.createdAt}</td>
                  <td>{sizeOf(v)}</td>
                  <td>{template?.readOnly ? '' : <code>{v.snapshotId}</code>}</td>
                  <td>{v.buildId && !template?.readOnly ? <a href={`#/templates/${name}/builds/${v.buildId}`}>{v.buildId}</a> : ''}</td>
                  <td>
                    {template?.readOnly ? (
                      ''
                    ) : confirm === v.version ? (
                      <>
                        <button type="button" onClick={() => remove(v.version)}>
                          Confirm delete version {v.version}
                        </button>
                        <button type="button" onClick={() => setConfirm(undefined)}>
                          Keep it
                        </button>
                      </>
                    ) : (
                      <button type="button" onClick={() => setConfirm(v.version)} disabled={busy !== ''}>
                        Delete version {v.version}
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <h2>Builds</h2>
      {builds.length === 0 ? <p>No builds of this template.</p> : <BuildTable builds={builds} linkTo={(b) => `#/templates/${name}/builds/${b.id}`} />}
      {buildId && <BuildLog key={buildId} buildId={buildId} onEnded={reload} />}
    </section>
  );
}
