// filesystem.Filesystem on a gateway Sandbox's files (files.ts): the same calls, events and checks as Sandglass's
// own file routes, with E2B's entry shape and error codes.
import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import { SandglassError, type Clock } from '@sandglass/core';
import type { FsEventOp } from '@sandglass/agent-client';
import type { Sandbox } from '../sandbox.js';
import { ConnectError } from './connect.js';
import { entryInfo, listDirRequest, moveRequest, pathRequest, watcherIdRequest, watchRequest, type FilesystemEvent, type StatLike } from './messages.js';
import type { EnvdUser } from './process.js';
import type { ServerStream } from './rpc.js';
import { MAX_WATCHER_EVENTS, MAX_WATCHERS, envdState } from './state.js';

export const WATCH_KEEPALIVE = { keepalive: {} };

function stat(sbx: Sandbox, path: string): Promise<StatLike> {
  return sbx.files.stat(path);
}

export async function statEntry(sbx: Sandbox, user: EnvdUser, body: unknown) {
  return { entry: entryInfo(await stat(sbx, user.resolve(pathRequest(body).path, 'path'))) };
}

export async function listDir(sbx: Sandbox, user: EnvdUser, body: unknown) {
  const req = listDirRequest(body);
  const entries = await sbx.files.list(user.resolve(req.path, 'path'), req.depth);
  return { entries: entries.map(entryInfo) };
}

/** MakeDir: already_exists when the path is there (the SDK then answers false); what it creates belongs to the user. */
export async function makeDir(sbx: Sandbox, user: EnvdUser, body: unknown) {
  const path = user.resolve(pathRequest(body).path, 'path');
  const { created } = await sbx.files.mkdir(path, { owner: user.name });
  if (!created) throw new ConnectError('already_exists', `${path} already exists`);
  return { entry: entryInfo(await stat(sbx, path)) };
}

export async function move(sbx: Sandbox, user: EnvdUser, body: unknown) {
  const req = moveRequest(body);
  const to = user.resolve(req.destination, 'destination');
  await sbx.files.rename(user.resolve(req.source, 'source'), to);
  return { entry: entryInfo(await stat(sbx, to)) };
}

/** Remove: recursive, and a path already gone is not an error (rm -rf, as envd's os.RemoveAll). */
export async function remove(sbx: Sandbox, user: EnvdUser, body: unknown) {
  try {
    await sbx.files.remove(user.resolve(pathRequest(body).path, 'path'), { recursive: true });
  } catch (err) {
    if (!(err instanceof SandglassError && err.code === 'file_not_found')) throw err;
  }
  return {};
}

const EVENT_OF: Record<FsEventOp, FilesystemEvent['type']> = {
  create: 'EVENT_TYPE_CREATE',
  write: 'EVENT_TYPE_WRITE',
  remove: 'EVENT_TYPE_REMOVE',
  rename: 'EVENT_TYPE_RENAME',
  chmod: 'EVENT_TYPE_CHMOD',
};

/**
 * Opens a guest watch on a directory that must exist. onEvent gets E2B's events (names relative to the directory),
 * with includeEntry each with its entry stat'ed after the event (none once the path is gone: a remove, a rename's
 * old name), delivered in the guest's order; onLost runs when the guest dropped events (its queue overflowed) or the
 * watch ended with the agent's connection.
 */
async function openWatch(
  sbx: Sandbox,
  user: EnvdUser,
  body: unknown,
  onEvent: (ev: FilesystemEvent) => void,
  onLost: (why: ConnectError) => void,
): Promise<{ close(): Promise<void> }> {
  const req = watchRequest(body);
  const path = user.resolve(req.path, 'path');
  const st = await stat(sbx, path);
  if (st.type !== 'dir') throw new ConnectError('invalid_argument', `path ${path} is not a directory`);
  // One chain, so an event whose stat is slow never overtakes the next (nor the loss that follows it).
  let delivered: Promise<unknown> = Promise.resolve();
  const inOrder = (deliver: () => Promise<void> | void) => {
    delivered = delivered.then(deliver).catch(() => {});
  };
  return sbx.files.watch(path, { recursive: req.recursive }, (ev) => {
    if (ev.op === 'overflow')
      return inOrder(() => onLost(new ConnectError('data_loss', `events under ${path} came faster than the guest could queue them; some were lost`)));
    if (ev.op === 'end') return inOrder(() => onLost(new ConnectError('unavailable', `the watch on ${path} ended: ${ev.error.message}`)));
    const event: FilesystemEvent = { name: posix.normalize(ev.name), type: EVENT_OF[ev.op] };
    if (!req.includeEntry) return inOrder(() => onEvent(event));
    const entry = stat(sbx, posix.join(path, event.name)).then(entryInfo, () => undefined);
    inOrder(async () => {
      const e = await entry;
      onEvent(e !== undefined ? { ...event, entry: e } : event);
    });
  });
}

/** WatchDir: `start` first, then the events, keepalives while idle; ends at the deadline or when the sandbox stops. */
export async function watchDir(sbx: Sandbox, user: EnvdUser, body: unknown, stream: ServerStream, opts: { clock: Clock; timeoutMs?: number }) {
  const w = await openWatch(
    sbx,
    user,
    body,
    (ev) => stream.send({ filesystem: ev }),
    (why) => stream.end(why),
  );
  void stream.closed.then(() => w.close().catch(() => {}));
  if (stream.ended) return;
  stream.send({ start: {} });
  if (opts.timeoutMs !== undefined) {
    const t = opts.clock.setTimeout(
      () => stream.end(new ConnectError('deadline_exceeded', `the watch ran past its ${opts.timeoutMs} ms deadline`)),
      opts.timeoutMs,
    );
    void stream.closed.then(() => t.cancel());
  }
}

export async function createWatcher(sbx: Sandbox, user: EnvdUser, body: unknown) {
  const st = envdState(sbx);
  if (st.watchers.size >= MAX_WATCHERS) throw new ConnectError('resource_exhausted', `a sandbox may hold ${MAX_WATCHERS} watchers; remove one first`);
  const id = randomUUID();
  const events: FilesystemEvent[] = [];
  const entry = { events, lost: false, close: async () => {} };
  // Reserved before the guest answers, so concurrent creates cannot pass the bound together.
  st.watchers.set(id, entry);
  try {
    const watch = await openWatch(
      sbx,
      user,
      body,
      (ev) => {
        if (events.length < MAX_WATCHER_EVENTS) events.push(ev);
        else entry.lost = true;
      },
      () => {
        entry.lost = true;
      },
    );
    entry.close = () => watch.close();
  } catch (err) {
    st.watchers.delete(id);
    throw err;
  }
  return { watcherId: id };
}

/** GetWatcherEvents: what arrived since the last poll; a watcher that lost events says so once and is removed. */
export async function getWatcherEvents(sbx: Sandbox, body: unknown) {
  const { watcherId } = watcherIdRequest(body);
  const st = envdState(sbx);
  const w = st.watchers.get(watcherId);
  if (!w) throw new ConnectError('not_found', `watcher ${watcherId} not found`);
  if (w.lost) {
    st.watchers.delete(watcherId);
    await w.close().catch(() => {});
    throw new ConnectError(
      'data_loss',
      `watcher ${watcherId} lost events (more than ${MAX_WATCHER_EVENTS} between polls, or the watch ended); create a new one`,
    );
  }
  return { events: w.events.splice(0) };
}

export async function removeWatcher(sbx: Sandbox, body: unknown) {
  const { watcherId } = watcherIdRequest(body);
  const st = envdState(sbx);
  const w = st.watchers.get(watcherId);
  if (!w) throw new ConnectError('not_found', `watcher ${watcherId} not found`);
  st.watchers.delete(watcherId);
  await w.close();
  return {};
}
