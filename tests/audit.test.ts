// `sandglass audit` over a real session: a command, a file written and a snapshot show up as timeline entries, in order;
// its signed export verifies offline, fails once a line is tampered with, and is another tenant's to read as little as its events.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type AuditEntry, Sandbox, verifyAuditExport } from '@sandglass/sdk';
import { api, checkResponsesAgainstSpec, config, home } from './helpers.js';

checkResponsesAgainstSpec();

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

      await exportAndVerify(id);
    } finally {
      sg(['kill', id]);
    }
  });
});

/** The session's export through the CLI and the SDK: both verify with the published key, and tampering is caught. */
async function exportAndVerify(id: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sg-audit-'));
  try {
    const file = join(dir, 'export.jsonl');
    const keyFile = join(dir, 'audit.pem');
    const key = sg(['keys', 'audit-public']);
    expect(key.code, key.stderr).toBe(0);
    expect(key.stdout).toMatch(/^-----BEGIN PUBLIC KEY-----\n/);
    writeFileSync(keyFile, key.stdout);
    expect((await Sandbox.auditPublicKey(config())).publicKeyPem).toBe(key.stdout);

    const exported = sg(['audit', id, '--export', '-o', file]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const text = readFileSync(file, 'utf8');
    const lines = text.trimEnd().split('\n');
    const events = lines.slice(1, -1).map((l) => JSON.parse(l) as { type: string; data: Record<string, unknown> });
    expect(events.map((e) => e.type)).toEqual(
      expect.arrayContaining(['sandbox.created', 'command.started', 'command.exited', 'file.written', 'snapshot.taken']),
    );
    const verified = sg(['events', 'verify', file, '--public-key', keyFile]);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    expect(verified.stdout).toMatch(new RegExp(`^OK ${id}: ${events.length} events, head [0-9a-f]{16}, signed by key [0-9a-f]{32} at `));

    // The SDK's export holds the same events (and any recorded since), and verifies with the same key.
    const viaSdk = await (await Sandbox.connect(id, config())).exportAudit();
    expect(
      viaSdk
        .trimEnd()
        .split('\n')
        .slice(1, events.length + 1),
    ).toEqual(lines.slice(1, -1));
    expect(verifyAuditExport(viaSdk, key.stdout)).toMatchObject({ ok: true, sandboxId: id });

    // The command's exit code rewritten on disk: the verdict names the line and the hash check.
    const at = events.findIndex((e) => e.type === 'command.exited');
    const edited = [...lines];
    edited[at + 1] = lines[at + 1]!.replace('"exitCode":3', '"exitCode":0');
    expect(edited[at + 1]).not.toBe(lines[at + 1]);
    writeFileSync(file, `${edited.join('\n')}\n`);
    const tampered = sg(['events', 'verify', file, '--public-key', keyFile]);
    expect(tampered.code).toBe(1);
    expect(tampered.stdout).toBe(
      `FAILED line ${at + 2} (hash): the hash of event ${JSON.parse(lines[at + 1]!).id} does not match its content: a field was edited\n`,
    );
    // The last event cut: the count check; and without the key nothing passes.
    writeFileSync(file, `${[...lines.slice(0, -2), lines.at(-1)].join('\n')}\n`);
    expect(sg(['events', 'verify', file, '--public-key', keyFile, '--json']).stdout).toMatch(/"ok":false,"line":\d+,"check":"count"/);
    writeFileSync(file, text);
    expect(sg(['events', 'verify', file]).stdout).toMatch(/^FAILED line \d+ \(key\): no public key was given/);

    // Another tenant's key learns nothing: the answer of an unknown sandbox.
    const tenant = await api('POST', '/v1/tenants', { body: { name: `audit-other-${Date.now()}` } });
    expect(tenant.status).toBe(201);
    const other = await api('POST', `/v1/tenants/${tenant.body!.id}/api-keys`, { body: {} });
    expect(other.status).toBe(201);
    const theirs = await api('GET', `/v1/sandboxes/${id}/audit/export`, { key: other.body!.key });
    expect(theirs.status).toBe(404);
    expect(theirs.body!.error.code).toBe('sandbox_not_found');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
