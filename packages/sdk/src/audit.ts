// A sandbox's event log as a readable timeline: what ran, what changed, what went out, which secrets were used.
import type { SandboxEvent } from './types.js';

export const AUDIT_KINDS = ['lifecycle', 'command', 'file', 'network', 'secret', 'approval', 'snapshot', 'other'] as const;
export type AuditKind = (typeof AUDIT_KINDS)[number];

/** One line of the timeline: one event, or a few that belong together (a command's start and exit). */
export interface AuditEntry {
  /** When it began: the time of its first event. */
  at: string;
  kind: AuditKind;
  summary: string;
  /** The events it was made from, in log order. */
  eventIds: string[];
  /** The fields the summary was made from, for tools: never a whole event's data. */
  details: Record<string, unknown>;
}

export interface AuditFilter {
  /** Only entries of these kinds. */
  kinds?: AuditKind[];
  /** Only entries at or after this time (ISO 8601). */
  since?: string;
  /** Only entries at or before this time (ISO 8601). */
  until?: string;
}

/*
 * Secret values never reach an entry. Event data is read field by field: every summary and every `details` is built
 * only from the fields named below, each checked for its type, and never from a whole `data` object, a header list or a
 * body (egress.exchange records them, redacted, but a timeline has no need for them). Secrets appear by NAME only: the
 * `secrets` name lists of egress.request and sandbox.created/forked, `secret` of the scope and approval events. So a
 * value that some gateway put into an event's data under any other field cannot come out through the timeline.
 */

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const bool = (v: unknown): boolean | undefined => (typeof v === 'boolean' ? v : undefined);
const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
/** The fields that are set, so details carry no `undefined`s. */
const defined = (o: Record<string, unknown>): Record<string, unknown> => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

// Guest-chosen text (argv, paths) lands in a terminal: control characters are shown escaped, never interpreted.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;
const printable = (s: string): string => s.replace(CONTROL, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

/** An argv as a shell would read it back: plain words bare, anything else single-quoted. */
function shellWords(argv: string[]): string {
  return argv.map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`)).join(' ');
}

/** Bytes in binary units, one decimal: 4096 → "4.0 KiB" (the CLI prints sizes with it too). */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

const duration = (ms: number): string => (ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);

/** host:port and the path where the proxy recorded one (CONNECT has none). */
const destination = (d: Record<string, unknown>): string => `${str(d.host) ?? '?'}:${num(d.port) ?? '?'}${str(d.path) ?? ''}`;

/**
 * The sandbox's timeline from its events (any order; read in log order). Pure: the same events give the same entries.
 * A command's start and exit become one entry (paired by command id), at its start; an egress.exchange joins the
 * request it recorded. Event types it does not know still appear, as kind `other` with the type as summary.
 */
export function auditTimeline(events: readonly SandboxEvent[]): AuditEntry[] {
  const entries: AuditEntry[] = [];
  // Commands started and not yet exited, by id: the entry and its summary up to the outcome.
  const commands = new Map<string, { entry: AuditEntry; head: string }>();
  // Requests an exchange may still join: the proxy emits egress.request and then, for the same exchange, egress.exchange.
  const openRequests: { entry: AuditEntry; key: string }[] = [];
  const add = (e: SandboxEvent, kind: AuditKind, summary: string, details: Record<string, unknown>): AuditEntry => {
    const entry: AuditEntry = { at: e.at, kind, summary, eventIds: [e.id], details: defined(details) };
    entries.push(entry);
    return entry;
  };

  for (const e of [...events].sort((a, b) => a.seq - b.seq)) {
    const d = (e.data ?? {}) as Record<string, unknown>;
    switch (e.type) {
      case 'sandbox.created': {
        const from = str(d.sourceSnapshotId);
        const disk = num(d.diskMib);
        const shape = `${str(d.template) ?? '?'}, ${num(d.memoryMib) ?? '?'} MiB, ${num(d.vcpus) ?? '?'} vCPU${disk ? `, ${disk} MiB disk` : ''}`;
        add(e, 'lifecycle', `created (${shape})${from ? ` from ${from}` : ''}`, {
          template: str(d.template),
          memoryMib: num(d.memoryMib),
          diskMib: disk,
          vcpus: num(d.vcpus),
          timeoutS: num(d.timeoutS),
          sourceSnapshotId: from,
          gatewayId: str(d.gatewayId),
          secrets: strings(d.secrets),
          envNames: strings(d.envNames),
        });
        break;
      }
      case 'sandbox.started': {
        const restoreMs = num(d.restoreMs);
        add(e, 'lifecycle', `started${bool(d.pooled) ? ' from the warm pool' : ''}${restoreMs === undefined ? '' : ` (restore ${duration(restoreMs)})`}`, {
          pooled: bool(d.pooled),
          restoreMs,
          template: str(d.template),
        });
        break;
      }
      case 'sandbox.paused':
        add(e, 'lifecycle', `paused (snapshot ${str(d.snapshotId) ?? '?'})`, { snapshotId: str(d.snapshotId) });
        break;
      case 'sandbox.resumed':
        add(e, 'lifecycle', `resumed from ${str(d.snapshotId) ?? '?'}`, { snapshotId: str(d.snapshotId), restoreMs: num(d.restoreMs) });
        break;
      case 'sandbox.moved':
        add(
          e,
          'lifecycle',
          `moved from node ${str(d.fromGatewayId) ?? '?'} to ${str(d.gatewayId) ?? '?'} (${str(d.reason) ?? '?'}), from ${str(d.snapshotId) ?? '?'}`,
          {
            fromGatewayId: str(d.fromGatewayId),
            gatewayId: str(d.gatewayId),
            reason: str(d.reason),
            snapshotId: str(d.snapshotId),
          },
        );
        break;
      case 'sandbox.forked':
        add(e, 'lifecycle', `forked from ${str(d.sourceSandboxId) ?? '?'} at ${str(d.snapshotId) ?? '?'}`, {
          sourceSandboxId: str(d.sourceSandboxId),
          snapshotId: str(d.snapshotId),
          secrets: strings(d.secrets),
        });
        break;
      case 'sandbox.killed':
        add(e, 'lifecycle', `killed (${str(d.reason) ?? 'no reason recorded'})`, { reason: str(d.reason) });
        break;
      case 'sandbox.ended':
        add(e, 'lifecycle', `ended${str(d.reason) ? ` (${str(d.reason)})` : ''}`, { reason: str(d.reason) });
        break;
      case 'sandbox.failed':
        // consoleTail stays out: the guest's console is the guest's words, and the reason says what happened.
        add(e, 'lifecycle', `failed: ${str(d.reason) ?? 'no reason recorded'}${str(d.code) ? ` (${str(d.code)})` : ''}`, {
          reason: str(d.reason),
          code: str(d.code),
        });
        break;
      case 'sandbox.extended':
        add(e, 'lifecycle', `timeout extended to ${num(d.timeoutS) ?? '?'} s`, { timeoutS: num(d.timeoutS), expiresAt: str(d.expiresAt) });
        break;
      case 'sandbox.configured':
        add(e, 'lifecycle', `snapshot interval set to ${num(d.snapshotIntervalS) ?? '?'} s`, { snapshotIntervalS: num(d.snapshotIntervalS) });
        break;
      case 'sandbox.network_changed': {
        const allow = strings(d.allow);
        const deny = strings(d.deny);
        add(e, 'network', `policy changed: allow ${allow.join(', ') || 'nothing'}; deny ${deny.join(', ') || 'nothing'}`, { allow, deny });
        break;
      }
      case 'command.started': {
        const argv = strings(d.argv);
        const user = str(d.user) ?? 'root';
        const cwd = str(d.cwd);
        const head = `${shellWords(argv)} (as ${user}${cwd ? ` in ${cwd}` : ''})`;
        const entry = add(e, 'command', `${head}: no exit recorded`, {
          commandId: str(d.commandId),
          argv,
          cwd,
          user,
          pty: bool(d.pty),
        });
        const id = str(d.commandId);
        if (id !== undefined) commands.set(id, { entry, head });
        break;
      }
      case 'command.exited': {
        const id = str(d.commandId);
        const open = id === undefined ? undefined : commands.get(id);
        const exitCode = num(d.exitCode);
        const signal = str(d.signal);
        const timedOut = bool(d.timedOut) === true;
        const end = timedOut ? `timed out, ${signal ?? 'killed'}` : signal ? `killed by ${signal}` : `exit ${exitCode ?? '?'}`;
        const outcome = { exitCode: exitCode ?? null, signal: signal ?? null, timedOut, outputBytes: num(d.outputBytes) };
        if (!open) {
          add(e, 'command', `${id ?? 'a command'} (its start is not in the log): ${end}`, { commandId: id, ...outcome });
          break;
        }
        commands.delete(id!);
        const { entry, head } = open;
        const durationMs = Date.parse(e.at) - Date.parse(entry.at);
        entry.eventIds.push(e.id);
        entry.details = defined({ ...entry.details, ...outcome, durationMs: Number.isFinite(durationMs) ? durationMs : undefined });
        entry.summary = `${head}: ${end}${Number.isFinite(durationMs) ? ` after ${duration(durationMs)}` : ''}`;
        break;
      }
      case 'file.written': {
        const size = num(d.sizeBytes);
        add(e, 'file', `wrote ${str(d.path) ?? '?'}${size === undefined ? '' : ` (${formatBytes(size)})`}`, { path: str(d.path), sizeBytes: size });
        break;
      }
      case 'file.tar_written': {
        const size = num(d.sizeBytes);
        add(e, 'file', `extracted ${num(d.entries) ?? '?'} entries into ${str(d.path) ?? '?'}${size === undefined ? '' : ` (${formatBytes(size)})`}`, {
          path: str(d.path),
          sizeBytes: size,
        });
        break;
      }
      case 'file.removed':
        add(e, 'file', `removed ${str(d.path) ?? '?'}`, { path: str(d.path) });
        break;
      case 'file.renamed':
        add(e, 'file', `renamed ${str(d.from) ?? '?'} to ${str(d.to) ?? '?'}`, { from: str(d.from), to: str(d.to) });
        break;
      case 'file.dir_created':
        add(e, 'file', `created directory ${str(d.path) ?? '?'}`, { path: str(d.path) });
        break;
      case 'egress.request': {
        const allowed = bool(d.allowed) === true;
        const method = str(d.method) ?? '?';
        const status = num(d.status);
        const reason = str(d.reason);
        const secrets = strings(d.secrets);
        const where = `${method} ${destination(d)}`;
        const outcome = allowed ? `allowed${status === undefined ? '' : ` → ${status}`}` : `denied${str(d.code) ? ` (${str(d.code)})` : ''}`;
        const details = {
          allowed,
          host: str(d.host),
          port: num(d.port),
          scheme: str(d.scheme),
          method,
          path: str(d.path),
          status,
          code: str(d.code),
          reason,
          rule: str(d.rule),
          error: str(d.error),
          secrets,
          bytesUp: num(d.bytesUp),
          bytesDown: num(d.bytesDown),
          durationMs: num(d.durationMs),
        };
        const entry = add(e, 'network', `${outcome} ${where}${reason ? `: ${reason}` : ''}${str(d.error) ? ` (${str(d.error)})` : ''}`, details);
        if (allowed) openRequests.push({ entry, key: `${method} ${str(d.host)}:${num(d.port)}` });
        for (const name of secrets)
          add(e, 'secret', `${name} used in ${where} (${allowed ? 'sent' : 'refused'})`, {
            secret: name,
            allowed,
            host: str(d.host),
            port: num(d.port),
            method,
            path: str(d.path),
          });
        break;
      }
      case 'egress.exchange': {
        // Headers and bodies are left out (see above): the entry only notes that the exchange was recorded.
        const key = `${str(d.method) ?? '?'} ${str(d.host)}:${num(d.port)}`;
        const at = openRequests.findIndex((r) => r.key === key);
        if (at >= 0) {
          const { entry } = openRequests.splice(at, 1)[0]!;
          entry.eventIds.push(e.id);
          entry.details = { ...entry.details, recorded: true };
          break;
        }
        add(e, 'network', `recorded ${key} → ${num(d.status) ?? '?'}`, { host: str(d.host), port: num(d.port), method: str(d.method), status: num(d.status) });
        break;
      }
      case 'egress.rejected': {
        const where = str(d.host) ? ` ${str(d.host)}:${num(d.port) ?? '?'}` : '';
        add(e, 'network', `rejected${where}: ${str(d.reason) ?? '?'}${str(d.code) ? ` (${str(d.code)})` : ''}`, {
          host: str(d.host),
          port: num(d.port),
          reason: str(d.reason),
          code: str(d.code),
          status: num(d.status),
        });
        break;
      }
      case 'egress.secret_scope':
        add(
          e,
          'secret',
          `${str(d.secret) ?? '?'} refused in the ${str(d.where) ?? '?'} of ${str(d.method) ?? '?'} ${destination(d)}: ${str(d.reason) ?? '?'}`,
          {
            secret: str(d.secret),
            where: str(d.where),
            host: str(d.host),
            port: num(d.port),
            method: str(d.method),
            path: str(d.path),
            reason: str(d.reason),
          },
        );
        break;
      case 'secret.approval_requested':
        add(e, 'approval', `requested: ${str(d.secret) ?? '?'} for ${str(d.method) ?? '?'} ${destination(d)} (${str(d.requestId) ?? '?'})`, {
          requestId: str(d.requestId),
          secret: str(d.secret),
          host: str(d.host),
          port: num(d.port),
          method: str(d.method),
          path: str(d.path),
          expiresAtMs: num(d.expiresAtMs),
        });
        break;
      case 'secret.approval_decided': {
        const decision = str(d.decision);
        const word = decision === 'timeout' ? 'timed out' : (decision ?? '?');
        const until = num(d.grantUntilMs);
        const request = str(d.requestId) ? ` (${str(d.requestId)})` : ' (by a running grant)';
        add(e, 'approval', `${word}: ${str(d.secret) ?? '?'}${request}${until === undefined ? '' : `, granted until ${new Date(until).toISOString()}`}`, {
          requestId: str(d.requestId),
          secret: str(d.secret),
          decision,
          grantUntilMs: until,
        });
        break;
      }
      case 'snapshot.taken': {
        const name = str(d.name);
        const size = num(d.sizeAddedBytes);
        const notes = [str(d.reason) ?? '?', name === undefined ? undefined : `named ${name}`, bool(d.pinned) ? 'pinned' : undefined].filter(
          (x) => x !== undefined,
        );
        add(e, 'snapshot', `taken ${str(d.snapshotId) ?? '?'} (${notes.join(', ')})${size === undefined ? '' : `, +${formatBytes(size)}`}`, {
          snapshotId: str(d.snapshotId),
          parentId: str(d.parentId),
          reason: str(d.reason),
          name,
          pinned: bool(d.pinned),
          sizeAddedBytes: size,
          pausedMs: num(d.pausedMs),
        });
        break;
      }
      case 'snapshot.failed':
        add(e, 'snapshot', `failed${str(d.snapshotId) ? ` ${str(d.snapshotId)}` : ''}: ${str(d.reason) ?? '?'}`, {
          snapshotId: str(d.snapshotId),
          reason: str(d.reason),
          code: str(d.code),
        });
        break;
      case 'snapshot.named': {
        const name = str(d.name);
        const previous = str(d.previousName);
        const change =
          name === undefined
            ? `unnamed (was ${previous ?? '?'}, no longer pinned)`
            : `named ${name}${previous === undefined ? '' : ` (was ${previous})`}, pinned`;
        add(e, 'snapshot', `${str(d.snapshotId) ?? '?'} ${change}`, { snapshotId: str(d.snapshotId), name, previousName: previous });
        break;
      }
      case 'snapshot.behind':
      case 'snapshot.caught_up': {
        const achieved = num(d.achievedIntervalS);
        const cadence = `asked every ${num(d.intervalS) ?? '?'} s, ${achieved === undefined ? 'none taken' : `one every ${achieved} s`} over the last ${num(d.windowS) ?? '?'} s`;
        const behind = e.type === 'snapshot.behind';
        add(e, 'snapshot', behind ? `behind (${str(d.why) ?? '?'}): ${cadence}` : `caught up after ${num(d.behindForS) ?? '?'} s: ${cadence}`, {
          intervalS: num(d.intervalS),
          achievedIntervalS: achieved,
          windowS: num(d.windowS),
          ...(behind ? { why: str(d.why), lateS: num(d.lateS) } : { behindForS: num(d.behindForS) }),
        });
        break;
      }
      case 'snapshot.deleted':
        add(e, 'snapshot', `deleted ${str(d.snapshotId) ?? '?'}${str(d.why) ? ` (${str(d.why)})` : ''}`, { snapshotId: str(d.snapshotId), why: str(d.why) });
        break;
      case 'quota.events_dropped':
        add(e, 'other', `events dropped: more than ${num(d.maxPerWindow) ?? '?'} in ${num(d.windowS) ?? '?'} s, from ${str(d.firstDroppedType) ?? '?'} on`, {
          maxPerWindow: num(d.maxPerWindow),
          windowS: num(d.windowS),
          firstDroppedType: str(d.firstDroppedType),
        });
        break;
      default:
        add(e, 'other', e.type, { type: e.type });
    }
  }
  return entries.map((x) => ({ ...x, summary: printable(x.summary) }));
}

/** The entries a filter keeps, in their order. Times compare as instants, so any ISO 8601 zone works. */
export function filterAudit(entries: readonly AuditEntry[], filter: AuditFilter = {}): AuditEntry[] {
  const since = filter.since === undefined ? undefined : Date.parse(filter.since);
  const until = filter.until === undefined ? undefined : Date.parse(filter.until);
  return entries.filter((x) => {
    const at = Date.parse(x.at);
    if (filter.kinds && !filter.kinds.includes(x.kind)) return false;
    if (since !== undefined && !(at >= since)) return false;
    if (until !== undefined && !(at <= until)) return false;
    return true;
  });
}
