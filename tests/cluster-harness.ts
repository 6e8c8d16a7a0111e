// A whole cluster on one machine, from real parts: PostgreSQL, an S3 server process, control-plane replicas behind
// haproxy, and gateways with homes, ports and /dev/shm areas of their own. Used by the multi-node test and the benchmark.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  createWriteStream,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, startPostgres, type TestPostgres } from '@sandglass/db/test-postgres';
import { startS3Server, type TestS3Server } from '@sandglass/chunkstore/test-s3';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

export interface ClusterOptions {
  /** Scratch directory for everything (database, objects, homes, logs). */
  dir: string;
  /** An existing home whose built guest artifacts the gateways reuse (the first one also its templates). */
  artifactsFrom: string;
  /** First of a block of loopback ports the cluster may use (about 20). */
  basePort: number;
  controlPlanes: number;
  gateways: number;
  deadAfterS: number;
  heartbeatIntervalS: number;
  /** Extra environment for the gateways. */
  gatewayEnv?: Record<string, string>;
  /** Give the replicas the shared store too (`--store`), so their maintenance rounds run (retention, GC, revoked tenants). */
  controlPlaneStore?: boolean;
  /** haproxy's connection limit (default 512): a fleet of simulated nodes keeps a connection each. */
  frontMaxConn?: number;
}

/** What one control-plane replica is started with (deploy/ renders the same flags: deploy/deploy.test.ts compares). */
export interface ControlPlaneArgs {
  dbUrl: string;
  listen: string;
  nodeSecretFile: string;
  keysDir: string;
  adminKeyFile: string;
  deadAfterS: number;
  heartbeatIntervalS: number;
  store?: string;
}

export function controlPlaneArgs(a: ControlPlaneArgs): string[] {
  return [
    'control-plane',
    '--db',
    a.dbUrl,
    '--listen',
    a.listen,
    '--node-secret-file',
    a.nodeSecretFile,
    '--keys-dir',
    a.keysDir,
    '--admin-key-file',
    a.adminKeyFile,
    '--dead-after-s',
    String(a.deadAfterS),
    '--heartbeat-interval-s',
    String(a.heartbeatIntervalS),
    ...(a.store ? ['--store', a.store] : []),
  ];
}

/** What one gateway is started with; `enrolToken` on its first start only (docs/deploy.md, "Enrolling a node"). */
export interface GatewayArgs {
  controlPlaneUrl: string;
  nodeId: string;
  nodeSecretFile: string;
  store: string;
  listen: string;
  internalListen: string;
  enrolToken?: string;
}

export function gatewayArgs(a: GatewayArgs): string[] {
  return [
    'gateway',
    '--control-plane',
    a.controlPlaneUrl,
    '--node-id',
    a.nodeId,
    '--node-secret-file',
    a.nodeSecretFile,
    '--store',
    a.store,
    '--listen',
    a.listen,
    '--internal-listen',
    a.internalListen,
    ...(a.enrolToken ? ['--enrol-token', a.enrolToken] : []),
  ];
}

interface Proc {
  child: ChildProcess;
  exited: Promise<number | null>;
}

export interface GatewayInfo {
  nodeId: string;
  home: string;
  url: string;
  internalUrl: string;
}

export class Cluster {
  pg?: TestPostgres;
  s3?: TestS3Server;
  dbUrl = '';
  /** Through haproxy: what SDKs and the CLI are given. */
  apiUrl = '';
  adminKey = '';
  readonly cpPorts: number[] = [];
  readonly #cps = new Map<number, Proc>();
  readonly #gateways = new Map<string, Proc>();
  /** Every gateway process ever started, so a stop leaves none behind (one started again replaces its map entry). */
  readonly #allGateways: Proc[] = [];
  readonly gatewayInfo = new Map<string, GatewayInfo>();
  #haproxy?: Proc;
  readonly #secretFile: string;
  readonly #keysDir: string;
  readonly #adminKeyFile: string;

  constructor(readonly opts: ClusterOptions) {
    mkdirSync(opts.dir, { recursive: true });
    // PostgreSQL runs as its own user (never root) and must be able to reach its directory inside this one.
    chmodSync(opts.dir, 0o711);
    this.#secretFile = join(opts.dir, 'node-secret');
    this.#keysDir = join(opts.dir, 'keys');
    this.#adminKeyFile = join(opts.dir, 'admin-key');
  }

  async start(): Promise<void> {
    const { dir, basePort } = this.opts;
    this.pg = await startPostgres({ dir: join(dir, 'pg') });
    this.dbUrl = await createTestDatabase(this.pg.url, 'sandglass_cluster');
    this.s3 = await startS3Server({ dir: join(dir, 's3'), prefix: 'cluster' });
    // Replicas one after another: the first creates the default tenant and the operator key, the next find them.
    for (let i = 0; i < this.opts.controlPlanes; i++) {
      this.cpPorts.push(basePort + i);
      await this.startControlPlane(i);
    }
    this.adminKey = readFileSync(this.#adminKeyFile, 'utf8').trim();
    const front = basePort + 9;
    this.apiUrl = `http://127.0.0.1:${front}`;
    this.#haproxy = this.#spawn('haproxy', 'haproxy', ['-f', this.#haproxyConfig(front), '-db'], {});
    await waitFor(async () => (await fetch(`${this.apiUrl}/v1/health`).catch(() => undefined))?.ok === true, 20_000, 'haproxy did not come up');
    // The first node publishes its template to the store; the others then restore it from there instead of booting.
    if (this.opts.gateways === 0) return;
    await this.startGateway('n1');
    await Promise.all(Array.from({ length: this.opts.gateways - 1 }, (_, i) => this.startGateway(`n${i + 2}`)));
  }

  async startControlPlane(i: number): Promise<void> {
    const port = this.cpPorts[i]!;
    const args = controlPlaneArgs({
      dbUrl: this.dbUrl,
      listen: `127.0.0.1:${port}`,
      nodeSecretFile: this.#secretFile,
      keysDir: this.#keysDir,
      adminKeyFile: this.#adminKeyFile,
      deadAfterS: this.opts.deadAfterS,
      heartbeatIntervalS: this.opts.heartbeatIntervalS,
      ...(this.opts.controlPlaneStore ? { store: this.s3!.url } : {}),
    });
    const env: Record<string, string> = this.opts.controlPlaneStore
      ? { AWS_ACCESS_KEY_ID: this.s3!.accessKeyId, AWS_SECRET_ACCESS_KEY: this.s3!.secretAccessKey }
      : {};
    const proc = this.#spawn(`cp${i + 1}`, bin, args, env);
    this.#cps.set(i, proc);
    await waitFor(
      async () => (await fetch(`http://127.0.0.1:${port}/v1/health`).catch(() => undefined))?.ok === true,
      180_000,
      `control plane ${i + 1} did not come up`,
      proc,
    );
  }

  /** kill -9 of one control-plane replica. */
  killControlPlane(i: number): void {
    this.#cps.get(i)?.child.kill('SIGKILL');
  }

  /** Starts (or starts again, same home and node id) a gateway; resolves once it registered. */
  async startGateway(nodeId: string): Promise<GatewayInfo> {
    const n = Number(nodeId.slice(1));
    const home = join(this.opts.dir, `home-${nodeId}`);
    if (!existsSync(home)) this.#seedHome(home, n === 1);
    rmSync(join(home, 'server.json'), { force: true });
    // Enrolled the documented way on its first start: the operator issues a token, the node spends it for its key.
    const enrolToken = existsSync(join(home, 'node-key')) ? undefined : this.operator('nodes', 'enroll', nodeId).trim();
    const port = this.opts.basePort + 10 + 2 * n;
    const args = gatewayArgs({
      controlPlaneUrl: this.apiUrl,
      nodeId,
      nodeSecretFile: this.#secretFile,
      store: this.s3!.url,
      listen: `127.0.0.1:${port}`,
      internalListen: `127.0.0.1:${port + 1}`,
      ...(enrolToken ? { enrolToken } : {}),
    });
    const env = {
      SANDGLASS_HOME: home,
      AWS_ACCESS_KEY_ID: this.s3!.accessKeyId,
      AWS_SECRET_ACCESS_KEY: this.s3!.secretAccessKey,
      SANDGLASS_WARM_POOL: '0',
      ...this.opts.gatewayEnv,
    };
    // Its own process group: "the node dies" is the gateway and every VM it started, killed at once.
    const proc = this.#spawn(`gateway-${nodeId}`, bin, args, env, true);
    this.#gateways.set(nodeId, proc);
    this.#allGateways.push(proc);
    await waitFor(async () => existsSync(join(home, 'server.json')), 600_000, `gateway ${nodeId} did not register`, proc);
    const info: GatewayInfo = { nodeId, home, url: `http://127.0.0.1:${port}`, internalUrl: `http://127.0.0.1:${port + 1}` };
    this.gatewayInfo.set(nodeId, info);
    return info;
  }

  /** The node dies: kill -9 of the gateway and of everything in its process group (its VMs' jailers and QEMUs). */
  async killGateway(nodeId: string): Promise<void> {
    const proc = this.#gateways.get(nodeId);
    if (!proc || proc.child.exitCode !== null) return;
    killGroup(proc);
    await proc.exited;
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.#allGateways.map(async (proc) => {
        if (proc.child.exitCode !== null || proc.child.signalCode !== null) return;
        proc.child.kill('SIGTERM');
        const t = setTimeout(() => killGroup(proc), 30_000);
        await proc.exited;
        clearTimeout(t);
      }),
    );
    for (const proc of [...this.#cps.values(), ...(this.#haproxy ? [this.#haproxy] : [])]) {
      if (proc.child.exitCode === null && proc.child.signalCode === null) {
        proc.child.kill('SIGTERM');
        await proc.exited;
      }
    }
    await this.s3?.stop();
    await this.pg?.stop();
  }

  /** The headers node `nodeId` sends on the node API, with the key it holds (its key file): what a compromised node has. */
  nodeHeaders(nodeId: string): Record<string, string> {
    const { nodeKey } = JSON.parse(readFileSync(join(this.opts.dir, `home-${nodeId}`, 'node-key'), 'utf8')) as { nodeKey: string };
    return { authorization: `Bearer ${nodeKey}`, 'x-sandglass-node': nodeId };
  }

  /** Hex of the cluster's shared node secret, as a node holding it would present it. */
  sharedSecretHex(): string {
    return readFileSync(this.#secretFile, 'utf8').trim();
  }

  /** `sandglass <args>` as the operator runs it against the cluster (docs/deploy.md), its stdout on success. */
  operator(...args: string[]): string {
    const r = spawnSync(bin, args, { env: { ...process.env, SANDGLASS_URL: this.apiUrl, SANDGLASS_API_KEY: this.adminKey }, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`sandglass ${args.join(' ')} exited with ${r.status}: ${r.stderr}`);
    return r.stdout;
  }

  log(name: string): string {
    const file = join(this.opts.dir, `${name}.log`);
    return existsSync(file) ? readFileSync(file, 'utf8') : '';
  }

  /**
   * The first node reuses the suite's artifacts and templates (it publishes its template to the store); the others
   * get the guest image only (hard links), so they must materialize the template from the store.
   */
  #seedHome(home: string, withTemplates: boolean): void {
    mkdirSync(home, { recursive: true, mode: 0o700 });
    const from = join(this.opts.artifactsFrom, 'artifacts');
    if (withTemplates) {
      symlinkSync(from, join(home, 'artifacts'));
      return;
    }
    const to = join(home, 'artifacts');
    mkdirSync(to, { recursive: true });
    for (const entry of readdirSync(from)) {
      if (entry.startsWith('template-')) continue;
      linkTree(join(from, entry), join(to, entry));
    }
  }

  #haproxyConfig(front: number): string {
    const file = join(this.opts.dir, 'haproxy.cfg');
    const servers = this.cpPorts.map((p, i) => `  server cp${i + 1} 127.0.0.1:${p} check inter 500 fall 1 rise 2`).join('\n');
    writeFileSync(
      file,
      `global
  maxconn ${this.opts.frontMaxConn ?? 512}
defaults
  mode http
  timeout connect 1s
  timeout client 600s
  timeout server 600s
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response response-timeout 503
frontend api
  bind 127.0.0.1:${front}
  default_backend cps
backend cps
  balance roundrobin
  option httpchk GET /v1/health
${servers}
`,
    );
    return file;
  }

  #spawn(name: string, cmd: string, args: string[], env: Record<string, string>, group = false): Proc {
    const log = createWriteStream(join(this.opts.dir, `${name}.log`), { flags: 'a' });
    const child = spawn(cmd, args, { env: { ...process.env, SANDGLASS_LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: group });
    child.stdout!.pipe(log);
    child.stderr!.pipe(log);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    return { child, exited };
  }
}

/** SIGKILL to the process group a gateway leads (it, its jailers and their QEMUs). */
function killGroup(proc: Proc): void {
  try {
    process.kill(-proc.child.pid!, 'SIGKILL');
  } catch {
    proc.child.kill('SIGKILL');
  }
}

function linkTree(from: string, to: string): void {
  if (statSync(from).isDirectory()) {
    mkdirSync(to, { recursive: true });
    for (const e of readdirSync(from)) linkTree(join(from, e), join(to, e));
    return;
  }
  try {
    linkSync(from, to);
  } catch {
    spawnSync('cp', ['-a', from, to]);
  }
}

export async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs: number, what: string, proc?: Proc): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (proc && proc.child.exitCode !== null) throw new Error(`${what}: the process exited with ${proc.child.exitCode}`);
    if (Date.now() > until) throw new Error(`${what} within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
