// Restoring a template snapshot into a running VM with its agent linked: the one path both sandboxes and the warm pool use.
import type { Socket } from 'node:net';
import { restoreVm, resumeVm, type Vm } from '@sandglass/vmm';
import type { AgentClient } from '@sandglass/agent-client';
import { connectAgent, openAgentSocket } from './agent-link.js';
import type { TemplateSnapshot } from './templates.js';

export interface Restored {
  vm: Vm;
  agent: AgentClient;
}

/**
 * Restores `template` into a new VM named `id` in `dir`, connects the agent channel before the snapshot loads,
 * resumes, and waits for `hello`. `check` runs between steps so a caller can abandon a restore midway.
 * On failure the VM (if any) is killed; the caller cleans `dir`.
 */
export async function restoreTemplate(template: TemplateSnapshot, id: string, dir: string, check: () => void = () => {}): Promise<Restored> {
  let socket: Socket | undefined;
  let vm: Vm | undefined;
  try {
    vm = await restoreVm({
      id,
      dir,
      snapshot: template,
      beforeLoad: async (v) => {
        socket = await openAgentSocket(v, 10_000);
      },
    });
    check();
    const running = vm;
    const agent = await connectAgent(running, { timeoutMs: 30_000, socket, beforeHello: () => resumeVm(running) });
    check();
    return { vm, agent };
  } catch (err) {
    socket?.destroy();
    if (vm) {
      vm.kill();
      await vm.exited;
    }
    throw err;
  }
}
