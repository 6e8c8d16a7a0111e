// After a restart, sandboxes the log still shows as live but whose VMs died with the old process are recorded as failed.
import type { Kysely } from 'kysely';
import type { Clock } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';

export async function reconcileNode(db: Kysely<Schema>, events: EventLog, opts: { liveIds: Set<string>; clock: Clock }): Promise<number> {
  const stale = await db.selectFrom('sandboxes').select(['id', 'tenant_id']).where('state', 'in', ['starting', 'running']).execute();
  let n = 0;
  for (const row of stale) {
    if (opts.liveIds.has(row.id)) continue;
    await events.append(
      { type: 'sandbox.failed', tenantId: row.tenant_id, sandboxId: row.id, data: { reason: 'the node restarted and the VM did not survive it' } },
      { clock: opts.clock },
    );
    n++;
  }
  return n;
}
