// `sandglass audit` over a real session: a command, a file written and a snapshot show up as timeline entries, in order.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type AuditEntry, Sandbox } from '@sandglass/sdk';
import { config, home } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

function sg(args: string[], input?: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, SANDGLASS_HOME: home };
  delete env.SANDGLASS_URL;
  delete env.SANDGLASS_API_KEY;
  const r = spawnSync(bin, args, { env, input, timeout: 120_000 });
  return { code: r.status, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') };
}

describe('sandglass audit', () => {
  it('shows a command, a file written and a snapshot in order, as the SDK returns them', async () => {
    // No rolling snapshot may come between the three actions.
    const created = sg(['create', '--json', '--timeout-s', '600', '--snapshot-interval', '86400']);
    expect(created.code, created.stderr).toBe(0);
    const id = JSON.parse(created.stdout).id as string;
    try {
      expect(sg(['exec', id, '--', 'bash', '-c', 'exit 3']).code).toBe(3);
      expect(sg(['cp', '-', `${id}:/root/audit.txt`], 'twelve bytes').code).toBe(0);
      const snapshot = sg(['snapshot', id, '--name', 'audit-1']);
      expect(snapshot.code, snapshot.stderr).toBe(0);
      const snapshotId = snapshot.stdout.trim();

      const text = sg(['audit', id, '--type', 'command,file,snapshot']);
      expect(text.code, text.stderr).toBe(0);
      const lines = text.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(3);
      expect(lines[0]).toMatch(/ command +bash -c 'exit 3' \(as root\): exit 3 after /);
      expect(lines[1]).toMatch(/ file +wrote \/root\/audit\.txt \(12 B\)$/);
      expect(lines[2]).toContain(`snapshot   taken ${snapshotId} (manual, named audit-1, pinned)`);

      // The whole timeline also holds the lifecycle, and the CLI's JSON lines are the SDK's entries.
      const json = sg(['audit', id, '--json']);
      expect(json.code, json.stderr).toBe(0);
      const entries = json.stdout
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as AuditEntry);
      expect(entries.map((x) => x.kind)).toEqual(expect.arrayContaining(['lifecycle', 'command', 'file', 'snapshot']));
      expect(entries[0]).toMatchObject({ kind: 'lifecycle', summary: expect.stringMatching(/^created /) });
      expect(await (await Sandbox.connect(id, config())).audit()).toEqual(entries);
    } finally {
      sg(['kill', id]);
    }
  });
});
