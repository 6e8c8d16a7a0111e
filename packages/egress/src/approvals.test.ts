// The approval broker: one-shot and time-boxed approvals, denial, timeout, cancellation and unknown ids.
import { describe, expect, it } from 'vitest';
import { ManualClock, SandglassError } from '@sandglass/core';
import { ApprovalBroker, type ApprovalDecided, type ApprovalRequest } from './approvals.js';

const input = { sandboxId: 'sbx_a', secret: 'gh', host: 'api.github.com', port: 443, method: 'GET', path: '/user' };

function broker(timeoutMs = 60_000, clock = new ManualClock(1_000)) {
  const requested: ApprovalRequest[] = [];
  const decided: ApprovalDecided[] = [];
  const b = new ApprovalBroker({ clock, timeoutMs, onRequested: (r) => requested.push(r), onDecided: (d) => decided.push(d) });
  return { b, clock, requested, decided };
}

describe('ApprovalBroker', () => {
  it('holds a request until it is approved, once', async () => {
    const { b, requested, decided } = broker();
    const p = b.request(input);
    expect(requested).toHaveLength(1);
    expect(requested[0]!.requestId).toMatch(/^apr_[a-z2-7]{20}$/);
    expect(b.pending('sbx_a').map((r) => r.requestId)).toEqual([requested[0]!.requestId]);
    expect(b.pending('sbx_other')).toEqual([]);
    b.decide(requested[0]!.requestId, 'approve');
    await expect(p).resolves.toBe('approved');
    expect(decided[0]).toMatchObject({ decision: 'approved' });
    expect(decided[0]!.grantUntilMs).toBeUndefined();
    // One-shot: the next use asks again.
    const again = b.request(input);
    expect(requested).toHaveLength(2);
    b.decide(requested[1]!.requestId, 'deny');
    await expect(again).resolves.toBe('denied');
  });

  it('times out', async () => {
    const { b, decided } = broker(30);
    await expect(b.request(input)).resolves.toBe('timeout');
    expect(decided[0]!.decision).toBe('timeout');
    expect(b.pending()).toEqual([]);
  });

  it('grants time-boxed approvals per sandbox and secret, covering requests already waiting', async () => {
    const { b, clock, requested } = broker();
    const first = b.request(input);
    const waiting = b.request(input);
    const otherSecret = b.request({ ...input, secret: 'npm' });
    b.decide(requested[0]!.requestId, 'approve', { ttlMs: 10_000 });
    await expect(first).resolves.toBe('approved');
    await expect(waiting).resolves.toBe('approved');
    expect(b.pending().map((r) => r.secret)).toEqual(['npm']);
    await expect(b.request(input)).resolves.toBe('approved');
    expect(requested).toHaveLength(3);
    expect(b.grantUntil('sbx_a', 'gh')).toBe(11_000);
    expect(b.grantUntil('sbx_b', 'gh')).toBeUndefined();
    clock.advance(10_001);
    const after = b.request(input);
    expect(requested).toHaveLength(4);
    b.revoke('sbx_a');
    await expect(after).resolves.toBe('denied');
    await expect(otherSecret).resolves.toBe('denied');
  });

  it('withdraws a request whose client went away', async () => {
    const { b, decided } = broker();
    const ac = new AbortController();
    const p = b.request(input, { signal: ac.signal });
    ac.abort();
    await expect(p).resolves.toBe('denied');
    expect(decided[0]!.decision).toBe('cancelled');
    expect(b.pending()).toEqual([]);
  });

  it('answers approval_not_found for unknown or already decided ids, and checks ttlMs', async () => {
    const { b, requested } = broker();
    expect(() => b.decide('apr_nope', 'approve')).toThrow(SandglassError);
    try {
      b.decide('apr_nope', 'approve');
    } catch (err) {
      expect((err as SandglassError).code).toBe('approval_not_found');
    }
    const p = b.request(input);
    expect(() => b.decide(requested[0]!.requestId, 'approve', { ttlMs: -5 })).toThrow(/ttlMs/);
    b.decide(requested[0]!.requestId, 'deny');
    await p;
    expect(() => b.decide(requested[0]!.requestId, 'approve')).toThrow(/No pending approval/);
  });
});
