// The chaos suite's CI round: a short run with fixed seeds on a server of its own; every invariant must hold.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatResult, runChaos } from '../scripts/chaos/chaos.js';
import { home as sharedHome } from './helpers.js';

const port = Number(process.env.SANDGLASS_TEST_PORT ?? 17070) + 40;

describe('chaos', () => {
  it('keeps every snapshot, explains every sandbox, and leaks nothing under faults (seed 13)', async () => {
    const workDir = join(sharedHome, 'chaos');
    mkdirSync(workDir, { recursive: true });
    const result = await runChaos({
      minutes: 1.5,
      seed: 13,
      port,
      workers: 2,
      forkChecks: 2,
      faultGapS: [5, 10],
      artifacts: join(sharedHome, 'artifacts'),
      workDir,
      log: (s) => console.log(s),
    });
    console.log(formatResult(result));
    // Faults really happened, and the workload really ran.
    expect(result.faults.filter((f) => f.fired).length).toBeGreaterThan(0);
    expect(result.recordedSnapshots).toBeGreaterThan(0);
    expect(result.dataLost).toEqual([]);
    expect(result.invariants.filter((i) => !i.ok)).toEqual([]);
    // Kept when something failed (server.log, chaos-faults.jsonl, chaos-result.json); gone when all held.
    rmSync(result.home, { recursive: true, force: true });
  });
});
