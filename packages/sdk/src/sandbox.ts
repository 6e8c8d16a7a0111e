// A sandbox: its lifecycle on the control plane, and commands, files and terminals on its node's gateway.
import { ControlPlane, DataPlane } from './client.js';
import { Commands } from './commands.js';
import type { ConnectionConfig } from './config.js';
import { NotFoundError } from './errors.js';
import { Files } from './files.js';
import { Pty } from './pty.js';
import type { SandboxEvent, SandboxInfo, SandboxState, TemplateInfo } from './types.js';

export interface SandboxCreateOptions extends ConnectionConfig {
  /** Template name or id; default "base". */
  template?: string;
  memoryMib?: number;
  vcpus?: number;
  /** The sandbox is killed this long after creation unless extended with setTimeout. */
  timeoutS?: number;
  metadata?: Record<string, string>;
}

export interface SandboxListOptions extends ConnectionConfig {
  state?: SandboxState;
}

// The largest page the control plane serves.
const EVENTS_PAGE = 1000;

const sandboxPath = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

export class Sandbox {
  readonly id: string;
  readonly commands: Commands;
  readonly files: Files;
  readonly pty: Pty;
  private readonly controlPlane: ControlPlane;

  private constructor(controlPlane: ControlPlane, info: SandboxInfo) {
    this.id = info.id;
    this.controlPlane = controlPlane;
    const dataPlane = new DataPlane(controlPlane, info.id, info.access);
    this.commands = new Commands(dataPlane);
    this.files = new Files(dataPlane);
    this.pty = new Pty(dataPlane, (id, signal) => this.commands.kill(id, signal));
  }

  static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
    const { template, memoryMib, vcpus, timeoutS, metadata, ...config } = opts;
    const cp = await ControlPlane.open(config);
    const info = await cp.json<SandboxInfo>('POST', '/v1/sandboxes', { json: { template, memoryMib, vcpus, timeoutS, metadata } });
    return new Sandbox(cp, info);
  }

  /** A handle on an existing sandbox; fails with sandbox_not_found when there is none with this id. */
  static async connect(id: string, config?: ConnectionConfig): Promise<Sandbox> {
    const cp = await ControlPlane.open(config);
    return new Sandbox(cp, await cp.json<SandboxInfo>('GET', sandboxPath(id)));
  }

  static async list(opts: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const { state, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return (await cp.json<{ sandboxes: SandboxInfo[] }>('GET', '/v1/sandboxes', { query: { state } })).sandboxes;
  }

  /** Kills a sandbox by id; false when no such sandbox exists. Killing an ended one is not an error. */
  static async kill(id: string, config?: ConnectionConfig): Promise<boolean> {
    const cp = await ControlPlane.open(config);
    try {
      await cp.request('DELETE', sandboxPath(id));
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && err.code === 'sandbox_not_found') return false;
      throw err;
    }
  }

  /** The templates a sandbox can be created from. */
  static async listTemplates(config?: ConnectionConfig): Promise<TemplateInfo[]> {
    const cp = await ControlPlane.open(config);
    return (await cp.json<{ templates: TemplateInfo[] }>('GET', '/v1/templates')).templates;
  }

  async kill(): Promise<void> {
    await this.controlPlane.request('DELETE', sandboxPath(this.id));
  }

  getInfo(): Promise<SandboxInfo> {
    return this.controlPlane.json<SandboxInfo>('GET', sandboxPath(this.id));
  }

  /** Moves the expiry to now + timeoutS. */
  setTimeout(timeoutS: number): Promise<SandboxInfo> {
    return this.controlPlane.json<SandboxInfo>('POST', `${sandboxPath(this.id)}/timeout`, { json: { timeoutS } });
  }

  /** The sandbox's events in log order; `afterSeq` resumes after an event already seen. Pages through them all. */
  async events(opts: { afterSeq?: number } = {}): Promise<SandboxEvent[]> {
    const all: SandboxEvent[] = [];
    let afterSeq = opts.afterSeq;
    for (;;) {
      const { events } = await this.controlPlane.json<{ events: SandboxEvent[] }>('GET', `${sandboxPath(this.id)}/events`, {
        query: { afterSeq, limit: EVENTS_PAGE },
      });
      all.push(...events);
      if (events.length < EVENTS_PAGE) return all;
      afterSeq = events[events.length - 1]!.seq;
    }
  }
}
