// `sandglass up`: the embedded single-node deployment — control plane and one gateway in one process, SQLite, local storage.
import { chmodSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger, homeLayout, loadNodeSecret, lockHome, systemClock } from '@sandglass/core';
import { openDatabase } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import {
  Gateway,
  BASE_TEMPLATE,
  DEFAULT_PORT_DOMAIN,
  DEFAULT_WARM_POOL,
  createDataPlaneServer,
  createInternalServer,
  listenOnSocket,
} from '@sandglass/gateway';
import { ChunkStore, LocalDiskBackend } from '@sandglass/chunkstore';
import { LocalKeyring, TenantKeys } from '@sandglass/kms';
import { DEFAULT_RETENTION, parseRetention } from '@sandglass/snapshots';
import { createControlPlane, bootstrapLocal, dbTemplateRegistry, upsertTemplate, singleGateway, SecretStore } from '@sandglass/control-plane';
import { reconcileNode } from './reconcile.js';
import { DEFAULT_REVOKED_RETENTION_S, purgeRevokedTenants } from './revoked-retention.js';
import { progressPrinter } from './progress.js';
import { prepareNode } from './accel.js';
import { consoleLimitsFromEnv, egressFromEnv, healthFromEnv, intFromEnv, recordingCapFromEnv } from './env.js';

/** The one node of `sandglass up`. */
const LOCAL_NODE_ID = 'local';

export interface UpOptions {
  port?: number;
  host?: string;
  home?: string;
  /** Port of the gateway's data plane; default port + 1. */
  gatewayPort?: number;
  /** Warmed base-template restores kept ready (default SANDGLASS_WARM_POOL or 2; 0 turns the pool off). */
  warmPoolSize?: number;
}

export interface Running {
  url: string;
  gatewayUrl: string;
  adminKeyFile: string;
  /** The node's gateway, for benchmarks that measure below the HTTP API (e.g. the agent's own ping). */
  gateway: Gateway;
  stop(): Promise<void>;
}

export async function start(opts: UpOptions = {}): Promise<Running> {
  const layout = homeLayout(opts.home);
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 7070;
  const gatewayPort = opts.gatewayPort ?? port + 1;
  const log = createLogger('sandglass');
  const clock = systemClock;
  // One home, one server: locked before anything in it is touched, so a second `up` refuses instead of taking over
  // the database and the first one's VMs. VMs never need to enter the home: the jail mirrors what they read.
  mkdirSync(layout.root, { recursive: true, mode: 0o700 });
  const homeLock = lockHome(layout.root);
  for (const d of [layout.root, layout.artifacts, layout.run, layout.store, layout.keys]) mkdirSync(d, { recursive: true, mode: 0o700 });
  chmodSync(layout.root, 0o700);
  // Before minutes of image building: a node secret that is not exactly 32 bytes stops start-up here, naming the file.
  const secret = loadNodeSecret(`${layout.root}/node-secret`);

  const progress = progressPrinter();
  const { image, kernelArgs, accel } = await prepareNode(layout, log, progress);

  const { db, close: closeDb } = await openDatabase({ url: `sqlite:${layout.database}` });
  const events = new EventLog(db);
  const keys = new LocalKeyring({ dir: layout.keys });
  // Each tenant's data keys come from its own provider (`sandglass keys use`): the keyring above, or its PKCS#11 HSM.
  const tenantKeys = new TenantKeys({ dir: layout.keys, keyring: keys, clock, pkcs11TimeoutMs: intFromEnv('SANDGLASS_PKCS11_TIMEOUT_MS', 5_000, 1, 600_000) });
  const store = new ChunkStore({ backend: new LocalDiskBackend(layout.store), keys: tenantKeys, clock });
  const secretStore = new SecretStore({ db, keys: tenantKeys, events, clock });
  const retention = process.env.SANDGLASS_RETENTION ? parseRetention(JSON.parse(process.env.SANDGLASS_RETENTION)) : DEFAULT_RETENTION;
  const gateway = new Gateway({
    home: layout,
    image,
    kernelArgs,
    accel,
    events: { append: (e) => events.append(e, { clock }) },
    nodeSecret: secret,
    clock,
    logger: log,
    health: healthFromEnv(),
    warmPoolSize: opts.warmPoolSize ?? intFromEnv('SANDGLASS_WARM_POOL', DEFAULT_WARM_POOL, 0, 64),
    store,
    keys: tenantKeys,
    keyPollIntervalMs: intFromEnv('SANDGLASS_KEY_POLL_INTERVAL_MS', 2_000, 100, 3_600_000),
    // Templates live in the store like any snapshot, named by the database: the node-local copy is a cache.
    templateRegistry: { registry: dbTemplateRegistry(db, { clock }), nodeId: LOCAL_NODE_ID },
    retention,
    secrets: secretStore,
    egress: egressFromEnv(),
    recordingCapBytes: recordingCapFromEnv(),
    captureConcurrency: intFromEnv('SANDGLASS_CAPTURE_CONCURRENCY', 2, 1, 64),
    // Guest memory admitted on this node; unset, 75 % of the host's memory less the image cache (docs/design/density.md).
    guestMemoryBudgetMib: process.env.SANDGLASS_GUEST_MEMORY_BUDGET_MIB ? intFromEnv('SANDGLASS_GUEST_MEMORY_BUDGET_MIB', 0, 1, 1 << 30) : undefined,
    snapshotIndex: {
      all: async () =>
        (
          await db
            .selectFrom('snapshots')
            .innerJoin('sandboxes', 'sandboxes.id', 'snapshots.sandbox_id')
            .select(['snapshots.id', 'snapshots.tenant_id', 'snapshots.sandbox_id', 'snapshots.taken_at', 'snapshots.pinned', 'sandboxes.state'])
            .orderBy('snapshots.taken_at', 'asc')
            .execute()
        ).map((r) => ({ id: r.id, tenantId: r.tenant_id, sandboxId: r.sandbox_id, takenAt: r.taken_at, pinned: r.pinned === 1, sandboxState: r.state })),
      thinnable: async (snapshotId) => (await db.selectFrom('snapshots').select('pinned').where('id', '=', snapshotId).executeTakeFirst())?.pinned === 0,
    },
  });
  await upsertTemplate(db, { name: BASE_TEMPLATE.name, status: 'building', memoryMib: BASE_TEMPLATE.memoryMib }, { clock });
  const tpl = await gateway.ensureBaseTemplate((p) => progress.update(p));
  progress.finish();
  await upsertTemplate(db, { name: BASE_TEMPLATE.name, status: 'ready', memoryMib: BASE_TEMPLATE.memoryMib, artifactKey: tpl.key }, { clock });

  const gatewayApp = await createDataPlaneServer(gateway);
  await gatewayApp.listen({ port: gatewayPort, host });
  const gatewayUrl = `http://${host}:${gatewayPort}`;
  // The internal API never shares the data plane's port: a unix socket in a directory only this user can enter
  // (VMs never see the home at all: their jail mirrors only what they read).
  const internalDir = join(layout.root, 'internal');
  mkdirSync(internalDir, { recursive: true, mode: 0o700 });
  chmodSync(internalDir, 0o700);
  const internalSocket = join(internalDir, 'gateway.sock');
  const internalApp = await createInternalServer(gateway);
  await listenOnSocket(internalApp, internalSocket);

  // VMs of a previous run died with its process: their sandboxes go back to their last snapshot (paused), or fail.
  await reconcileNode(db, events, { liveIds: new Set(gateway.sandboxes.keys()), clock });
  // Retention and GC: thin old snapshots, then sweep chunks no manifest references.
  const maintenanceMs = intFromEnv('SANDGLASS_MAINTENANCE_INTERVAL_S', 600, 1, 86_400) * 1000;
  const revokedRetentionMs = intFromEnv('SANDGLASS_REVOKED_RETENTION_S', DEFAULT_REVOKED_RETENTION_S, 0, 10 * 365 * 86_400) * 1000;
  const maintenance = setInterval(() => {
    gateway.snapshots.maintain().catch((err: unknown) => log.warn({ err: (err as Error).message }, 'snapshot maintenance failed'));
    purgeRevokedTenants({
      keys: tenantKeys,
      store,
      events: { append: (e) => events.append(e, { clock }) },
      clock,
      logger: log,
      retentionMs: revokedRetentionMs,
    }).catch((err: unknown) => log.warn({ err: (err as Error).message }, "reclaiming revoked tenants' stores failed"));
  }, maintenanceMs);
  maintenance.unref();

  await bootstrapLocal({ db, events, keyFile: layout.adminKeyFile, clock });
  const cp = await createControlPlane({
    db,
    events,
    gateways: singleGateway({ id: LOCAL_NODE_ID, url: gatewayUrl, internalUrl: `unix:${internalSocket}` }),
    nodeSecret: secret,
    clock,
    logger: log,
    keys: tenantKeys,
    keyAdmin: tenantKeys,
    auditSigner: keys,
    console: consoleLimitsFromEnv(),
    // The gateway's (createDataPlaneServer reads the same variable): E2B's getHost names its host-name form.
    portDomain: process.env.SANDGLASS_PORT_DOMAIN ?? DEFAULT_PORT_DOMAIN,
  });
  // One process: a request to a paused sandbox's port or envd can resume it here (autoResume).
  gateway.waker = { wake: async (id, credential) => ((await cp.wake(id, credential)).gatewayId === LOCAL_NODE_ID ? 'here' : 'elsewhere') };
  await cp.listen(port, host);
  const url = `http://${host}:${port}`;
  writeFileSync(layout.serverFile, JSON.stringify({ url, gatewayUrl, internalSocket, pid: process.pid, adminKeyFile: layout.adminKeyFile }, null, 2) + '\n', {
    mode: 0o600,
  });

  let stopping: Promise<void> | undefined;
  return {
    url,
    gatewayUrl,
    adminKeyFile: layout.adminKeyFile,
    gateway,
    stop: () =>
      (stopping ??= (async () => {
        rmSync(layout.serverFile, { force: true });
        clearInterval(maintenance);
        await cp.close();
        await gateway.shutdown();
        await gatewayApp.close();
        await internalApp.close();
        await closeDb();
        await tenantKeys.close();
        homeLock.release();
      })()),
  };
}

/** Runs until SIGINT/SIGTERM, then stops every VM cleanly. */
export async function up(opts: UpOptions = {}): Promise<void> {
  const t0 = performance.now();
  const running = await start(opts);
  process.stdout.write(
    `Sandglass is up in ${((performance.now() - t0) / 1000).toFixed(1)} s\n` +
      `  API:      ${running.url}\n` +
      `  gateway:  ${running.gatewayUrl}\n` +
      `  console:  ${running.url}/console (sign in with an API key)\n` +
      `  API key:  ${running.adminKeyFile} (the CLI and SDK read it; or set SANDGLASS_URL and SANDGLASS_API_KEY)\n` +
      `  E2B SDK:  E2B_API_URL=${running.url}/e2b E2B_SANDBOX_URL=${running.gatewayUrl}/e2b E2B_API_KEY=<a Sandglass API key> (docs/e2b.md)\n` +
      `Stop with Ctrl-C.\n`,
  );
  await new Promise<void>((resolve) => {
    const onSignal = (sig: NodeJS.Signals) => {
      process.stdout.write(`\n${sig}: stopping sandboxes…\n`);
      running.stop().then(resolve, (err: unknown) => {
        process.stderr.write(`error while stopping: ${(err as Error).message}\n`);
        resolve();
      });
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}
