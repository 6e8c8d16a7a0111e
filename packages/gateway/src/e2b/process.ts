// process.Process on a gateway Sandbox: commands started, followed, fed and signalled through the same Sandbox
// methods as Sandglass's own data plane, so command.* events, egress and snapshots apply unchanged.
import type { Clock } from '@sandglass/core';
import type { CommandRecord, Sandbox } from '../sandbox.js';
import { OUTPUT_WINDOW_BYTES } from '../output-pacing.js';
import { ConnectError } from './connect.js';
import {
  dataEvent,
  endEvent,
  processEvent,
  selectorRequest,
  sendInputRequest,
  sendSignalRequest,
  startRequest,
  updateRequest,
  type ProcessInfo,
  type ProcessSelector,
} from './messages.js';
import type { ServerStream } from './rpc.js';
import { envdState } from './state.js';

/** Who the request acts as, and how its relative paths resolve. */
export interface EnvdUser {
  name: string;
  home: string;
  /** A guest path from a request field: relative to the user's home, then checked (paths.ts). */
  resolve(path: string, field: string): string;
}

export const PROCESS_KEEPALIVE = processEvent({ keepalive: {} });

function notFound(sel: ProcessSelector): ConnectError {
  return new ConnectError('not_found', 'pid' in sel ? `process with pid ${sel.pid} not found` : `process with tag ${sel.tag} not found`);
}

/** A command the selector names that is still running. */
function running(sbx: Sandbox, sel: ProcessSelector): CommandRecord {
  const rec = envdState(sbx).find(sel);
  if (!rec || rec.state !== 'running') throw notFound(sel);
  return rec;
}

/**
 * Relays a command's output to the stream from the start (Start) or from now (Connect), then its end event and the
 * end-of-stream frame. The stream's end (deadline, client gone) only detaches: the command keeps running.
 */
function relay(sbx: Sandbox, rec: CommandRecord, stream: ServerStream, from: 'start' | 'now'): void {
  const agent = sbx.requireRunning();
  // The attach reply can come in the same read as the data and END that follow it: pieces wait until the reply
  // said where "now" is, so order and the cut are both right.
  let skipBelow = from === 'start' ? 0 : Number.POSITIVE_INFINITY;
  let ready = false;
  const early: Array<() => void> = [];
  const inOrder = (fn: () => void) => (ready ? fn() : early.push(fn));
  const handle = agent.procAttach(
    rec.id,
    0,
    (fd, offset, bytes, release) =>
      inOrder(() => {
        if (offset + bytes.length <= skipBelow) return release();
        const piece = offset < skipBelow ? bytes.subarray(skipBelow - offset) : bytes;
        stream.send(dataEvent(rec.pty ? 'pty' : fd === 2 ? 'stderr' : 'stdout', piece), release);
      }),
    (err) =>
      inOrder(() => {
        if (err) return stream.end(err);
        // The exit status comes with proc.exit; should the stream's end overtake it, ask before answering.
        void sbx.exitStatus(rec.id).then(() => {
          stream.send(processEvent(endEvent(rec)));
          stream.end();
        });
      }),
    { deferCredit: true, windowBytes: OUTPUT_WINDOW_BYTES },
  );
  handle.then(
    (h) => {
      if (from === 'now') skipBelow = h.endOffset;
      ready = true;
      for (const fn of early.splice(0)) fn();
    },
    (err) => stream.end(err),
  );
  void stream.closed.then(() => handle.then((h) => h.detach()).catch(() => {}));
}

/** Ends the stream with deadline_exceeded at the RPC's deadline (Connect-Timeout-Ms). */
function armDeadline(stream: ServerStream, clock: Clock, timeoutMs: number | undefined, what: string): void {
  if (timeoutMs === undefined) return;
  const t = clock.setTimeout(() => stream.end(new ConnectError('deadline_exceeded', `${what} ran past its ${timeoutMs} ms deadline`)), timeoutMs);
  void stream.closed.then(() => t.cancel());
}

/**
 * Start: the command's timeout is the RPC's deadline, so the Sandbox kills it then (and records it timed out)
 * while the stream ends with deadline_exceeded. A client that goes away earlier leaves it running.
 */
export async function startProcess(
  sbx: Sandbox,
  user: EnvdUser,
  body: unknown,
  stream: ServerStream,
  opts: { clock: Clock; timeoutMs?: number },
): Promise<void> {
  const req = startRequest(body);
  // No cwd: the sandbox's workdir (its template's WORKDIR), as E2B's envd does.
  const cwd = req.process.cwd ? user.resolve(req.process.cwd, 'process.cwd') : sbx.defaults.workdir;
  const rec = await sbx.startCommand({
    argv: [req.process.cmd, ...req.process.args],
    cwd,
    envs: req.process.envs,
    user: user.name,
    stdin: req.stdin,
    pty: req.pty,
    timeoutMs: opts.timeoutMs,
  });
  envdState(sbx).remember(rec.id, { config: { ...req.process, ...(cwd !== undefined ? { cwd } : {}) }, tag: req.tag });
  armDeadline(stream, opts.clock, opts.timeoutMs, 'the command');
  stream.send(processEvent({ start: { pid: rec.pid } }));
  relay(sbx, rec, stream, 'start');
}

/** Connect: live output from now and the end; an exited command the gateway remembers answers start and end at once. */
export async function connectProcess(sbx: Sandbox, body: unknown, stream: ServerStream, opts: { clock: Clock; timeoutMs?: number }): Promise<void> {
  const sel = selectorRequest(body);
  const rec = envdState(sbx).find(sel);
  if (!rec) throw notFound(sel);
  stream.send(processEvent({ start: { pid: rec.pid } }));
  if (rec.state !== 'running') {
    stream.send(processEvent(endEvent(rec)));
    return stream.end();
  }
  armDeadline(stream, opts.clock, opts.timeoutMs, 'the connection');
  relay(sbx, rec, stream, 'now');
}

/** List: running commands only, as envd lists them. */
export function listProcesses(sbx: Sandbox): { processes: ProcessInfo[] } {
  const st = envdState(sbx);
  const processes = [...sbx.commands.values()]
    .filter((r) => r.state === 'running')
    .map((r) => {
      const meta = st.configOf(r);
      return { config: meta.config, pid: r.pid, ...(meta.tag !== undefined ? { tag: meta.tag } : {}) };
    });
  return { processes };
}

export async function sendInput(sbx: Sandbox, body: unknown): Promise<Record<string, never>> {
  const req = sendInputRequest(body);
  const rec = running(sbx, req.process);
  await sbx.commandInput(rec, { kind: 'stdin', data: req.input, eof: false });
  return {};
}

export async function closeStdin(sbx: Sandbox, body: unknown): Promise<Record<string, never>> {
  const rec = running(sbx, selectorRequest(body));
  await sbx.commandInput(rec, { kind: 'stdin', data: Buffer.alloc(0), eof: true });
  return {};
}

export async function sendSignal(sbx: Sandbox, body: unknown): Promise<Record<string, never>> {
  const req = sendSignalRequest(body);
  const rec = running(sbx, req.process);
  await sbx.commandInput(rec, { kind: 'signal', signal: req.signal });
  return {};
}

export async function updateProcess(sbx: Sandbox, body: unknown): Promise<Record<string, never>> {
  const req = updateRequest(body);
  const rec = running(sbx, req.process);
  if (!req.pty) return {};
  if (!rec.pty) throw new ConnectError('invalid_argument', `process with pid ${rec.pid} has no PTY to resize`);
  await sbx.commandInput(rec, { kind: 'resize', cols: req.pty.cols, rows: req.pty.rows });
  return {};
}
