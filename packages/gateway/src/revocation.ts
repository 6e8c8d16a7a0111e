// A tenant's key revoked: its sandboxes stop, every plaintext of it on this node is wiped, and its boots are refused.
import { closeSync, constants as fsc, ftruncateSync, lstatSync, openSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SandglassError, type Clock, type Logger, type Timer } from '@sandglass/core';
import type { GatewayEvents } from './events.js';
import type { Sandbox } from './sandbox.js';
import type { SnapshotManager } from './snapshots.js';

/** How often the node asks the provider about each tenant it holds plaintext of. */
export const DEFAULT_KEY_POLL_INTERVAL_MS = 2_000;

export interface RevocationOptions {
  sandboxes: ReadonlyMap<string, Sandbox>;
  snapshots: SnapshotManager;
  /** Asks the tenant's key provider (verify when it has one: past every cache). */
  verify: (tenantId: string) => Promise<void>;
  events: GatewayEvents;
  clock: Clock;
  logger: Logger;
  pollIntervalMs?: number;
  /** The tenant template pools: VMs restored from the tenant's snapshots, bound to no sandbox yet. */
  pools?: TenantPools;
}

export interface TenantPools {
  tenants(): string[];
  paths(tenantId: string): string[];
  /** Stops and wipes the tenant's pooled VMs, waiting out restores in flight. */
  drainTenant(tenantId: string): Promise<void>;
}

/** Where a tenant's plaintext lives on this node, and the sandboxes that make more of it. */
export interface TenantPlaintext {
  sandboxes: Sandbox[];
  paths: string[];
}

/**
 * The one list of a tenant's plaintext on this node. A new cache of tenant data must be added here, or a revocation
 * leaves it behind (tests/byok.test.ts lists the tmpfs and run directories after a revocation and finds nothing).
 * - each sandbox's guest RAM file on tmpfs (`<vm>.mem`) and its run directory (qcow2 overlays with the guest's disk
 *   writes, device state, sockets); so for each VM of the tenant's template pools (`pool_…`), drained first;
 * - the restored disk deltas kept on disk for forks of snapshots with large ones (`disk-cache/snap-<id>.qcow2`);
 * - the snapshot RAM images cached on tmpfs for forks and resumes (`snap-<id>.img`); a capture's RAM copy in flight
 *   (`<snap>.capture`) becomes one when it commits or is removed when it fails, and the wipe waits for it; so it does
 *   for a restore being prepared (its image's temporary file, device state and overlay) and a sandbox still starting;
 * - unwrapped data keys (the key provider's cache, dropped by the provider's revoke; a cluster node's RemoteKeys
 *   cache, dropped through onRevoked as the wipe starts).
 * Decrypted secret values are never held past one proxied request, and a sandbox's connections close with it.
 */
export function tenantPlaintext(o: Pick<RevocationOptions, 'sandboxes' | 'snapshots' | 'pools'>, tenantId: string): TenantPlaintext {
  const sandboxes = [...o.sandboxes.values()].filter((s) => s.tenantId === tenantId);
  const paths: string[] = [];
  for (const s of sandboxes) {
    paths.push(s.dir);
    if (s.vm) paths.push(s.vm.memPath);
  }
  paths.push(...o.snapshots.imagesOf(tenantId));
  paths.push(...(o.pools?.paths(tenantId) ?? []));
  return { sandboxes, paths };
}

export class TenantRevocation {
  readonly #o: RevocationOptions;
  /** Tenants revoked through the control plane: final, so refused here even while the provider cannot be asked. */
  readonly #revoked = new Set<string>();
  readonly #running = new Map<string, Promise<{ stoppedSandboxes: string[]; wipedFiles: number }>>();
  readonly #listeners: Array<(tenantId: string) => void> = [];
  /**
   * Every sandbox a wipe of the tenant stopped on this node. The poll can see a revocation (the provider already
   * refuses) before the control plane's call arrives; that call's answer still names the sandboxes it cost.
   */
  readonly #stopped = new Map<string, Set<string>>();
  #timer: Timer | undefined;
  #polling = false;

  constructor(opts: RevocationOptions) {
    this.#o = opts;
  }

  /** Every boot path (create, resume, fork) asks first; nothing boots on a key the provider does not give now. */
  async requireKey(tenantId: string): Promise<void> {
    if (this.#revoked.has(tenantId)) throw revokedError(tenantId);
    await this.#o.verify(tenantId);
  }

  /**
   * Stops the tenant's sandboxes and wipes its plaintext; `api` (the control plane said so) also refuses the
   * tenant's boots from now on. Concurrent calls for one tenant share one run.
   */
  revoke(tenantId: string, trigger: 'api' | 'provider', reason?: string): Promise<{ stoppedSandboxes: string[]; wipedFiles: number }> {
    if (trigger === 'api') this.#revoked.add(tenantId);
    let run = this.#running.get(tenantId);
    if (!run) {
      run = this.#wipe(tenantId, trigger, reason).finally(() => this.#running.delete(tenantId));
      this.#running.set(tenantId, run);
    }
    return run.then((r) => ({ ...r, stoppedSandboxes: [...(this.#stopped.get(tenantId) ?? r.stoppedSandboxes)] }));
  }

  /** Called as each wipe starts: whoever holds the tenant's keys in memory on this node drops them. */
  onRevoked(listener: (tenantId: string) => void): void {
    this.#listeners.push(listener);
  }

  /** Polls the provider for every tenant this node holds plaintext of, so an HSM-side revocation needs no API call. */
  start(): void {
    this.#timer ??= this.#o.clock.setInterval(() => void this.poll(), this.#o.pollIntervalMs ?? DEFAULT_KEY_POLL_INTERVAL_MS);
  }

  stop(): void {
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  /** One round of the poll; exported for tests. A provider that cannot answer is logged: running guests keep running. */
  async poll(): Promise<void> {
    if (this.#polling) return;
    this.#polling = true;
    try {
      const tenants = new Set<string>();
      for (const s of this.#o.sandboxes.values()) tenants.add(s.tenantId);
      for (const t of this.#o.pools?.tenants() ?? []) tenants.add(t);
      for (const t of this.#revoked) tenants.add(t);
      for (const tenantId of tenants) {
        if (this.#revoked.has(tenantId)) {
          // A boot that raced the revocation: stopped and wiped again.
          const left = tenantPlaintext(this.#o, tenantId);
          if (left.sandboxes.length > 0 || (this.#o.pools?.tenants().includes(tenantId) ?? false)) await this.revoke(tenantId, 'api');
          continue;
        }
        try {
          await this.#o.verify(tenantId);
        } catch (err) {
          if (err instanceof SandglassError && err.code === 'key_revoked') {
            await this.revoke(tenantId, 'provider', err.message);
          } else {
            this.#o.logger.warn({ tenantId, err: (err as Error).message }, "the tenant's key provider did not answer the poll");
          }
        }
      }
    } finally {
      this.#polling = false;
    }
  }

  async #wipe(tenantId: string, trigger: 'api' | 'provider', reason?: string): Promise<{ stoppedSandboxes: string[]; wipedFiles: number }> {
    for (const listener of this.#listeners) {
      try {
        listener(tenantId);
      } catch (err) {
        this.#o.logger.warn({ tenantId, err: (err as Error).message }, "dropping a revoked tenant's keys failed");
      }
    }
    // No pooled VM of the tenant is handed out from here on; those warming finish or fail first, then all are wiped.
    await this.#o.pools?.drainTenant(tenantId);
    const { sandboxes } = tenantPlaintext(this.#o, tenantId);
    const why = trigger === 'api' ? "the tenant's key was revoked" : `the tenant's key provider refused its key (${reason ?? 'revoked'})`;
    await Promise.all(
      sandboxes.map(async (s) => {
        const wasRunning = s.state === 'running' || s.state === 'starting';
        await s.end('killed');
        // A start in flight gives up at its next check and removes its RAM file; a capture in flight finishes or fails
        // before the files are counted: it may rename its RAM copy into an image.
        await s.settled();
        await this.#o.snapshots.untrack(s.id);
        if (wasRunning) {
          await this.#o.events.append({ type: 'sandbox.failed', tenantId, sandboxId: s.id, data: { reason: why, code: 'key_revoked' } });
        }
      }),
    );
    // A restore being prepared (its sandbox already ended above) writes its RAM image and overlay to the end.
    await this.#o.snapshots.settle(tenantId);
    // Listed again after the stops: what the captures and restores that were in flight left is in it now.
    const { paths } = tenantPlaintext(this.#o, tenantId);
    for (const s of sandboxes) paths.push(s.dir, ...(s.vm ? [s.vm.memPath] : []));
    let wipedFiles = 0;
    for (const p of new Set(paths)) if (wipePath(p)) wipedFiles++;
    const stopped = this.#stopped.get(tenantId) ?? new Set<string>();
    for (const s of sandboxes) stopped.add(s.id);
    this.#stopped.set(tenantId, stopped);
    await this.#o.events.append({
      type: 'tenant.plaintext_wiped',
      tenantId,
      data: { trigger, stoppedSandboxes: sandboxes.map((s) => s.id), wipedFiles },
    });
    this.#o.logger.warn(
      { tenantId, trigger, stopped: sandboxes.length, wipedFiles },
      "a tenant's key was revoked: its sandboxes stopped and its plaintext wiped",
    );
    return { stoppedSandboxes: sandboxes.map((s) => s.id), wipedFiles };
  }
}

/**
 * Removes a file or a directory tree, each regular file emptied first: a descriptor still open on it (a copy in
 * flight, a process not yet reaped) or a mapping then reads nothing, and tmpfs hands its pages back now rather than
 * when the last holder lets go. Symlinks and other entries are removed, never followed or opened. False when absent.
 */
export function wipePath(path: string): boolean {
  const empty = (p: string) => {
    const st = lstatSync(p, { throwIfNoEntry: false });
    if (st?.isDirectory()) {
      for (const name of readdirSync(p)) empty(join(p, name));
    } else if (st?.isFile()) {
      let fd: number;
      try {
        fd = openSync(p, fsc.O_WRONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
      } catch {
        return;
      }
      try {
        ftruncateSync(fd, 0);
      } finally {
        closeSync(fd);
      }
    }
  };
  if (!lstatSync(path, { throwIfNoEntry: false })) return false;
  empty(path);
  rmSync(path, { recursive: true, force: true });
  return true;
}

function revokedError(tenantId: string): SandglassError {
  return new SandglassError('key_revoked', `The key of tenant ${tenantId} was revoked; its sandboxes cannot be created, resumed or forked.`, {
    details: { tenantId },
  });
}
