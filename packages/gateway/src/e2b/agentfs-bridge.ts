// Issue 12, pending the agentfs helper's commit: the gateway file layer's `owner` option and `files.watch` are
// being added beside this code. These calls name them as specified there; the file goes once they land.
import type { Readable } from 'node:stream';
import type { Sandbox } from '../sandbox.js';
import { ConnectError } from './connect.js';

export interface GuestFsEvent {
  name?: string;
  op: string;
}

interface PendingFiles {
  write(path: string, data: Readable, opts: { mode?: number; owner?: string }): Promise<{ sizeBytes: number }>;
  mkdir(path: string, opts: { owner?: string }): Promise<{ created: boolean }>;
  watch?(path: string, opts: { recursive: boolean }, onEvent: (ev: GuestFsEvent) => void): Promise<{ close(): Promise<void> }>;
}

const filesOf = (sbx: Sandbox) => sbx.files as unknown as PendingFiles;

export function writeAs(sbx: Sandbox, path: string, data: Readable, owner: string): Promise<{ sizeBytes: number }> {
  return filesOf(sbx).write(path, data, { owner });
}

export function mkdirAs(sbx: Sandbox, path: string, owner: string): Promise<{ created: boolean }> {
  return filesOf(sbx).mkdir(path, { owner });
}

export function watch(sbx: Sandbox, path: string, opts: { recursive: boolean }, onEvent: (ev: GuestFsEvent) => void): Promise<{ close(): Promise<void> }> {
  const files = filesOf(sbx);
  if (!files.watch) throw new ConnectError('unimplemented', 'watching directories needs the guest agent fs.watch, which this gateway build lacks');
  return files.watch(path, opts, onEvent);
}
