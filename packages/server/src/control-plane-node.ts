// `sandglass control-plane`: one stateless replica of the control plane of a cluster (PostgreSQL, gateways as nodes).
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createLogger, loadNodeSecret, systemClock } from '@sandglass/core';
import { openDatabase } from '@sandglass/db';
import { EventLog } from '@sandglass/events';
import { LocalKeyring, TenantKeys } from '@sandglass/kms';
import { ChunkStore, openChunkBackend } from '@sandglass/chunkstore';
import { bootstrapLocal, claimLease, createControlPlane, Maintenance, NodeDirectory, releaseLease, upsertTemplate } from '@sandglass/control-plane';
import { DEFAULT_RETENTION } from '@sandglass/snapshots';
import { consoleLimitsFromEnv, intFromEnv } from './env.js';
import { parseListen } from './gateway-node.js';
import { DEFAULT_REVOKED_RETENTION_S, purgeRevokedTenants } from './revoked-retention.js';

export interface ControlPlaneNodeOptions {
  /** `postgres://…` for a cluster (several replicas share it); `sqlite:` works for one replica. */
  db: string;
  /** host:port of the public API, which also serves the node API (/node/v1) to gateways. */
  listen: string;
  /** The cluster's node secret: created here (0600) when absent, then copied to every gateway and replica. */
  nodeSecretFile: string;
  /**
   * The local keyring (master key and wrapped tenant data keys) and the tenants' key registrations (`byok/`, with the
   * PKCS#11 module, token, key and PIN file each names): every replica must see the same directory, and the modules
   * and PIN files at the same paths.
   */
  keysDir: string;
  /** Where the operator API key is written on first start (default tenant); every replica may name the same file. */
  adminKeyFile?: string;
  /** A gateway silent for this long is declared dead and its sandboxes move (default 30). */
  deadAfterS?: number;
  /** How often gateways heartbeat (default 2). */
  heartbeatIntervalS?: number;
  /**
   * The chunk store the gateways share (s3://bucket/prefix, file:/abs/path): snapshot retention and chunk GC run here,
   * on one replica at a time. Without it nothing is thinned or collected.
   */
  store?: string;
}

export interface RunningControlPlaneNode {
  url: string;
  stop(): Promise<void>;
}

/** The base template every node builds or restores from the store; placement only needs its name and shape here. */
const BASE_TEMPLATE = { name: 'base', memoryMib: 256 } as const;

export async function startControlPlaneNode(opts: ControlPlaneNodeOptions): Promise<RunningControlPlaneNode> {
  const log = createLogger('sandglass-control-plane');
  const clock = systemClock;
  const { host, port } = parseListen('--listen', opts.listen);
  const deadAfterS = opts.deadAfterS ?? 30;
  const heartbeatIntervalS = opts.heartbeatIntervalS ?? 2;
  if (!(heartbeatIntervalS > 0 && deadAfterS >= 2 * heartbeatIntervalS)) {
    throw new Error(`--dead-after-s (${deadAfterS}) must be at least twice --heartbeat-interval-s (${heartbeatIntervalS}), which must be positive`);
  }
  const secret = loadNodeSecret(opts.nodeSecretFile);
  mkdirSync(opts.keysDir, { recursive: true, mode: 0o700 });

  // Opened first: a malformed store URL stops start-up before anything else is touched.
  const backend = opts.store === undefined ? undefined : openChunkBackend(opts.store);
  const { db, close: closeDb } = await openDatabase({ url: opts.db });
  const events = new EventLog(db);
  const keyring = new LocalKeyring({ dir: opts.keysDir });
  // Each tenant's data keys come from its own provider (`sandglass keys use`, on any replica): the keyring or its HSM.
  const keys = new TenantKeys({ dir: opts.keysDir, keyring, clock, pkcs11TimeoutMs: intFromEnv('SANDGLASS_PKCS11_TIMEOUT_MS', 5_000, 1, 600_000) });
  const nodes = new NodeDirectory({ db, clock, deadAfterMs: deadAfterS * 1000, heartbeatIntervalMs: heartbeatIntervalS * 1000 });
  if (opts.adminKeyFile) await bootstrapLocal({ db, events, keyFile: opts.adminKeyFile, clock });
  // Nodes build (or restore from the store) the base template themselves; the control plane only names it.
  await upsertTemplate(db, { name: BASE_TEMPLATE.name, status: 'ready', memoryMib: BASE_TEMPLATE.memoryMib }, { clock });
  const cp = createControlPlane({
    db,
    events,
    gateways: nodes,
    nodeSecret: secret,
    clock,
    logger: log,
    keys,
    keyAdmin: keys,
    auditSigner: keyring,
    cluster: { nodes, failoverIntervalMs: Math.max(500, (heartbeatIntervalS * 1000) / 2) },
    console: consoleLimitsFromEnv(),
    // Only when set: the gateways' port domain, which the control plane of a cluster cannot know otherwise.
    portDomain: process.env.SANDGLASS_PORT_DOMAIN,
  });
  const url = await cp.listen(port, host);
  // Every replica runs the loop; the maintenance lease lets one of them work each round.
  const maintenanceMs = intFromEnv('SANDGLASS_MAINTENANCE_INTERVAL_S', 600, 1, 86_400) * 1000;
  const store = backend && new ChunkStore({ backend, keys, clock });
  const maintenance = store && new Maintenance({ db, events, store, retention: DEFAULT_RETENTION, clock, logger: log, intervalMs: maintenanceMs });
  if (maintenance) maintenance.start();
  else log.warn('no --store: snapshot retention and chunk-store GC do not run (snapshots are never thinned)');
  // A revoked tenant's store (unreadable by anyone) is reclaimed once its retention period is over, by one replica a
  // round: the one holding the lease.
  const revokedRetentionMs = intFromEnv('SANDGLASS_REVOKED_RETENTION_S', DEFAULT_REVOKED_RETENTION_S, 0, 10 * 365 * 86_400) * 1000;
  const holder = `cp-${process.pid}-${randomBytes(4).toString('hex')}`;
  const reclaim = async (s: ChunkStore): Promise<void> => {
    // Held well past one round: a long purge must not find a second replica purging beside it.
    if (!(await claimLease(db, 'revoked-retention', holder, Math.max(maintenanceMs, 600_000), clock))) return;
    try {
      await purgeRevokedTenants({
        keys,
        store: s,
        events: { append: (e) => events.append(e, { clock }) },
        clock,
        logger: log,
        retentionMs: revokedRetentionMs,
      });
    } finally {
      await releaseLease(db, 'revoked-retention', holder).catch(() => undefined);
    }
  };
  const reclaimTimer =
    store &&
    setInterval(
      () => reclaim(store).catch((err: unknown) => log.warn({ err: (err as Error).message }, "reclaiming revoked tenants' stores failed")),
      maintenanceMs,
    );
  reclaimTimer?.unref();
  log.info({ url, deadAfterS, heartbeatIntervalS }, 'control plane replica up');
  let stopping: Promise<void> | undefined;
  return {
    url,
    stop: () =>
      (stopping ??= (async () => {
        clearInterval(reclaimTimer);
        await maintenance?.stop();
        await cp.close();
        await keys.close();
        await closeDb();
      })()),
  };
}

/** Runs until SIGINT/SIGTERM. */
export async function controlPlaneNode(opts: ControlPlaneNodeOptions): Promise<void> {
  const running = await startControlPlaneNode(opts);
  process.stdout.write(`Sandglass control plane listening on ${running.url} (node API under /node/v1)\n`);
  await new Promise<void>((resolve) => {
    const onSignal = () => {
      running.stop().then(resolve, (err: unknown) => {
        process.stderr.write(`error while stopping: ${(err as Error).message}\n`);
        resolve();
      });
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}
