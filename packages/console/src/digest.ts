// What a stretch of a sandbox's event log did, as the timeline and the network page show it: files changed, commands
// run, egress decided. Event data is read field by field, each checked for its type, never copied whole: secrets appear
// by name only, so a value some gateway put under another field cannot reach the page's text.
import type { LogEvent } from './api.js';

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

export interface FileChange {
  seq: number;
  at: string;
  what: 'written' | 'removed' | 'renamed' | 'directory created';
  path: string;
}

export interface CommandRun {
  seq: number;
  at: string;
  commandId: string;
  argv: string[];
}

export interface EgressDecision {
  seq: number;
  at: string;
  method: string;
  host: string;
  port: number | undefined;
  path: string;
  allowed: boolean;
  reason: string;
  secrets: string[];
  status: number | undefined;
}

export interface Digest {
  files: FileChange[];
  commands: CommandRun[];
  egress: EgressDecision[];
}

export function fileChange(e: LogEvent): FileChange | undefined {
  const d = e.data;
  switch (e.type) {
    case 'file.written':
      return { seq: e.seq, at: e.at, what: 'written', path: str(d.path) ?? '?' };
    case 'file.removed':
      return { seq: e.seq, at: e.at, what: 'removed', path: str(d.path) ?? '?' };
    case 'file.renamed':
      return { seq: e.seq, at: e.at, what: 'renamed', path: `${str(d.from) ?? '?'} → ${str(d.to) ?? '?'}` };
    case 'file.dir_created':
      return { seq: e.seq, at: e.at, what: 'directory created', path: str(d.path) ?? '?' };
    default:
      return undefined;
  }
}

/** An egress decision: a request the proxy saw (allowed or refused), or a connection it refused before any request. */
export function egressDecision(e: LogEvent): EgressDecision | undefined {
  const d = e.data;
  if (e.type === 'egress.request') {
    return {
      seq: e.seq,
      at: e.at,
      method: str(d.method) ?? '?',
      host: str(d.host) ?? '?',
      port: num(d.port),
      path: str(d.path) ?? '',
      allowed: d.allowed === true,
      reason: str(d.reason) ?? '',
      secrets: strings(d.secrets),
      status: num(d.status),
    };
  }
  if (e.type === 'egress.rejected') {
    return {
      seq: e.seq,
      at: e.at,
      method: 'CONNECT',
      host: str(d.host) ?? '?',
      port: num(d.port),
      path: '',
      allowed: false,
      reason: str(d.reason) ?? '',
      secrets: [],
      status: num(d.status),
    };
  }
  return undefined;
}

/** What the events with `fromMs <= at < toMs` did. */
export function digest(events: readonly LogEvent[], fromMs: number, toMs: number): Digest {
  const out: Digest = { files: [], commands: [], egress: [] };
  for (const e of events) {
    const atMs = Date.parse(e.at);
    if (!(atMs >= fromMs && atMs < toMs)) continue;
    const f = fileChange(e);
    if (f) out.files.push(f);
    const g = egressDecision(e);
    if (g) out.egress.push(g);
    if (e.type === 'command.started') out.commands.push({ seq: e.seq, at: e.at, commandId: str(e.data.commandId) ?? '?', argv: strings(e.data.argv) });
  }
  return out;
}
