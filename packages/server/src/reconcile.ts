// After a restart, sandboxes the log still shows as live but whose VMs died with the old process go back to their last snapshot.
import type { Kysely } from 'kysely';
import type { Clock } from '@sandglass/core';
import type { Schema } from '@sandglass/db';
import type { EventLog } from '@sandglass/events';

export async function reconcileNode(db: Kysely<Schema>, events: EventLog, opts: { liveIds: Set<string>; clock: Clock }): Promise<number> {
  const stale = await db.selectFrom('sandboxes').select(['id', 'tenant_id']).where('state', 'in', ['starting', 'running']).execute();
  let n = 0;
  for (const row of stale) {
    if (opts.liveIds.has(row.id)) continue;
    const last = await db.selectFrom('snapshots').select('id').where('sandbox_id', '=', row.id).orderBy('taken_at', 'desc').limit(1).executeTakeFirst();
    if (last) {
      // Its history survives the node: paused at the last snapshot, it resumes from there.
      await events.append(
        {
          type: 'sandbox.paused',
          tenantId: row.tenant_id,
          sandboxId: row.id,
          data: { snapshotId: last.id, reason: 'the node restarted; resume to continue from the last snapshot' },
        },
        { clock: opts.clock },
      );
      n++;
      continue;
    }
    await events.append(
      { type: 'sandbox.failed', tenantId: row.tenant_id, sandboxId: row.id, data: { reason: 'the node restarted and the VM did not survive it' } },
      { clock: opts.clock },
    );
    n++;
  }
  return n;
}
