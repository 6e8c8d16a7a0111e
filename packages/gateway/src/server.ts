// The gateway's HTTP edge: the data-plane API (commands, files, PTYs over HTTP and WebSocket) and the internal node API.
import { timingSafeEqual } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import websocket from '@fastify/websocket';
import type { WebSocket } from 'ws';
import {
  SandglassError,
  genRequestId,
  installErrorHandling,
  installValidation,
  invalidArgument,
  loadOpenApi,
  routeSchema,
  toSandglassError,
  verifyAccessToken,
} from '@sandglass/core';
import type { SignalName } from '@sandglass/agent-client';
import type { PolicyInput } from '@sandglass/egress';
import type { Gateway } from './gateway.js';
import type { CommandRecord, Sandbox } from './sandbox.js';
import { guestPath } from './paths.js';
import { mapAgentError, viaAgent } from './agent-link.js';

const spec = loadOpenApi(fileURLToPath(new URL('../../../spec/gateway.yaml', import.meta.url)));
const MAX_UPLOAD_BYTES = 4 * 1024 ** 3;
const MAX_STDIN_BYTES = 16 * 1024 * 1024;

type Params = { id: string; cid: string };

function bearer(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (h?.startsWith('Bearer ')) return h.slice(7).trim();
  const q = (req.query as Record<string, unknown> | undefined)?.access_token;
  return typeof q === 'string' ? q : undefined;
}

function commandView(c: CommandRecord): Record<string, unknown> {
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

function sandboxView(s: Sandbox): Record<string, unknown> {
  return {
    id: s.id,
    tenantId: s.tenantId,
    state: s.state,
    pid: s.pid ?? null,
    startedAt: s.startedAt,
    expiresAt: new Date(s.expiresAtMs).toISOString(),
    ...(s.failureReason ? { failureReason: s.failureReason } : {}),
  };
}

/** A Readable that errors with payload_too_large once more than `max` bytes passed. */
function limitBytes(max: number): Transform {
  let n = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      n += chunk.length;
      if (n > max) cb(new SandglassError('payload_too_large', `Uploads are limited to ${max} bytes.`));
      else cb(null, chunk);
    },
  });
}

export async function createGatewayServer(gw: Gateway): Promise<FastifyInstance> {
  const app = Fastify({
    logger: false,
    genReqId: genRequestId,
    bodyLimit: 1024 * 1024,
  });
  installValidation(app);
  installErrorHandling(app);
  await app.register(websocket, { options: { maxPayload: 4 * 1024 * 1024 } });
  // Raw bodies (file uploads, stdin) stay streams: the handler pipes them to the agent.
  app.addContentTypeParser('*', (_req, _payload, done) => done(null));

  const nodeSecretHex = Buffer.from(gw.opts.nodeSecret.toString('hex'));
  app.addHook('onRequest', async (req) => {
    const url = req.url;
    if (url.startsWith('/internal/')) {
      const got = Buffer.from(bearer(req) ?? '');
      if (got.length !== nodeSecretHex.length || !timingSafeEqual(got, nodeSecretHex)) {
        throw new SandglassError('unauthenticated', 'The internal node API needs the node secret.');
      }
      return;
    }
    if (!url.startsWith('/v1/sandboxes/')) return;
    const token = bearer(req);
    if (!token) throw new SandglassError('unauthenticated', 'Send the access token from POST /v1/sandboxes/{id}/access as Authorization: Bearer.');
    const claims = verifyAccessToken(token, gw.opts.nodeSecret, gw.opts.clock.nowMs());
    const id = (req.params as Partial<Params>).id;
    if (claims.sbx !== id) throw new SandglassError('permission_denied', 'This access token is for another sandbox.');
  });

  const schema = (method: string, path: string) => routeSchema(spec, method, path);
  const sbxOf = (req: FastifyRequest) => gw.get((req.params as Params).id);
  const recordEvent = (s: Sandbox, type: string, data: Record<string, unknown>) =>
    gw.opts.events.append({ type, tenantId: s.tenantId, sandboxId: s.id, data });

  app.get('/v1/health', async () => ({ status: 'ok', accel: gw.accel, sandboxes: gw.sandboxes.size, warm: gw.warmAvailable }));

  // ---- commands ----
  app.post('/v1/sandboxes/:id/commands', { schema: schema('post', '/v1/sandboxes/{id}/commands') }, async (req, reply) => {
    const body = req.body as { cmd?: string; argv?: string[]; cwd?: string; envs?: Record<string, string>; user?: string; stdin?: boolean; pty?: { cols: number; rows: number }; timeoutMs?: number };
    if ((body.cmd === undefined) === (body.argv === undefined)) throw invalidArgument('cmd', 'give exactly one of cmd or argv');
    const sbx = sbxOf(req);
    // Not a login shell: the agent already gives every process PATH, HOME and friends, and under TCG sourcing the
    // profile scripts costs ~0.3 s per command.
    const argv = body.cmd !== undefined ? ['/bin/bash', '-c', body.cmd] : body.argv!;
    const rec = await sbx.startCommand({
      argv,
      cwd: body.cwd !== undefined ? guestPath(body.cwd, 'cwd') : undefined,
      envs: body.envs,
      user: body.user,
      stdin: body.stdin,
      pty: body.pty,
      timeoutMs: body.timeoutMs,
    });
    return reply.status(201).send(commandView(rec));
  });

  app.get('/v1/sandboxes/:id/commands', { schema: schema('get', '/v1/sandboxes/{id}/commands') }, async (req) => ({
    commands: [...sbxOf(req).commands.values()].map(commandView),
  }));

  app.get('/v1/sandboxes/:id/commands/:cid', { schema: schema('get', '/v1/sandboxes/{id}/commands/{cid}') }, async (req) =>
    commandView(sbxOf(req).command((req.params as Params).cid)),
  );

  const runningCommand = (req: FastifyRequest) => {
    const sbx = sbxOf(req);
    const rec = sbx.command((req.params as Params).cid);
    if (rec.state === 'exited') throw new SandglassError('command_exited', `Command ${rec.id} has exited (code ${rec.exitCode}).`);
    return { sbx, rec, agent: sbx.requireRunning() };
  };

  app.post('/v1/sandboxes/:id/commands/:cid/stdin', { schema: schema('post', '/v1/sandboxes/{id}/commands/{cid}/stdin') }, async (req, reply) => {
    const { rec, agent } = runningCommand(req);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req.raw as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > MAX_STDIN_BYTES) throw new SandglassError('payload_too_large', `stdin writes are limited to ${MAX_STDIN_BYTES} bytes per request.`);
      chunks.push(c);
    }
    const eof = (req.query as { eof?: boolean }).eof === true;
    await viaAgent(agent.procStdin(rec.id, Buffer.concat(chunks), { eof }));
    return reply.status(204).send();
  });

  app.post('/v1/sandboxes/:id/commands/:cid/signal', { schema: schema('post', '/v1/sandboxes/{id}/commands/{cid}/signal') }, async (req, reply) => {
    const { rec, agent } = runningCommand(req);
    await viaAgent(agent.procSignal(rec.id, (req.body as { signal: SignalName }).signal));
    return reply.status(204).send();
  });

  app.post('/v1/sandboxes/:id/commands/:cid/resize', { schema: schema('post', '/v1/sandboxes/{id}/commands/{cid}/resize') }, async (req, reply) => {
    const { rec, agent } = runningCommand(req);
    if (!rec.pty) throw invalidArgument('cid', 'the command has no PTY to resize');
    const { cols, rows } = req.body as { cols: number; rows: number };
    await viaAgent(agent.procResize(rec.id, cols, rows));
    return reply.status(204).send();
  });

  app.register(async (scope) => {
    scope.addHook('preHandler', async (req) => {
      const sbx = sbxOf(req);
      sbx.command((req.params as Params).cid);
      sbx.requireRunning();
    });
    scope.get(
      '/v1/sandboxes/:id/commands/:cid/stream',
      { websocket: true, schema: schema('get', '/v1/sandboxes/{id}/commands/{cid}/stream') },
      (socket: WebSocket, req) => streamCommand(gw, socket, req),
    );
  });

  // ---- files ----
  const pathOf = (req: FastifyRequest, field = 'path') => guestPath((req.query as Record<string, string>)[field]!, field);

  app.get('/v1/sandboxes/:id/files', { schema: schema('get', '/v1/sandboxes/{id}/files') }, async (req, reply) => {
    const sbx = sbxOf(req);
    const agent = sbx.requireRunning();
    const path = pathOf(req);
    const st = await viaAgent(agent.stat(path), { path });
    if (st.type === 'dir') throw new SandglassError('is_a_directory', `${path} is a directory; list it with /files/list.`, { details: { field: 'path' } });
    const stream: Readable = await viaAgent(agent.readFile(path), { path });
    return reply.header('content-type', 'application/octet-stream').header('x-sandglass-size-bytes', String(st.sizeBytes)).send(stream);
  });

  app.put('/v1/sandboxes/:id/files', { schema: schema('put', '/v1/sandboxes/{id}/files') }, async (req) => {
    const sbx = sbxOf(req);
    const agent = sbx.requireRunning();
    const path = pathOf(req);
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > MAX_UPLOAD_BYTES) throw new SandglassError('payload_too_large', `Uploads are limited to ${MAX_UPLOAD_BYTES} bytes.`);
    const mode = (req.query as { mode?: number }).mode;
    const limited = limitBytes(MAX_UPLOAD_BYTES);
    const piping = pipeline(req.raw, limited).catch((e: unknown) => limited.destroy(e as Error));
    const { sizeBytes } = await viaAgent(agent.writeFile(path, limited, { mode: mode ?? 0o644 }), { path });
    await piping;
    await recordEvent(sbx, 'file.written', { path, sizeBytes });
    return { path, sizeBytes };
  });

  app.delete('/v1/sandboxes/:id/files', { schema: schema('delete', '/v1/sandboxes/{id}/files') }, async (req, reply) => {
    const sbx = sbxOf(req);
    const path = pathOf(req);
    if (path === '/') throw new SandglassError('path_outside_sandbox', 'Refusing to remove the guest root.', { details: { field: 'path' } });
    await viaAgent(sbx.requireRunning().remove(path, { recursive: (req.query as { recursive?: boolean }).recursive ?? false }), { path });
    await recordEvent(sbx, 'file.removed', { path });
    return reply.status(204).send();
  });

  app.get('/v1/sandboxes/:id/files/stat', { schema: schema('get', '/v1/sandboxes/{id}/files/stat') }, async (req) => {
    const path = pathOf(req);
    return fileView(await viaAgent(sbxOf(req).requireRunning().stat(path), { path }));
  });

  app.get('/v1/sandboxes/:id/files/list', { schema: schema('get', '/v1/sandboxes/{id}/files/list') }, async (req) => {
    const path = pathOf(req);
    const entries = await viaAgent(sbxOf(req).requireRunning().list(path, { depth: (req.query as { depth?: number }).depth ?? 1 }), { path });
    return { entries: entries.map(fileView) };
  });

  app.post('/v1/sandboxes/:id/files/mkdir', { schema: schema('post', '/v1/sandboxes/{id}/files/mkdir') }, async (req) => {
    const sbx = sbxOf(req);
    const path = guestPath((req.body as { path: string }).path);
    const { created } = await viaAgent(sbx.requireRunning().mkdir(path), { path });
    if (created) await recordEvent(sbx, 'file.dir_created', { path });
    return { created };
  });

  app.post('/v1/sandboxes/:id/files/rename', { schema: schema('post', '/v1/sandboxes/{id}/files/rename') }, async (req, reply) => {
    const sbx = sbxOf(req);
    const body = req.body as { from: string; to: string };
    const from = guestPath(body.from, 'from');
    const to = guestPath(body.to, 'to');
    await viaAgent(sbx.requireRunning().rename(from, to), { path: from });
    await recordEvent(sbx, 'file.renamed', { from, to });
    return reply.status(204).send();
  });

  // ---- internal node API (control plane only) ----
  app.post('/internal/v1/sandboxes', { schema: schema('post', '/internal/v1/sandboxes') }, async (req, reply) => {
    const sbx = await gw.createSandbox(req.body as Parameters<Gateway['createSandbox']>[0]);
    return reply.status(201).send(sandboxView(sbx));
  });
  app.get('/internal/v1/sandboxes', { schema: schema('get', '/internal/v1/sandboxes') }, async () => ({
    sandboxes: [...gw.sandboxes.values()].map(sandboxView),
  }));
  app.delete('/internal/v1/sandboxes/:id', { schema: schema('delete', '/internal/v1/sandboxes/{id}') }, async (req, reply) => {
    await gw.killSandbox((req.params as Params).id);
    return reply.status(204).send();
  });
  app.post('/internal/v1/sandboxes/:id/timeout', { schema: schema('post', '/internal/v1/sandboxes/{id}/timeout') }, async (req, reply) => {
    gw.get((req.params as Params).id).setExpiry(Date.parse((req.body as { expiresAt: string }).expiresAt));
    return reply.status(204).send();
  });
  app.get('/internal/v1/templates', { schema: schema('get', '/internal/v1/templates') }, async () => ({ templates: gw.listTemplates() }));

  // ---- snapshots: take, pause, resume, fork, delete, interval, maintenance ----
  app.post('/internal/v1/sandboxes/:id/snapshots', { schema: schema('post', '/internal/v1/sandboxes/{id}/snapshots') }, async (req, reply) => {
    const name = (req.body as { name?: string } | undefined)?.name ?? null;
    return reply.status(201).send({ snapshot: await gw.snapshotSandbox((req.params as Params).id, name) });
  });
  app.post('/internal/v1/sandboxes/:id/pause', { schema: schema('post', '/internal/v1/sandboxes/{id}/pause') }, async (req) => ({
    snapshot: await gw.pauseSandbox((req.params as Params).id),
  }));
  app.post('/internal/v1/sandboxes/:id/resume', { schema: schema('post', '/internal/v1/sandboxes/{id}/resume') }, async (req) => {
    const body = req.body as { snapshotId: string; tenantId: string; timeoutS: number; snapshotIntervalS?: number; network?: PolicyInput; secrets?: string[] };
    return sandboxView(await gw.restoreSandbox({ id: (req.params as Params).id, ...body }, 'resume'));
  });
  app.post('/internal/v1/forks', { schema: schema('post', '/internal/v1/forks') }, async (req) => {
    const body = req.body as { snapshotId: string; tenantId: string; sandboxes: Array<{ id: string; timeoutS: number; snapshotIntervalS: number }> };
    return { sandboxes: await gw.forkSandboxes(body.snapshotId, body.tenantId, body.sandboxes) };
  });
  app.delete('/internal/v1/snapshots/:id', { schema: schema('delete', '/internal/v1/snapshots/{id}') }, async (req, reply) => {
    await gw.deleteSnapshot((req.query as { tenantId: string }).tenantId, (req.params as { id: string }).id);
    return reply.status(204).send();
  });
  app.put('/internal/v1/sandboxes/:id/snapshot-interval', { schema: schema('put', '/internal/v1/sandboxes/{id}/snapshot-interval') }, async (req, reply) => {
    gw.setSnapshotInterval((req.params as Params).id, (req.body as { snapshotIntervalS: number }).snapshotIntervalS);
    return reply.status(204).send();
  });
  // ---- network: policy changes and approvals of secret use ----
  app.put('/internal/v1/sandboxes/:id/network', { schema: schema('put', '/internal/v1/sandboxes/{id}/network') }, async (req, reply) => {
    gw.setNetwork((req.params as Params).id, req.body as { allow?: string[]; deny?: string[] });
    return reply.status(204).send();
  });
  app.get('/internal/v1/sandboxes/:id/approvals', { schema: schema('get', '/internal/v1/sandboxes/{id}/approvals') }, async (req) => {
    const id = (req.params as Params).id;
    gw.get(id);
    return {
      approvals: gw.network.approvals.pending(id).map((a) => ({
        requestId: a.requestId,
        sandboxId: a.sandboxId,
        secret: a.secret,
        host: a.host,
        port: a.port,
        method: a.method,
        path: a.path,
        requestedAt: new Date(a.requestedAtMs).toISOString(),
        expiresAt: new Date(a.expiresAtMs).toISOString(),
      })),
    };
  });
  app.post('/internal/v1/sandboxes/:id/approvals/:requestId', { schema: schema('post', '/internal/v1/sandboxes/{id}/approvals/{requestId}') }, async (req, reply) => {
    const { id, requestId } = req.params as { id: string; requestId: string };
    const body = req.body as { decision: 'approve' | 'deny'; ttlS?: number };
    // Only this sandbox's pending requests: a request id of another sandbox is as unknown as a made-up one.
    if (!gw.network.approvals.pending(id).some((a) => a.requestId === requestId)) {
      throw new SandglassError('approval_not_found', `No pending approval request ${requestId} for sandbox ${id} (decided, timed out, or never made).`, { details: { field: 'requestId' } });
    }
    gw.network.approvals.decide(requestId, body.decision, body.ttlS ? { ttlMs: body.ttlS * 1000 } : {});
    return reply.status(204).send();
  });
  app.post('/internal/v1/maintenance', { schema: schema('post', '/internal/v1/maintenance') }, async (req) => {
    const graceMs = (req.body as { gcGraceMs?: number } | undefined)?.gcGraceMs;
    return gw.snapshots.maintain({ graceMs });
  });

  return app;
}

function fileView(st: { name: string; path: string; type: string; sizeBytes: number; mode: number; mtimeMs: number; symlinkTarget?: string }) {
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
function streamCommand(gw: Gateway, socket: WebSocket, req: FastifyRequest): void {
  const sbx = gw.get((req.params as Params).id);
  const rec = sbx.command((req.params as Params).cid);
  const agent = sbx.requireRunning();
  const fromOffset = Number((req.query as { fromOffset?: number }).fromOffset ?? 0);
  // The agent's attach reply can arrive in the same read as the data and END that follow it (a command that
  // already exited): everything is queued until `start` is on the wire, so the client sees start, data, exit in order.
  let started = false;
  const early: Array<() => void> = [];
  const inOrder = (fn: () => void) => (started ? fn() : early.push(fn));
  const sendData = (frame: Buffer) => {
    if (socket.readyState === socket.OPEN) socket.send(frame, { binary: true });
  };
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
    (fd, offset, bytes) => {
      const header = Buffer.allocUnsafe(9);
      header[0] = fd;
      header.writeBigUInt64BE(BigInt(offset), 1);
      const frame = Buffer.concat([header, bytes]);
      inOrder(() => sendData(frame));
    },
    (err) =>
      inOrder(() => {
        if (err) return sendError(err);
        // The exit status comes with proc.exit; should the stream's end overtake it, ask before answering.
        void sbx.exitStatus(rec.id).then(() => {
          if (socket.readyState !== socket.OPEN) return;
          socket.send(JSON.stringify({ type: 'exit', exitCode: rec.exitCode ?? null, signal: rec.signal ?? null, timedOut: rec.timedOut, endOffset: rec.outputBytes }));
          socket.close(1000, 'exited');
        });
      }),
  );
  handle.then(
    (info) => {
      if (socket.readyState === socket.OPEN) socket.send(JSON.stringify({ type: 'start', startOffset: info.startOffset, command: commandView(rec) }));
      started = true;
      for (const fn of early.splice(0)) fn();
    },
    sendError,
  );
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) {
      agent.procStdin(rec.id, data).catch(() => {});
      return;
    }
    let msg: { type?: string; cols?: number; rows?: number; signal?: string };
    try {
      msg = JSON.parse(data.toString('utf8'));
    } catch {
      return;
    }
    if (msg.type === 'stdin_eof') agent.procStdin(rec.id, undefined, { eof: true }).catch(() => {});
    else if (msg.type === 'resize' && rec.pty && msg.cols && msg.rows) agent.procResize(rec.id, msg.cols, msg.rows).catch(() => {});
    else if (msg.type === 'signal' && typeof msg.signal === 'string') agent.procSignal(rec.id, msg.signal as SignalName).catch(() => {});
  });
  socket.on('close', () => {
    handle.then((h) => h.detach()).catch(() => {});
  });
}
