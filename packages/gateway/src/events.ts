// Where the gateway records what happened: the event log (directly in the embedded deployment), behind a per-sandbox quota.
import type { Clock, Logger } from '@sandglass/core';

export interface GatewayEvent {
  type: string;
  tenantId: string;
  sandboxId?: string;
  data: Record<string, unknown>;
}

export interface GatewayEvents {
  append(event: GatewayEvent): Promise<unknown> | unknown;
}

export interface EventQuotaOptions {
  clock: Clock;
  logger?: Logger;
  /** Events one sandbox may cause per window; default 3000. */
  maxPerWindow?: number;
  /** default 60 s. */
  windowMs?: number;
}

/** Lifecycle events: the projection of sandboxes and snapshots is built from them, so they are never dropped. */
const EXEMPT = /^(sandbox|snapshot)\./;
const DEFAULT_MAX_PER_WINDOW = 3000;
const DEFAULT_WINDOW_MS = 60_000;
/** Past this many sandboxes tracked, windows that ended are forgotten. */
const PRUNE_AT = 1024;

interface Window {
  startMs: number;
  count: number;
  dropped: number;
}

/**
 * A cap on the events each sandbox can cause per window. A guest decides how many egress requests, commands and
 * exits happen; each would otherwise be a row in the one event log. Past the cap, the sandbox's events are dropped
 * until the window ends, and the first drop is recorded once as `quota.events_dropped`; lifecycle events always pass.
 */
export class EventQuota implements GatewayEvents {
  private readonly windows = new Map<string, Window>();
  private readonly maxPerWindow: number;
  private readonly windowMs: number;

  constructor(
    private readonly sink: GatewayEvents,
    private readonly opts: EventQuotaOptions,
  ) {
    this.maxPerWindow = opts.maxPerWindow ?? DEFAULT_MAX_PER_WINDOW;
    this.windowMs = opts.windowMs ?? DEFAULT_WINDOW_MS;
  }

  append(event: GatewayEvent): Promise<unknown> | unknown {
    if (!event.sandboxId || EXEMPT.test(event.type)) return this.sink.append(event);
    const w = this.window(event.sandboxId);
    if (++w.count <= this.maxPerWindow) return this.sink.append(event);
    if (++w.dropped > 1) return undefined;
    this.opts.logger?.warn(
      { sandboxId: event.sandboxId, maxPerWindow: this.maxPerWindow, windowMs: this.windowMs },
      'sandbox event quota reached: dropping its events',
    );
    return this.sink.append({
      type: 'quota.events_dropped',
      tenantId: event.tenantId,
      sandboxId: event.sandboxId,
      data: { maxPerWindow: this.maxPerWindow, windowS: this.windowMs / 1000, firstDroppedType: event.type },
    });
  }

  private window(sandboxId: string): Window {
    const nowMs = this.opts.clock.nowMs();
    let w = this.windows.get(sandboxId);
    if (w && nowMs - w.startMs < this.windowMs) return w;
    if (w && w.dropped > 1) this.opts.logger?.warn({ sandboxId, droppedEvents: w.dropped - 1 }, 'sandbox event quota window ended');
    if (!w && this.windows.size >= PRUNE_AT) {
      for (const [id, old] of this.windows) if (nowMs - old.startMs >= this.windowMs) this.windows.delete(id);
    }
    w = { startMs: nowMs, count: 0, dropped: 0 };
    this.windows.set(sandboxId, w);
    return w;
  }
}
