// The replay driver: forks a sandbox in replay mode at a snapshot and re-issues its recorded inputs in order, comparing each.
import { performance } from 'node:perf_hooks';
import { DataPlane, type ControlPlane } from './client.js';
import { CommandExitError, CommandTimeoutError, SandglassError } from './errors.js';
import { type CommandHandle, Commands } from './commands.js';
import { Files } from './files.js';
import type { ControlPlaneReply, GatewayReply } from './replies.js';
import { compareCommand, digestOf, summarize, type CommandOutcome, type OutputDigest, type ReplayInputResult, type ReplayReport } from './replay-report.js';
import type { SandboxEvent, SignalName } from './types.js';

export interface ReplayRunOptions {
  /**
   * Start from the moment the sandbox was created (its template with what it was created with, and the clock and
   * entropy of its first sync) instead of a snapshot. The default when no snapshot precedes the sandbox's first input.
   */
  from?: 'creation';
  /** The snapshot to start from; default: the sandbox's first snapshot (or its latest at or before `at`). */
  snapshotId?: string;
  at?: Date | string;
  /** Inputs recorded after this time are not replayed. */
  until?: Date | string;
  /** Commands whose argv contains one of these strings print random numbers or times: their output may differ. */
  nondeterministic?: string[];
  /** How long the replay may wait for one input's precondition (output offset, exit); default 60 s. */
  inputTimeoutMs?: number;
  /** Seconds until the fork is ended; default 600. */
  timeoutS?: number;
  /** Keep the fork running after the replay (to look around in it); default: it is killed. */
  keepFork?: boolean;
  /**
   * Runs in the fork before the first input: changes made here (a file edited) ask "what if the snapshot had been
   * this way", and the report shows where the inputs then go another way. Its own actions are not compared.
   */
  prepare?: (fork: { id: string; commands: Commands; files: Files }) => Promise<void>;
}

const PAGE = 1000;

async function sourceEvents(cp: ControlPlane, sandboxId: string): Promise<SandboxEvent[]> {
  const all: SandboxEvent[] = [];
  let afterSeq: number | undefined;
  for (;;) {
    const { events } = await cp.json<ControlPlaneReply<'listSandboxEvents'>>('GET', `/v1/sandboxes/${encodeURIComponent(sandboxId)}/events`, {
      query: { afterSeq, limit: PAGE },
    });
    all.push(...events);
    if (events.length < PAGE) return all;
    afterSeq = events[events.length - 1]!.seq;
  }
}

const ms = (t: Date | string) => (t instanceof Date ? t.getTime() : Date.parse(t));

/** The events a replay re-issues. */
const INPUT_TYPES = new Set(['command.started', 'command.input', 'file.written', 'file.tar_written', 'file.removed', 'file.renamed', 'file.dir_created']);

/**
 * The log in the order its inputs reached the guest. The gateway records a `command.input` once the agent has answered
 * with the output offset it arrived at, so an input that ends its command (stdin EOF, a signal) can be logged after
 * the `command.exited` it caused. The agent took it while the command ran, so it goes back before that exit; the
 * replay would otherwise wait for an exit that only that input brings about.
 */
export function deliveryOrder(events: readonly SandboxEvent[]): SandboxEvent[] {
  const exited = new Set<string>();
  const late = new Map<string, SandboxEvent[]>();
  for (const e of events) {
    const id = String(e.data.commandId);
    if (e.type === 'command.exited') exited.add(id);
    else if (e.type === 'command.input' && exited.has(id)) late.set(id, [...(late.get(id) ?? []), e]);
  }
  const moved = new Set([...late.values()].flat());
  return events.flatMap((e) => {
    if (moved.has(e)) return [];
    return e.type === 'command.exited' ? [...(late.get(String(e.data.commandId)) ?? []), e] : [e];
  });
}

/** Where a replay starts: a snapshot, or (snapshotId null) the moment the sandbox was created. */
interface Start {
  snapshotId: string | null;
  takenAt: string;
}

/**
 * Picks where a replay starts: the named snapshot, the latest at or before `at`, the sandbox's creation (`from:
 * 'creation'`, and the default when no snapshot precedes its first input), or else its first snapshot.
 */
export function chooseStart(events: SandboxEvent[], opts: ReplayRunOptions): Start {
  const taken = events
    .filter((e) => e.type === 'snapshot.taken')
    .map((e) => ({ snapshotId: String(e.data.snapshotId), takenAt: String(e.data.takenAt ?? e.at) }));
  const creation = (): Start => ({
    snapshotId: null,
    takenAt: events.find((e) => e.type === 'sandbox.created')?.at ?? events[0]?.at ?? new Date(0).toISOString(),
  });
  if (opts.from === 'creation') return creation();
  let pick: Start | undefined;
  if (opts.snapshotId !== undefined) pick = taken.find((s) => s.snapshotId === opts.snapshotId);
  else if (opts.at !== undefined) pick = taken.filter((s) => Date.parse(s.takenAt) <= ms(opts.at!)).pop();
  else {
    const firstInput = events.find((e) => INPUT_TYPES.has(e.type));
    const first = taken[0];
    pick = first && (!firstInput || Date.parse(first.takenAt) < Date.parse(firstInput.at)) ? first : creation();
  }
  if (!pick) {
    throw new SandglassError(
      'snapshot_not_found',
      opts.snapshotId !== undefined
        ? `Snapshot ${opts.snapshotId} is not one of this sandbox's.`
        : 'The sandbox has no snapshot at or before that time; replay it from its creation (from: creation) or a later time.',
    );
  }
  return pick;
}

/** One command of the replay: its handle in the fork and what it printed, per stream. */
interface Running {
  handle: CommandHandle;
  stdout: Buffer[];
  stderr: Buffer[];
  all: Buffer[];
  outcome?: Promise<CommandOutcome>;
}

/** Replays `sourceId` (see Sandbox.replay). */
export async function runReplay(cp: ControlPlane, sourceId: string, opts: ReplayRunOptions = {}): Promise<ReplayReport> {
  const t0 = performance.now();
  const events = await sourceEvents(cp, sourceId);
  const snap = chooseStart(events, opts);
  // From creation every input is replayed; from a snapshot, those after it.
  const fromMs = snap.snapshotId === null ? Number.NEGATIVE_INFINITY : Date.parse(snap.takenAt);
  const untilMs = opts.until === undefined ? Number.POSITIVE_INFINITY : ms(opts.until);
  const inputTimeoutMs = opts.inputTimeoutMs ?? 60_000;
  const { sandboxes } = await cp.json<ControlPlaneReply<'forkSandbox'>>('POST', '/v1/forks', {
    json: {
      ...(snap.snapshotId === null ? { sandboxId: sourceId, fromCreation: true } : { snapshotId: snap.snapshotId }),
      count: 1,
      timeoutS: opts.timeoutS ?? 600,
      replay: true,
    },
  });
  const fork = sandboxes[0]!;
  const dataPlane = new DataPlane(cp, fork.id, fork.access);
  const commands = new Commands(dataPlane);
  const files = new Files(dataPlane);
  const recorded = async (contentId: string, sizeBytes?: number): Promise<Buffer> => {
    const res = await dataPlane.request('GET', `/recording/${contentId}`, { query: { sizeBytes } });
    return res.bytes();
  };
  const capped = events.find((e) => e.type === 'recording.capped');
  const inputs: ReplayInputResult[] = [];
  const running = new Map<string, Running>();
  let lastSeq = 0;
  let unrecordedSeen = 0;

  const follow = async (forkCommandId: string): Promise<Running> => {
    const r: Running = { stdout: [], stderr: [], all: [], handle: undefined as unknown as CommandHandle };
    r.handle = await commands.connect(forkCommandId, {
      fromOffset: 0,
      retainOutput: false,
      onStdoutBytes: (b) => {
        r.stdout.push(Buffer.from(b));
        r.all.push(Buffer.from(b));
      },
      onStderrBytes: (b) => {
        r.stderr.push(Buffer.from(b));
        r.all.push(Buffer.from(b));
      },
    });
    r.outcome = r.handle.wait().then(
      (res) => ({ exitCode: res.exitCode, signal: null, timedOut: false, outputBytes: r.handle.outputOffset }),
      (err: unknown) => {
        if (err instanceof CommandExitError || err instanceof CommandTimeoutError) {
          const res = err.result;
          return {
            exitCode: res.signal ? null : res.exitCode,
            signal: res.signal ?? null,
            timedOut: res.timedOut,
            outputBytes: r.handle.outputOffset,
          };
        }
        throw err;
      },
    );
    // Ending the replay disconnects commands still running: that rejection is no one's to handle.
    r.outcome.catch(() => undefined);
    return r;
  };
  /** The fork's command for a source command id: one the replay started, or one restored from the snapshot. */
  const commandFor = async (id: string): Promise<Running> => {
    let r = running.get(id);
    if (!r) {
      r = await follow(id);
      running.set(id, r);
    }
    return r;
  };
  const within = async <T>(what: string, p: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        p,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new SandglassError('timeout', `the replay waited ${inputTimeoutMs} ms for ${what}`)), inputTimeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  };
  /** Requests the fork's guest made that the recording did not have: a real divergence at the input in progress. */
  const unrecordedRequests = async (): Promise<string[]> => {
    const { events: fe } = await cp.json<ControlPlaneReply<'listSandboxEvents'>>('GET', `/v1/sandboxes/${encodeURIComponent(fork.id)}/events`, {
      query: { type: 'egress.replay_unrecorded', limit: PAGE },
    });
    const fresh = fe.slice(unrecordedSeen);
    unrecordedSeen = fe.length;
    return fresh.map((e) => `the guest requested ${e.data.method} ${e.data.url}, which the recording does not have`);
  };

  try {
    await opts.prepare?.({ id: fork.id, commands, files });
    for (const e of deliveryOrder(events)) {
      if (Date.parse(e.at) <= fromMs || Date.parse(e.at) > untilMs) continue;
      const d = e.data as Record<string, unknown>;
      const base = { seq: e.seq };
      const notRecorded = (kind: ReplayInputResult['kind'], summary: string): ReplayInputResult => ({
        ...base,
        kind,
        summary,
        verdict: 'not_recorded',
        differences: ['its content was not recorded (the recording reached its cap)'],
      });
      let result: ReplayInputResult | undefined;
      switch (e.type) {
        case 'command.started': {
          const summary = (d.argv as string[]).join(' ');
          if (typeof d.recordingId !== 'string') {
            result = notRecorded('command', summary);
            break;
          }
          const spec = JSON.parse((await recorded(d.recordingId)).toString('utf8')) as {
            argv: string[];
            envs: Record<string, string>;
            cwd: string | null;
            user: string | null;
            stdin: boolean;
            pty: { cols: number; rows: number } | null;
            timeoutMs: number | null;
          };
          const info = await dataPlane.json<GatewayReply<'startCommand'>>('POST', '/commands', {
            json: {
              argv: spec.argv,
              envs: spec.envs,
              ...(spec.cwd === null ? {} : { cwd: spec.cwd }),
              ...(spec.user === null ? {} : { user: spec.user }),
              stdin: spec.stdin,
              ...(spec.pty === null ? {} : { pty: spec.pty }),
              ...(spec.timeoutMs === null ? {} : { timeoutMs: spec.timeoutMs }),
            },
          });
          running.set(String(d.commandId), await follow(info.id));
          break;
        }
        case 'command.input': {
          const r = await commandFor(String(d.commandId));
          const kind = d.kind as 'stdin' | 'signal' | 'resize';
          const at = typeof d.outputOffset === 'number' ? d.outputOffset : 0;
          const summary =
            kind === 'stdin'
              ? `${d.sizeBytes} bytes${d.eof ? ' and EOF' : ''} at output offset ${at}`
              : kind === 'signal'
                ? `${d.signal} at output offset ${at}`
                : `${d.cols}x${d.rows}`;
          if (kind === 'stdin' && (d.sizeBytes as number) > 0 && typeof d.contentId !== 'string') {
            result = notRecorded('stdin', summary);
            break;
          }
          // Delivered once the replayed command has written as much as the original had when the input arrived.
          const reached = await within(
            `output offset ${at}`,
            (async () => {
              while (r.handle.outputOffset < at) {
                const done = await Promise.race([r.outcome!.then(() => true), new Promise<boolean>((res) => setTimeout(() => res(false), 10))]);
                if (done) return r.handle.outputOffset >= at;
              }
              return true;
            })(),
          ).catch(() => false);
          const differences = reached ? [] : [`the replayed command never reached output offset ${at} (it is at ${r.handle.outputOffset})`];
          try {
            if (kind === 'stdin') {
              if ((d.sizeBytes as number) > 0) await r.handle.sendStdin(await recorded(d.contentId as string, d.sizeBytes as number));
              if (d.eof) await r.handle.closeStdin();
            } else if (kind === 'signal') await r.handle.kill(d.signal as SignalName);
            else await dataPlane.request('POST', `/commands/${encodeURIComponent(r.handle.id)}/resize`, { json: { cols: d.cols, rows: d.rows } });
          } catch (err) {
            differences.push(`the replay could not deliver it: ${(err as Error).message}`);
          }
          result = { ...base, kind, summary, verdict: differences.length ? 'different' : 'same', differences };
          break;
        }
        case 'command.exited': {
          const id = String(d.commandId);
          const r = await commandFor(id);
          const started = events.find((x) => x.type === 'command.started' && x.data.commandId === id);
          const argv = (started?.data.argv as string[] | undefined) ?? [id];
          const summary = argv.join(' ');
          const original: CommandOutcome = {
            exitCode: (d.exitCode as number | null) ?? null,
            signal: (d.signal as string | null) ?? null,
            timedOut: d.timedOut === true,
            outputBytes: Number(d.outputBytes ?? 0),
            ...(d.output ? { output: d.output as OutputDigest } : {}),
          };
          let replayed: CommandOutcome;
          try {
            replayed = { ...(await within(`${summary} to exit`, r.outcome!)), output: digestOf(r.stdout, r.stderr, r.all) };
          } catch (err) {
            result = { ...base, kind: 'command', summary, verdict: 'different', differences: [(err as Error).message], original: { ...original } };
            break;
          }
          const nondeterministic = (opts.nondeterministic ?? []).some((s) => argv.some((a) => a.includes(s)));
          const cmp = compareCommand(original, replayed, { nondeterministic });
          const unrecorded = await unrecordedRequests();
          const tail = Buffer.concat(r.all).subarray(-512).toString('utf8');
          result = {
            ...base,
            kind: 'command',
            summary,
            verdict: unrecorded.length > 0 ? 'different' : cmp.verdict,
            differences: [...unrecorded, ...cmp.differences],
            original: { ...original },
            replay: { ...replayed, outputTail: tail },
          };
          break;
        }
        case 'file.written': {
          const path = String(d.path);
          const summary = `${path} (${d.sizeBytes} bytes)`;
          if (typeof d.contentId !== 'string') {
            result = notRecorded('file.write', summary);
            break;
          }
          const data = await recorded(d.contentId, Number(d.sizeBytes));
          const w = await files.write(path, data).catch((err: Error) => err);
          const differences = w instanceof Error ? [`the write failed in the replay: ${w.message}`] : [];
          result = { ...base, kind: 'file.write', summary, verdict: differences.length ? 'different' : 'same', differences };
          break;
        }
        case 'file.tar_written': {
          const path = String(d.path);
          const summary = `${path} (${d.entries} entries from a tar)`;
          if (typeof d.contentId !== 'string') {
            result = notRecorded('file.writeTar', summary);
            break;
          }
          const data = await recorded(d.contentId, Number(d.archiveBytes));
          const w = await files.writeTar(path, data).catch((err: Error) => err);
          const differences =
            w instanceof Error
              ? [`the upload failed in the replay: ${w.message}`]
              : w.entries !== d.entries
                ? [`${w.entries} entries extracted in the replay, ${d.entries} originally`]
                : [];
          result = { ...base, kind: 'file.writeTar', summary, verdict: differences.length ? 'different' : 'same', differences };
          break;
        }
        case 'file.removed':
        case 'file.renamed':
        case 'file.dir_created': {
          const kind = e.type === 'file.removed' ? 'file.remove' : e.type === 'file.renamed' ? 'file.rename' : 'file.mkdir';
          const summary = e.type === 'file.renamed' ? `${d.from} → ${d.to}` : String(d.path);
          const done =
            e.type === 'file.removed'
              ? files.remove(String(d.path)).then(() => undefined)
              : e.type === 'file.renamed'
                ? files.rename(String(d.from), String(d.to)).then(() => undefined)
                : files.makeDir(String(d.path)).then(() => undefined);
          const err = await done.then(
            () => undefined,
            (x: Error) => x,
          );
          result = { ...base, kind, summary, verdict: err ? 'different' : 'same', differences: err ? [`it failed in the replay: ${err.message}`] : [] };
          break;
        }
        default:
          continue;
      }
      lastSeq = e.seq;
      if (result) inputs.push(result);
    }
  } finally {
    for (const r of running.values()) await r.handle.disconnect().catch(() => undefined);
    if (!opts.keepFork) await cp.request('DELETE', `/v1/sandboxes/${encodeURIComponent(fork.id)}`).catch(() => undefined);
  }
  return summarize({
    sourceSandboxId: sourceId,
    forkSandboxId: fork.id,
    snapshotId: snap.snapshotId,
    fromSnapshotTakenAt: snap.takenAt,
    untilSeq: lastSeq,
    inputs,
    notRecordedBeyondSeq: capped ? capped.seq : null,
    durationMs: Math.round(performance.now() - t0),
  });
}
