// The page as a data-plane client: a short-lived token per sandbox from the control plane, then calls to its gateway.
import { type Access, ApiError, call } from './api.js';

/** A token is fetched again this long before it expires, so no call starts with one about to lapse. */
const REFRESH_BEFORE_MS = 60_000;
const tokens = new Map<string, Promise<Access>>();

/** This sandbox's data-plane address and token, from the control plane as the SDK gets them; one request per token. */
export async function access(sandboxId: string): Promise<Access> {
  const cached = tokens.get(sandboxId);
  if (cached) {
    const a = await cached.catch(() => undefined);
    if (a && Date.parse(a.expiresAt) - Date.now() > REFRESH_BEFORE_MS) return a;
  }
  const fresh = call<Access>('POST', `/v1/sandboxes/${encodeURIComponent(sandboxId)}/access`);
  tokens.set(sandboxId, fresh);
  fresh.catch(() => tokens.delete(sandboxId));
  return fresh;
}

/** Drops the sandbox's token: it moved to another gateway, or its VM was replaced. */
export function forgetAccess(sandboxId: string): void {
  tokens.delete(sandboxId);
}

/** The sandbox's data-plane base URL, e.g. http://127.0.0.1:7071/v1/sandboxes/sbx_… */
export function sandboxBase(a: Access, sandboxId: string): string {
  return `${a.gatewayUrl}/v1/sandboxes/${encodeURIComponent(sandboxId)}`;
}

/** A call to the sandbox's gateway with its bearer token; a refused one becomes an ApiError with the gateway's code. */
export async function gatewayFetch(sandboxId: string, path: string, init: { method?: string; body?: BodyInit; json?: unknown } = {}): Promise<Response> {
  const a = await access(sandboxId);
  const headers: Record<string, string> = { authorization: `Bearer ${a.token}` };
  let body = init.body;
  if (init.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(init.json);
  } else if (body !== undefined) headers['content-type'] = 'application/octet-stream';
  const res = await fetch(`${sandboxBase(a, sandboxId)}${path}`, { method: init.method ?? 'GET', headers, body });
  if (!res.ok) {
    const json = (await res.json().catch(() => ({}))) as { error?: { code?: string; message?: string } };
    throw new ApiError(res.status, json.error?.code ?? 'error', json.error?.message ?? res.statusText);
  }
  return res;
}

export async function gatewayJson<T>(sandboxId: string, path: string, init: { method?: string; json?: unknown } = {}): Promise<T> {
  const res = await gatewayFetch(sandboxId, path, init);
  return (res.status === 204 ? undefined : await res.json()) as T;
}

/** The WebSocket URL of a command's output stream from `fromOffset` on; the token rides in the query, as browsers send no headers there. */
export async function commandStreamUrl(sandboxId: string, commandId: string, fromOffset: number): Promise<string> {
  const a = await access(sandboxId);
  return `${sandboxBase(a, sandboxId).replace(/^http/, 'ws')}/commands/${encodeURIComponent(commandId)}/stream?fromOffset=${fromOffset}&access_token=${encodeURIComponent(a.token)}`;
}

export interface CommandInfo {
  id: string;
  pid: number;
  argv: string[];
  cwd?: string | null;
  pty: boolean;
  state: 'running' | 'exited';
  exitCode?: number | null;
  signal?: string | null;
  timedOut: boolean;
  outputBytes: number;
  startedAt: string;
  endedAt?: string | null;
}

export interface FileInfo {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  sizeBytes: number;
  mode: number;
  mtime: string;
  symlinkTarget?: string;
}
