// Node failure: every control-plane replica watches, the database decides once, and each lost sandbox moves once.
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { SandglassError, type Clock, type Logger } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import { claimLease, releaseLease, type NodeDirectory } from './nodes.js';
import { Rounds } from './rounds.js';
import type { SandboxService } from './sandboxes.js';

export interface FailoverOptions {
  db: Kysely<Schema>;
  nodes: NodeDirectory;
  sandboxes: SandboxService;
  clock: Clock;
  logger: Logger;
  /** How often this replica looks for silent nodes and stranded sandboxes. */
  intervalMs: number;
  /** How long one replica owns one sandbox's move before another may try again (a restore under TCG takes seconds). */
  moveLeaseMs?: number;
}

const DEFAULT_MOVE_LEASE_MS = 5 * 60_000;

/**
 * Declares silent nodes dead (one conditional UPDATE: exactly one replica decides each), then moves every sandbox that
 * the log still places on a dead node — or on a node that registered again since it started — under a per-sandbox
 * lease, so two replicas never resume one sandbox twice. A replica killed mid-move leaves the lease to expire and the
 * sandbox still placed on the dead node (or paused on the new one after sandbox.moved, which a later resume completes).
 */
export class Failover {
  readonly #holder = `cp-${process.pid}-${randomBytes(4).toString('hex')}`;
  readonly #rounds: Rounds;

  constructor(private readonly opts: FailoverOptions) {
    this.#rounds = new Rounds(
      () => this.tick(),
      opts.intervalMs,
      (err) => opts.logger.warn({ err: (err as Error).message }, 'failover round failed'),
    );
  }

  start(): void {
    this.#rounds.start();
  }

  async stop(): Promise<void> {
    await this.#rounds.stop();
  }

  /** One round: decide deaths, then move what is stranded on dead nodes. */
  async tick(): Promise<void> {
    for (const nodeId of await this.opts.nodes.declareDead()) {
      this.opts.logger.warn({ nodeId, deadAfterMs: this.opts.nodes.deadAfterMs }, 'node declared dead: moving its sandboxes');
    }
    const stranded = await this.opts.db
      .selectFrom('sandboxes')
      .innerJoin('nodes', 'nodes.id', 'sandboxes.gateway_id')
      .select('sandboxes.id')
      .where('nodes.state', '=', 'dead')
      .where('sandboxes.state', 'in', ['starting', 'running'])
      .execute();
    await Promise.all(stranded.map((s) => this.move(s.id, 'node_dead')));
  }

  /** Moves one sandbox unless another replica is already at it; errors are logged and retried by a later round. */
  async move(sandboxId: string, reason: 'node_dead' | 'node_restarted'): Promise<void> {
    const lease = `move:${sandboxId}`;
    if (!(await claimLease(this.opts.db, lease, this.#holder, this.opts.moveLeaseMs ?? DEFAULT_MOVE_LEASE_MS, this.opts.clock))) return;
    try {
      const t0 = this.opts.clock.nowMs();
      const outcome = await this.opts.sandboxes.move(sandboxId, reason);
      if (outcome !== 'skipped') this.opts.logger.info({ sandboxId, reason, outcome, ms: this.opts.clock.nowMs() - t0 }, 'sandbox moved off a lost node');
    } catch (err) {
      const capacity = err instanceof SandglassError && err.code === 'capacity_exhausted';
      this.opts.logger.warn(
        { sandboxId, err: (err as Error).message },
        capacity ? 'no node can take a lost sandbox yet: retrying' : 'resuming a lost sandbox on its new node failed: it stays paused there',
      );
    } finally {
      await releaseLease(this.opts.db, lease, this.#holder).catch(() => undefined);
    }
  }
}
