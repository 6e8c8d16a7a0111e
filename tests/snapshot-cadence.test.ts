// Time travel says when it falls behind: overloaded captures on a one-slot server give one snapshot.behind per sandbox,
// shown in the API's cadence, and one snapshot.caught_up once the load drops. The overload has margin over how fast one
// capture is: eight sandboxes on one slot fall behind unless a capture of a writing guest takes
// under about 0.9 s (a 5 s interval, 2.5 s of grace, a round of eight); under TCG here one takes about 1.6 s. Four
// sandboxes were too few on a quiet machine: their round fitted in 6.3 s and only one fell behind.
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox, type SandboxEvent } from '@sandglass/sdk';
import { OwnServer } from './own-server.js';

const server = new OwnServer('snapshot-cadence');
afterAll(() => server.dispose());

/** Rewrites 4 MiB of random data every half second: every capture has fresh pages and disk clusters to chunk. */
const WRITER = `nohup sh -c 'while true; do head -c 4194304 /dev/urandom > /root/noise.tmp && mv /root/noise.tmp /root/noise; sleep 0.5; done' >/dev/null 2>&1 & echo $! > /root/writer.pid`;

async function cadenceEvents(sbx: Sandbox): Promise<SandboxEvent[]> {
  return (await sbx.events({ types: ['snapshot'] })).filter((e) => e.type === 'snapshot.behind' || e.type === 'snapshot.caught_up');
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe('snapshot cadence', () => {
  it('reports each overloaded sandbox behind exactly once, and the one left caught up once the load drops', async () => {
    // One capture slot: eight sandboxes each asking for a snapshot every 5 s, with a writer running, cannot all be kept.
    const s = await server.up({ SANDGLASS_CAPTURE_CONCURRENCY: '1' });
    const sandboxes = await Promise.all(Array.from({ length: 8 }, () => Sandbox.create({ ...s.config, timeoutS: 900, snapshotIntervalS: 5 })));
    for (const sbx of sandboxes) await sbx.commands.run(WRITER);
    await until(
      'a snapshot.behind of every sandbox',
      async () => (await Promise.all(sandboxes.map(cadenceEvents))).every((list) => list.some((e) => e.type === 'snapshot.behind')),
      120_000,
    );
    const [kept, ...dropped] = sandboxes as [Sandbox, ...Sandbox[]];
    for (const behind of await Promise.all(sandboxes.map(cadenceEvents))) {
      expect(behind.map((e) => e.type)).toEqual(['snapshot.behind']);
      const d = behind[0]!.data as { intervalS: number; why: string; lateS: number };
      expect(d.intervalS).toBe(5);
      expect(['slots_full', 'capture_slow']).toContain(d.why);
      expect(d.lateS).toBeGreaterThanOrEqual(2.5);
    }
    // The API shows the same: asked 5 s, behind, and (once its window has a snapshot) fewer than one every 5 s.
    const { cadence } = await kept.timelineWithCadence();
    expect(cadence).toMatchObject({ intervalS: 5, behind: true });
    if (cadence.achievedIntervalS !== null) expect(cadence.achievedIntervalS).toBeGreaterThan(5);

    // The load drops: the other sandboxes end and the kept one's writer stops.
    await Promise.all(dropped.map((sbx) => sbx.kill()));
    await kept.commands.run('kill $(cat /root/writer.pid)');
    await until('snapshot.caught_up of the kept sandbox', async () => (await cadenceEvents(kept)).some((e) => e.type === 'snapshot.caught_up'), 90_000);
    expect((await cadenceEvents(kept)).map((e) => e.type)).toEqual(['snapshot.behind', 'snapshot.caught_up']);
    expect((await kept.timelineWithCadence()).cadence).toMatchObject({ intervalS: 5, behind: false });
    for (const sbx of dropped) expect((await cadenceEvents(sbx)).map((e) => e.type)).toEqual(['snapshot.behind']);
    await kept.kill();
  });
});
