// Connecting the gateway to a VM's agent, and turning agent errors into catalogued Sandglass errors.
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { SandglassError } from '@sandglass/core';
import type { Vm } from '@sandglass/vmm';
import { AgentClient, AgentError, connectUnixSocket, type AgentEvent } from '@sandglass/agent-client';

export interface ConnectOptions {
  timeoutMs: number;
  /** Runs once the host end is connected and before `hello`: resuming a restored VM goes here. */
  beforeHello?: () => Promise<void>;
  /** A socket connected earlier (before a restore loaded its snapshot); otherwise one is opened. */
  socket?: Socket;
}

/** Opens the host end of the agent's virtio-serial channel (QEMU's chardev socket). */
export function openAgentSocket(vm: Vm, timeoutMs: number): Promise<Socket> {
  return connectUnixSocket(vm.paths.agentSocket, { timeoutMs });
}

/** Connects to the agent's virtio-serial socket and waits for `hello`; fails early if QEMU dies meanwhile. */
export async function connectAgent(vm: Vm, opts: ConnectOptions): Promise<AgentClient> {
  const died = vm.exited.then((e) => {
    throw new SandglassError(
      'vm_failed',
      `QEMU exited (code ${e.code}, signal ${e.signal}) before the agent answered: ${e.stderrTail}\n${vm.consoleTail(1024)}`,
    );
  });
  const work = (async () => {
    const sock = opts.socket ?? (await openAgentSocket(vm, opts.timeoutMs));
    const agent = new AgentClient(sock);
    await opts.beforeHello?.();
    await agent.hello({ timeoutMs: opts.timeoutMs });
    return agent;
  })();
  return Promise.race([work, died]);
}

/** Runs a command to completion for the node itself (`sync` before a template snapshot, pool warm-up). */
export async function runToExit(agent: AgentClient, argv: string[], opts: { timeoutMs: number }): Promise<number | null> {
  const id = `node_${randomBytes(6).toString('hex')}`;
  let onEvent: ((ev: AgentEvent) => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  const exited = new Promise<number | null>((resolve, reject) => {
    timer = setTimeout(() => reject(new SandglassError('timeout', `${argv.join(' ')} did not finish in ${opts.timeoutMs} ms`)), opts.timeoutMs);
    onEvent = (ev) => {
      if (ev.event === 'proc.exit' && ev.id === id) resolve(ev.exitCode as number | null);
    };
    agent.on('event', onEvent);
  });
  try {
    await agent.procStart({ id, argv, env: {}, stdin: false });
    const code = await exited;
    // The node's own commands leave no record in the guest's process table.
    await agent.procForget(id).catch(() => {});
    return code;
  } finally {
    clearTimeout(timer);
    agent.off('event', onEvent!);
  }
}

/** Awaits an agent call, turning its failure into the catalogued error (`ctx` as for mapAgentError). */
export function viaAgent<T>(call: Promise<T>, ctx?: { argv0?: string; cwd?: string; path?: string }): Promise<T> {
  return call.catch((err: unknown) => {
    throw mapAgentError(err, ctx);
  });
}

/** Maps an agent error code onto the catalogue; `ctx` says what a bare `not_found` referred to. */
export function mapAgentError(err: unknown, ctx: { argv0?: string; cwd?: string; path?: string } = {}): SandglassError {
  if (err instanceof SandglassError) return err;
  if (err instanceof AgentError) {
    const msg = err.message;
    switch (err.code) {
      case 'command_not_found':
        return new SandglassError('command_not_found', msg, { details: { field: 'argv', argv0: ctx.argv0 } });
      case 'not_found':
        if (ctx.cwd !== undefined && ctx.argv0 !== undefined) return new SandglassError('file_not_found', msg, { details: { field: 'cwd' } });
        return new SandglassError('file_not_found', msg, { details: { field: 'path', path: ctx.path } });
      case 'exists':
        return new SandglassError('file_exists', msg, { details: { field: 'path', path: ctx.path } });
      case 'not_a_directory':
        return new SandglassError('not_a_directory', msg, { details: { field: 'path', path: ctx.path } });
      case 'is_a_directory':
        return new SandglassError('is_a_directory', msg, { details: { field: 'path', path: ctx.path } });
      case 'permission_denied':
        return new SandglassError('permission_denied', msg);
      case 'bad_request':
        return new SandglassError('invalid_argument', msg);
      case 'agent_disconnected':
        return new SandglassError('sandbox_not_running', `The sandbox's agent is not connected: ${msg}`);
      case 'timeout':
        return new SandglassError('agent_timeout', msg);
      default:
        return new SandglassError('internal', `agent error ${err.code}: ${msg}`, { cause: err });
    }
  }
  return new SandglassError('internal', undefined, { cause: err });
}
