// A sandbox's files as the data plane uses them: agent errors mapped onto the catalogue, and every change recorded.
import { posix } from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { SandglassError, type EventData, type EventType } from '@sandglass/core';
import { type AgentClient, AgentError, type FileStat, type FsEventOp } from '@sandglass/agent-client';
import { mapAgentError, viaAgent } from './agent-link.js';
import { agentNameRefused, cleanGuestPath, isPlainName } from './paths.js';
import type { Recorder } from './recording.js';

/** What the files of one sandbox need from it: its agent while it runs, and its event record. */
export interface FilesHost {
  requireRunning(): AgentClient;
  record<T extends EventType>(type: T, data: EventData<T>): Promise<unknown>;
  /** Where written content is recorded, when the sandbox records its inputs. */
  recorder?(): Recorder | undefined;
}

/**
 * A change under a watched directory, `name` relative to it; `overflow`: changes were lost (rescan if it matters);
 * `end`: the watch ended without close() (the sandbox's agent connection went away: pause, kill, failure), and
 * nothing follows.
 */
export type FileWatchEvent = { op: FsEventOp; name: string } | { op: 'overflow' } | { op: 'end'; error: SandglassError };

export interface FileWatch {
  /** Stops the watch; no event follows once called. Idempotent, and harmless after `end`. */
  close(): Promise<void>;
}

/** A user (name or uid) in the guest, for files and directories a call creates. */
export type GuestOwner = string | number;

/**
 * File operations on guest paths the caller has already checked (paths.ts). A change is recorded once the agent
 * confirmed it, never for one that failed: the log says what the guest's files went through.
 */
export class SandboxFiles {
  #lastWatchId = 0;

  constructor(private readonly host: FilesHost) {}

  /** A file's bytes as a stream, and its size; a directory is listed, not read. */
  async open(path: string): Promise<{ sizeBytes: number; stream: Readable }> {
    const agent = this.host.requireRunning();
    const st = statOf(await viaAgent(agent.stat(path), { path }), path);
    if (st.type === 'dir') throw new SandglassError('is_a_directory', `${path} is a directory; list it with /files/list.`, { details: { field: 'path' } });
    const stream: Readable = await viaAgent(agent.readFile(path), { path });
    return { sizeBytes: st.sizeBytes, stream };
  }

  /** The agent's stat of `path`, refused (vm_reply_refused) unless it names `path` itself. */
  async stat(path: string): Promise<FileStat> {
    return statOf(await viaAgent(this.host.requireRunning().stat(path), { path }), path);
  }

  /** Entries under `path`; the listing is refused whole if one entry's name or path would lead a client elsewhere. */
  async list(path: string, depth: number): Promise<FileStat[]> {
    const entries = await viaAgent(this.host.requireRunning().list(path, { depth }), { path });
    const dir = cleanGuestPath(path);
    const prefix = dir === '/' ? '/' : `${dir}/`;
    for (const e of entries) {
      if (!isPlainName(e.name)) throw agentNameRefused('name', e.name, path);
      // Below `path`, one plain name per level, and the entry's own name last.
      const rel = typeof e.path === 'string' && e.path.startsWith(prefix) ? e.path.slice(prefix.length).split('/') : [];
      if (rel.length === 0 || rel.length > depth || !rel.every(isPlainName) || rel.at(-1) !== e.name) throw agentNameRefused('path', e.path, path);
    }
    return entries;
  }

  /**
   * Writes `data` to `path` (the agent renames it into place once complete) and records file.written. With `owner`
   * the file, and every directory the write created, belong to that guest user and its primary group; `xattrs` are
   * set on it as `user.` extended attributes before it appears.
   */
  async write(path: string, data: Readable, opts: { mode?: number; owner?: GuestOwner; xattrs?: Record<string, string> } = {}): Promise<{ sizeBytes: number }> {
    const agent = this.host.requireRunning();
    // The content is recorded as it streams past (parts staged behind the write), never held whole.
    const tee = this.host.recorder?.()?.tee();
    let source = data;
    if (tee) {
      source = tee.stream;
      pipeline(data, tee.stream).catch((e: unknown) => tee.stream.destroy(e as Error));
    }
    const { sizeBytes } = await viaAgent(agent.writeFile(path, source, { mode: opts.mode ?? 0o644, owner: opts.owner, xattrs: opts.xattrs }), {
      path,
    });
    await this.host.record('file.written', {
      path,
      sizeBytes,
      ...(tee ? { contentId: tee.ref().contentId } : {}),
      ...(opts.xattrs !== undefined ? { xattrs: opts.xattrs } : {}),
    });
    return { sizeBytes };
  }

  /**
   * Extracts a tar stream into the directory `path` (created with its parents): the agent never writes outside it and
   * never through a symlink. Records file.tar_written with the archive as its content (a replay extracts it again);
   * a failure keeps what was extracted before it, as tar does, and records nothing.
   */
  async writeTar(path: string, data: Readable, opts: { owner?: GuestOwner } = {}): Promise<{ entries: number; sizeBytes: number; archiveBytes: number }> {
    const agent = this.host.requireRunning();
    const tee = this.host.recorder?.()?.tee();
    let archiveBytes = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        archiveBytes += chunk.length;
        cb(null, chunk);
      },
    });
    // The agent's reply comes after it consumed every byte, so archiveBytes is complete by then.
    const source = tee ? tee.stream : counter;
    (tee ? pipeline(data, counter, tee.stream) : pipeline(data, counter)).catch((e: unknown) => source.destroy(e as Error));
    const { entries, sizeBytes } = await viaAgent(agent.writeTar(path, source, { owner: opts.owner }), { path });
    await this.host.record('file.tar_written', { path, entries, sizeBytes, archiveBytes, ...(tee ? { contentId: tee.ref().contentId } : {}) });
    return { entries, sizeBytes, archiveBytes };
  }

  /** A directory as a tar stream, packed by the agent as it is read (never held whole on the host). */
  async readTar(path: string): Promise<Readable> {
    const agent = this.host.requireRunning();
    const st = statOf(await viaAgent(agent.stat(path), { path }), path);
    if (st.type !== 'dir')
      throw new SandglassError('not_a_directory', `${path} is not a directory; read a file with GET /files.`, { details: { field: 'path' } });
    return viaAgent(agent.readTar(path), { path });
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    if (path === '/') throw new SandglassError('path_outside_sandbox', 'Refusing to remove the guest root.', { details: { field: 'path' } });
    await viaAgent(this.host.requireRunning().remove(path, { recursive: opts.recursive ?? false }), { path });
    await this.host.record('file.removed', { path });
  }

  /**
   * Creates a directory and its parents; only one that did not exist yet is a change to record. With `owner`, the
   * directories it created belong to that guest user; existing ones keep their owner.
   */
  async mkdir(path: string, opts: { owner?: GuestOwner } = {}): Promise<{ created: boolean }> {
    const { created } = await viaAgent(this.host.requireRunning().mkdir(path, { owner: opts.owner }), { path });
    if (created) await this.host.record('file.dir_created', { path });
    return { created };
  }

  async rename(from: string, to: string): Promise<void> {
    await viaAgent(this.host.requireRunning().rename(from, to), { path: from });
    await this.host.record('file.renamed', { from, to });
  }

  /**
   * Watches a guest directory (with `recursive`, its subdirectories too) until close(), or until the agent
   * connection ends, which onEvent learns as `end`. Watches are not recorded: they change nothing. An event whose
   * name is not plain names below the directory (one, unless recursive) is not passed on: the watch ends with
   * vm_reply_refused.
   */
  async watch(path: string, opts: { recursive?: boolean }, onEvent: (ev: FileWatchEvent) => void): Promise<FileWatch> {
    const agent = this.host.requireRunning();
    const watchId = `w${++this.#lastWatchId}`;
    let open = true;
    const onEnd = (err: AgentError) => {
      if (!open) return;
      open = false;
      onEvent({ op: 'end', error: mapAgentError(err) });
    };
    try {
      await agent.watch(watchId, path, { recursive: opts.recursive ?? false, onEnd }, (ev) => {
        if (!open) return;
        if (ev.op === 'overflow') return onEvent({ op: 'overflow' });
        const parts = ev.name.split('/');
        if (parts.every(isPlainName) && (opts.recursive || parts.length === 1)) return onEvent({ op: ev.op, name: ev.name });
        open = false;
        onEvent({ op: 'end', error: agentNameRefused('name', ev.name, path) });
        agent.unwatch(watchId).catch(() => undefined);
      });
    } catch (err) {
      open = false;
      if (err instanceof AgentError && err.code === 'busy') {
        throw new SandglassError('capacity_exhausted', `The sandbox has too many directory watches open (or ${path} holds too many directories); close one.`);
      }
      throw mapAgentError(err, { path });
    }
    return {
      close: async () => {
        if (!open) return;
        open = false;
        // A connection already gone took the watch with it.
        await agent.unwatch(watchId).catch(() => undefined);
      },
    };
  }
}

/** A stat answer is for the path asked about: its name is that path's last component ('/' for the root), its path that path. */
function statOf(st: FileStat, path: string): FileStat {
  const clean = cleanGuestPath(path);
  if (st.name !== (clean === '/' ? '/' : posix.basename(clean))) throw agentNameRefused('name', st.name, path);
  if (st.path !== clean) throw agentNameRefused('path', st.path, path);
  return st;
}
