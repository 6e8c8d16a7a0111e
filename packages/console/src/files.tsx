// A sandbox's file browser: list a directory, move through it, download a file and upload into it, over the gateway's data plane.
import { useCallback, useEffect, useState } from 'react';
import { ApiError } from './api.js';
import { type FileInfo, gatewayFetch, gatewayJson } from './gateway.tsx';

const START_DIR = '/root';

/** A directory's parent; `/` is its own. */
export function parentOf(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const cut = trimmed.lastIndexOf('/');
  return cut <= 0 ? '/' : trimmed.slice(0, cut);
}

export function joinPath(dir: string, name: string): string {
  return `${dir.replace(/\/+$/, '')}/${name}`;
}

export function formatSize(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u]}`;
}

export function FileBrowser({ sandboxId }: { sandboxId: string }) {
  const [dir, setDir] = useState(START_DIR);
  const [typed, setTyped] = useState(START_DIR);
  const [entries, setEntries] = useState<FileInfo[]>([]);
  const [status, setStatus] = useState('');
  const [error, setError] = useState('');
  const fail = useCallback((e: Error) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : e.message), []);

  const load = useCallback(
    (path: string) => {
      setError('');
      gatewayJson<{ entries: FileInfo[] }>(sandboxId, `/files/list?${new URLSearchParams({ path, depth: '1' })}`).then((r) => {
        // Directories first, then by name, as `ls` users expect.
        const sorted = [...r.entries].sort((a, b) => Number(b.type === 'dir') - Number(a.type === 'dir') || a.name.localeCompare(b.name));
        setEntries(sorted);
        setDir(path);
        setTyped(path);
      }, fail);
    },
    [sandboxId, fail],
  );
  useEffect(() => load(START_DIR), [load]);

  const download = async (f: FileInfo) => {
    try {
      const res = await gatewayFetch(sandboxId, `/files?${new URLSearchParams({ path: f.path })}`);
      // Through a blob: the token stays in a header, never in a URL that history or a download list would keep.
      const url = URL.createObjectURL(await res.blob());
      const a = document.createElement('a');
      a.href = url;
      a.download = f.name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      setStatus(`Downloaded ${f.path}`);
    } catch (e) {
      fail(e as Error);
    }
  };

  const upload = async (e: React.ChangeEvent<HTMLInputElement>) => {
    const input = e.currentTarget;
    const files = [...(input.files ?? [])];
    try {
      for (const file of files) {
        const path = joinPath(dir, file.name);
        setStatus(`Uploading ${path}…`);
        await gatewayFetch(sandboxId, `/files?${new URLSearchParams({ path })}`, { method: 'PUT', body: file });
        setStatus(`Uploaded ${path}`);
      }
      load(dir);
    } catch (err) {
      fail(err as Error);
    } finally {
      input.value = '';
    }
  };

  return (
    <section aria-label="Files">
      <h2>Files</h2>
      <form
        className="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          load(typed || '/');
        }}
      >
        <button type="button" onClick={() => load(parentOf(dir))} disabled={dir === '/'}>
          Up
        </button>
        <label>
          Path <input value={typed} onChange={(e) => setTyped(e.target.value)} spellCheck={false} />
        </label>
        <button type="submit">Open</button>
        <button type="button" onClick={() => load(dir)}>
          Refresh
        </button>
        <label>
          Upload a file <input type="file" multiple onChange={upload} />
        </label>
      </form>
      {error && <p role="alert">{error}</p>}
      <p aria-live="polite" data-testid="files-status">
        {status}
      </p>
      <table data-testid="files">
        <caption>
          <code>{dir}</code>
        </caption>
        <thead>
          <tr>
            <th>Name</th>
            <th>Type</th>
            <th>Size</th>
            <th>Modified</th>
          </tr>
        </thead>
        <tbody>
          {entries.map((f) => (
            <tr key={f.path} data-testid="file-row">
              <td>
                {f.type === 'dir' ? (
                  <button type="button" className="link" onClick={() => load(f.path)} aria-label={`Open directory ${f.name}`}>
                    {f.name}/
                  </button>
                ) : f.type === 'file' ? (
                  <button type="button" className="link" onClick={() => download(f)} aria-label={`Download ${f.name}`}>
                    {f.name}
                  </button>
                ) : (
                  <span>
                    {f.name}
                    {f.symlinkTarget ? ` → ${f.symlinkTarget}` : ''}
                  </span>
                )}
              </td>
              <td>{f.type}</td>
              <td>{f.type === 'file' ? formatSize(f.sizeBytes) : ''}</td>
              <td>{f.mtime}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
