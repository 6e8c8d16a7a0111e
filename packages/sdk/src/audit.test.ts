// The audit timeline over a realistic session: every kind, command pairing, order, unknown types, and no secret value out.
import { describe, expect, it } from 'vitest';
import { type AuditEntry, auditTimeline, filterAudit } from './audit.js';
import type { SandboxEvent } from './types.js';

const SBX = 'sbx_auditauditauditaudi';
let seq = 0;
const ev = (type: string, at: string, data: Record<string, unknown>): SandboxEvent => {
  seq += 3;
  return { seq, id: `evt_${seq}`, type, tenantId: 't', sandboxId: SBX, at: `2025-06-01T12:${at}Z`, data, hash: 'h', prevHash: 'p' };
};

// A session in log order, shaped as the control plane, gateway and egress proxy append it.
const session: SandboxEvent[] = [
  ev('sandbox.created', '00:00.000', {
    template: 'base',
    memoryMib: 256,
    vcpus: 1,
    diskMib: 4096,
    timeoutS: 300,
    snapshotIntervalS: 60,
    metadata: {},
    gatewayId: 'gw_a',
    gatewayUrl: 'http://127.0.0.1:1',
    network: { allow: ['api.github.com'], deny: [] },
    secrets: ['GITHUB_TOKEN'],
    envNames: ['MODE'],
  }),
  ev('sandbox.started', '00:00.100', { pid: 42, vmId: 'pool_1', restoreMs: 31.4, pooled: true, template: 'k1', accel: 'tcg' }),
  ev('command.started', '00:01.000', { commandId: 'cmd_a', argv: ['python3', '-c', "print('hi')"], cwd: '/work', pty: false, user: 'user' }),
  ev('command.started', '00:01.500', { commandId: 'cmd_b', argv: ['sleep', '100'], cwd: null, pty: false, user: 'root' }),
  ev('file.written', '00:02.000', { path: '/work/a.txt', sizeBytes: 2048 }),
  ev('command.exited', '00:03.250', { commandId: 'cmd_a', exitCode: 0, signal: null, timedOut: false, outputBytes: 3 }),
  ev('file.renamed', '00:04.000', { from: '/work/a.txt', to: '/work/b.txt' }),
  ev('file.dir_created', '00:04.100', { path: '/work/out' }),
  ev('file.removed', '00:04.200', { path: '/work/b.txt' }),
  ev('egress.request', '00:05.000', {
    host: 'api.github.com',
    port: 443,
    scheme: 'https',
    method: 'POST',
    path: '/repos/x/issues',
    allowed: true,
    reason: '',
    rule: 'api.github.com',
    secrets: ['GITHUB_TOKEN'],
    bytesUp: 10,
    bytesDown: 200,
    status: 201,
    durationMs: 40,
  }),
  ev('egress.exchange', '00:05.001', {
    scheme: 'https',
    host: 'api.github.com',
    port: 443,
    method: 'POST',
    url: 'https://api.github.com/repos/x/issues',
    requestHeaders: [['authorization', 'Bearer «redacted»']],
    requestBody: { encoding: 'utf8', data: '{}', sizeBytes: 2, truncated: false },
    status: 201,
    responseHeaders: [],
    responseBody: { encoding: 'utf8', data: 'ok', sizeBytes: 2, truncated: false },
    startedAtMs: 0,
    durationMs: 40,
  }),
  ev('egress.request', '00:06.000', {
    host: 'evil.example',
    port: 443,
    scheme: 'tunnel',
    method: 'CONNECT',
    path: '',
    allowed: false,
    reason: 'no rule allows evil.example',
    secrets: [],
    bytesUp: 0,
    bytesDown: 0,
    status: 403,
    code: 'egress_denied',
    durationMs: 1,
  }),
  ev('egress.secret_scope', '00:06.500', {
    secret: 'GITHUB_TOKEN',
    host: 'other.example',
    port: 443,
    method: 'GET',
    path: '/',
    where: 'header',
    reason: 'not a scoped host',
  }),
  ev('egress.rejected', '00:06.700', { reason: 'malformed request line', status: 400, code: 'invalid_argument' }),
  ev('secret.approval_requested', '00:07.000', {
    requestId: 'apr_1',
    secret: 'GITHUB_TOKEN',
    host: 'api.github.com',
    port: 443,
    method: 'DELETE',
    path: '/repos/x',
    expiresAtMs: 0,
  }),
  ev('secret.approval_decided', '00:08.000', { requestId: 'apr_1', secret: 'GITHUB_TOKEN', decision: 'approved' }),
  ev('secret.approval_decided', '00:08.100', { requestId: 'apr_2', secret: 'GITHUB_TOKEN', decision: 'denied' }),
  ev('secret.approval_decided', '00:08.200', { requestId: 'apr_3', secret: 'GITHUB_TOKEN', decision: 'timeout' }),
  ev('snapshot.taken', '00:09.000', {
    snapshotId: 'snap_1',
    takenAt: '2025-06-01T12:00:09Z',
    parentId: null,
    reason: 'manual',
    name: 'v1',
    pinned: true,
    sizeAddedBytes: 3 * 1024 * 1024,
    memoryMib: 256,
    vcpus: 1,
    template: 'k1',
    pausedMs: 12,
  }),
  ev('sandbox.network_changed', '00:09.500', { allow: ['pypi.org'], deny: ['evil.example'] }),
  ev('sandbox.paused', '00:10.000', { snapshotId: 'snap_2' }),
  ev('sandbox.moved', '00:11.000', { fromGatewayId: 'gw_a', gatewayId: 'gw_b', gatewayUrl: 'http://127.0.0.1:2', reason: 'node_dead', snapshotId: 'snap_2' }),
  ev('sandbox.resumed', '00:12.000', { snapshotId: 'snap_2', pid: 43, restoreMs: 50 }),
  ev('guest.something_new', '00:12.500', { anything: 1 }),
  ev('snapshot.deleted', '00:13.000', { snapshotId: 'snap_0', why: 'retention' }),
  ev('command.exited', '00:14.000', { commandId: 'cmd_b', exitCode: null, signal: 'SIGKILL', timedOut: true, outputBytes: 0 }),
  ev('sandbox.failed', '00:15.000', { reason: 'the VM exited (guest-reset)', consoleTail: 'Kernel panic' }),
  ev('sandbox.killed', '00:16.000', { reason: 'killed' }),
];

const lines = (entries: AuditEntry[]) => entries.map((x) => `${x.kind} ${x.summary}`);

describe('auditTimeline', () => {
  it('turns a session into one readable entry per action, in log order', () => {
    expect(lines(auditTimeline(session))).toEqual([
      'lifecycle created (base, 256 MiB, 1 vCPU, 4096 MiB disk)',
      'lifecycle started from the warm pool (restore 31 ms)',
      "command python3 -c 'print('\\''hi'\\'')' (as user in /work): exit 0 after 2.3 s",
      'command sleep 100 (as root): timed out, SIGKILL after 12.5 s',
      'file wrote /work/a.txt (2.0 KiB)',
      'file renamed /work/a.txt to /work/b.txt',
      'file created directory /work/out',
      'file removed /work/b.txt',
      'network allowed → 201 POST api.github.com:443/repos/x/issues',
      'secret GITHUB_TOKEN used in POST api.github.com:443/repos/x/issues (sent)',
      'network denied (egress_denied) CONNECT evil.example:443: no rule allows evil.example',
      'secret GITHUB_TOKEN refused in the header of GET other.example:443/: not a scoped host',
      'network rejected: malformed request line (invalid_argument)',
      'approval requested: GITHUB_TOKEN for DELETE api.github.com:443/repos/x (apr_1)',
      'approval approved: GITHUB_TOKEN (apr_1)',
      'approval denied: GITHUB_TOKEN (apr_2)',
      'approval timed out: GITHUB_TOKEN (apr_3)',
      'snapshot taken snap_1 (manual, named v1, pinned), +3.0 MiB',
      'network policy changed: allow pypi.org; deny evil.example',
      'lifecycle paused (snapshot snap_2)',
      'lifecycle moved from node gw_a to gw_b (node_dead), from snap_2',
      'lifecycle resumed from snap_2',
      'other guest.something_new',
      'snapshot deleted snap_0 (retention)',
      'lifecycle failed: the VM exited (guest-reset)',
      'lifecycle killed (killed)',
    ]);
  });

  it('tells a snapshot named, renamed and unnamed after it was taken', () => {
    const named = [
      ev('snapshot.named', '00:01.000', { snapshotId: 'snap_1', name: 'v1', previousName: null }),
      ev('snapshot.named', '00:02.000', { snapshotId: 'snap_1', name: 'v2', previousName: 'v1' }),
      ev('snapshot.named', '00:03.000', { snapshotId: 'snap_1', name: null, previousName: 'v2' }),
    ];
    expect(auditTimeline(named).map((x) => `${x.kind} ${x.summary}`)).toEqual([
      'snapshot snap_1 named v1, pinned',
      'snapshot snap_1 named v2 (was v1), pinned',
      'snapshot snap_1 unnamed (was v2, no longer pinned)',
    ]);
    expect(auditTimeline(named)[1]!.details).toEqual({ snapshotId: 'snap_1', name: 'v2', previousName: 'v1' });
  });

  it('tells when rolling snapshots fell behind the interval asked for, why, and when they caught up', () => {
    const cadence = [
      ev('snapshot.behind', '00:01.000', { intervalS: 5, achievedIntervalS: 11.5, windowS: 60, takenInWindow: 5, lateS: 3, why: 'slots_full' }),
      ev('snapshot.behind', '00:02.000', { intervalS: 5, achievedIntervalS: null, windowS: 60, takenInWindow: 0, lateS: 3, why: 'failing' }),
      ev('snapshot.caught_up', '00:03.000', { intervalS: 5, achievedIntervalS: 6, windowS: 60, takenInWindow: 10, behindForS: 42 }),
    ];
    expect(auditTimeline(cadence).map((x) => `${x.kind} ${x.summary}`)).toEqual([
      'snapshot behind (slots_full): asked every 5 s, one every 11.5 s over the last 60 s',
      'snapshot behind (failing): asked every 5 s, none taken over the last 60 s',
      'snapshot caught up after 42 s: asked every 5 s, one every 6 s over the last 60 s',
    ]);
    expect(auditTimeline(cadence)[0]!.details).toEqual({ intervalS: 5, achievedIntervalS: 11.5, windowS: 60, why: 'slots_full', lateS: 3 });
  });

  it("pairs a command's start and exit by command id, with argv, cwd, user, outcome and duration", () => {
    const [a, b] = auditTimeline(session).filter((x) => x.kind === 'command');
    expect(a).toEqual({
      at: '2025-06-01T12:00:01.000Z',
      kind: 'command',
      summary: expect.any(String),
      eventIds: [session[2]!.id, session[5]!.id],
      details: {
        commandId: 'cmd_a',
        argv: ['python3', '-c', "print('hi')"],
        cwd: '/work',
        user: 'user',
        pty: false,
        exitCode: 0,
        signal: null,
        timedOut: false,
        outputBytes: 3,
        durationMs: 2250,
      },
    });
    expect(b!.eventIds).toEqual([session[3]!.id, session.at(-3)!.id]);
    expect(b!.details).toMatchObject({ signal: 'SIGKILL', timedOut: true, exitCode: null, durationMs: 12_500 });
  });

  it('keeps an exit without its start and a start without its exit, saying which half is missing', () => {
    const entries = auditTimeline([
      ev('command.exited', '01:00.000', { commandId: 'cmd_z', exitCode: 1, signal: null, timedOut: false }),
      ev('command.started', '01:01.000', { commandId: 'cmd_y', argv: ['ls'], user: 'root' }),
      ev('command.exited', '01:02.000', { commandId: 'cmd_x', exitCode: null, signal: 'SIGTERM', timedOut: false }),
    ]);
    expect(lines(entries)).toEqual([
      'command cmd_z (its start is not in the log): exit 1',
      'command ls (as root): no exit recorded',
      'command cmd_x (its start is not in the log): killed by SIGTERM',
    ]);
  });

  it('reads events in log order whatever order they come in', () => {
    const shuffled = [...session].reverse();
    expect(auditTimeline(shuffled)).toEqual(auditTimeline(session));
  });

  it('folds an egress.exchange into the request it recorded, and shows one without its request', () => {
    const entries = auditTimeline(session);
    const request = entries.find((x) => x.kind === 'network' && x.summary.startsWith('allowed'))!;
    expect(request.eventIds).toEqual([session[9]!.id, session[10]!.id]);
    expect(request.details).toMatchObject({
      recorded: true,
      host: 'api.github.com',
      port: 443,
      method: 'POST',
      path: '/repos/x/issues',
      status: 201,
      secrets: ['GITHUB_TOKEN'],
    });
    expect(entries.filter((x) => x.eventIds.includes(session[10]!.id))).toHaveLength(1);
    const lone = auditTimeline([session[10]!]);
    expect(lines(lone)).toEqual(['network recorded POST api.github.com:443 → 201']);
  });

  it('shows every event: unknown types as kind other with the type as summary', () => {
    const entries = auditTimeline(session);
    const covered = new Set(entries.flatMap((x) => x.eventIds));
    expect(session.filter((e) => !covered.has(e.id))).toEqual([]);
    expect(entries.find((x) => x.kind === 'other')).toEqual({
      at: '2025-06-01T12:00:12.500Z',
      kind: 'other',
      summary: 'guest.something_new',
      eventIds: [session[23]!.id],
      details: { type: 'guest.something_new' },
    });
  });

  it('never lets a secret value out, wherever an event carries one: summaries and details take only whitelisted fields', () => {
    const VALUE = 'ghp_S3CR3T-VALUE-never-shown';
    // The value placed in every event's data under fields the timeline does not name, and in the exchange's headers
    // and bodies, where a gateway that forgot to redact would put it.
    const leaky = session.map((e) => ({
      ...e,
      data: {
        ...e.data,
        value: VALUE,
        secretValue: VALUE,
        env: { GITHUB_TOKEN: VALUE },
        headers: [['authorization', VALUE]],
        consoleTail: VALUE,
        ...(e.type === 'egress.exchange'
          ? {
              requestHeaders: [['authorization', `Bearer ${VALUE}`]],
              requestBody: { encoding: 'utf8', data: VALUE, sizeBytes: 1, truncated: false },
              url: `https://x/?t=${VALUE}`,
            }
          : {}),
      },
    }));
    const out = JSON.stringify(auditTimeline(leaky));
    expect(out).not.toContain(VALUE);
    // ...while secrets still show by name.
    expect(out).toContain('GITHUB_TOKEN');
  });

  it('escapes control characters of guest-chosen text, so a summary cannot drive a terminal', () => {
    const [entry] = auditTimeline([ev('file.written', '02:00.000', { path: '/tmp/\u001b[2Jx\n', sizeBytes: 1 })]);
    expect(entry!.summary).toBe('wrote /tmp/\\x1b[2Jx\\x0a (1 B)');
  });

  it('tolerates fields of the wrong type or missing data without throwing', () => {
    const entries = auditTimeline([
      ev('command.started', '03:00.000', { commandId: 7, argv: 'rm -rf /', user: 3 }),
      ev('snapshot.taken', '03:01.000', {}),
      { ...ev('file.written', '03:02.000', {}), data: null as unknown as Record<string, unknown> },
    ]);
    expect(lines(entries)).toEqual(['command  (as root): no exit recorded', 'snapshot taken ? (?)', 'file wrote ?']);
  });
});

describe('filterAudit', () => {
  const entries = auditTimeline(session);

  it('keeps the kinds asked for, in order', () => {
    expect(filterAudit(entries, { kinds: ['snapshot', 'approval'] }).map((x) => x.kind)).toEqual([
      'approval',
      'approval',
      'approval',
      'approval',
      'snapshot',
      'snapshot',
    ]);
  });

  it('keeps entries between since and until, both inclusive, comparing instants across zones', () => {
    const kept = filterAudit(entries, { since: '2025-06-01T14:00:04+02:00', until: '2025-06-01T12:00:04.200Z' });
    expect(lines(kept)).toEqual(['file renamed /work/a.txt to /work/b.txt', 'file created directory /work/out', 'file removed /work/b.txt']);
    // A command that started before `since` keeps its start time, so it is left out with its start.
    expect(filterAudit(entries, { since: '2025-06-01T12:00:02Z', kinds: ['command'] })).toEqual([]);
  });
});
