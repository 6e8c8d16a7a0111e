// What the timeline's scrubber shows for a stretch of the log: only that stretch, and no field it does not name.
import { describe, expect, it } from 'vitest';
import type { LogEvent } from './api.js';
import { digest } from './digest.js';

let seq = 0;
const ev = (type: string, at: string, data: Record<string, unknown>): LogEvent => ({
  seq: ++seq,
  type,
  sandboxId: 'sbx_a',
  at: `2026-12-01T09:00:${at}Z`,
  data,
});
const ms = (at: string) => Date.parse(`2026-12-01T09:00:${at}Z`);

const log = [
  ev('file.written', '01.000', { path: '/root/before', sizeBytes: 1 }),
  ev('file.written', '10.000', { path: '/root/a', sizeBytes: 4 }),
  ev('file.renamed', '11.000', { from: '/root/a', to: '/root/b' }),
  ev('command.started', '12.000', { commandId: 'cmd_1', argv: ['/bin/bash', '-c', 'make'] }),
  ev('egress.request', '13.000', {
    host: 'api.example.com',
    port: 443,
    method: 'POST',
    path: '/v1',
    allowed: false,
    reason: 'approval denied',
    secrets: ['TOKEN'],
    // A field the digest does not read: whatever a gateway put there stays out of the page.
    headers: [['authorization', 'Bearer hunter2-value']],
  }),
  ev('egress.rejected', '14.000', { reason: 'not allowed by policy', host: 'evil.example', port: 443 }),
  ev('file.removed', '20.000', { path: '/root/after' }),
];

describe('digest', () => {
  it('keeps the events of the interval, from its start up to (not including) its end', () => {
    const d = digest(log, ms('10.000'), ms('20.000'));
    expect(d.files.map((f) => `${f.what} ${f.path}`)).toEqual(['written /root/a', 'renamed /root/a → /root/b']);
    expect(d.commands.map((c) => c.argv.join(' '))).toEqual(['/bin/bash -c make']);
    expect(d.egress.map((g) => [g.method, g.host, g.allowed, g.reason, g.secrets])).toEqual([
      ['POST', 'api.example.com', false, 'approval denied', ['TOKEN']],
      ['CONNECT', 'evil.example', false, 'not allowed by policy', []],
    ]);
    expect(digest(log, ms('20.000'), Number.POSITIVE_INFINITY).files.map((f) => f.path)).toEqual(['/root/after']);
  });

  it('copies no field it does not name', () => {
    expect(JSON.stringify(digest(log, 0, Number.POSITIVE_INFINITY))).not.toContain('hunter2');
  });
});
