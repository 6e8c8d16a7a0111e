// Resource exhaustion from inside a real guest: a console printed forever and a hostile CA bundle cost the node a bounded amount.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { checkResponsesAgainstSpec, config, home } from '../helpers.js';

checkResponsesAgainstSpec();

const MiB = 1024 * 1024;
const made: Sandbox[] = [];
afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
});

async function track(s: Sandbox | Promise<Sandbox>): Promise<Sandbox> {
  const sbx = await s;
  made.push(sbx);
  return sbx;
}

async function sh(s: Sandbox, cmd: string, timeoutMs = 120_000): Promise<string> {
  const r = await s.commands.run(cmd, { timeoutMs });
  return r.stdout;
}

/**
 * Bytes of every VM's files on the node except disk layers (which the guest fills by writing files). All VMs: a
 * sandbox may run in a warm-pool VM whose directory is named after the pool, not the sandbox.
 */
function hostFileBytes(): number {
  const run = join(home, 'run');
  let total = 0;
  for (const vm of readdirSync(run)) {
    const dir = join(run, vm);
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue; // a VM that went away meanwhile
    }
    for (const name of names) {
      if (name.endsWith('.qcow2')) continue;
      try {
        const st = statSync(join(dir, name));
        if (st.isFile()) total += st.size;
      } catch {
        // gone meanwhile
      }
    }
  }
  return total;
}

describe('resource exhaustion from inside the guest', () => {
  it('a guest printing to its serial console cannot grow what the host keeps of it', async () => {
    const s = await track(Sandbox.create({ ...config(), timeoutS: 900, snapshotIntervalS: 3600 }));
    const before = hostFileBytes();
    // 3 MiB through the UART, more than ten times the ring the host keeps, ending with a line the tail must show.
    await sh(s, "head -c 3145728 /dev/zero | tr '\\0' x > /dev/ttyS0; echo CONSOLE-FLOOD-END > /dev/ttyS0", 280_000);
    expect(hostFileBytes() - before).toBeLessThan(1 * MiB);
    // The guest is fine and the console is still read (not stalled by a full buffer).
    expect(await sh(s, 'echo ok > /dev/ttyS0 && echo ok')).toBe('ok\n');
  });

  it('a huge or pathological CA bundle in the guest does not stall or bloat a resume', async () => {
    const s = await track(Sandbox.create({ ...config(), timeoutS: 900, snapshotIntervalS: 3600, network: { allow: ['api.example.test:443'] } }));
    const bundle = '/etc/ssl/certs/ca-certificates.crt';
    // 1 MiB of newlines then a byte: under the size cap, but a trailing-newline regex over it backtracks for hours.
    await sh(s, `head -c 1048576 /dev/zero | tr '\\0' '\\n' > ${bundle}; printf x >> ${bundle}`);
    await s.pause();
    const back = await track(Sandbox.resume(s.id, config()));
    const ours = await sh(back, 'grep -c "BEGIN CERTIFICATE" /etc/sandglass/ca-bundle.crt; wc -c < /etc/sandglass/ca-bundle.crt');
    const [certs, bytes] = ours.trim().split('\n').map(Number);
    expect(certs).toBe(1);
    expect(bytes).toBeGreaterThan(1 * MiB);

    // 8 MiB: past the cap. The host does not read it into memory (nor writes it back): the sandbox's bundle is its CA alone.
    await sh(back, `head -c ${8 * MiB} /dev/zero | tr '\\0' A > ${bundle}`);
    await back.pause();
    const again = await track(Sandbox.resume(s.id, config()));
    const after = await sh(again, `wc -c < /etc/sandglass/ca-bundle.crt; wc -c < ${bundle}; grep -c "BEGIN CERTIFICATE" /etc/sandglass/ca-bundle.crt`);
    const [bundleBytes, systemBytes, ourCerts] = after.trim().split('\n').map(Number);
    expect(bundleBytes).toBeLessThan(64 * 1024);
    expect(ourCerts).toBe(1);
    expect(systemBytes).toBe(8 * MiB);
  });
});
