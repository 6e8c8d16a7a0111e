// The accelerator probe's boot attempt: the real guest image cold-booted the way a template boots, to its agent's hello.
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { GuestImage } from '@sandglass/images';
import type { ProbeAttempt, Vm } from '@sandglass/vmm';
import { connectAgent } from './agent-link.js';
import { BASE_TEMPLATE } from './gateway.js';
import { bootGuest } from './templates.js';

/**
 * A probe attempt that boots `image` with one accelerator and CPU model in a throw-away directory under `runDir`, and
 * resolves once the agent answers. Aborting (the probe's time limit) kills the VM; the directory always goes.
 */
export function kvmProbeAttempt(image: GuestImage, kernelArgs: string, runDir: string): ProbeAttempt {
  return async ({ accel, cpu }, signal) => {
    const id = `accel-probe-${randomBytes(4).toString('hex')}`;
    const dir = join(runDir, id);
    let vm: Vm | undefined;
    const onAbort = () => vm?.kill();
    signal.addEventListener('abort', onAbort);
    try {
      vm = await bootGuest(image, kernelArgs, { id, dir, config: { memoryMib: BASE_TEMPLATE.memoryMib, vcpus: BASE_TEMPLATE.vcpus, accel, cpu } });
      if (signal.aborted) throw new Error('aborted');
      // The probe's own limit decides; this one only bounds a probe that nobody aborts.
      const agent = await connectAgent(vm, { timeoutMs: 120_000 });
      await agent.close();
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (vm) {
        vm.kill();
        await vm.exited;
      }
      rmSync(dir, { recursive: true, force: true });
    }
  };
}
