// For unit tests: a running gateway Sandbox whose VM is a stand-in (no QEMU) and whose agent is a double speaking the real protocol.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, systemClock, type Clock } from '@sandglass/core';
import type { Vm } from '@sandglass/vmm';
import type { HostileAgent } from '@sandglass/agent-client/hostile-agent';
import type { GatewayEvents } from './events.js';
import type { RamFiles } from './ram.js';
import { Sandbox } from './sandbox.js';
import type { TemplateSnapshot } from './templates.js';

/**
 * Starts sandbox `id` on `agent` as if restored from a template: by default the VM never exits and its RAM file is
 * nowhere; `vm` (a Vm on a QMP double), `template` and `dir` stand in for what a capture reads.
 */
export async function sandboxOnDouble(
  agent: HostileAgent,
  opts: { id: string; events: GatewayEvents; clock?: Clock; timeoutS?: number; vm?: Vm; template?: TemplateSnapshot; dir?: string },
): Promise<Sandbox> {
  const vm =
    opts.vm ??
    ({
      exited: new Promise(() => {}),
      consoleTail: () => '',
      consoleTailAtExit: async () => '',
      stop: async () => ({}),
      memPath: '/nonexistent',
      pid: 1,
    } as unknown as Vm);
  const sandbox = new Sandbox({
    id: opts.id,
    tenantId: 'ten_a',
    template: opts.template ?? ({} as TemplateSnapshot),
    dir: opts.dir ?? mkdtempSync(join(tmpdir(), 'sbx-')),
    timeoutS: opts.timeoutS ?? 600,
    snapshotIntervalS: 60,
    events: opts.events,
    clock: opts.clock ?? systemClock,
    logger: createLogger('test', 'silent'),
    ram: { remove: () => {} } as unknown as RamFiles,
    onGone: () => {},
  });
  await sandbox.start({ warm: { vm, agent: agent.client } });
  return sandbox;
}
