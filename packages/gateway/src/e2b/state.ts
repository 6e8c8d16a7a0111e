// What the envd translation remembers per sandbox beside the gateway's own records: each command's E2B config and
// tag, and the polled watchers. Bounded, and forgotten with the Sandbox object (a resume makes a new one).
import type { CommandRecord, Sandbox } from '../sandbox.js';
import type { ProcessConfig, ProcessSelector } from './messages.js';

/** Commands whose config and tag are kept; older ones (exited first) are forgotten beyond this. */
export const MAX_REMEMBERED_COMMANDS = 4096;
/** Polled watchers (CreateWatcher) one sandbox may hold at once. */
export const MAX_WATCHERS = 64;
/** Events one polled watcher buffers between two GetWatcherEvents. */
export const MAX_WATCHER_EVENTS = 4096;
/** envd tokens kept per sandbox to check signed file URLs against: the newest that envd requests proved. */
export const MAX_SIGNING_TOKENS = 16;

export interface CommandMeta {
  config: ProcessConfig;
  tag?: string;
}

export interface PolledWatcher {
  events: Array<{ name: string; type: string }>;
  /** Events were dropped (buffer full, or the guest's queue overflowed): the next poll says so. */
  lost: boolean;
  close(): Promise<void>;
}

export class SandboxEnvdState {
  readonly commands = new Map<string, CommandMeta>();
  readonly watchers = new Map<string, PolledWatcher>();
  /** Verified envd tokens of this sandbox, oldest first: what a signed file URL's signature may have been made with. */
  readonly signingTokens: string[] = [];

  constructor(private readonly sbx: Sandbox) {}

  /** Keeps a token an envd request proved for this sandbox (its signature verified), newest last, bounded. */
  rememberToken(token: string): void {
    const at = this.signingTokens.indexOf(token);
    if (at === this.signingTokens.length - 1 && at >= 0) return;
    if (at >= 0) this.signingTokens.splice(at, 1);
    this.signingTokens.push(token);
    if (this.signingTokens.length > MAX_SIGNING_TOKENS) this.signingTokens.shift();
  }

  remember(commandId: string, meta: CommandMeta): void {
    this.commands.set(commandId, meta);
    if (this.commands.size <= MAX_REMEMBERED_COMMANDS) return;
    const exited = [...this.commands.keys()].find((id) => this.sbx.commands.get(id)?.state !== 'running');
    this.commands.delete(exited ?? this.commands.keys().next().value!);
  }

  /** The command a selector names: by pid the running one (a guest pid can be reused), else the latest; by tag the latest. */
  find(sel: ProcessSelector): CommandRecord | undefined {
    if ('tag' in sel) {
      const ids = [...this.commands].filter(([, m]) => m.tag === sel.tag).map(([id]) => id);
      for (const id of ids.reverse()) {
        const rec = this.sbx.commands.get(id);
        if (rec) return rec;
      }
      return undefined;
    }
    let latest: CommandRecord | undefined;
    for (const rec of this.sbx.commands.values()) {
      if (rec.pid !== sel.pid) continue;
      if (rec.state === 'running') return rec;
      latest = rec;
    }
    return latest;
  }

  /** E2B's view of a command's config; one started through Sandglass's own API is described from its argv. */
  configOf(rec: CommandRecord): CommandMeta {
    return (
      this.commands.get(rec.id) ?? { config: { cmd: rec.argv[0] ?? '', args: rec.argv.slice(1), envs: {}, ...(rec.cwd !== undefined ? { cwd: rec.cwd } : {}) } }
    );
  }
}

const states = new WeakMap<Sandbox, SandboxEnvdState>();

export function envdState(sbx: Sandbox): SandboxEnvdState {
  let st = states.get(sbx);
  if (!st) {
    st = new SandboxEnvdState(sbx);
    states.set(sbx, st);
  }
  return st;
}
