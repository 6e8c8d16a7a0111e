// `sandglass gateway`: one node of a cluster — VMs, data plane and internal API — reaching the control plane only through its node API.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger, homeLayout, invalidArgument, loadNodeSecret, lockHome, systemClock } from '@sandglass/core';
import {
  Gateway,
  DEFAULT_WARM_POOL,
  Membership,
  NodeApiClient,
  Outbox,
  RemoteKeys,
  RemoteSecrets,
  RemoteTemplateRegistry,
  RemoteCaptureGate,
  createDataPlaneServer,
  EnvdForwarder,
  createInternalServer,
  type MemberNode,
} from '@sandglass/gateway';
import { ChunkStore, openChunkBackend } from '@sandglass/chunkstore';
import { newNodeTransportKeys } from '@sandglass/kms';
import { DEFAULT_RETENTION } from '@sandglass/snapshots';
import { progressPrinter } from './progress.js';
import { prepareNode } from './accel.js';
import { egressFromEnv, healthFromEnv, intFromEnv, recordingCapFromEnv } from './env.js';

export interface GatewayNodeOptions {
  /** The node's home (artifacts, run directories, outbox); default SANDGLASS_HOME. */
  home?: string;
  /** The control plane's API base URL (http:// or https://); the node API is under /node/v1 on it. */
  controlPlaneUrl: string;
  /** Stable across restarts of this host: the control plane knows the node by it. */
  nodeId: string;
  /**
   * The cluster's node secret (64 hex digits), the one the control plane has; never created here. Still what the
   * gateway's internal API bearer and data-plane access tokens derive from; the node API takes the node's own key.
   */
  nodeSecretFile: string;
  /** This node's own credential (JSON, mode 0600): written at enrolment, read at every later start; default <home>/node-key. */
  nodeKeyFile?: string;
  /** The one-time token the operator issued for this node id (`sandglass nodes enroll`); needed only to enrol. */
  enrolToken?: string;
  /** The chunk store every node and the control plane share: s3://bucket/prefix, file:/abs/path or /abs/path. */
  store: string;
  /** host:port of the data plane (SDKs connect to it). */
  listen: string;
  /** host:port of the internal API (the control plane calls it with the internal bearer). */
  internalListen: string;
  /** What the control plane hands clients and calls; default http:// on the listen addresses. */
  advertiseUrl?: string;
  advertiseInternalUrl?: string;
  /** PEM files of CAs trusted for an https:// control plane. */
  controlPlaneCaFiles?: string[];
  warmPoolSize?: number;
}

export interface RunningGatewayNode {
  nodeId: string;
  url: string;
  internalUrl: string;
  /** Stops every VM without ending its sandbox (the control plane moves them), then delivers what the outbox holds. */
  stop(): Promise<void>;
}

const NODE_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** A clean stop waits this long for the outbox to reach the control plane; what is left is delivered by the next run. */
const STOP_DRAIN_MS = 5000;
/** A wake may be a whole resume, bounded on the control plane's side by its own restore timeout (120 s): a little more. */
const WAKE_TIMEOUT_MS = 130_000;

/** `host:port` or `[v6]:port` → the parts; anything else stops start-up naming the flag. */
export function parseListen(flag: string, value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(value);
  const port = Number(m?.[3]);
  if (!m || !Number.isInteger(port) || port < 1 || port > 65535) throw invalidArgument(flag, `must be host:port (or [v6]:port), got ${JSON.stringify(value)}`);
  return { host: m[1] ?? m[2]!, port };
}

function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

function httpUrl(addr: { host: string; port: number }): string {
  return `http://${addr.host.includes(':') ? `[${addr.host}]` : addr.host}:${addr.port}`;
}

/** The cluster's secret or nothing: a node that made its own would fail every call with the control plane. */
function clusterNodeSecret(file: string): Buffer {
  if (!existsSync(file)) {
    throw invalidArgument('--node-secret-file', `${file} does not exist: copy the control plane's node-secret to this host (mode 0600)`);
  }
  if ((statSync(file).mode & 0o077) !== 0) throw invalidArgument('--node-secret-file', `${file} is open to other users: chmod 600 it`);
  return loadNodeSecret(file);
}

/** What a node keeps of its enrolment: the key it speaks with and the private half of its transport key pair. */
interface NodeKeyFile {
  nodeId: string;
  nodeKey: string;
  transportPrivateKey: string;
}

/**
 * This node's credential: the key file when it exists (it must be this node id's, and private), else an enrolment
 * with the operator's one-time token, whose answer is written there before anything else uses it.
 */
async function nodeCredential(opts: GatewayNodeOptions, file: string, ca: string[] | undefined): Promise<NodeKeyFile> {
  if (existsSync(file)) {
    if ((statSync(file).mode & 0o077) !== 0) throw invalidArgument('--node-key-file', `${file} is open to other users: chmod 600 it`);
    let parsed: Partial<NodeKeyFile>;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<NodeKeyFile>;
    } catch {
      parsed = {};
    }
    if (typeof parsed.nodeKey !== 'string' || typeof parsed.transportPrivateKey !== 'string') {
      throw invalidArgument(
        '--node-key-file',
        `${file} is not a node key file: remove it and enrol again with a new token (sandglass nodes enroll ${opts.nodeId})`,
      );
    }
    if (parsed.nodeId !== opts.nodeId) {
      throw invalidArgument(
        '--node-key-file',
        `${file} holds the key of node ${parsed.nodeId}, not ${opts.nodeId}: a key speaks only for the node it was issued to`,
      );
    }
    return parsed as NodeKeyFile;
  }
  if (!opts.enrolToken) {
    throw invalidArgument(
      '--enrol-token',
      `node ${opts.nodeId} has not enrolled (no ${file}): run \`sandglass nodes enroll ${opts.nodeId}\` with the operator key and pass the token it prints`,
    );
  }
  const transport = newNodeTransportKeys();
  const anonymous = new NodeApiClient({ baseUrl: opts.controlPlaneUrl, nodeId: opts.nodeId, ca, retries: 0 });
  try {
    const { nodeKey } = await anonymous.enrol(opts.enrolToken, transport.publicKey);
    const cred: NodeKeyFile = { nodeId: opts.nodeId, nodeKey, transportPrivateKey: transport.privateKey };
    writeFileSync(file, `${JSON.stringify(cred)}\n`, { mode: 0o600, flag: 'wx' });
    return cred;
  } finally {
    anonymous.close();
  }
}

/** Template keys cached on this node (`artifacts/template-<key>/`), for placement. */
function cachedTemplateKeys(artifactsDir: string): string[] {
  try {
    return readdirSync(artifactsDir)
      .map((n) => /^template-([0-9a-f]{16})$/.exec(n)?.[1])
      .filter((k): k is string => k !== undefined)
      .slice(0, 1000);
  } catch {
    return [];
  }
}

export async function startGateway(opts: GatewayNodeOptions): Promise<RunningGatewayNode> {
  if (!NODE_ID.test(opts.nodeId))
    throw invalidArgument('--node-id', `must be 1-63 lowercase letters, digits or "-", starting with a letter or digit; got ${JSON.stringify(opts.nodeId)}`);
  const listen = parseListen('--listen', opts.listen);
  const internalListen = parseListen('--internal-listen', opts.internalListen);
  const url = opts.advertiseUrl ?? httpUrl(listen);
  const internalUrl = opts.advertiseInternalUrl ?? httpUrl(internalListen);
  const layout = homeLayout(opts.home);
  const log = createLogger('sandglass-gateway');
  const clock = systemClock;
  // Bearers travel in these requests: in clear text they belong on loopback or a network only the cluster reaches.
  const cpUrl = URL.canParse(opts.controlPlaneUrl) ? new URL(opts.controlPlaneUrl) : undefined;
  if (cpUrl?.protocol !== 'http:' && cpUrl?.protocol !== 'https:') throw invalidArgument('--control-plane', 'must be an http:// or https:// URL');
  if (cpUrl.protocol === 'http:' && !isLoopback(cpUrl.hostname)) {
    log.warn({ controlPlaneUrl: opts.controlPlaneUrl }, 'the control plane is reached over plain http: the node key crosses the network in clear');
  }
  if (!isLoopback(internalListen.host)) {
    log.warn(
      { internalListen: opts.internalListen },
      'the internal API listens beyond loopback over plain http: keep it on a network only the control plane reaches',
    );
  }

  mkdirSync(layout.root, { recursive: true, mode: 0o700 });
  const homeLock = lockHome(layout.root);
  for (const d of [layout.root, layout.artifacts, layout.run]) mkdirSync(d, { recursive: true, mode: 0o700 });
  // Everything that can be wrong in the settings fails here, before minutes of image building.
  const secret = clusterNodeSecret(opts.nodeSecretFile);
  const backend = openChunkBackend(opts.store);
  const ca = opts.controlPlaneCaFiles?.map((f) => readFileSync(f, 'utf8'));
  const credential = await nodeCredential(opts, opts.nodeKeyFile ?? join(layout.root, 'node-key'), ca);
  const client = new NodeApiClient({ baseUrl: opts.controlPlaneUrl, nodeId: opts.nodeId, nodeKey: credential.nodeKey, ca });

  const progress = progressPrinter();
  const { image, kernelArgs, accel } = await prepareNode(layout, log, progress);

  // Events from a previous run that never reached the control plane go first.
  const outbox = new Outbox({ dir: join(layout.root, 'outbox'), sink: client, clock, logger: log });
  await outbox.start();
  // Asked before every boot and polled for each tenant running here, so a key revoked anywhere (any replica, the HSM) stops its sandboxes.
  const keys = new RemoteKeys({ client, transportPrivateKey: credential.transportPrivateKey, clock });
  const store = new ChunkStore({ backend, keys, clock });
  // Leftover VMs of a dead predecessor are killed by the Gateway itself (its jailers' records); their sandboxes are
  // the control plane's to move: this node does not know which ones it still owns until the first heartbeat.
  const gateway = new Gateway({
    home: layout,
    image,
    kernelArgs,
    accel,
    events: outbox,
    nodeSecret: secret,
    clock,
    logger: log,
    health: healthFromEnv(),
    warmPoolSize: opts.warmPoolSize ?? intFromEnv('SANDGLASS_WARM_POOL', DEFAULT_WARM_POOL, 0, 64),
    store,
    keys,
    keyPollIntervalMs: intFromEnv('SANDGLASS_KEY_POLL_INTERVAL_MS', 2_000, 100, 3_600_000),
    templateRegistry: { registry: new RemoteTemplateRegistry(client), nodeId: opts.nodeId },
    // Retention and GC run in the control plane (no snapshotIndex here); captures take its gate against the sweep.
    captureGate: new RemoteCaptureGate({ client, logger: log }),
    retention: DEFAULT_RETENTION,
    secrets: new RemoteSecrets({ client, transportPrivateKey: credential.transportPrivateKey }),
    egress: egressFromEnv(),
    recordingCapBytes: recordingCapFromEnv(),
    captureConcurrency: intFromEnv('SANDGLASS_CAPTURE_CONCURRENCY', 2, 1, 64),
  });
  // A revoked tenant's keys leave this node's memory with its sandboxes, whoever told it (the control plane, the poll).
  gateway.revocation.onRevoked((tenantId) => keys.forget(tenantId));
  await gateway.ensureBaseTemplate((p) => progress.update(p));
  progress.finish();

  const internalApp = await createInternalServer(gateway);
  await internalApp.listen(internalListen);
  const node: MemberNode = {
    sandboxIds: () => [...gateway.sandboxes.keys()],
    memory: () => gateway.memory(),
    captureCapacityPerMin: () => gateway.snapshots.scheduler.capacityPerMinute(),
    templateKeys: () => cachedTemplateKeys(layout.artifacts),
    evict: (id) => gateway.killSandbox(id),
    evictAll: () => gateway.evictAll(),
    revokeKeys: (keyIds, untilMs) => gateway.revokedKeys.add(keyIds, untilMs),
  };
  const membership = new Membership({ client, node, url, internalUrl, logger: log });
  // Registered before the data plane serves: the keys revoked while their tokens may live arrive with registration.
  await membership.start();
  // A request with a credential for a sandbox this node does not run: the control plane verifies the credential and
  // resumes the sandbox when it opted in (autoResume); it answers the node that runs it, this one or another.
  gateway.waker = {
    wake: async (id, credential) =>
      (await client.sandboxWake(id, credential, { timeoutMs: WAKE_TIMEOUT_MS })).gatewayId === opts.nodeId ? 'here' : 'elsewhere',
  };
  // E2B's SDK sends every envd request to one URL: one for a sandbox another node runs is forwarded there.
  const envdForward = new EnvdForwarder({ nodeId: opts.nodeId, locate: (id) => client.sandboxLocation(id, { timeoutMs: 3000 }), clock });
  const dataApp = await createDataPlaneServer(gateway, { envdForward });
  await dataApp.listen(listen);
  writeFileSync(
    layout.serverFile,
    `${JSON.stringify({ nodeId: opts.nodeId, gatewayUrl: url, internalUrl, controlPlaneUrl: opts.controlPlaneUrl, pid: process.pid }, null, 2)}\n`,
    { mode: 0o600 },
  );

  let stopping: Promise<void> | undefined;
  return {
    nodeId: opts.nodeId,
    url,
    internalUrl,
    stop: () =>
      (stopping ??= (async () => {
        rmSync(layout.serverFile, { force: true });
        await membership.stop();
        await gateway.shutdown({ end: false });
        await dataApp.close();
        envdForward.close();
        await internalApp.close();
        if (!(await outbox.drain(STOP_DRAIN_MS)))
          log.warn({ bytes: outbox.undeliveredBytes() }, 'stopping with events not yet delivered; the next start delivers them');
        await outbox.close();
        client.close();
        homeLock.release();
      })()),
  };
}

/** Runs until SIGINT/SIGTERM, then stops every VM (the control plane moves their sandboxes) and exits. */
export async function gatewayNode(opts: GatewayNodeOptions): Promise<void> {
  const t0 = performance.now();
  const running = await startGateway(opts);
  process.stdout.write(
    `Sandglass gateway ${running.nodeId} is up in ${((performance.now() - t0) / 1000).toFixed(1)} s\n` +
      `  data plane:   ${running.url}\n` +
      `  internal API: ${running.internalUrl}\n` +
      `  control plane: ${opts.controlPlaneUrl}\n` +
      `Stop with Ctrl-C.\n`,
  );
  await new Promise<void>((resolve) => {
    const onSignal = (sig: NodeJS.Signals) => {
      process.stdout.write(`\n${sig}: stopping VMs (their sandboxes stay for the control plane to move)…\n`);
      running.stop().then(resolve, (err: unknown) => {
        process.stderr.write(`error while stopping: ${(err as Error).message}\n`);
        resolve();
      });
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}
