// How the page talks to the control plane: same-origin calls carrying the session cookie and the CSRF header, and one
// server-sent events stream. The API key is only ever in the sign-in request's body, never kept by the page.

const CSRF_HEADER = 'x-sandglass-console';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { [CSRF_HEADER]: '1' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, credentials: 'same-origin', headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 204) return undefined as T;
  const json = (await res.json().catch(() => ({}))) as { error?: { code?: string; message?: string } };
  if (!res.ok) throw new ApiError(res.status, json.error?.code ?? 'error', json.error?.message ?? res.statusText);
  return json as T;
}

export interface LogEvent {
  seq: number;
  type: string;
  sandboxId: string | null;
  at: string;
  data: Record<string, unknown>;
}

/**
 * Follows the tenant's event log (optionally one sandbox's) over one server-sent events stream, read with fetch so the
 * CSRF header goes along. A dropped stream is reopened once, after a pause, from the last event seen. `onReady` is
 * called when the events already in the log have been delivered: those after it are live.
 */
export function followEvents(query: { sandboxId?: string; afterSeq?: number }, onEvent: (ev: LogEvent) => void, onReady?: () => void): () => void {
  const abort = new AbortController();
  let afterSeq = query.afterSeq ?? 0;
  const run = async (): Promise<void> => {
    const params = new URLSearchParams({ afterSeq: String(afterSeq), ...(query.sandboxId ? { sandboxId: query.sandboxId } : {}) });
    const res = await fetch(`/console/api/stream?${params}`, { headers: { [CSRF_HEADER]: '1' }, credentials: 'same-origin', signal: abort.signal });
    if (!res.ok || !res.body) throw new ApiError(res.status, 'stream', 'the event stream was refused');
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffered += value;
      let end = buffered.indexOf('\n\n');
      while (end >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const lines = block.split('\n');
        const data = lines
          .filter((l) => l.startsWith('data: '))
          .map((l) => l.slice(6))
          .join('\n');
        if (lines.includes('event: ready')) onReady?.();
        else if (data) {
          const ev = JSON.parse(data) as LogEvent;
          afterSeq = ev.seq;
          onEvent(ev);
        }
        end = buffered.indexOf('\n\n');
      }
    }
  };
  const loop = async () => {
    while (!abort.signal.aborted) {
      await run().catch(() => undefined);
      if (!abort.signal.aborted) await new Promise((r) => setTimeout(r, 2000));
    }
  };
  void loop();
  return () => abort.abort();
}

export interface Sandbox {
  id: string;
  template: string;
  state: string;
  memoryMib: number;
  vcpus: number;
  createdAt: string;
  gatewayId?: string | null;
  /** The egress policy in force; null when the sandbox has no network. */
  network?: { allow: string[]; deny: string[] } | null;
  secrets?: string[];
}

export interface Snapshot {
  id: string;
  takenAt: string;
  reason: string;
  name: string | null;
  sizeAddedBytes: number;
}

/** How often the sandbox's snapshots are taken: asked for, and achieved over the last window (spec SnapshotCadence). */
export interface SnapshotCadence {
  intervalS: number;
  achievedIntervalS: number | null;
  windowS: number;
  takenInWindow: number;
  behind: boolean;
}

export interface Access {
  gatewayUrl: string;
  token: string;
  expiresAt: string;
}

export interface Approval {
  requestId: string;
  sandboxId: string;
  secret: string;
  host: string;
  port: number;
  method: string;
  path: string;
  requestedAt: string;
  expiresAt: string;
}

export interface Template {
  id: string;
  name: string;
  status: string;
  memoryMib: number;
  createdAt: string;
  /** The tenant's own template: its size is the one it was built with, and it has versions. */
  custom?: boolean;
  vcpus?: number;
  diskMib?: number | null;
  version?: number;
  /** Published by the operator for every tenant. */
  public?: boolean;
  /** Another tenant's published template (the platform's): created from, never changed or deleted from here. */
  readOnly?: boolean;
}

export interface TemplateVersion {
  id: string;
  name: string;
  version: number;
  snapshotId: string;
  memoryMib: number;
  vcpus: number;
  diskMib: number | null;
  buildId: string | null;
  createdAt: string;
}

export interface TemplateBuild {
  id: string;
  name: string;
  status: 'running' | 'ready' | 'failed';
  startedAt: string;
  finishedAt: string | null;
  steps: Array<{ index: number; name: string; status: string; durationMs?: number }>;
  versionId: string | null;
  error: { message: string; step?: number } | null;
}

export interface TemplateBuildLine {
  n: number;
  at: string;
  stream: 'stdout' | 'stderr' | 'info';
  text: string;
}
