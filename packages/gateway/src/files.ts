// A sandbox's files as the data plane uses them: agent errors mapped onto the catalogue, and every change recorded.
import type { Readable } from 'node:stream';
import { SandglassError } from '@sandglass/core';
import type { AgentClient, FileStat } from '@sandglass/agent-client';
import { viaAgent } from './agent-link.js';

/** What the files of one sandbox need from it: its agent while it runs, and its event record. */
export interface FilesHost {
  requireRunning(): AgentClient;
  record(type: string, data: Record<string, unknown>): Promise<unknown>;
}

/**
 * File operations on guest paths the caller has already checked (paths.ts). A change is recorded once the agent
 * confirmed it, never for one that failed: the log says what the guest's files went through.
 */
export class SandboxFiles {
  constructor(private readonly host: FilesHost) {}

  /** A file's bytes as a stream, and its size; a directory is listed, not read. */
  async open(path: string): Promise<{ sizeBytes: number; stream: Readable }> {
    const agent = this.host.requireRunning();
    const st = await viaAgent(agent.stat(path), { path });
    if (st.type === 'dir') throw new SandglassError('is_a_directory', `${path} is a directory; list it with /files/list.`, { details: { field: 'path' } });
    const stream: Readable = await viaAgent(agent.readFile(path), { path });
    return { sizeBytes: st.sizeBytes, stream };
  }

  async stat(path: string): Promise<FileStat> {
    return viaAgent(this.host.requireRunning().stat(path), { path });
  }

  async list(path: string, depth: number): Promise<FileStat[]> {
    return viaAgent(this.host.requireRunning().list(path, { depth }), { path });
  }

  /** Writes `data` to `path` (the agent renames it into place once complete) and records file.written. */
  async write(path: string, data: Readable, opts: { mode?: number } = {}): Promise<{ sizeBytes: number }> {
    const { sizeBytes } = await viaAgent(this.host.requireRunning().writeFile(path, data, { mode: opts.mode ?? 0o644 }), { path });
    await this.host.record('file.written', { path, sizeBytes });
    return { sizeBytes };
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    if (path === '/') throw new SandglassError('path_outside_sandbox', 'Refusing to remove the guest root.', { details: { field: 'path' } });
    await viaAgent(this.host.requireRunning().remove(path, { recursive: opts.recursive ?? false }), { path });
    await this.host.record('file.removed', { path });
  }

  /** Creates a directory and its parents; only one that did not exist yet is a change to record. */
  async mkdir(path: string): Promise<{ created: boolean }> {
    const { created } = await viaAgent(this.host.requireRunning().mkdir(path), { path });
    if (created) await this.host.record('file.dir_created', { path });
    return { created };
  }

  async rename(from: string, to: string): Promise<void> {
    await viaAgent(this.host.requireRunning().rename(from, to), { path: from });
    await this.host.record('file.renamed', { from, to });
  }
}
