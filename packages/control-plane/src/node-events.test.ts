// The node-event check before anything is looked up: which types a node may send at all, about what, in which shape.
import { describe, expect, it } from 'vitest';
import { nodeEventShapeDrop } from './node-events.js';

const SBX = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const SNAP = 'snap_aaaaaaaaaaaaaaaaaaaa';
const CMD = 'cmd_aaaaaaaaaaaaaaaaaaaa';
const at = '2026-12-02T12:00:00.000Z';
const ev = (type: string, data: Record<string, unknown>, more: { tenantId?: string; sandboxId?: string | undefined } = {}) => ({
  id: 'evt_aaaaaaaaaaaaaaaaaaaa',
  type,
  tenantId: more.tenantId ?? 'ten_a',
  ...('sandboxId' in more ? (more.sandboxId === undefined ? {} : { sandboxId: more.sandboxId }) : { sandboxId: SBX }),
  at,
  data,
});
const digests = { sha256: 'a'.repeat(64), stdoutSha256: 'b'.repeat(64), stderrSha256: 'c'.repeat(64), stdoutBytes: 1, stderrBytes: 2 };
const cadence = { intervalS: 5, achievedIntervalS: 9.5, windowS: 60, takenInWindow: 6 };
const wipe = { trigger: 'api', stoppedSandboxes: [SBX], wipedFiles: 2 };
const gc = { thinned: 0, manifests: 1, liveChunks: 2, deletedChunks: 0, abandonedWrites: 0, freedBytes: 0, keptYoung: 0, undecidedTenants: [], durationMs: 5 };

describe('nodeEventShapeDrop', () => {
  it('admits what gateways record about a sandbox they run, in the shape they record it', () => {
    for (const e of [
      ev('sandbox.started', { pid: 1, vmId: SBX, restoreMs: 160.4, pooled: true, template: 'base', accel: 'tcg' }),
      ev('sandbox.resumed', { snapshotId: SNAP, pid: null, restoreMs: 1, prepareMs: 2 }),
      ev('sandbox.paused', { snapshotId: SNAP, reason: 'timeout' }),
      ev('sandbox.killed', { reason: 'shutdown' }),
      ev('sandbox.failed', { reason: 'gone', consoleTail: '' }),
      ev('snapshot.behind', { ...cadence, lateS: 2.5, why: 'slots_full' }),
      ev('snapshot.behind', { ...cadence, achievedIntervalS: null, lateS: 2.5, why: 'failing' }),
      ev('snapshot.caught_up', { ...cadence, behindForS: 40 }),
      ev('command.exited', { commandId: CMD, exitCode: 0, signal: null, timedOut: false, outputBytes: 3 }),
      ev('file.written', { path: '/root/a', sizeBytes: 1 }),
      ev('port.visibility', { port: 8080, public: true }),
      ev('gc.completed', gc, { tenantId: 'system', sandboxId: undefined }),
      ev('tenant.plaintext_wiped', wipe, { sandboxId: undefined }),
    ]) {
      expect(nodeEventShapeDrop(e), e.type).toBeUndefined();
    }
  });

  it('drops a type no spec lists as invalid, also inside a family nodes send', () => {
    for (const type of ['command.forged', 'file.anything', 'egress.whatever', 'port.x', 'snapshot.restored', 'guest.something_new']) {
      expect(nodeEventShapeDrop(ev(type, {}))).toMatchObject({ code: 'node_event_invalid', field: '/type' });
    }
  });

  it('drops data that does not fit the type, naming the field', () => {
    const cases: Array<[ReturnType<typeof ev>, string]> = [
      [ev('sandbox.paused', { snapshotId: 7 }), '/data/snapshotId'],
      [ev('sandbox.paused', { snapshotId: 'snap_../../other' }), '/data/snapshotId'],
      [ev('sandbox.paused', { snapshotId: SNAP, note: 'trust me' }), '/data/note'],
      [ev('sandbox.paused', {}), '/data/snapshotId'],
      [ev('snapshot.behind', { ...cadence, lateS: 2.5, why: '<script>' }), '/data/why'],
      [ev('snapshot.behind', { ...cadence, lateS: -1, why: 'slots_full' }), '/data/lateS'],
      [ev('snapshot.behind', { ...cadence, intervalS: 0, lateS: 1, why: 'slots_full' }), '/data/intervalS'],
      [ev('snapshot.behind', { ...cadence, achievedIntervalS: '9.5', lateS: 1, why: 'slots_full' }), '/data/achievedIntervalS'],
      [ev('snapshot.behind', { ...cadence, takenInWindow: 1.5, lateS: 1, why: 'slots_full' }), '/data/takenInWindow'],
      [ev('snapshot.caught_up', { ...cadence }), '/data/behindForS'],
      [
        ev('command.exited', { commandId: CMD, exitCode: 0, signal: null, timedOut: false, outputBytes: 3, output: { ...digests, sha256: 'x' } }),
        '/data/output/sha256',
      ],
      [ev('tenant.plaintext_wiped', { ...wipe, stoppedSandboxes: ['sbx_1'] }, { sandboxId: undefined }), '/data/stoppedSandboxes/0'],
      [ev('tenant.plaintext_wiped', { ...wipe, wipedFiles: -1 }, { sandboxId: undefined }), '/data/wipedFiles'],
    ];
    for (const [e, field] of cases) expect(nodeEventShapeDrop(e), JSON.stringify(e.data)).toMatchObject({ code: 'node_event_invalid', field });
  });

  it("refuses the control plane's own decisions and tenant-wide events, whoever they name", () => {
    for (const type of ['sandbox.created', 'sandbox.moved', 'sandbox.configured', 'sandbox.extended', 'sandbox.network_changed', 'sandbox.timeout']) {
      expect(nodeEventShapeDrop(ev(type, {}))).toMatchObject({ code: 'node_event_refused', field: '/type' });
    }
    for (const type of ['snapshot.named', 'api_key.revoked', 'secret.set', 'tenant.created', 'secret.removed', 'template.published']) {
      expect(nodeEventShapeDrop(ev(type, {}))).toMatchObject({ code: 'node_event_refused', field: '/type' });
    }
  });

  it('admits about no sandbox only a GC report of the system tenant and a wipe report of another tenant', () => {
    // The forged deletion of issue 23, and its relatives.
    expect(nodeEventShapeDrop(ev('snapshot.deleted', { snapshotId: SNAP, why: 'user' }, { tenantId: 'system', sandboxId: undefined }))).toMatchObject({
      code: 'node_event_invalid',
      field: '/sandboxId',
    });
    expect(nodeEventShapeDrop(ev('sandbox.killed', {}, { tenantId: 'system' }))).toMatchObject({ code: 'node_event_refused', field: '/tenantId' });
    expect(nodeEventShapeDrop(ev('gc.completed', gc, { sandboxId: undefined }))).toMatchObject({ code: 'node_event_refused', field: '/tenantId' });
    expect(nodeEventShapeDrop(ev('gc.completed', gc, { tenantId: 'system' }))).toMatchObject({ code: 'node_event_invalid', field: '/sandboxId' });
    expect(nodeEventShapeDrop(ev('tenant.plaintext_wiped', wipe, { tenantId: 'system', sandboxId: undefined }))).toMatchObject({
      code: 'node_event_refused',
      field: '/tenantId',
    });
    // The template tenant runs no sandbox.
    expect(nodeEventShapeDrop(ev('file.removed', { path: '/x' }, { tenantId: 'system' }))).toMatchObject({ code: 'node_event_refused', field: '/tenantId' });
  });
});
