// A tenant's own templates: versions that name its snapshots, the cache of build steps, and the records of builds.
import type { Kysely, Transaction } from 'kysely';
import { invalidArgument, newId, SandglassError, type Clock, type ControlPlaneApi } from '@sandglass/core';
import { isUniqueViolation, toIso, type Schema, type TemplateBuildRow, type TemplateVersionRow } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';
import { toTemplate, type Template } from './api.js';
import type { Principal } from './keys.js';
import { checkEnvs, type SandboxService } from './sandboxes.js';
import { findPublishedVersion, findTemplate, findTemplateVersion, listTemplates, publisherOf, templateVersions, versionHolding } from './templates.js';
import type { TemplatePools } from './template-pools.js';

type Schemas = ControlPlaneApi.components['schemas'];
export type TemplateVersion = Schemas['TemplateVersion'];
export type TemplateBuild = Schemas['TemplateBuild'];
export type TemplateBuildReport = Schemas['TemplateBuildReport'];
type BuildStep = Schemas['TemplateBuildStep'];

/** A running build its builder has not reported to for this long is stale: it ends failed and frees the name. */
export const TEMPLATE_BUILD_STALE_MS = 60_000;
/** A build's log keeps at most this many lines; later ones are counted, not kept (the tail of a step is in its error). */
export const TEMPLATE_BUILD_MAX_LINES = 20_000;
const LOG_PAGE = 1000;
const MAX_STEPS = 1000;
/** A tenant's step cache keeps this many steps by default; past it the least recently used go first. */
export const TEMPLATE_CACHE_ENTRIES = 64;
/** The builder's own names for the step snapshots it pins (the SDK's `tb-<name>-<step>-<key>`). */
const STEP_SNAPSHOT_PREFIX = 'tb-';

export interface CustomTemplatesDeps {
  db: Kysely<Schema>;
  events: EventLog;
  clock: Clock;
  sandboxes: SandboxService;
  pools: TemplatePools;
  /** The step cache's bound per tenant; default TEMPLATE_CACHE_ENTRIES. */
  cacheEntries?: number;
}

export function toTemplateVersion(row: TemplateVersionRow): TemplateVersion {
  return {
    id: row.id,
    name: row.name,
    version: row.version,
    snapshotId: row.snapshot_id,
    memoryMib: row.memory_mib,
    vcpus: row.vcpus,
    diskMib: row.disk_mib,
    envs: JSON.parse(row.envs) as Record<string, string>,
    user: row.user,
    workdir: row.workdir,
    start: row.start === null ? null : (JSON.parse(row.start) as Schemas['TemplateStart']),
    buildId: row.build_id,
    createdAt: row.created_at,
  };
}

/** How a tenant sees a custom template: its own (public when it published it), or another's published one, read-only. */
function toCustomTemplate(row: TemplateVersionRow, warmPoolSize: number, seen: { public: boolean; readOnly: boolean }): Template {
  return {
    id: row.id,
    name: row.name,
    status: 'ready',
    memoryMib: row.memory_mib,
    createdAt: row.created_at,
    custom: true,
    vcpus: row.vcpus,
    diskMib: row.disk_mib,
    version: row.version,
    warmPoolSize,
    public: seen.public,
    readOnly: seen.readOnly,
  };
}

function toBuild(row: TemplateBuildRow): TemplateBuild {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    steps: JSON.parse(row.steps) as BuildStep[],
    versionId: row.version_id,
    error: row.error === null ? null : (JSON.parse(row.error) as TemplateBuild['error']),
  };
}

const noSuchTemplate = (name: string) =>
  new SandglassError('template_not_found', `No template ${JSON.stringify(name)}; GET /v1/templates lists them.`, { details: { field: 'name' } });
const publishedElsewhere = (name: string, field: string) =>
  new SandglassError('permission_denied', `${name} is a template the platform published for every tenant; only its own tenant may change or delete it.`, {
    details: { field },
  });
const noSuchBuild = (id: string) => new SandglassError('not_found', `No template build ${id}.`, { details: { field: 'id' } });

/** The snapshot name that pins a version's snapshot, within the snapshot name rules (64 characters). */
const pinName = (name: string, version: number) => `tpl-${name}`.slice(0, 56) + `-v${version}`;

export class CustomTemplates {
  constructor(private readonly deps: CustomTemplatesDeps) {}

  /**
   * Platform templates, then the tenant's own and those the operator published for every tenant (each as its newest
   * version, sorted by name); a published name the tenant also uses is its own template's.
   */
  async list(who: Principal): Promise<Template[]> {
    const { db } = this.deps;
    const published = await db.selectFrom('published_templates').select(['tenant_id', 'name']).execute();
    const publishedBy = new Map(published.map((p) => [p.name, p.tenant_id]));
    const others = published.filter((p) => p.tenant_id !== who.tenantId);
    const rows = await db
      .selectFrom('template_versions')
      .selectAll()
      .where((eb) => eb.or([eb('tenant_id', '=', who.tenantId), ...others.map((p) => eb.and([eb('tenant_id', '=', p.tenant_id), eb('name', '=', p.name)]))]))
      .orderBy('name')
      .orderBy('version', 'desc')
      .execute();
    const newest = new Map<string, TemplateVersionRow>();
    // The tenant's own rows first, so its own template of a published name is the one it sees.
    for (const r of [...rows.filter((r) => r.tenant_id === who.tenantId), ...rows]) if (!newest.has(r.name)) newest.set(r.name, r);
    const sizes = new Map(
      (await db.selectFrom('template_pools').select(['tenant_id', 'name', 'size']).execute()).map((r) => [`${r.tenant_id}/${r.name}`, r.size]),
    );
    const custom = [...newest.values()]
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((r) =>
        toCustomTemplate(r, sizes.get(`${r.tenant_id}/${r.name}`) ?? 0, {
          public: publishedBy.get(r.name) === r.tenant_id,
          readOnly: r.tenant_id !== who.tenantId,
        }),
      );
    return [...(await listTemplates(db)).map(toTemplate), ...custom];
  }

  /** A template with its versions: the tenant's own, else one published for every tenant, else a platform one. */
  async get(who: Principal, name: string): Promise<Schemas['TemplateDetail']> {
    const { db } = this.deps;
    const publisher = await publisherOf(db, name);
    for (const tenantId of [who.tenantId, ...(publisher !== undefined && publisher !== who.tenantId ? [publisher] : [])]) {
      const versions = await templateVersions(db, tenantId, name);
      if (versions.length === 0) continue;
      const seen = { public: publisher === tenantId, readOnly: tenantId !== who.tenantId };
      const template = {
        ...toCustomTemplate(versions[0]!, await this.deps.pools.size(tenantId, name), seen),
        warmPoolReady: await this.deps.pools.ready(tenantId, name),
      };
      return { template, versions: versions.map(toTemplateVersion) };
    }
    const platform = await findTemplate(db, name);
    if (platform) return { template: toTemplate(platform), versions: [] };
    throw noSuchTemplate(name);
  }

  /**
   * A new version of `name` from a snapshot of the tenant's. The version row is written first, so from then on the
   * snapshot cannot be unnamed or deleted through /v1/snapshots; then the snapshot is pinned under a name of its own.
   */
  async createVersion(who: Principal, req: Schemas['CreateTemplateVersionRequest']): Promise<TemplateVersion> {
    const { db, events, clock, sandboxes } = this.deps;
    if (await findTemplate(db, req.name)) throw invalidArgument('name', `${req.name} is a platform template's name; choose another`);
    const envs = checkEnvs(req.envs ?? {}, 'envs');
    const snap = await sandboxes.getSnapshot(who, req.snapshotId);
    const source = await db.selectFrom('sandboxes').select('disk_mib').where('id', '=', snap.sandboxId).executeTakeFirst();
    const now = toIso(clock.nowMs());
    let row: TemplateVersionRow | undefined;
    for (let attempt = 0; row === undefined; attempt++) {
      try {
        row = await db.transaction().execute(async (trx) => {
          const running = await this.#runningBuild(trx, who.tenantId, req.name);
          if (req.buildId !== undefined) {
            if (running?.id !== req.buildId) {
              const build = await trx
                .selectFrom('template_builds')
                .select('status')
                .where('id', '=', req.buildId)
                .where('tenant_id', '=', who.tenantId)
                .executeTakeFirst();
              if (!build) throw invalidArgument('buildId', `no build ${req.buildId} of this tenant`);
              throw new SandglassError(
                'conflict',
                `Build ${req.buildId} is not the running build of ${req.name} (it is ${build.status}); nothing was published.`,
                {
                  details: { field: 'buildId' },
                },
              );
            }
          } else if (running) {
            throw buildInProgress(req.name, running.id);
          }
          const last = await trx
            .selectFrom('template_versions')
            .select('version')
            .where('tenant_id', '=', who.tenantId)
            .where('name', '=', req.name)
            .orderBy('version', 'desc')
            .limit(1)
            .executeTakeFirst();
          const version: TemplateVersionRow = {
            id: newId('tpl'),
            tenant_id: who.tenantId,
            name: req.name,
            version: (last?.version ?? 0) + 1,
            snapshot_id: snap.id,
            memory_mib: snap.memoryMib,
            vcpus: snap.vcpus,
            disk_mib: source?.disk_mib ?? null,
            envs: JSON.stringify(envs),
            user: req.user ?? null,
            workdir: req.workdir ?? null,
            start: req.start ? JSON.stringify(req.start) : null,
            build_id: req.buildId ?? null,
            created_at: now,
          };
          await trx.insertInto('template_versions').values(version).execute();
          if (req.buildId !== undefined) {
            await trx
              .updateTable('template_builds')
              .set({ status: 'ready', finished_at: now, reported_at: now, version_id: version.id })
              .where('id', '=', req.buildId)
              .execute();
          }
          await events.append(
            {
              type: 'template.published',
              tenantId: who.tenantId,
              data: { name: req.name, version: version.version, versionId: version.id, snapshotId: snap.id, buildId: req.buildId ?? null },
            },
            { clock, trx },
          );
          return version;
        });
      } catch (err) {
        // Two publications of one name raced for the same version number: the loser takes the next one.
        if (!isUniqueViolation(err) || attempt >= 3) throw err;
      }
    }
    if (snap.name === null) await sandboxes.nameSnapshot(who, snap.id, pinName(row.name, row.version), { pinForTemplate: true });
    // The pool, if the template has one, holds the previous version: its node replaces it with this one.
    await this.#pushPool(who.tenantId, req.name);
    return toTemplateVersion(row);
  }

  /**
   * PATCH /v1/templates/{name}: how many warmed VMs of the newest version its node keeps, and (operator keys only)
   * whether every tenant may use it. Only the template's own tenant changes it. The role is checked first, so a key
   * that may not publish learns nothing about the name.
   */
  async update(who: Principal, name: string, body: { warmPoolSize?: number; public?: boolean }): Promise<Template> {
    const { db, pools } = this.deps;
    if (body.public !== undefined && who.role !== 'operator') {
      throw new SandglassError('permission_denied', 'Only an operator key publishes a template for every tenant.', { details: { field: 'public' } });
    }
    const newest = name.startsWith('tpl_') ? undefined : await findTemplateVersion(db, who.tenantId, name);
    if (!newest) {
      const field = body.public !== undefined ? 'public' : 'warmPoolSize';
      if (await findTemplate(db, name)) {
        throw new SandglassError(
          'permission_denied',
          field === 'public'
            ? `${name} is a platform template; every tenant has it already.`
            : `${name} is a platform template; its warm pool is the node's setting (warmPoolSize in its configuration).`,
          { details: { field } },
        );
      }
      if (await findPublishedVersion(db, name)) throw publishedElsewhere(name, field);
      throw noSuchTemplate(name);
    }
    if (body.public !== undefined) await this.#setPublic(who, name, body.public);
    if (body.warmPoolSize !== undefined) await pools.set(who.tenantId, name, body.warmPoolSize);
    return toCustomTemplate(newest, body.warmPoolSize ?? (await pools.size(who.tenantId, name)), {
      public: (await publisherOf(db, name)) === who.tenantId,
      readOnly: false,
    });
  }

  /** Publishes the template for every tenant, or withdraws it; one tenant's template per name may be published. */
  async #setPublic(who: Principal, name: string, isPublic: boolean): Promise<void> {
    const { db, events, clock } = this.deps;
    try {
      await db.transaction().execute(async (trx) => {
        const holder = await publisherOf(trx, name);
        if (holder !== undefined && holder !== who.tenantId) {
          throw new SandglassError('conflict', `Another tenant's template ${name} is published already; publish this one under another name.`, {
            details: { field: 'public' },
          });
        }
        if (isPublic === (holder !== undefined)) return;
        if (isPublic)
          await trx
            .insertInto('published_templates')
            .values({ name, tenant_id: who.tenantId, published_at: toIso(clock.nowMs()) })
            .execute();
        else await trx.deleteFrom('published_templates').where('name', '=', name).execute();
        await events.append(
          { type: 'template.visibility_changed', tenantId: who.tenantId, data: { name, public: isPublic, keyId: who.keyId } },
          { clock, trx },
        );
      });
    } catch (err) {
      // Two publications of one name raced: the loser is told as if it had come second.
      if (!isUniqueViolation(err)) throw err;
      throw new SandglassError('conflict', `Another tenant's template ${name} is published already; publish this one under another name.`, {
        details: { field: 'public' },
      });
    }
  }

  /** A pool change reaches its node now when it can; a node that cannot be told gets it at its next registration. */
  async #pushPool(tenantId: string, name: string): Promise<void> {
    await this.deps.pools.push(tenantId, name).catch(() => undefined);
  }

  /**
   * Deletes every version of `name` (or one). Their snapshots lose the pin the versions gave them and go back to the
   * retention of their sandbox's history; sandboxes created from them, and those sandboxes' snapshots, are their own.
   */
  async delete(who: Principal, name: string, version?: number): Promise<void> {
    const { db, events, clock, sandboxes } = this.deps;
    let q = db.selectFrom('template_versions').selectAll().where('tenant_id', '=', who.tenantId).where('name', '=', name);
    if (version !== undefined) q = q.where('version', '=', version);
    const rows = await q.execute();
    if (rows.length === 0) {
      if (version !== undefined && (await findTemplateVersion(db, who.tenantId, name))) {
        throw new SandglassError('template_not_found', `Template ${name} has no version ${version}.`, { details: { field: 'version' } });
      }
      if (await findTemplate(db, name)) throw new SandglassError('permission_denied', `${name} is a platform template; it cannot be deleted through the API.`);
      if (await findPublishedVersion(db, name)) throw publishedElsewhere(name, 'name');
      throw noSuchTemplate(name);
    }
    const left = await db.selectFrom('template_versions').select('id').where('tenant_id', '=', who.tenantId).where('name', '=', name).execute();
    await db.transaction().execute(async (trx) => {
      // With its last version the template is gone for every tenant: a later template of that name starts private.
      if (left.length === rows.length) await trx.deleteFrom('published_templates').where('name', '=', name).where('tenant_id', '=', who.tenantId).execute();
      await trx
        .deleteFrom('template_versions')
        .where(
          'id',
          'in',
          rows.map((r) => r.id),
        )
        .execute();
      await events.append({ type: 'template.deleted', tenantId: who.tenantId, data: { name, versions: rows.map((r) => r.version) } }, { clock, trx });
    });
    // Drained when no version is left, moved to the newest one left when only the pooled version went.
    await this.#pushPool(who.tenantId, name);
    for (const r of rows) {
      if (await versionHolding(db, who.tenantId, r.snapshot_id)) continue;
      const snap = await sandboxes.getSnapshot(who, r.snapshot_id).catch(() => undefined);
      // A built version's snapshot is its last step's: the builder's pin goes once the step cache no longer holds it.
      if (snap?.name === pinName(r.name, r.version)) await sandboxes.nameSnapshot(who, r.snapshot_id, null);
      else await this.#releaseStep(who, r.snapshot_id);
    }
  }

  /** A cached step while its snapshot exists (a look-up is a use); a deleted or thinned one is forgotten here too. */
  async cacheGet(who: Principal, key: string): Promise<Schemas['TemplateCacheEntry']> {
    const { db, clock } = this.deps;
    const row = await db.selectFrom('template_cache').selectAll().where('tenant_id', '=', who.tenantId).where('key', '=', key).executeTakeFirst();
    const alive =
      row && (await db.selectFrom('snapshots').select('id').where('id', '=', row.snapshot_id).where('tenant_id', '=', who.tenantId).executeTakeFirst());
    if (!row || !alive) {
      if (row) await db.deleteFrom('template_cache').where('tenant_id', '=', who.tenantId).where('key', '=', key).execute();
      throw new SandglassError('not_found', `No cached build step ${key}.`, { details: { field: 'key' } });
    }
    await db
      .updateTable('template_cache')
      .set({ used_at: toIso(clock.nowMs()) })
      .where('tenant_id', '=', who.tenantId)
      .where('key', '=', key)
      .execute();
    return { key: row.key, snapshotId: row.snapshot_id, createdAt: row.created_at };
  }

  async cachePut(who: Principal, key: string, snapshotId: string): Promise<Schemas['TemplateCacheEntry']> {
    const { db, clock, sandboxes } = this.deps;
    await sandboxes.getSnapshot(who, snapshotId);
    const createdAt = toIso(clock.nowMs());
    await db
      .insertInto('template_cache')
      .values({ tenant_id: who.tenantId, key, snapshot_id: snapshotId, created_at: createdAt, used_at: createdAt })
      .onConflict((oc) => oc.columns(['tenant_id', 'key']).doUpdateSet({ snapshot_id: snapshotId, created_at: createdAt, used_at: createdAt }))
      .execute();
    await this.#evictSteps(who);
    return { key, snapshotId, createdAt };
  }

  /**
   * Keeps the tenant's step cache within its bound, least recently used first. A step a running build may be using is
   * never evicted: every step such a build looked up or stored was used after the build started (the builder opens
   * its build before its first look-up), so nothing used since the oldest running build began is a candidate. An
   * evicted step's snapshot loses the builder's pin, unless a version or another step holds it, and goes back to its
   * build sandbox's retention.
   */
  async #evictSteps(who: Principal): Promise<void> {
    const { db } = this.deps;
    const bound = this.deps.cacheEntries ?? TEMPLATE_CACHE_ENTRIES;
    const rows = await db
      .selectFrom('template_cache')
      .select(['key', 'snapshot_id', 'used_at'])
      .where('tenant_id', '=', who.tenantId)
      .orderBy('used_at')
      .orderBy('key')
      .execute();
    if (rows.length <= bound) return;
    await this.#expireStale(db, who.tenantId);
    const oldestRunning = await db
      .selectFrom('template_builds')
      .select('started_at')
      .where('tenant_id', '=', who.tenantId)
      .where('status', '=', 'running')
      .orderBy('started_at')
      .limit(1)
      .executeTakeFirst();
    const evicted = rows.filter((r) => oldestRunning === undefined || r.used_at < oldestRunning.started_at).slice(0, rows.length - bound);
    if (evicted.length === 0) return;
    await db
      .deleteFrom('template_cache')
      .where('tenant_id', '=', who.tenantId)
      .where(
        'key',
        'in',
        evicted.map((r) => r.key),
      )
      .execute();
    for (const snapshotId of new Set(evicted.map((r) => r.snapshot_id))) await this.#releaseStep(who, snapshotId);
  }

  /** Unpins a step snapshot the builder pinned once neither a version nor a cached step holds it any more. */
  async #releaseStep(who: Principal, snapshotId: string): Promise<void> {
    const { db, sandboxes } = this.deps;
    if (await versionHolding(db, who.tenantId, snapshotId)) return;
    const cached = await db
      .selectFrom('template_cache')
      .select('key')
      .where('tenant_id', '=', who.tenantId)
      .where('snapshot_id', '=', snapshotId)
      .executeTakeFirst();
    if (cached) return;
    const snap = await sandboxes.getSnapshot(who, snapshotId).catch(() => undefined);
    if (snap?.name?.startsWith(STEP_SNAPSHOT_PREFIX)) await sandboxes.nameSnapshot(who, snapshotId, null);
  }

  /** Opens a build of `name`: one runs per name (the database's unique index holds it across replicas). */
  async startBuild(who: Principal, name: string): Promise<TemplateBuild> {
    const { db, clock } = this.deps;
    if (await findTemplate(db, name)) throw invalidArgument('name', `${name} is a platform template's name; choose another`);
    const now = toIso(clock.nowMs());
    const row: TemplateBuildRow = {
      id: newId('bld'),
      tenant_id: who.tenantId,
      name,
      status: 'running',
      started_at: now,
      finished_at: null,
      reported_at: now,
      steps: '[]',
      lines: 0,
      version_id: null,
      error: null,
    };
    try {
      await db.transaction().execute(async (trx) => {
        const running = await this.#runningBuild(trx, who.tenantId, name);
        if (running) throw buildInProgress(name, running.id);
        await trx.insertInto('template_builds').values(row).execute();
      });
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      const running = await this.#runningBuild(db, who.tenantId, name);
      throw buildInProgress(name, running?.id ?? 'unknown');
    }
    return toBuild(row);
  }

  async getBuild(who: Principal, id: string): Promise<TemplateBuild> {
    await this.#expireStale(this.deps.db, who.tenantId);
    return toBuild(await this.#build(who, id));
  }

  async listBuilds(who: Principal, name?: string): Promise<TemplateBuild[]> {
    const { db } = this.deps;
    await this.#expireStale(db, who.tenantId);
    let q = db.selectFrom('template_builds').selectAll().where('tenant_id', '=', who.tenantId);
    if (name !== undefined) q = q.where('name', '=', name);
    return (await q.orderBy('started_at', 'desc').orderBy('id', 'desc').limit(100).execute()).map(toBuild);
  }

  /** Appends the builder's lines and a step's progress; a build that has ended takes no more. */
  async report(who: Principal, id: string, body: TemplateBuildReport): Promise<void> {
    const { db, clock } = this.deps;
    const now = toIso(clock.nowMs());
    await db.transaction().execute(async (trx) => {
      const build = await this.#build(who, id, trx);
      if (build.status !== 'running') throw ended(build);
      if (new Date(build.reported_at).getTime() < clock.nowMs() - TEMPLATE_BUILD_STALE_MS) {
        await this.#expireStale(trx, who.tenantId);
        throw ended({ ...build, status: 'failed' });
      }
      const lines = body.lines ?? [];
      const keep = lines.slice(0, Math.max(0, TEMPLATE_BUILD_MAX_LINES - build.lines));
      if (keep.length > 0) {
        await trx
          .insertInto('template_build_lines')
          .values(keep.map((l, i) => ({ build_id: id, n: build.lines + i, at: now, stream: l.stream, text: l.text })))
          .execute();
      }
      let steps = JSON.parse(build.steps) as BuildStep[];
      if (body.step) {
        const step = body.step;
        if (step.index > steps.length) throw invalidArgument('step.index', `steps are reported in order: the next is ${steps.length}`);
        if (steps.length >= MAX_STEPS && step.index === steps.length) throw invalidArgument('step.index', `a build has at most ${MAX_STEPS} steps`);
        steps = [...steps.slice(0, step.index), step, ...steps.slice(step.index + 1)];
      }
      await trx
        .updateTable('template_builds')
        .set({ reported_at: now, lines: build.lines + keep.length, steps: JSON.stringify(steps) })
        .where('id', '=', id)
        .execute();
    });
  }

  async fail(who: Principal, id: string, error: Schemas['TemplateBuildError']): Promise<TemplateBuild> {
    const { db, clock } = this.deps;
    const now = toIso(clock.nowMs());
    const build = await this.#build(who, id);
    if (build.status !== 'running') throw ended(build);
    const updated = { ...build, status: 'failed' as const, finished_at: now, reported_at: now, error: JSON.stringify(error) };
    await db.updateTable('template_builds').set(updated).where('id', '=', id).where('status', '=', 'running').execute();
    return toBuild(updated);
  }

  async readLog(
    who: Principal,
    id: string,
    fromLine = 0,
  ): Promise<{ lines: Schemas['TemplateBuildLine'][]; nextLine: number; status: TemplateBuild['status'] }> {
    const { db } = this.deps;
    await this.#expireStale(db, who.tenantId);
    const build = await this.#build(who, id);
    const rows = await db
      .selectFrom('template_build_lines')
      .selectAll()
      .where('build_id', '=', id)
      .where('n', '>=', fromLine)
      .orderBy('n')
      .limit(LOG_PAGE)
      .execute();
    const lines = rows.map((r) => ({ n: r.n, at: r.at, stream: r.stream as 'stdout' | 'stderr' | 'info', text: r.text }));
    return { lines, nextLine: lines.length > 0 ? lines[lines.length - 1]!.n + 1 : Math.max(fromLine, 0), status: build.status };
  }

  async #build(who: Principal, id: string, db: Kysely<Schema> | Transaction<Schema> = this.deps.db): Promise<TemplateBuildRow> {
    const row = await db.selectFrom('template_builds').selectAll().where('id', '=', id).where('tenant_id', '=', who.tenantId).executeTakeFirst();
    if (!row) throw noSuchBuild(id);
    return row;
  }

  /** The running build of a name, once any stale one has been ended. */
  async #runningBuild(db: Kysely<Schema> | Transaction<Schema>, tenantId: string, name: string): Promise<TemplateBuildRow | undefined> {
    await this.#expireStale(db, tenantId, name);
    return db
      .selectFrom('template_builds')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .where('status', '=', 'running')
      .executeTakeFirst();
  }

  async #expireStale(db: Kysely<Schema> | Transaction<Schema>, tenantId: string, name?: string): Promise<void> {
    const { clock } = this.deps;
    let q = db
      .updateTable('template_builds')
      .set({
        status: 'failed',
        finished_at: toIso(clock.nowMs()),
        error: JSON.stringify({ message: `the builder stopped reporting for ${TEMPLATE_BUILD_STALE_MS / 1000} s; nothing was published` }),
      })
      .where('tenant_id', '=', tenantId)
      .where('status', '=', 'running')
      .where('reported_at', '<', toIso(clock.nowMs() - TEMPLATE_BUILD_STALE_MS));
    if (name !== undefined) q = q.where('name', '=', name);
    await q.execute();
  }
}

function buildInProgress(name: string, buildId: string): SandglassError {
  return new SandglassError(
    'template_build_in_progress',
    `A build of ${name} is running (${buildId}); wait for it or follow it with \`sandglass template logs ${buildId} -f\`.`,
    {
      details: { field: 'name', buildId },
    },
  );
}

function ended(build: Pick<TemplateBuildRow, 'id' | 'status'>): SandglassError {
  return new SandglassError('conflict', `Build ${build.id} has ended (${build.status}); it takes no more reports.`, { details: { field: 'id' } });
}
