// The gateway's data plane (commands, files, PTYs over HTTP and WebSocket): every route opens one sandbox, with its token.
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { SandglassError, invalidArgument, toSandglassError, type GatewayApi, type NodeKeys, type OperationRoute } from '@sandglass/core';
import type { SignalName } from '@sandglass/agent-client';
import type { Gateway } from './gateway.js';
import type { CommandInput, CommandRecord, Sandbox } from './sandbox.js';
import { guestPath } from './paths.js';
import { mapAgentError } from './agent-link.js';
import { operation, specRoutes } from './spec.js';
import { accessTokenHook } from './auth.js';
import { OUTPUT_WINDOW_BYTES, pacedSender } from './output-pacing.js';
import { GuestReader, HubFollower, hubSnapshot, hubSource } from './output-read.js';
import { hubKey } from './output-hub.js';
import { metricsView } from './metrics.js';

export const MAX_UPLOAD_BYTES = 4 * 1024 ** 3;
const MAX_STDIN_BYTES = 16 * 1024 * 1024;

type Schemas = GatewayApi.components['schemas'];
type StreamRoute = OperationRoute<GatewayApi.operations['streamCommand']>;

function commandView(c: CommandRecord): Schemas['Command'] {
  return {
    id: c.id,
    pid: c.pid,
    argv: c.argv,
    cwd: c.cwd ?? null,
    pty: c.pty,
    state: c.state,
    exitCode: c.exitCode ?? null,
    signal: c.signal ?? null,
    timedOut: c.timedOut,
    outputBytes: c.outputBytes,
    startedAt: c.startedAt,
    endedAt: c.endedAt ?? null,
  };
}

/** A Readable that errors with payload_too_large once more than `max` bytes passed. */
export function limitBytes(max: number): Transform {
  let n = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      n += chunk.length;
      if (n > max) cb(new SandglassError('payload_too_large', `Uploads are limited to ${max} bytes.`));
      else cb(null, chunk);
    },
  });
}

/**
 * The data-plane routes as one encapsulated plugin: its onRequest hook runs only for a request the router matched to
 * one of these routes (after percent-decoding) and checks the token against the decoded sandbox id. A request that
 * matches no route never gets here: the server's not-found handler answers it.
 */
export function dataPlaneApi(gw: Gateway, keys: NodeKeys): FastifyPluginAsync {
  return async (scope) => {
    scope.addHook('onRequest', accessTokenHook(keys, gw.opts.clock, gw.revokedKeys));

    const route = specRoutes(scope);
    const sbxOf = (req: { params: { id: string } }) => gw.get(req.params.id);
    // A guest path of a request, relative ones under the sandbox's workdir.
    const pathIn = (sbx: Sandbox, value: string, field = 'path') => guestPath(value, field, sbx.defaults.workdir);

    // ---- commands ----
    route('POST', '/v1/sandboxes/{id}/commands', async (req, reply) => {
      const body = req.body;
      if ((body.cmd === undefined) === (body.argv === undefined)) throw invalidArgument('cmd', 'give exactly one of cmd or argv');
      const sbx = sbxOf(req);
      // Not a login shell: the agent already gives every process PATH, HOME and friends, and under TCG sourcing the
      // profile scripts costs ~0.3 s per command.
      const argv = body.cmd !== undefined ? ['/bin/bash', '-c', body.cmd] : body.argv!;
      const rec = await sbx.startCommand({
        argv,
        cwd: body.cwd !== undefined ? pathIn(sbx, body.cwd, 'cwd') : sbx.defaults.workdir,
        envs: body.envs,
        user: body.user ?? sbx.defaults.user,
        stdin: body.stdin,
        pty: body.pty,
        timeoutMs: body.timeoutMs,
      });
      return reply.status(201).send(commandView(rec));
    });

    route('GET', '/v1/sandboxes/{id}/commands', async (req) => ({
      commands: [...sbxOf(req).commands.values()].map(commandView),
    }));

    route('GET', '/v1/sandboxes/{id}/commands/{cid}', async (req) => commandView(sbxOf(req).command(req.params.cid)));

    route('GET', '/v1/sandboxes/{id}/metrics', async (req) => metricsView(sbxOf(req).metrics, req.query));

    const runningCommand = (req: { params: { id: string; cid: string } }) => {
      const sbx = sbxOf(req);
      const rec = sbx.command(req.params.cid);
      if (rec.state === 'exited') throw new SandglassError('command_exited', `Command ${rec.id} has exited (code ${rec.exitCode}).`);
      return { sbx, rec, agent: sbx.requireRunning() };
    };

    route('POST', '/v1/sandboxes/{id}/commands/{cid}/stdin', async (req, reply) => {
      const { sbx, rec } = runningCommand(req);
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of req.raw as AsyncIterable<Buffer>) {
        size += c.length;
        if (size > MAX_STDIN_BYTES) throw new SandglassError('payload_too_large', `stdin writes are limited to ${MAX_STDIN_BYTES} bytes per request.`);
        chunks.push(c);
      }
      const eof = req.query.eof === true;
      await sbx.commandInput(rec, { kind: 'stdin', data: Buffer.concat(chunks), eof });
      return reply.status(204).send();
    });

    route('POST', '/v1/sandboxes/{id}/commands/{cid}/signal', async (req, reply) => {
      const { sbx, rec } = runningCommand(req);
      await sbx.commandInput(rec, { kind: 'signal', signal: req.body.signal });
      return reply.status(204).send();
    });

    route('POST', '/v1/sandboxes/{id}/commands/{cid}/resize', async (req, reply) => {
      const { sbx, rec } = runningCommand(req);
      if (!rec.pty) throw invalidArgument('cid', 'the command has no PTY to resize');
      const { cols, rows } = req.body;
      await sbx.commandInput(rec, { kind: 'resize', cols, rows });
      return reply.status(204).send();
    });

    // The one route a browser reaches without headers: its token may come in the query string, and nowhere else.
    const stream = operation('GET', '/v1/sandboxes/{id}/commands/{cid}/stream');
    scope.get<StreamRoute>(
      stream.url,
      {
        websocket: true,
        schema: stream.schema,
        config: { tokenInQuery: true },
        // Before the upgrade, so an unknown command or a stopped sandbox is an HTTP error rather than a closed socket.
        preHandler: async (req) => {
          const sbx = gw.get(req.params.id);
          sbx.command(req.params.cid);
          sbx.requireRunning();
        },
      },
      (socket: WebSocket, req) => streamCommand(gw, socket, req),
    );

    // A reconnect in one request: served from the node's copy of the command's recent output when it holds the offset.
    route('GET', '/v1/sandboxes/{id}/commands/{cid}/output', async (req, reply) => {
      const sbx = sbxOf(req);
      const rec = sbx.command(req.params.cid);
      const agent = sbx.requireRunning();
      const fromOffset = req.query.fromOffset ?? 0;
      const follow = req.query.follow === true;
      const start = { type: 'start', command: commandView(rec) };
      const errorBody = (err: unknown) => toSandglassError(mapAgentError(err)).toBody(req.id);
      const ok = () => reply.header('content-type', 'application/octet-stream').code(200);
      const hub = gw.outputHubs.open(hubKey(sbx.id, rec.id), fromOffset, () => hubSource(sbx, rec, agent));
      // A hub that could not attach (or was evicted meanwhile) leaves the answer to the guest's ring, which reports its own errors.
      const attached = hub !== undefined && (await hub.ready.then(() => true).catch(() => false));
      if (hub && attached && fromOffset >= hub.ring.start) {
        return ok().send(follow ? new HubFollower(hub, fromOffset, start, errorBody) : hubSnapshot(hub, fromOffset, start));
      }
      return ok().send(new GuestReader(sbx, rec, agent, fromOffset, follow, start, errorBody));
    });

    // ---- files ----
    route('GET', '/v1/sandboxes/{id}/files', async (req, reply) => {
      const sbx = sbxOf(req);
      const { sizeBytes, stream } = await sbx.files.open(pathIn(sbx, req.query.path));
      return reply.header('content-type', 'application/octet-stream').header('x-sandglass-size-bytes', String(sizeBytes)).code(200).send(stream);
    });

    route('PUT', '/v1/sandboxes/{id}/files', async (req) => {
      const sbx = sbxOf(req);
      const path = pathIn(sbx, req.query.path);
      const declared = Number(req.headers['content-length'] ?? 0);
      if (declared > MAX_UPLOAD_BYTES) throw new SandglassError('payload_too_large', `Uploads are limited to ${MAX_UPLOAD_BYTES} bytes.`);
      const limited = limitBytes(MAX_UPLOAD_BYTES);
      const piping = pipeline(req.raw, limited).catch((e: unknown) => limited.destroy(e as Error));
      const { sizeBytes } = await sbx.files.write(path, limited, { mode: req.query.mode, owner: sbx.defaults.user });
      await piping;
      return { path, sizeBytes };
    });

    route('GET', '/v1/sandboxes/{id}/files/tar', async (req, reply) => {
      const sbx = sbxOf(req);
      const stream = await sbx.files.readTar(pathIn(sbx, req.query.path));
      return reply.header('content-type', 'application/x-tar').code(200).send(stream);
    });

    route('PUT', '/v1/sandboxes/{id}/files/tar', async (req) => {
      const sbx = sbxOf(req);
      const path = pathIn(sbx, req.query.path);
      const declared = Number(req.headers['content-length'] ?? 0);
      if (declared > MAX_UPLOAD_BYTES) throw new SandglassError('payload_too_large', `Uploads are limited to ${MAX_UPLOAD_BYTES} bytes.`);
      const limited = limitBytes(MAX_UPLOAD_BYTES);
      pipeline(req.raw, limited).catch((e: unknown) => limited.destroy(e as Error));
      const { entries, sizeBytes, archiveBytes } = await sbx.files.writeTar(path, limited, { owner: sbx.defaults.user });
      return { path, entries, sizeBytes, archiveBytes };
    });

    route('DELETE', '/v1/sandboxes/{id}/files', async (req, reply) => {
      const sbx = sbxOf(req);
      await sbx.files.remove(pathIn(sbx, req.query.path), { recursive: req.query.recursive });
      return reply.status(204).send();
    });

    // A replay's driver reads its source's recorded inputs through the fork, with the fork's token.
    route('GET', '/v1/sandboxes/{id}/recording/{contentId}', async (req, reply) => {
      const source = gw.replays.get(req.params.id);
      if (!source) throw new SandglassError('not_found', `Sandbox ${req.params.id} is not a replay; only a replay's fork reads its source's recording.`);
      const data = await source.read(req.params.contentId, req.query.sizeBytes);
      return reply.header('content-type', 'application/octet-stream').code(200).send(data);
    });

    route('GET', '/v1/sandboxes/{id}/files/stat', async (req) => {
      const sbx = sbxOf(req);
      return fileView(await sbx.files.stat(pathIn(sbx, req.query.path)));
    });

    route('GET', '/v1/sandboxes/{id}/files/list', async (req) => {
      const sbx = sbxOf(req);
      const entries = await sbx.files.list(pathIn(sbx, req.query.path), req.query.depth ?? 1);
      return { entries: entries.map(fileView) };
    });

    route('POST', '/v1/sandboxes/{id}/files/mkdir', async (req) => {
      const sbx = sbxOf(req);
      return sbx.files.mkdir(pathIn(sbx, req.body.path), { owner: sbx.defaults.user });
    });

    route('POST', '/v1/sandboxes/{id}/files/rename', async (req, reply) => {
      const sbx = sbxOf(req);
      const body = req.body;
      await sbx.files.rename(pathIn(sbx, body.from, 'from'), pathIn(sbx, body.to, 'to'));
      return reply.status(204).send();
    });
  };
}

function fileView(st: {
  name: string;
  path: string;
  type: Schemas['FileInfo']['type'];
  sizeBytes: number;
  mode: number;
  mtimeMs: number;
  symlinkTarget?: string;
}): Schemas['FileInfo'] {
  return {
    name: st.name,
    path: st.path,
    type: st.type,
    sizeBytes: st.sizeBytes,
    mode: st.mode,
    mtime: new Date(st.mtimeMs).toISOString(),
    ...(st.symlinkTarget !== undefined ? { symlinkTarget: st.symlinkTarget } : {}),
  };
}

/** Relays one command's output (from an offset) to a WebSocket client, and its stdin/resize/signal messages back. */
function streamCommand(gw: Gateway, socket: WebSocket, req: FastifyRequest<StreamRoute>): void {
  const sbx = gw.get(req.params.id);
  const rec = sbx.command(req.params.cid);
  const agent = sbx.requireRunning();
  const fromOffset = req.query.fromOffset ?? 0;
  // The agent's attach reply can arrive in the same read as the data and END that follow it (a command that
  // already exited): everything is queued until `start` is on the wire, so the client sees start, data, exit in order.
  let started = false;
  const early: Array<() => void> = [];
  const inOrder = (fn: () => void) => (started ? fn() : early.push(fn));
  // Credit for each piece goes back to the agent only once the socket drained: a client that never reads holds the
  // guest's output in the agent's ring, not in this process.
  const sendData = pacedSender(socket);
  const sendError = (err: unknown) => {
    const se = toSandglassError(mapAgentError(err));
    if (socket.readyState === socket.OPEN) {
      socket.send(JSON.stringify({ type: 'error', ...se.toBody(req.id) }));
      socket.close(1011, se.code);
    }
  };
  const handle = agent.procAttach(
    rec.id,
    fromOffset,
    (fd, offset, bytes, release) => {
      const header = Buffer.allocUnsafe(9);
      header[0] = fd;
      header.writeBigUInt64BE(BigInt(offset), 1);
      const frame = Buffer.concat([header, bytes]);
      inOrder(() => sendData(frame, release));
    },
    (err) =>
      inOrder(() => {
        if (err) return sendError(err);
        // The exit status comes with proc.exit; should the stream's end overtake it, ask before answering.
        void sbx.exitStatus(rec.id).then(() => {
          if (socket.readyState !== socket.OPEN) return;
          socket.send(
            JSON.stringify({ type: 'exit', exitCode: rec.exitCode ?? null, signal: rec.signal ?? null, timedOut: rec.timedOut, endOffset: rec.outputBytes }),
          );
          socket.close(1000, 'exited');
        });
      }),
    { deferCredit: true, windowBytes: OUTPUT_WINDOW_BYTES },
  );
  handle.then((info) => {
    if (socket.readyState === socket.OPEN) socket.send(JSON.stringify({ type: 'start', startOffset: info.startOffset, command: commandView(rec) }));
    started = true;
    for (const fn of early.splice(0)) fn();
  }, sendError);
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) {
      sbx.commandInput(rec, { kind: 'stdin', data, eof: false }).catch(() => {});
      return;
    }
    let msg: { type?: string; cols?: number; rows?: number; signal?: string };
    try {
      msg = JSON.parse(data.toString('utf8'));
    } catch {
      return;
    }
    let input: CommandInput | undefined;
    if (msg.type === 'stdin_eof') input = { kind: 'stdin', data: Buffer.alloc(0), eof: true };
    else if (msg.type === 'resize' && rec.pty && msg.cols && msg.rows) input = { kind: 'resize', cols: msg.cols, rows: msg.rows };
    else if (msg.type === 'signal' && typeof msg.signal === 'string') input = { kind: 'signal', signal: msg.signal as SignalName };
    if (input) sbx.commandInput(rec, input).catch(() => {});
  });
  socket.on('close', () => {
    handle.then((h) => h.detach()).catch(() => {});
  });
}
