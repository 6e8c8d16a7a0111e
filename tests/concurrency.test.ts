// Eight sandboxes restored at once from one template: all work, and none sees another's files or random state.
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { checkResponsesAgainstSpec, config } from './helpers.js';

checkResponsesAgainstSpec();

const created: Sandbox[] = [];
afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})));
});

describe('concurrent sandboxes', () => {
  it('creates 8 at once, each working and isolated', async () => {
    const sbxs = await Promise.all(Array.from({ length: 8 }, () => Sandbox.create({ ...config(), timeoutS: 600 })));
    created.push(...sbxs);
    expect(new Set(sbxs.map((s) => s.id)).size).toBe(8);
    await Promise.all(sbxs.map((s, i) => s.files.write('/root/mine.txt', `sandbox ${i}`)));
    const results = await Promise.all(
      sbxs.map((s) => s.commands.run('cat /root/mine.txt; echo; head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"; echo; cat /proc/sys/kernel/random/uuid')),
    );
    const randoms = new Set<string>();
    const uuids = new Set<string>();
    results.forEach((r, i) => {
      const [mine, rnd, uuid] = r.stdout.trim().split('\n');
      expect(mine).toBe(`sandbox ${i}`);
      randoms.add(rnd!);
      uuids.add(uuid!);
    });
    // Restored from one snapshot, yet the agent re-seeded each kernel's CRNG: no two share random output.
    expect(randoms.size).toBe(8);
    expect(uuids.size).toBe(8);
    // A file written in one sandbox is absent in every other.
    await sbxs[0]!.files.write('/root/only-in-0.txt', 'x');
    const seen = await Promise.all(sbxs.slice(1).map((s) => s.files.exists('/root/only-in-0.txt')));
    expect(seen.every((e) => e === false)).toBe(true);
  });
});
