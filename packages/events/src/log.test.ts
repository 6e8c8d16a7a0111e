// The event log on SQLite and PostgreSQL: hashes chain, tampering is detected, the projection rebuilt from the log equals
// the live one, and appenders in several replicas at once neither fail nor fork the chain.
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '@sandglass/core';
import { GENESIS_HASH, isPostgres, openDatabase, toIso, type Database } from '@sandglass/db';
import { canonicalJson, EventLog, eventHash, project, type AppendInput, type StoredEvent } from './index.js';
import { created, dialects, openTestLog } from './test-support.js';

let database: Database;
let log: EventLog;
let clock: ManualClock;

describe.each(dialects('log_test'))('on $dialect', ({ fresh }) => {
  beforeEach(async () => {
    ({ database, log, clock } = await openTestLog(await fresh()));
  });
  afterEach(() => database.close());

  /** A day in the life of four sandboxes, with the clock moving between events. */
  async function script(): Promise<void> {
    const steps: AppendInput[] = [
      { type: 'tenant.created', tenantId: 'ten_a', data: { name: 'a' } },
      created('sbx_1'),
      created('sbx_2', 'ten_b', 60),
      { type: 'sandbox.started', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { pid: 10 } },
      { type: 'command.started', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { commandId: 'cmd_1', argv: ['ls'] } },
      { type: 'command.exited', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { commandId: 'cmd_1', exitCode: 0 } },
      { type: 'sandbox.extended', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { timeoutS: 900, expiresAt: toIso(Date.UTC(2025, 0, 1, 1)) } },
      { type: 'sandbox.started', tenantId: 'ten_b', sandboxId: 'sbx_2', data: {} },
      { type: 'sandbox.timeout', tenantId: 'ten_b', sandboxId: 'sbx_2', data: {} },
      created('sbx_3'),
      { type: 'sandbox.failed', tenantId: 'ten_a', sandboxId: 'sbx_3', data: { reason: 'vm exited', consoleTail: 'panic' } },
      // Late start after failure: kept in the log, moves nothing.
      { type: 'sandbox.started', tenantId: 'ten_a', sandboxId: 'sbx_3', data: {} },
      created('sbx_4'),
      { type: 'sandbox.started', tenantId: 'ten_a', sandboxId: 'sbx_4', data: {} },
      { type: 'file.written', tenantId: 'ten_a', sandboxId: 'sbx_4', data: { path: '/tmp/x', sizeBytes: 3 } },
      { type: 'sandbox.killed', tenantId: 'ten_a', sandboxId: 'sbx_4', data: { reason: 'killed' } },
      { type: 'sandbox.killed', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { reason: 'shutdown' } },
    ];
    for (const step of steps) {
      await log.append(step, { clock });
      clock.advance(1_500);
    }
  }

  const sandboxes = () => database.db.selectFrom('sandboxes').selectAll().orderBy('id').execute();

  describe('EventLog.append', () => {
    it('links each event to the previous one and applies sandbox events to the projection', async () => {
      const e1 = await log.append(created('sbx_1'), { clock });
      clock.advance(2_000);
      const e2 = await log.append({ type: 'sandbox.started', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { pid: 7 } }, { clock });
      expect(e1.seq).toBeLessThan(e2.seq);
      expect(e2.prevHash).toBe(e1.hash);
      expect(e1.hash).toBe(eventHash(e1));
      expect(e1.at).toBe('2025-01-01T00:00:00.000Z');

      const row = await database.db.selectFrom('sandboxes').selectAll().where('id', '=', 'sbx_1').executeTakeFirstOrThrow();
      expect(row).toMatchObject({
        state: 'running',
        started_at: '2025-01-01T00:00:02.000Z',
        expires_at: '2025-01-01T00:05:02.000Z',
        metadata: '{"a":"1","b":"2"}',
      });
      expect(await log.list({ sandboxId: 'sbx_1' })).toEqual([e1, e2]);
    });

    it('rolls back the event when the projection refuses it', async () => {
      await expect(log.append({ type: 'sandbox.started', tenantId: 'ten_a', sandboxId: 'sbx_nope', data: {} }, { clock })).rejects.toThrow(/never created/);
      await log.append(created('sbx_1'), { clock });
      await expect(log.append(created('sbx_1'), { clock })).rejects.toThrow(/created twice/);
      await expect(log.append({ type: 'sandbox.hibernated', tenantId: 'ten_a', sandboxId: 'sbx_1', data: {} }, { clock })).rejects.toThrow(
        /unknown sandbox event type/,
      );
      await expect(log.append({ type: 'Sandbox Created', tenantId: 'ten_a', data: {} }, { clock })).rejects.toThrow(/dotted lowercase/);
      await expect(log.append({ type: 'sandbox.started', tenantId: 'ten_a', data: {} }, { clock })).rejects.toThrow(/needs a sandboxId/);
      expect(await log.list()).toHaveLength(1);
      expect((await log.verifyChain()).ok).toBe(true);
    });

    it('records types beyond the known ones (a gateway’s file.renamed) without touching the projection', async () => {
      await log.append(created('sbx_1'), { clock });
      const before = await sandboxes();
      const e = await log.append({ type: 'file.renamed', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { from: '/a', to: '/b' } }, { clock });
      expect(e.type).toBe('file.renamed');
      expect(await sandboxes()).toEqual(before);
    });

    it('commits with the caller’s transaction, or not at all', async () => {
      await expect(
        database.db.transaction().execute(async (trx) => {
          await trx
            .insertInto('tenants')
            .values({ id: 'ten_c', name: 'c', created_at: toIso(0) })
            .execute();
          await log.append({ type: 'tenant.created', tenantId: 'ten_c', data: { name: 'c' } }, { clock, trx });
          throw new Error('caller changed its mind');
        }),
      ).rejects.toThrow('caller changed its mind');
      expect(await log.list()).toEqual([]);
      expect(await database.db.selectFrom('tenants').select('id').where('id', '=', 'ten_c').execute()).toEqual([]);
      expect((await log.verifyChain()).ok).toBe(true);
    });

    it("links each sandbox's events into a chain of their own, through other sandboxes' and tenants' events", async () => {
      await script();
      const all = await log.list();
      expect(all.filter((e) => e.sandboxId === null).every((e) => e.sandboxPrevHash === undefined)).toBe(true);
      for (const id of ['sbx_1', 'sbx_2', 'sbx_3', 'sbx_4']) {
        const own = all.filter((e) => e.sandboxId === id);
        expect(own.map((e) => e.sandboxPrevHash)).toEqual([GENESIS_HASH, ...own.slice(0, -1).map((e) => e.hash)]);
      }
      // The field is hashed: the stored hash covers it, and without it the hash differs.
      const linked = all.find((e) => e.sandboxId === 'sbx_1' && e.type === 'sandbox.started')!;
      expect(eventHash(linked)).toBe(linked.hash);
      expect(eventHash({ ...linked, sandboxPrevHash: undefined })).not.toBe(linked.hash);
    });

    it('keeps the hashes of events written before the sub-chain, and links the next event to the last of them', async () => {
      // Two events as an earlier version wrote them: no sandbox_prev_hash, hashed without it.
      const overriding = isPostgres(database.db) ? sql`overriding system value` : sql``;
      let prevHash = GENESIS_HASH;
      const old: StoredEvent[] = [];
      for (const [seq, type] of [
        [1, 'sandbox.created'],
        [2, 'command.started'],
      ] as const) {
        const data = type === 'sandbox.created' ? created('sbx_old').data : { commandId: 'cmd_1' };
        const body = { id: `evt_old_${seq}`, type, tenantId: 'ten_a', sandboxId: 'sbx_old', at: toIso(seq), data, prevHash };
        const e = { seq, ...body, hash: eventHash(body) };
        await sql`insert into events (seq, id, type, tenant_id, sandbox_id, at, data, prev_hash, hash) ${overriding} values (${seq}, ${e.id}, ${type}, ${'ten_a'}, ${'sbx_old'}, ${e.at}, ${canonicalJson(data)}, ${prevHash}, ${e.hash})`.execute(
          database.db,
        );
        old.push(e);
        prevHash = e.hash;
      }
      await database.db.updateTable('event_chain_head').set({ seq: 2, hash: prevHash }).execute();
      // Rows inserted with their own seq leave PostgreSQL's identity sequence behind: move it past them.
      if (isPostgres(database.db)) await sql`select setval(pg_get_serial_sequence('events', 'seq'), 2)`.execute(database.db);
      await log.rebuildProjections();

      const next = await log.append({ type: 'command.exited', tenantId: 'ten_a', sandboxId: 'sbx_old', data: { commandId: 'cmd_1', exitCode: 0 } }, { clock });
      expect(next.sandboxPrevHash).toBe(old[1]!.hash);
      expect((await log.list()).slice(0, 2)).toEqual(old);
      expect(await log.verifyChain()).toMatchObject({ ok: true, count: 3 });
    });

    it('filters and pages', async () => {
      await script();
      const all = await log.list();
      expect(all.map((e) => e.seq)).toEqual([...all.map((e) => e.seq)].sort((a, b) => a - b));
      expect((await log.list({ tenantId: 'ten_b' })).map((e) => e.type)).toEqual(['sandbox.created', 'sandbox.started', 'sandbox.timeout']);
      const page = await log.list({ afterSeq: all[2]!.seq, limit: 2 });
      expect(page).toEqual(all.slice(3, 5));
    });

    it('filters by type and by family, where a family never matches a longer name', async () => {
      await log.append(created('sbx_1'), { clock });
      for (const type of ['egress.request', 'secret.approval_requested', 'egressx.other', 'api_key.created', 'apixkey.created', 'egress.exchange']) {
        await log.append({ type, tenantId: 'ten_a', sandboxId: 'sbx_1', data: {} }, { clock });
      }
      const types = async (t: string[]) => (await log.list({ types: t })).map((e) => e.type);
      expect(await types(['egress', 'secret'])).toEqual(['egress.request', 'secret.approval_requested', 'egress.exchange']);
      expect(await types(['api_key'])).toEqual(['api_key.created']);
      expect(await types(['sandbox.created', 'egress.exchange'])).toEqual(['sandbox.created', 'egress.exchange']);
      expect(await types(['egress.req'])).toEqual([]);
    });
  });

  describe('EventLog.verifyChain', () => {
    beforeEach(script);

    it('accepts an untouched log', async () => {
      const report = await log.verifyChain();
      expect(report).toMatchObject({ ok: true, count: 17 });
    });

    it('catches an edited event', async () => {
      const victim = (await log.list())[5]!;
      await database.db
        .updateTable('events')
        .set({ data: canonicalJson({ ...victim.data, exitCode: 1 }) })
        .where('seq', '=', victim.seq)
        .execute();
      expect(await log.verifyChain()).toMatchObject({ ok: false, seq: victim.seq, problem: expect.stringMatching(/edited/) });
    });

    it('catches an edit whose hash was recomputed, at the next link', async () => {
      const [, victim, next] = (await log.list()).slice(4, 7);
      const edited = { ...victim!, at: toIso(0) };
      await database.db
        .updateTable('events')
        .set({ at: edited.at, hash: eventHash(edited) })
        .where('seq', '=', victim!.seq)
        .execute();
      expect(await log.verifyChain()).toMatchObject({ ok: false, seq: next!.seq, problem: expect.stringMatching(/removed or reordered/) });
    });

    it('catches a removed event in the middle, at the start and at the end', async () => {
      const all = await log.list();
      await database.db.deleteFrom('events').where('seq', '=', all[8]!.seq).execute();
      expect(await log.verifyChain()).toMatchObject({ ok: false, seq: all[9]!.seq });

      await database.db.deleteFrom('events').execute();
      // PostgreSQL assigns an identity column itself unless told to take the value given.
      const overriding = isPostgres(database.db) ? sql`overriding system value` : sql``;
      await sql`insert into events (seq, id, type, tenant_id, sandbox_id, at, data, prev_hash, hash) ${overriding} values (${all[1]!.seq}, ${all[1]!.id}, ${all[1]!.type}, ${all[1]!.tenantId}, ${all[1]!.sandboxId}, ${all[1]!.at}, ${canonicalJson(all[1]!.data)}, ${all[1]!.prevHash}, ${all[1]!.hash})`.execute(
        database.db,
      );
      expect(await log.verifyChain()).toMatchObject({ ok: false, seq: all[1]!.seq });
    });

    it("catches a sandbox link that points at another event than the sandbox's previous one", async () => {
      // Rewritten from one event on with every later hash and the head recomputed, so only the sub-chain link is wrong.
      const all = await log.list();
      const at = all.findIndex((e) => e.sandboxId === 'sbx_4' && e.type === 'file.written');
      let prevHash = all[at - 1]!.hash;
      for (const [i, e] of all.slice(at).entries()) {
        const rewritten = { ...e, prevHash, ...(i === 0 ? { sandboxPrevHash: all[0]!.hash } : {}) };
        const hash = eventHash(rewritten);
        await database.db
          .updateTable('events')
          .set({ prev_hash: `x${e.seq}`, hash: `y${e.seq}` })
          .where('seq', '=', e.seq)
          .execute();
        await database.db
          .updateTable('events')
          .set({ prev_hash: prevHash, hash, sandbox_prev_hash: rewritten.sandboxPrevHash ?? null })
          .where('seq', '=', e.seq)
          .execute();
        prevHash = hash;
      }
      await database.db.updateTable('event_chain_head').set({ hash: prevHash }).execute();
      expect(await log.verifyChain()).toMatchObject({ ok: false, seq: all[at]!.seq, problem: expect.stringMatching(/sandbox's previous event/) });
    });

    it('catches a truncated tail', async () => {
      const all = await log.list();
      await database.db.deleteFrom('events').where('seq', '=', all.at(-1)!.seq).execute();
      expect(await log.verifyChain()).toMatchObject({ ok: false, problem: expect.stringMatching(/removed from the end/) });
    });
  });

  describe('projections', () => {
    it('rebuilt from the log equal the live projection after a scripted sequence', async () => {
      await script();
      const live = await sandboxes();
      expect(live.map((r) => [r.id, r.state, r.end_reason])).toEqual([
        ['sbx_1', 'ended', 'shutdown'],
        ['sbx_2', 'ended', 'timeout'],
        ['sbx_3', 'failed', null],
        ['sbx_4', 'ended', 'killed'],
      ]);
      expect(live[0]).toMatchObject({ timeout_s: 900, expires_at: '2025-01-01T01:00:00.000Z' });
      expect(live[2]).toMatchObject({ failure_reason: 'vm exited', started_at: null });

      await database.db.updateTable('sandboxes').set({ state: 'running' }).execute();
      await database.db
        .insertInto('sandboxes')
        .values({ ...live[0]!, id: 'sbx_stray' })
        .execute();
      await log.rebuildProjections();
      expect(await sandboxes()).toEqual(live);
      expect([...project(await log.list()).values()].sort((a, b) => a.id.localeCompare(b.id))).toEqual(live);
    });

    it('carries the egress policy and secret names of sandbox.created and sandbox.network_changed, and rebuilds them', async () => {
      const withEgress = created('sbx_n');
      withEgress.data = { ...withEgress.data, network: { allow: ['api.github.com'], deny: [] }, secrets: ['GITHUB_TOKEN'] };
      await log.append(withEgress, { clock });
      await log.append(created('sbx_none'), { clock });
      await log.append(
        { type: 'sandbox.network_changed', tenantId: 'ten_a', sandboxId: 'sbx_n', data: { allow: ['*.pypi.org'], deny: ['evil.pypi.org'] } },
        { clock },
      );
      await log.append(
        { type: 'secret.set', tenantId: 'ten_a', data: { name: 'GITHUB_TOKEN', hosts: ['api.github.com'], header: null, approval: 'none' } },
        { clock },
      );
      const live = await sandboxes();
      expect(live.map((r) => [r.id, r.network, r.secrets])).toEqual([
        ['sbx_n', '{"allow":["*.pypi.org"],"deny":["evil.pypi.org"]}', '["GITHUB_TOKEN"]'],
        ['sbx_none', null, '[]'],
      ]);
      await log.rebuildProjections();
      expect(await sandboxes()).toEqual(live);
    });

    it('renames and pins a snapshot by snapshot.named, only the tenant’s own, and rebuilds the same', async () => {
      const taken = (snapshotId: string, name: string | null): AppendInput => ({
        type: 'snapshot.taken',
        tenantId: 'ten_a',
        sandboxId: 'sbx_1',
        data: { snapshotId, parentId: null, reason: 'manual', name, pinned: name !== null, sizeAddedBytes: 1, memoryMib: 256, vcpus: 1, template: 'base' },
      });
      const named = (tenantId: string, snapshotId: string, name: string | null, previousName: string | null): AppendInput => ({
        type: 'snapshot.named',
        tenantId,
        sandboxId: 'sbx_1',
        data: { snapshotId, name, previousName },
      });
      await log.append(created('sbx_1'), { clock });
      for (const input of [
        taken('snap_1', null),
        taken('snap_2', 'before'),
        taken('snap_3', null),
        named('ten_a', 'snap_1', 'after', null),
        named('ten_a', 'snap_2', null, 'before'),
        named('ten_a', 'snap_3', 'one', null),
        named('ten_a', 'snap_3', 'two', 'one'),
        // Another tenant's event for the same id renames nothing of ten_a's.
        named('ten_b', 'snap_1', 'theirs', null),
        { type: 'snapshot.deleted', tenantId: 'ten_a', sandboxId: 'sbx_1', data: { snapshotId: 'snap_2', why: 'user' } },
        // Named after it was deleted: no row comes back.
        named('ten_a', 'snap_2', 'late', null),
      ])
        await log.append(input, { clock });
      const rows = () => database.db.selectFrom('snapshots').selectAll().orderBy('id').execute();
      const live = await rows();
      expect(live.map((r) => [r.id, r.name, r.pinned])).toEqual([
        ['snap_1', 'after', 1],
        ['snap_3', 'two', 1],
      ]);
      await log.append(named('ten_a', 'snap_1', null, 'after'), { clock });
      const unpinned = await rows();
      expect(unpinned.map((r) => [r.id, r.name, r.pinned])).toEqual([
        ['snap_1', null, 0],
        ['snap_3', 'two', 1],
      ]);
      await log.rebuildProjections();
      expect(await rows()).toEqual(unpinned);
    });

    it('deletes a snapshot or moves a sandbox only by an event of its own tenant (and sandbox), live and rebuilt', async () => {
      const taken = (snapshotId: string, pinned: boolean): AppendInput => ({
        type: 'snapshot.taken',
        tenantId: 'ten_a',
        sandboxId: 'sbx_1',
        data: {
          snapshotId,
          parentId: null,
          reason: 'manual',
          name: pinned ? 'keep' : null,
          pinned,
          sizeAddedBytes: 1,
          memoryMib: 256,
          vcpus: 1,
          template: 'base',
        },
      });
      const deleted = (tenantId: string, sandboxId: string | undefined, snapshotId: string): AppendInput => ({
        type: 'snapshot.deleted',
        tenantId,
        ...(sandboxId ? { sandboxId } : {}),
        data: { snapshotId, why: 'user' },
      });
      await log.append(created('sbx_1'), { clock });
      await log.append(created('sbx_2'), { clock });
      for (const input of [
        taken('snap_1', true),
        taken('snap_2', false),
        // The forgery of issue 23: the system tenant naming a pinned snapshot of ten_a.
        deleted('system', undefined, 'snap_1'),
        deleted('ten_b', 'sbx_1', 'snap_2'),
        // ten_a's own event, but about another of its sandboxes.
        deleted('ten_a', 'sbx_2', 'snap_2'),
        { type: 'sandbox.killed', tenantId: 'ten_b', sandboxId: 'sbx_1', data: { reason: 'killed' } },
      ])
        await log.append(input, { clock });
      const rows = () => database.db.selectFrom('snapshots').select('id').orderBy('id').execute();
      expect((await rows()).map((r) => r.id)).toEqual(['snap_1', 'snap_2']);
      expect((await sandboxes()).find((r) => r.id === 'sbx_1')?.state).toBe('starting');
      await log.rebuildProjections();
      expect((await rows()).map((r) => r.id)).toEqual(['snap_1', 'snap_2']);
      expect((await sandboxes()).find((r) => r.id === 'sbx_1')?.state).toBe('starting');
      await log.append(deleted('ten_a', 'sbx_1', 'snap_2'), { clock });
      expect((await rows()).map((r) => r.id)).toEqual(['snap_1']);
    });

    it('takes a fork’s network and secrets from sandbox.forked when the gateway reports them, and only the rules', async () => {
      const fork = created('sbx_f');
      fork.data = { ...fork.data, network: { allow: ['now.example'], deny: [] }, secrets: ['A', 'B'] };
      await log.append(fork, { clock });
      await log.append({ type: 'sandbox.forked', tenantId: 'ten_a', sandboxId: 'sbx_f', data: { snapshotId: 'snap_1', sourceSandboxId: 'sbx_s' } }, { clock });
      expect((await sandboxes())[0]).toMatchObject({ network: '{"allow":["now.example"],"deny":[]}', secrets: '["A","B"]' });
      const reported = {
        snapshotId: 'snap_1',
        sourceSandboxId: 'sbx_s',
        network: { allow: ['then.example'], deny: ['x.example'], placeholders: { A: 'sg_placeholder_x' } },
        secrets: ['A'],
      };
      await log.append({ type: 'sandbox.forked', tenantId: 'ten_a', sandboxId: 'sbx_f', data: reported }, { clock });
      expect((await sandboxes())[0]).toMatchObject({ network: '{"allow":["then.example"],"deny":["x.example"]}', secrets: '["A"]' });
      await log.append(
        { type: 'sandbox.forked', tenantId: 'ten_a', sandboxId: 'sbx_f', data: { snapshotId: 'snap_1', sourceSandboxId: 'sbx_s', network: null } },
        { clock },
      );
      expect((await sandboxes())[0]).toMatchObject({ network: null, secrets: '["A"]' });
    });

    it('project leaves its base untouched', () => {
      const base = new Map();
      const out = project(
        [
          {
            seq: 1,
            id: 'evt_1',
            type: 'sandbox.created',
            tenantId: 'ten_a',
            sandboxId: 'sbx_1',
            at: toIso(0),
            data: created('sbx_1').data as Record<string, unknown>,
            prevHash: '',
            hash: '',
          },
        ],
        base,
      );
      expect(base.size).toBe(0);
      expect(out.get('sbx_1')?.state).toBe('starting');
    });
  });
});

describe('on postgres, three replicas appending at once', () => {
  const replicas: Database[] = [];
  afterEach(async () => {
    await Promise.all(replicas.splice(0).map((r) => r.close()));
  });

  it('surface no error, keep one chain, and leave projections equal to a rebuild', async () => {
    const url = await dialects('log_test')[1]!.fresh();
    // Three control planes: each its own pool, so their appends race for the head across connections.
    for (let i = 0; i < 3; i++) replicas.push(await openDatabase({ url, poolSize: 4 }));
    const logs = replicas.map((r) => new EventLog(r.db));
    const tenants = ['ten_a', 'ten_b', 'ten_c', 'ten_d', 'ten_e'];
    for (const t of tenants)
      await replicas[0]!.db
        .insertInto('tenants')
        .values({ id: t, name: t, created_at: toIso(0) })
        .execute();
    const clock = new ManualClock(Date.UTC(2025, 0, 1));
    // 30 sandboxes, 10 events each: in order within a sandbox (a start follows its creation), each event sent by
    // another replica than the one before, and all sandboxes at once.
    const lifeOf = (i: number): AppendInput[] => {
      const tenantId = tenants[i % tenants.length]!;
      const sandboxId = `sbx_${i}`;
      const snap = (n: number): AppendInput => ({
        type: 'snapshot.taken',
        tenantId,
        sandboxId,
        data: {
          snapshotId: `snap_${i}_${n}`,
          parentId: null,
          reason: 'rolling',
          name: null,
          pinned: false,
          sizeAddedBytes: 4096 * n,
          memoryMib: 256,
          vcpus: 1,
          template: 'base',
        },
      });
      return [
        created(sandboxId, tenantId),
        { type: 'sandbox.started', tenantId, sandboxId, data: {} },
        { type: 'command.started', tenantId, sandboxId, data: { commandId: 'cmd_1' } },
        snap(1),
        { type: 'command.exited', tenantId, sandboxId, data: { commandId: 'cmd_1', exitCode: 0 } },
        snap(2),
        { type: 'snapshot.deleted', tenantId, sandboxId, data: { snapshotId: `snap_${i}_1`, why: 'retention' } },
        { type: 'sandbox.extended', tenantId, sandboxId, data: { timeoutS: 900, expiresAt: toIso(Date.UTC(2025, 0, 1, 1)) } },
        { type: 'file.written', tenantId, sandboxId, data: { path: '/tmp/x', sizeBytes: i } },
        i % 2 === 0 ? { type: 'sandbox.killed', tenantId, sandboxId, data: { reason: 'killed' } } : { type: 'sandbox.timeout', tenantId, sandboxId, data: {} },
      ];
    };
    const appending = Promise.allSettled(
      Array.from({ length: 30 }, async (_, i) => {
        for (const [k, input] of lifeOf(i).entries()) await logs[(i + k) % 3]!.append(input, { clock });
      }),
    );
    // Meanwhile an auditor verifies the chain again and again: appends committing under it are not a truncated tail.
    let done = false;
    const audits: Array<Awaited<ReturnType<EventLog['verifyChain']>>> = [];
    const auditing = (async () => {
      while (!done) audits.push(await logs[2]!.verifyChain());
    })();
    const results = await appending;
    done = true;
    await auditing;
    expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
    expect(audits.filter((a) => !a.ok)).toEqual([]);

    const log = logs[1]!;
    expect(await log.verifyChain()).toMatchObject({ ok: true, count: 300 });
    const all = await log.list();
    expect(all).toHaveLength(300);
    expect(new Set(all.map((e) => e.prevHash)).size).toBe(300);
    // Each sandbox's own chain is linear too: its events link in seq order, whichever replica appended them.
    for (let i = 0; i < 30; i++) {
      const own = all.filter((e) => e.sandboxId === `sbx_${i}`);
      expect(own.map((e) => e.sandboxPrevHash)).toEqual([GENESIS_HASH, ...own.slice(0, -1).map((e) => e.hash)]);
    }
    const { db } = replicas[2]!;
    const live = {
      sandboxes: await db.selectFrom('sandboxes').selectAll().orderBy('id').execute(),
      snapshots: await db.selectFrom('snapshots').selectAll().orderBy('id').execute(),
    };
    expect(live.sandboxes).toHaveLength(30);
    expect(live.snapshots.map((s) => s.id)).toEqual(Array.from({ length: 30 }, (_, i) => `snap_${i}_2`).sort());
    await log.rebuildProjections();
    expect({
      sandboxes: await db.selectFrom('sandboxes').selectAll().orderBy('id').execute(),
      snapshots: await db.selectFrom('snapshots').selectAll().orderBy('id').execute(),
    }).toEqual(live);
  });
});
