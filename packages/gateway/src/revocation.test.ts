import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readSync, rmSync, symlinkSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger, SandglassError, systemClock } from '@sandglass/core';
import { TenantRevocation, tenantPlaintext, wipePath, type RevocationOptions } from './revocation.js';
import type { Sandbox } from './sandbox.js';
import type { SnapshotManager } from './snapshots.js';

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'sg-revocation-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A sandbox as the revocation sees it: its files are real, its VM is not (ending it only changes its state). */
function sandbox(id: string, tenantId: string, settled: () => Promise<void> = async () => {}): Sandbox {
  const dir = join(root, 'run', id);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'disk.qcow2'), 'guest disk writes');
  const memPath = join(root, 'shm', `${id}.mem`);
  mkdirSync(join(root, 'shm'), { recursive: true });
  writeFileSync(memPath, 'guest ram');
  let state = 'running';
  return {
    id,
    tenantId,
    dir,
    vm: { memPath },
    get state() {
      return state;
    },
    end: async () => {
      state = 'ended';
    },
    settled,
  } as unknown as Sandbox;
}

function setup(verify: RevocationOptions['verify'], settle: (tenantId: string) => Promise<void> = async () => {}) {
  const images = new Map<string, string[]>();
  const img = (tenantId: string, snap: string) => {
    const p = join(root, 'shm', `snap-${snap}.img`);
    writeFileSync(p, 'snapshot ram');
    images.set(tenantId, [...(images.get(tenantId) ?? []), p]);
    return p;
  };
  const sandboxes = new Map<string, Sandbox>();
  const events: Array<{ type: string; tenantId: string; sandboxId?: string; data: Record<string, unknown> }> = [];
  const untracked: string[] = [];
  const snapshots = {
    imagesOf: (t: string) => images.get(t) ?? [],
    untrack: async (id: string) => {
      untracked.push(id);
    },
    settle,
  } as unknown as SnapshotManager;
  const rev = new TenantRevocation({
    sandboxes,
    snapshots,
    verify,
    events: { append: async (e) => void events.push(e) },
    clock: systemClock,
    logger: createLogger('test'),
  });
  return { rev, sandboxes, img, events, untracked, snapshots };
}

describe('TenantRevocation', () => {
  it('the plaintext list names every sandbox file and cached image of the tenant, and no other tenant’s', () => {
    const { sandboxes, img, snapshots } = setup(async () => {});
    const a = sandbox('sbx_a', 'ten_a');
    const b = sandbox('sbx_b', 'ten_b');
    sandboxes.set(a.id, a).set(b.id, b);
    const imgA = img('ten_a', 'snap_1');
    img('ten_b', 'snap_2');
    const list = tenantPlaintext({ sandboxes, snapshots }, 'ten_a');
    expect(list.sandboxes).toEqual([a]);
    expect(list.paths.sort()).toEqual([a.dir, a.vm!.memPath, imgA].sort());
  });

  it('an API revocation stops the tenant, wipes its files, refuses its boots, and leaves other tenants alone', async () => {
    const { rev, sandboxes, img, events, untracked } = setup(async () => {});
    const a1 = sandbox('sbx_a1', 'ten_a');
    const a2 = sandbox('sbx_a2', 'ten_a');
    const b = sandbox('sbx_b', 'ten_b');
    for (const s of [a1, a2, b]) sandboxes.set(s.id, s);
    const paused = img('ten_a', 'snap_paused');
    const other = img('ten_b', 'snap_b');
    const r = await rev.revoke('ten_a', 'api');
    expect(r.stoppedSandboxes.sort()).toEqual(['sbx_a1', 'sbx_a2']);
    expect(r.wipedFiles).toBe(5);
    for (const p of [a1.dir, a1.vm!.memPath, a2.dir, a2.vm!.memPath, paused]) expect(existsSync(p), p).toBe(false);
    for (const p of [b.dir, b.vm!.memPath, other]) expect(existsSync(p), p).toBe(true);
    expect(b.state).toBe('running');
    expect(untracked.sort()).toEqual(['sbx_a1', 'sbx_a2']);
    expect(events.map((e) => [e.type, e.sandboxId ?? null, e.data.code ?? null])).toEqual([
      ['sandbox.failed', 'sbx_a1', 'key_revoked'],
      ['sandbox.failed', 'sbx_a2', 'key_revoked'],
      ['tenant.plaintext_wiped', null, null],
    ]);
    await expect(rev.requireKey('ten_a')).rejects.toMatchObject({ code: 'key_revoked' });
    await rev.requireKey('ten_b');
  });

  it('the poll honours a provider that refuses a key, and only logs one that does not answer', async () => {
    const answers = new Map<string, SandglassError>([
      ['ten_gone', new SandglassError('key_revoked', 'the HSM holds no such key')],
      ['ten_down', new SandglassError('key_unavailable', 'the HSM did not answer')],
    ]);
    const { rev, sandboxes, events } = setup(async (t) => {
      const err = answers.get(t);
      if (err) throw err;
    });
    const gone = sandbox('sbx_gone', 'ten_gone');
    const down = sandbox('sbx_down', 'ten_down');
    const fine = sandbox('sbx_fine', 'ten_fine');
    for (const s of [gone, down, fine]) sandboxes.set(s.id, s);
    await rev.poll();
    expect(gone.state).toBe('ended');
    expect(existsSync(gone.dir)).toBe(false);
    expect(down.state).toBe('running');
    expect(fine.state).toBe('running');
    expect(events.find((e) => e.type === 'tenant.plaintext_wiped')).toMatchObject({ tenantId: 'ten_gone', data: { trigger: 'provider' } });
    // A provider-side refusal is not final here: the provider is asked again at the next boot.
    answers.delete('ten_gone');
    await rev.requireKey('ten_gone');
  });
});

describe('the wipe', () => {
  it('leaves nothing to read through a descriptor still open on a wiped file, and follows no symlink', async () => {
    const { rev, sandboxes, img } = setup(async () => {});
    const a = sandbox('sbx_a', 'ten_a');
    sandboxes.set(a.id, a);
    const image = img('ten_a', 'snap_1');
    // A copy in flight, or a process not yet reaped, still holding the RAM file and the image open.
    const held = [a.vm!.memPath, image, join(a.dir, 'disk.qcow2')].map((p) => openSync(p, 'r'));
    const outside = join(root, 'outside');
    writeFileSync(outside, 'not the tenant’s');
    symlinkSync(outside, join(a.dir, 'link'));
    try {
      await rev.revoke('ten_a', 'api');
      for (const fd of held) expect(readSync(fd, Buffer.alloc(64), 0, 64, 0)).toBe(0);
    } finally {
      for (const fd of held) closeSync(fd);
    }
    expect(readFileSync(outside, 'utf8')).toBe('not the tenant’s');
    expect(wipePath(join(root, 'absent'))).toBe(false);
  });

  it('waits out a start in flight and the restores being prepared before it lists the files', async () => {
    let restoreDone!: () => void;
    let late = '';
    const { rev, sandboxes, img } = setup(
      async () => {},
      // A restore of the tenant writes its RAM image after the sandbox was ended; the image was named when it began.
      (t) =>
        t === 'ten_a'
          ? new Promise<void>((resolve) => {
              restoreDone = () => {
                writeFileSync(late, 'snapshot ram');
                resolve();
              };
            })
          : Promise.resolve(),
    );
    // A sandbox killed while starting: its restore writes its RAM file until it reaches its next check.
    let settled = false;
    const starting = sandbox('sbx_s', 'ten_a', async () => {
      settled = true;
    });
    sandboxes.set(starting.id, starting);
    late = img('ten_a', 'snap_late');
    rmSync(late);
    const run = rev.revoke('ten_a', 'api');
    await new Promise((r) => setImmediate(r));
    restoreDone();
    await run;
    expect(settled).toBe(true);
    expect(existsSync(late)).toBe(false);
  });
  it("the control plane's call after the poll already wiped still names the sandboxes the revocation stopped", async () => {
    const { rev, sandboxes, events } = setup(async () => {
      throw new SandglassError('key_revoked', 'the node API answers revoked');
    });
    const a = sandbox('sbx_a', 'ten_a');
    sandboxes.set(a.id, a);
    await rev.poll();
    expect(a.state).toBe('ended');
    sandboxes.delete(a.id);
    const r = await rev.revoke('ten_a', 'api');
    expect(r.stoppedSandboxes).toEqual(['sbx_a']);
    expect(events.filter((e) => e.type === 'tenant.plaintext_wiped').map((e) => e.data.trigger)).toEqual(['provider', 'api']);
    await expect(rev.requireKey('ten_a')).rejects.toMatchObject({ code: 'key_revoked' });
  });
});
