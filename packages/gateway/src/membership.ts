// A gateway's membership of a cluster: registration, heartbeats with what it runs and has room for (memory, captures a
// minute), and fencing.
import { SandglassError, type Logger } from '@sandglass/core';
import type { Heartbeat, HeartbeatReply, NodeApiClient } from './node-api-client.js';

/** What membership reads from and does to the node: a Gateway in production, a double in tests. */
export interface MemberNode {
  /** Sandboxes whose VMs run here now. */
  sandboxIds(): string[];
  memory(): { capacityMib: number; freeMib: number };
  /** Snapshots a minute the node can sustain (its capture scheduler's measure); null until it has taken one. */
  captureCapacityPerMin(): number | null;
  /** Keys of the templates cached on this node. */
  templateKeys(): string[];
  /** Stops this sandbox's VM at once: no snapshot, no event (it is placed elsewhere now). */
  evict(id: string): Promise<void>;
  /** The same for every sandbox: the node was fenced. */
  evictAll(): Promise<void>;
  revokeKeys(keyIds: string[], untilMs: number): void;
}

export interface MembershipOptions {
  client: Pick<NodeApiClient, 'heartbeat'>;
  node: MemberNode;
  /** The data plane's URL clients are handed, and the internal API's, for the control plane. */
  url: string;
  internalUrl: string;
  logger: Logger;
  /** Wait between failed attempts, doubled up to retryMaxMs; default 500 ms to 10 s. */
  retryMinMs?: number;
  retryMaxMs?: number;
}

/**
 * Registers (epoch null) and then renews every `heartbeatIntervalS` the control plane asked for. A heartbeat the
 * control plane cannot answer is retried and the VMs keep running. A reply's `stop` list (sandboxes placed
 * elsewhere now) is evicted; its revoked keys are refused from then on. `node_fenced` means the control plane
 * declared this node dead (its sandboxes may already run elsewhere): every VM is stopped at once, before anything
 * else, and the node registers afresh.
 */
export class Membership {
  private epoch: number | null = null;
  private intervalMs = 5000;
  private stopped = false;
  private timer?: NodeJS.Timeout;
  private wakeSleep?: () => void;
  private loop?: Promise<void>;
  /** Times this node was fenced since it started (for the log and tests). */
  fencedCount = 0;

  constructor(private readonly opts: MembershipOptions) {}

  get currentEpoch(): number | null {
    return this.epoch;
  }

  /** Resolves once registered (retrying as long as it takes), then keeps heartbeating in the background. */
  async start(): Promise<void> {
    await this.beatUntilAnswered();
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.wakeSleep?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      await this.sleep(this.intervalMs);
      if (this.stopped) return;
      await this.beatUntilAnswered();
    }
  }

  /** One heartbeat, retried with backoff until the control plane answers it (or membership stops). */
  private async beatUntilAnswered(): Promise<void> {
    let waitMs = this.opts.retryMinMs ?? 500;
    let failures = 0;
    while (!this.stopped) {
      try {
        await this.beat();
        if (failures > 0) this.opts.logger.info({ failures }, 'heartbeat answered again');
        return;
      } catch (err) {
        if (failures++ === 0) this.opts.logger.warn({ err: (err as Error).message }, 'heartbeat failed; retrying (the VMs keep running)');
        await this.sleep(waitMs);
        waitMs = Math.min(waitMs * 2, this.opts.retryMaxMs ?? 10_000);
      }
    }
  }

  private async beat(): Promise<void> {
    const { node } = this.opts;
    const mem = node.memory();
    const body: Heartbeat = {
      epoch: this.epoch,
      url: this.opts.url,
      internalUrl: this.opts.internalUrl,
      capacityMemoryMib: Math.max(0, Math.floor(mem.capacityMib)),
      freeMemoryMib: Math.max(0, Math.floor(mem.freeMib)),
      captureCapacityPerMin: node.captureCapacityPerMin(),
      sandboxes: node.sandboxIds(),
      templates: node.templateKeys(),
    };
    let reply: HeartbeatReply;
    try {
      reply = await this.opts.client.heartbeat(body);
    } catch (err) {
      if (err instanceof SandglassError && err.code === 'unauthenticated') {
        // The node's key is refused: revoked by the operator, or replaced by a new enrolment of this id. Its sandboxes
        // fail over elsewhere, so none may keep running here; it speaks again only once enrolled again.
        if (this.epoch !== null || node.sandboxIds().length > 0) {
          this.opts.logger.error('the control plane refused this node key (revoked?): stopping every VM; enrol the node again to rejoin');
          this.epoch = null;
          await node.evictAll().catch((e: unknown) => this.opts.logger.error({ err: (e as Error).message }, 'stopping the VMs of a revoked node failed'));
        }
        throw err;
      }
      if (!(err instanceof SandglassError && err.code === 'node_fenced')) throw err;
      await this.fenced();
      // A registration is never fenced; if one is, retrying it at once would loop.
      if (body.epoch === null) throw err;
      // Register afresh right away: the fenced node has nothing running and is ready for new placements.
      return this.beat();
    }
    const registered = this.epoch === null;
    this.epoch = reply.epoch;
    this.intervalMs = Math.max(100, reply.heartbeatIntervalS * 1000);
    if (registered) this.opts.logger.info({ epoch: reply.epoch, heartbeatIntervalS: reply.heartbeatIntervalS }, 'registered with the control plane');
    if (reply.revokedKeys.keyIds.length > 0) node.revokeKeys(reply.revokedKeys.keyIds, reply.revokedKeys.untilMs);
    for (const id of reply.stop) {
      this.opts.logger.warn({ sandboxId: id }, 'the control plane placed this sandbox elsewhere: stopping its VM here');
      await node.evict(id).catch((err: unknown) => this.opts.logger.error({ sandboxId: id, err: (err as Error).message }, 'stopping a VM failed'));
    }
  }

  private async fenced(): Promise<void> {
    this.fencedCount++;
    this.opts.logger.error({ epoch: this.epoch }, 'fenced by the control plane: stopping every VM and registering again');
    this.epoch = null;
    await this.opts.node
      .evictAll()
      .catch((err: unknown) => this.opts.logger.error({ err: (err as Error).message }, 'stopping the VMs of a fenced node failed'));
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.timer = setTimeout(() => resolve(), ms);
      this.timer.unref();
      this.wakeSleep = () => {
        clearTimeout(this.timer);
        resolve();
      };
    });
  }
}
