// Reclaims the store of a tenant whose key was revoked (unreadable by anyone) once its retention period has passed.
import type { Clock, Logger } from '@sandglass/core';
import type { ChunkStore } from '@sandglass/chunkstore';
import type { TenantKeys } from '@sandglass/kms';

/** Default: revoked data is kept (unreadable) for 30 days, in case the revocation was the wrong tenant's. */
export const DEFAULT_REVOKED_RETENTION_S = 30 * 86_400;

/** One sweep: purges each revoked tenant older than retentionMs and records tenant.data_purged when anything went. */
export async function purgeRevokedTenants(o: {
  keys: TenantKeys;
  store: ChunkStore;
  events: { append(e: { type: string; tenantId: string; data: Record<string, unknown> }): Promise<unknown> };
  clock: Clock;
  logger: Logger;
  retentionMs: number;
}): Promise<string[]> {
  const purged: string[] = [];
  for (const { tenantId, revokedAtMs } of await o.keys.revokedTenants()) {
    if (o.clock.nowMs() - revokedAtMs < o.retentionMs) continue;
    const r = await o.store.purgeTenant(tenantId);
    if (r.manifests + r.chunks === 0) continue;
    await o.events.append({ type: 'tenant.data_purged', tenantId, data: { ...r, revokedAt: new Date(revokedAtMs).toISOString() } });
    o.logger.info({ tenantId, ...r }, "a revoked tenant's store was reclaimed after its retention period");
    purged.push(tenantId);
  }
  return purged;
}
