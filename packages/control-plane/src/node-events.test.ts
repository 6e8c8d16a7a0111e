// The allow-list of node events, before anything is looked up: which kinds a node may send at all.
import { describe, expect, it } from 'vitest';
import { cadenceRefusal, nodeEventKind } from './node-events.js';

const SBX = 'sbx_aaaaaaaaaaaaaaaaaaaa';

describe('nodeEventKind', () => {
  it('admits what gateways record about a sandbox they run', () => {
    for (const type of ['sandbox.started', 'sandbox.resumed', 'sandbox.forked', 'sandbox.paused', 'sandbox.synced', 'sandbox.killed', 'sandbox.failed']) {
      expect(nodeEventKind({ type, tenantId: 'ten_a', sandboxId: SBX })).toBe('sandbox');
    }
    for (const type of [
      'command.started',
      'file.written',
      'egress.replay_unrecorded',
      'port.request',
      'port.visibility',
      'secret.approval_requested',
      'recording.capped',
      'quota.events_dropped',
    ]) {
      expect(nodeEventKind({ type, tenantId: 'ten_a', sandboxId: SBX })).toBe('sandbox');
    }
    for (const type of ['snapshot.taken', 'snapshot.failed', 'snapshot.deleted'])
      expect(nodeEventKind({ type, tenantId: 'ten_a', sandboxId: SBX })).toBe('snapshot');
    for (const type of ['snapshot.behind', 'snapshot.caught_up']) expect(nodeEventKind({ type, tenantId: 'ten_a', sandboxId: SBX })).toBe('cadence');
    // About a sandbox only, and never of the template tenant.
    expect(nodeEventKind({ type: 'snapshot.behind', tenantId: 'ten_a' })).toBeUndefined();
    expect(nodeEventKind({ type: 'snapshot.behind', tenantId: 'system', sandboxId: SBX })).toBeUndefined();
  });

  it('admits cadence reports only in the shape the scheduler produces', () => {
    const cadence = { intervalS: 5, achievedIntervalS: 9.5, windowS: 60, takenInWindow: 6 };
    expect(cadenceRefusal({ type: 'snapshot.behind', data: { ...cadence, lateS: 2.5, why: 'slots_full' } })).toBeUndefined();
    expect(cadenceRefusal({ type: 'snapshot.behind', data: { ...cadence, achievedIntervalS: null, lateS: 2.5, why: 'failing' } })).toBeUndefined();
    expect(cadenceRefusal({ type: 'snapshot.caught_up', data: { ...cadence, behindForS: 40 } })).toBeUndefined();
    for (const data of [
      { ...cadence, lateS: 2.5, why: 'because I said so' },
      { ...cadence, lateS: -1, why: 'slots_full' },
      { ...cadence, intervalS: 0, lateS: 1, why: 'slots_full' },
      { ...cadence, achievedIntervalS: '9.5', lateS: 1, why: 'slots_full' },
      { ...cadence, takenInWindow: 1.5, lateS: 1, why: 'slots_full' },
      { ...cadence, windowS: Number.POSITIVE_INFINITY, lateS: 1, why: 'slots_full' },
      { lateS: 1, why: 'slots_full' },
    ]) {
      expect(cadenceRefusal({ type: 'snapshot.behind', data }), JSON.stringify(data)).toMatch(/snapshot.behind wants data/);
    }
    expect(cadenceRefusal({ type: 'snapshot.caught_up', data: { ...cadence } })).toMatch(/snapshot.caught_up wants data/);
  });

  it("refuses the control plane's own decisions and tenant-wide events, whoever they name", () => {
    for (const type of ['sandbox.created', 'sandbox.moved', 'sandbox.configured', 'sandbox.extended', 'sandbox.network_changed', 'sandbox.timeout']) {
      expect(nodeEventKind({ type, tenantId: 'ten_a', sandboxId: SBX })).toBeUndefined();
    }
    for (const type of ['snapshot.named', 'snapshot.restored', 'api_key.revoked', 'secret.set', 'tenant.created', 'secret.removed']) {
      expect(nodeEventKind({ type, tenantId: 'ten_a', sandboxId: SBX })).toBeUndefined();
    }
    // The template tenant runs no sandbox.
    expect(nodeEventKind({ type: 'command.started', tenantId: 'system', sandboxId: SBX })).toBeUndefined();
  });

  it('admits about no sandbox only a GC report of the system tenant and a wipe report of a tenant', () => {
    expect(nodeEventKind({ type: 'gc.completed', tenantId: 'system' })).toBe('system');
    expect(nodeEventKind({ type: 'tenant.plaintext_wiped', tenantId: 'ten_a' })).toBe('wipe');
    // The forged deletion of issue 23, and its relatives.
    expect(nodeEventKind({ type: 'snapshot.deleted', tenantId: 'system' })).toBeUndefined();
    expect(nodeEventKind({ type: 'snapshot.deleted', tenantId: 'ten_a' })).toBeUndefined();
    expect(nodeEventKind({ type: 'snapshot.named', tenantId: 'system' })).toBeUndefined();
    expect(nodeEventKind({ type: 'sandbox.killed', tenantId: 'system' })).toBeUndefined();
    expect(nodeEventKind({ type: 'gc.completed', tenantId: 'ten_a' })).toBeUndefined();
    expect(nodeEventKind({ type: 'tenant.plaintext_wiped', tenantId: 'system' })).toBeUndefined();
    expect(nodeEventKind({ type: 'template.published', tenantId: 'system' })).toBeUndefined();
  });
});
