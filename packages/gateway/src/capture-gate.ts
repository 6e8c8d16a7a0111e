// Captures against a cluster's chunk-store GC sweep: what a capture holds from before its first chunk until its manifest is committed.
import { SandglassError, type Logger } from '@sandglass/core';
import type { NodeApiClient } from './node-api-client.js';

export interface CapturePass {
  /** Throws once the pass may have lapsed: the manifest must then not be committed (a sweep may have taken a chunk it deduplicated). */
  check(): void;
  /** Idempotent; never throws (an unreleased lease only delays a sweep until it expires). */
  leave(): Promise<void>;
}

export interface CaptureGate {
  /** Waits up to waitMs while a GC sweep holds the gate (0: refuse at once with `conflict`, retryable by the scheduler). */
  enter(snapshotId: string, opts: { waitMs: number }): Promise<CapturePass>;
}

/** One process (`sandglass up`): the chunk store's own leases keep its GC off the captures in flight. */
export const inProcessGate: CaptureGate = {
  enter: async () => ({ check: () => undefined, leave: async () => undefined }),
};

export interface RemoteCaptureGateOptions {
  client: NodeApiClient;
  logger: Logger;
  /** A capture commits no later than this before its lease ends (clock drift, the commit's own time); default 2 min. */
  marginMs?: number;
}

/**
 * Capture leases from the control plane (`/node/v1/capture-leases`). The lease's end is reckoned on this node's
 * monotonic clock from when the request was sent, so it is never later than the control plane's, whatever the skew
 * between the two wall clocks.
 */
export class RemoteCaptureGate implements CaptureGate {
  readonly #marginMs: number;

  constructor(private readonly opts: RemoteCaptureGateOptions) {
    this.#marginMs = opts.marginMs ?? 2 * 60_000;
  }

  async enter(snapshotId: string, { waitMs }: { waitMs: number }): Promise<CapturePass> {
    const { client, logger } = this.opts;
    const startMs = performance.now();
    for (let delayMs = 1000; ; delayMs = Math.min(delayMs * 2, 15_000)) {
      const sentMs = performance.now();
      let ttlMs: number;
      try {
        ({ ttlMs } = await client.captureLeaseTake(snapshotId));
      } catch (err) {
        const sweeping = err instanceof SandglassError && err.code === 'conflict';
        if (!sweeping || performance.now() - startMs + delayMs > waitMs) throw err;
        await new Promise((r) => setTimeout(r, delayMs));
        continue;
      }
      const deadlineMs = sentMs + ttlMs - this.#marginMs;
      let left: Promise<void> | undefined;
      return {
        check: () => {
          if (performance.now() < deadlineMs) return;
          throw new SandglassError('snapshot_failed', `Capture ${snapshotId} outlived its lease against chunk-store GC; it was not committed.`);
        },
        leave: () =>
          (left ??= client.captureLeaseRelease(snapshotId).catch((err: unknown) => {
            logger.warn({ snapshotId, err: (err as Error).message }, 'releasing a capture lease failed; it expires on its own');
          })),
      };
    }
  }
}
