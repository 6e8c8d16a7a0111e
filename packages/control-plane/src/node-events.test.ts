// The allow-list of node events, before anything is looked up: which kinds a node may send at all.
import { describe, expect, it } from 'vitest';
import { nodeEventKind } from './node-events.js';

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
