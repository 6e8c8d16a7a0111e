// A `sandglass up` of one test file's own, beside the suite's shared server: its own home (database, chunk store, keys,
// run directory) that reuses the suite's built artifacts, for tests that kill, restart or arm failpoints on a server.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deriveNodeKeys, loadNodeSecret } from '@sandglass/core';
import { home as sharedHome } from './helpers.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

/**
 * Each own server's port above the shared server's (SANDGLASS_TEST_PORT): a server takes two (API, then gateway); the
 * egress tests' upstreams take +20…+27 and the air-gap and chaos runs +40.
 */
const PORT_OFFSETS = {
  restart: 10,
  'snapshot-faults': 12,
  'orphan-manifests': 14,
  'clock-jump': 16,
  'restore-race': 18,
  'revocation-wipe': 30,
  'snapshot-cadence': 34,
  'template-pool': 36,
} as const;

export interface OwnServerInfo {
  apiUrl: string;
  apiKey: string;
  /** What the SDK connects with: the API and the admin key. */
  config: { apiUrl: string; apiKey: string };
  gatewayUrl: string;
  /** The gateway's internal API (failpoints, maintenance) and the bearer it takes. */
  internalSocket: string;
  internalBearer: string;
}

export class OwnServer {
  readonly home: string;
  readonly port: number;
  #child: ChildProcess | undefined;

  constructor(readonly name: keyof typeof PORT_OFFSETS) {
    this.home = mkdtempSync(join(tmpdir(), `sg-${name}-`));
    symlinkSync(join(sharedHome, 'artifacts'), join(this.home, 'artifacts'));
    this.port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + PORT_OFFSETS[name];
  }

  /** The running (or last) server process. */
  get child(): ChildProcess {
    if (!this.#child) throw new Error(`the ${this.name} test server was never started`);
    return this.#child;
  }

  get running(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /**
   * Starts the server with the warm pool off and warnings only, `env` on top, and waits until it serves. Its output goes
   * to server.log in its home, whose tail a failed start quotes.
   */
  async up(env: Record<string, string> = {}): Promise<OwnServerInfo> {
    const serverFile = join(this.home, 'server.json');
    const logFile = join(this.home, 'server.log');
    rmSync(serverFile, { force: true });
    const log = openSync(logFile, 'a');
    const child = spawn(bin, ['up', '--port', String(this.port)], {
      env: { ...process.env, SANDGLASS_HOME: this.home, SANDGLASS_WARM_POOL: '0', SANDGLASS_LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', log, log],
    });
    closeSync(log);
    this.#child = child;
    const until = Date.now() + 180_000;
    while (!existsSync(serverFile)) {
      if (Date.now() > until || child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`the ${this.name} test server did not come up: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const config = { apiUrl: `http://127.0.0.1:${this.port}`, apiKey: readFileSync(join(this.home, 'admin-key'), 'utf8').trim() };
    return {
      ...config,
      config,
      gatewayUrl: `http://127.0.0.1:${this.port + 1}`,
      internalSocket: join(this.home, 'internal', 'gateway.sock'),
      internalBearer: deriveNodeKeys(loadNodeSecret(join(this.home, 'node-secret'))).internalBearer.toString('hex'),
    };
  }

  /** Resolves once the server process has exited (at once if it has, or never ran). */
  exited(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => child.once('exit', () => resolve()));
  }

  /** Sends `signal` to a running server and waits for it to exit. */
  async down(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (!this.running) return;
    const gone = this.exited();
    this.#child!.kill(signal);
    await gone;
  }

  /** Stops the server and removes its home. */
  async dispose(): Promise<void> {
    await this.down();
    rmSync(this.home, { recursive: true, force: true });
  }
}
