// `Template`: custom templates of the caller's tenant: build one from a spec, promote a snapshot, list, inspect, delete, read build logs.
import { ControlPlane } from './client.js';
import type { ConnectionConfig } from './config.js';
import { NotFoundError } from './errors.js';
import type { ControlPlaneReply } from './replies.js';
import { buildTemplate, type TemplateBuildOptions, type TemplateBuildResult } from './template-build.js';
import { checkName } from './template-spec.js';
import type { TemplateBuildInfo, TemplateBuildLine, TemplateDetail, TemplateInfo, TemplateVersionInfo } from './types.js';

export interface TemplateFromSnapshotOptions extends ConnectionConfig {
  /** What sandboxes created from the version get. */
  envs?: Record<string, string>;
  user?: string;
  workdir?: string;
}

export interface TemplateLogsOptions extends ConnectionConfig {
  /** Start after the lines already read. */
  fromLine?: number;
  /** Keep reading until the build ends. */
  follow?: boolean;
  /** Each line as it is read; without it, lines are collected and returned. */
  onLine?: (line: TemplateBuildLine) => void;
  /** How often a followed build is asked for more; default 1000. */
  intervalMs?: number;
}

const templatePath = (name: string) => `/v1/templates/${encodeURIComponent(name)}`;

export class Template {
  private constructor() {}

  /**
   * Builds a version of the template `name` from a spec (a `file`, YAML or Dockerfile, or a `spec` object) and a
   * context directory: a sandbox boots `from`, runs each step with its output streamed to `onLog` and the build's
   * log, and is snapshotted after each; a step whose key (its inputs, the files it copies, every step before it)
   * was built before is taken from the cache instead. A failed step fails the build (template_build_failed naming the
   * step) and publishes nothing; one build runs per name at a time (template_build_in_progress).
   */
  static async build(opts: TemplateBuildOptions): Promise<TemplateBuildResult> {
    const { apiUrl, apiKey, requestTimeoutMs } = opts;
    return buildTemplate(await ControlPlane.open({ apiUrl, apiKey, requestTimeoutMs }), opts);
  }

  /** Every template the caller can create from: the platform's and the tenant's own. */
  static async list(config?: ConnectionConfig): Promise<TemplateInfo[]> {
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listTemplates'>>('GET', '/v1/templates')).templates;
  }

  /** A template with its versions, newest first; template_not_found when there is none. */
  static async get(name: string, config?: ConnectionConfig): Promise<TemplateDetail> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'getTemplate'>>('GET', templatePath(name));
  }

  static async exists(name: string, config?: ConnectionConfig): Promise<boolean> {
    try {
      await Template.get(name, config);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /**
   * Keeps `warmPoolSize` VMs of the template's newest version restored and warmed on a node (0: none, at most 8), so a
   * create from it is a hand-over like a create from base; answers the template with its pool size.
   */
  static async setWarmPool(name: string, warmPoolSize: number, config?: ConnectionConfig): Promise<TemplateInfo> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'updateTemplate'>>('PATCH', templatePath(name), { json: { warmPoolSize } });
  }

  /**
   * Publishes the template for every tenant (`true`), or withdraws it (`false`); an operator key only, on a template
   * of its own tenant. Every tenant then lists it and creates from it by name or version id; none but its own
   * tenant changes or deletes it, and a tenant's own template of the same name wins over it.
   */
  static async setPublic(name: string, isPublic: boolean, config?: ConnectionConfig): Promise<TemplateInfo> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'updateTemplate'>>('PATCH', templatePath(name), { json: { public: isPublic } });
  }

  /** Deletes a template's versions, or one with `version`; sandboxes and snapshots made from them keep working. */
  static async delete(name: string, opts: ConnectionConfig & { version?: number } = {}): Promise<void> {
    const { version, ...config } = opts;
    const cp = await ControlPlane.open(config);
    await cp.request('DELETE', templatePath(name), { query: { version } });
  }

  /** Promotes a snapshot of the tenant to a new version of `name` (created on first use). */
  static async fromSnapshot(name: string, snapshotId: string, opts: TemplateFromSnapshotOptions = {}): Promise<TemplateVersionInfo> {
    const { envs, user, workdir, ...config } = opts;
    checkName(name, 'name');
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'createTemplateVersion'>>('POST', '/v1/templates', { json: { name, snapshotId, envs, user, workdir } });
  }

  /** The tenant's builds, newest first; of one template with `name`. */
  static async builds(opts: ConnectionConfig & { name?: string } = {}): Promise<TemplateBuildInfo[]> {
    const { name, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listTemplateBuilds'>>('GET', '/v1/template-builds', { query: { name } })).builds;
  }

  static async getBuild(buildId: string, config?: ConnectionConfig): Promise<TemplateBuildInfo> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'getTemplateBuild'>>('GET', `/v1/template-builds/${encodeURIComponent(buildId)}`);
  }

  /**
   * A build's log: `bld_…`, or a template name for its newest build. With `follow`, reads on until the build has
   * ended and every line is read. Answers the lines (those not given to onLine) and the build's status at the end.
   */
  static async logs(buildOrName: string, opts: TemplateLogsOptions = {}): Promise<{ lines: TemplateBuildLine[]; status: TemplateBuildInfo['status'] }> {
    const { fromLine, follow, onLine, intervalMs, ...config } = opts;
    const cp = await ControlPlane.open(config);
    let id = buildOrName;
    if (!buildOrName.startsWith('bld_')) {
      const { builds } = await cp.json<ControlPlaneReply<'listTemplateBuilds'>>('GET', '/v1/template-builds', { query: { name: buildOrName } });
      if (!builds[0]) throw new NotFoundError('not_found', `template '${buildOrName}' has no builds`, { details: { field: 'name' } });
      id = builds[0].id;
    }
    const collected: TemplateBuildLine[] = [];
    let next = fromLine ?? 0;
    for (;;) {
      const page = await cp.json<ControlPlaneReply<'readTemplateBuildLog'>>('GET', `/v1/template-builds/${encodeURIComponent(id)}/log`, {
        query: { fromLine: next },
      });
      for (const line of page.lines) {
        if (onLine) onLine(line);
        else collected.push(line);
      }
      next = page.nextLine;
      if (page.lines.length > 0) continue;
      if (!follow || page.status !== 'running') return { lines: collected, status: page.status };
      await new Promise((resolve) => setTimeout(resolve, intervalMs ?? 1000));
    }
  }
}
