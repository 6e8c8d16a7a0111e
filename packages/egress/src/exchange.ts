// Requests and upgrades from a sandbox: the facts the decision asks for gathered, the request sent, the answer relayed and reported.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type net from 'node:net';
import { PassThrough, type Duplex, type Readable } from 'node:stream';
import { SandglassError } from '@sandglass/core';
import { REFUSALS, type Conn, type Ex, type ProxyContext, type Sandbox } from './context.js';
import { decideRequest, refusalError, type ApprovalFact, type Dest, type RequestFacts } from './decision.js';
import { Capture, exchangeRecord, recordedRequestBody, recordedUrl } from './record.js';
import { compileSecret, type CompiledSecret, type ResolvedBinding, type UnusableSecret } from './secrets.js';
import { substituteRequest, maskText, type Prepared } from './substitute.js';
import { forGuest, upstreamRequest, watch } from './upstream.js';
import { endToEnd, errorReply, pairsOf, rawHead, replyRawAndClose, type HeaderPairs } from './wire.js';

interface PrepareResult {
  dest: Dest;
  addresses: string[];
  prep: Prepared;
}

export class Exchanges {
  readonly #ctx: ProxyContext;

  constructor(ctx: ProxyContext) {
    this.#ctx = ctx;
  }

  /** The exchange record of a request on `conn`, before anything about it is judged: in a tunnel, its target. */
  #begin(conn: Conn, req: IncomingMessage, inner: boolean): Ex {
    return this.#ctx.newEx(conn.sb, this.#ctx.clock.nowMs(), {
      host: conn.tunnel?.host.host ?? '',
      port: conn.tunnel?.port ?? 0,
      scheme: inner && conn.tunnel?.tls ? 'https' : 'http',
      method: req.method ?? 'GET',
      path: '',
    });
  }

  /** A request from the front server (absolute-form) or from inside a tunnel (`inner`). */
  async onRequest(req: IncomingMessage, res: ServerResponse, inner: boolean): Promise<void> {
    const ctx = this.#ctx;
    const conn = ctx.conns.get(req.socket);
    if (!conn || conn.sb.removed) return void req.socket.destroy();
    ctx.disarmIdle(req.socket);
    const ex = this.#begin(conn, req, inner);
    const abort = new AbortController();
    res.once('close', () => abort.abort());
    try {
      const { dest, addresses, prep } = await this.#prepare(conn, req, ex, abort.signal, this.#bodyReader(req, ex));
      if (abort.signal.aborted) {
        ex.reason = 'client closed';
        return ctx.report(ex);
      }
      this.#forward(conn.sb, ex, req, res, dest, addresses, prep);
    } catch (err) {
      this.#fail(ex, req, res, err);
    }
  }

  /** Answers with the error (or cuts a response already under way) and reads away what is left of the request body. */
  #fail(ex: Ex, req: IncomingMessage, res: ServerResponse, err: unknown): void {
    const se = err instanceof SandglassError ? err : new SandglassError('internal', 'The egress proxy failed while handling this request.', { cause: err });
    if (se.code === 'internal') this.#ctx.log.error({ err, sandboxId: ex.sb.id, host: ex.host, port: ex.port }, 'egress request failed');
    if (REFUSALS.has(se.code)) ex.allowed = false;
    if (!ex.reason) ex.reason = se.message;
    if (!REFUSALS.has(se.code)) ex.error = res.destroyed && !res.writableFinished ? 'client closed' : se.message;
    ex.code = se.code;
    if (!res.headersSent && !res.destroyed) {
      const reply = errorReply(se);
      ex.status = reply.status;
      res.writeHead(reply.status, reply.headers);
      res.end(reply.body);
    } else res.destroy();
    if (!req.complete) {
      req.unpipe();
      req.resume();
    }
    this.#ctx.report(ex);
  }

  /**
   * Asks the decision until it allows or refuses, gathering each fact it needs (addresses, the secrets as configured
   * now, the body, approvals, values), then puts the values in: what is sent upstream.
   */
  async #prepare(
    conn: Conn,
    req: IncomingMessage,
    ex: Ex,
    signal: AbortSignal,
    /** Absent for upgrades (no body; the Upgrade header is kept). */
    readBody: (() => Promise<Buffer>) | undefined,
  ): Promise<PrepareResult> {
    const ctx = this.#ctx;
    const { sb } = conn;
    const approvals = new Map<string, ApprovalFact>();
    const values = new Map<string, string>();
    const facts: RequestFacts = {
      policy: sb.policy,
      privateAllow: ctx.privateAllow,
      ...(conn.tunnel ? { tunnel: conn.tunnel } : {}),
      url: req.url ?? '',
      method: ex.method,
      headers: pairsOf(req.rawHeaders),
      contentType: req.headers['content-type'],
      contentEncoding: req.headers['content-encoding'],
      hasBody: hasBody(req),
      upgrade: readBody === undefined,
      approvals,
      values,
    };
    for (;;) {
      const d = decideRequest(facts);
      ctx.account(ex, d.account);
      if (d.verdict === 'refuse') {
        for (const s of d.refusal.strays ?? []) {
          ctx.emit({
            type: 'egress.secret_scope',
            sandboxId: sb.id,
            data: { secret: s.secret, host: ex.host, port: ex.port, method: ex.method, path: ex.path, where: s.where, reason: s.reason },
          });
        }
        ex.allowed = false;
        throw refusalError(d.refusal);
      }
      if (d.verdict === 'allow') {
        const { dest, addresses, used, headers, target, media } = d.allowed;
        const secretValues = new Map<CompiledSecret, string>([...used.keys()].map((s) => [s, values.get(s.binding.name)!]));
        const out = substituteRequest({
          values: secretValues,
          used,
          headers,
          target,
          body: facts.body,
          media,
          placeholders: (facts.secrets ?? []).map((s) => s.binding.placeholder),
          record: ctx.recordBytes !== undefined,
        });
        // An exchange that carries a secret asks for an uncompressed answer, so an echoed value can be found and masked.
        if (secretValues.size > 0) out.headers = [...out.headers.filter(([k]) => k.toLowerCase() !== 'accept-encoding'), ['accept-encoding', 'identity']];
        return { dest, addresses, prep: out };
      }
      const need = d.need;
      switch (need.fact) {
        case 'addresses':
          facts.addresses = await ctx.addressFacts(need.dest);
          break;
        case 'secrets':
          facts.secrets = await this.#currentSecrets(sb);
          break;
        case 'body':
          // Never asked for an upgrade (facts.upgrade), the one case without a reader.
          facts.body = await readBody!();
          break;
        case 'approval':
          approvals.set(need.secret, await this.#approve(sb, ex, need.secret, signal));
          break;
        case 'value':
          values.set(need.secret.name, await this.#valueOf(need.secret));
          break;
      }
    }
  }

  /** Every bound secret's configuration as it is now; one that cannot be read or is not valid is unusable (fail closed). */
  async #currentSecrets(sb: Sandbox): Promise<(CompiledSecret | UnusableSecret)[]> {
    return Promise.all(
      sb.secrets.map(async (b): Promise<CompiledSecret | UnusableSecret> => {
        const binding = { name: b.name, placeholder: b.placeholder };
        try {
          return compileSecret(binding, await b.current(), `secret ${b.name}`);
        } catch (err) {
          if (err instanceof SandglassError && err.code === 'secret_not_found') return { binding, unusable: 'the secret no longer exists' };
          if (err instanceof SandglassError && err.code === 'invalid_argument') return { binding, unusable: `its configuration is not valid: ${err.message}` };
          this.#ctx.log.error({ secret: b.name, sandboxId: sb.id, errorName: (err as Error)?.name }, 'reading a secret configuration failed');
          return { binding, unusable: 'its configuration could not be read' };
        }
      }),
    );
  }

  /** The value, decrypted now. A failure is reported without its message, which could quote what it failed on. */
  async #valueOf(b: ResolvedBinding): Promise<string> {
    try {
      return (await b.value()).reveal();
    } catch (err) {
      if (err instanceof SandglassError) throw err;
      this.#ctx.log.error(
        { secret: b.name, errorName: (err as Error)?.name, errorCode: (err as NodeJS.ErrnoException)?.code },
        'reading a secret value failed',
      );
      throw new SandglassError('internal', `Secret '${b.name}' could not be read.`);
    }
  }

  /** Asks the broker (which approves at once while a time-boxed grant runs) and records the question and the answer. */
  async #approve(sb: Sandbox, ex: Ex, secret: string, signal: AbortSignal): Promise<ApprovalFact> {
    const ctx = this.#ctx;
    let requestId: string | undefined;
    const input = { sandboxId: sb.id, secret, host: ex.host, port: ex.port, method: ex.method, path: ex.path };
    const result = await ctx.approvals.request(input, {
      signal,
      onRequested: (r) => {
        requestId = r.requestId;
        ctx.emit({
          type: 'secret.approval_requested',
          sandboxId: sb.id,
          data: { requestId: r.requestId, secret, host: input.host, port: input.port, method: input.method, path: input.path, expiresAtMs: r.expiresAtMs },
        });
      },
    });
    const grantUntilMs = ctx.approvals.grantUntil(sb.id, secret);
    const decision = signal.aborted && result === 'denied' ? 'cancelled' : result;
    ctx.emit({
      type: 'secret.approval_decided',
      sandboxId: sb.id,
      data: { ...(requestId ? { requestId } : {}), secret, decision, ...(result === 'approved' && grantUntilMs !== undefined ? { grantUntilMs } : {}) },
    });
    return { result, ...(requestId ? { requestId } : {}) };
  }

  /** Reads a body that is searched for placeholders, up to the limit. */
  #bodyReader(req: IncomingMessage, ex: Ex): () => Promise<Buffer> {
    return () => {
      const max = this.#ctx.limits.maxScannedBodyBytes;
      const declared = Number(req.headers['content-length']);
      if (declared > max) return Promise.reject(tooLarge(ex, max));
      return new Promise<Buffer>((resolve, reject) => {
        const parts: Buffer[] = [];
        let size = 0;
        const onData = (c: Buffer) => {
          size += c.length;
          if (size > max) {
            req.off('data', onData);
            req.pause();
            reject(tooLarge(ex, max));
            return;
          }
          parts.push(c);
        };
        req.on('data', onData);
        req.once('end', () => resolve(Buffer.concat(parts)));
        req.once('error', reject);
        req.once('close', () => {
          if (!req.complete)
            reject(
              new SandglassError('invalid_argument', 'The client closed the request before its body ended.', { details: { field: 'body', rule: 'complete' } }),
            );
        });
      });
    };
  }

  /**
   * A replay's fork: the request, judged like any, is answered with what the original guest got for the same one; a
   * request the recording does not have is refused (egress_denied) and reported as `egress.replay_unrecorded`.
   */
  async #answerFromRecording(sb: Sandbox, ex: Ex, req: IncomingMessage, res: ServerResponse, dest: Dest, prep: Prepared): Promise<void> {
    const ctx = this.#ctx;
    try {
      let raw = prep.recordBody ?? prep.body;
      if (raw === undefined) {
        const parts: Buffer[] = [];
        let size = 0;
        for await (const c of req as AsyncIterable<Buffer>) {
          size += c.length;
          if (size > ctx.limits.maxDecodedBodyBytes) throw tooLarge(ex, ctx.limits.maxDecodedBodyBytes);
          parts.push(c);
        }
        raw = Buffer.concat(parts);
      }
      ex.bytesUp = raw.length;
      const url = recordedUrl(dest, prep);
      const requestBody = recordedRequestBody(raw, ctx.recordBytes ?? raw.length, prep.redactor);
      const answer = await sb.replay!.answer({ method: ex.method, url, requestBody });
      if (!answer) throw ctx.replayUnrecorded(ex, url, raw.length);
      ex.status = answer.status;
      ex.bytesDown = answer.body.length;
      const headers = answer.headers.filter(([k]) => !['content-length', 'transfer-encoding', 'connection'].includes(k.toLowerCase()));
      headers.push(['content-length', String(answer.body.length)]);
      res.writeHead(answer.status, headers.flat());
      res.end(answer.body);
      ctx.report(ex);
    } catch (err) {
      this.#fail(ex, req, res, err);
    }
  }

  #forward(sb: Sandbox, ex: Ex, req: IncomingMessage, res: ServerResponse, dest: Dest, addresses: string[], prep: Prepared): void {
    const ctx = this.#ctx;
    if (sb.replay) return void this.#answerFromRecording(sb, ex, req, res, dest, prep);
    const headers = prep.headers.filter(([k]) => !['content-length', 'transfer-encoding'].includes(k.toLowerCase()));
    const streamed = prep.body === undefined && hasBody(req);
    if (prep.body !== undefined) headers.push(['content-length', String(prep.body.length)]);
    else if (streamed) {
      if (req.headers['content-length'] !== undefined) headers.push(['content-length', req.headers['content-length']]);
      else headers.push(['transfer-encoding', 'chunked']);
    }
    const upReq = upstreamRequest(ctx, ex, dest, addresses[0]!, { ...prep, headers });
    const recordBytes = ctx.recordBytes;
    const reqCapture = recordBytes !== undefined && streamed ? new Capture(recordBytes + (prep.redactor?.longestBytes ?? 0)) : undefined;
    const watcher = watch(upReq, dest, ctx.limits, (err) => this.#fail(ex, req, res, err));
    res.once('close', () => {
      if (!res.writableFinished) upReq.destroy();
    });
    if (prep.body !== undefined) {
      ex.bytesUp = prep.body.length;
      upReq.end(prep.body);
    } else if (streamed) {
      req.on('data', (c: Buffer) => {
        ex.bytesUp += c.length;
        reqCapture?.add(c);
      });
      req.pipe(upReq);
    } else upReq.end();

    upReq.once('response', (upRes: IncomingMessage) => {
      watcher.responded();
      const status = upRes.statusCode ?? 502;
      ex.status = status;
      let headers = endToEnd(pairsOf(upRes.rawHeaders));
      if (upRes.headers['transfer-encoding'] !== undefined || upRes.headers['content-length'] === undefined)
        headers = headers.filter(([k]) => k.toLowerCase() !== 'content-length');
      let guest: { headers: HeaderPairs; body: Readable };
      try {
        guest = forGuest(upRes, prep, headers, ctx.limits.maxDecodedBodyBytes, () => res.destroy());
      } catch (err) {
        upRes.destroy();
        return this.#fail(ex, req, res, err);
      }
      const outHeaders = guest.headers;
      const resCapture = recordBytes !== undefined ? new Capture(recordBytes + (prep.redactor?.longestBytes ?? 0)) : undefined;
      res.writeHead(status, upRes.statusMessage, outHeaders.flat());
      upRes.on('data', (c: Buffer) => (ex.bytesDown += c.length));
      let body = guest.body;
      if (resCapture) {
        const tee = new PassThrough();
        tee.on('data', (c: Buffer) => resCapture.add(c));
        body = body.pipe(tee);
      }
      upRes.once('close', () => {
        if (!upRes.complete) res.destroy();
      });
      upRes.once('error', () => res.destroy());
      body.pipe(res);
      res.once('finish', () => {
        ctx.report(ex);
        if (resCapture) {
          // What the guest got: decoded and masked when the exchange carried a secret, so the redactor can read it.
          ctx.emit({
            type: 'egress.exchange',
            sandboxId: sb.id,
            data: exchangeRecord({
              capBytes: recordBytes!,
              dest,
              method: ex.method,
              prep,
              requestBody: { buffer: prep.recordBody ?? reqCapture?.buffer ?? Buffer.alloc(0), size: prep.recordBody?.length ?? reqCapture?.size ?? 0 },
              status,
              responseHeaders: outHeaders,
              responseBody: resCapture,
              startedAtMs: ex.startedAtMs,
              durationMs: Math.max(0, ctx.clock.nowMs() - ex.startedAtMs),
            }),
          });
        }
      });
      res.once('close', () => {
        if (!res.writableFinished) {
          ex.reason = ex.reason || 'client closed';
          ctx.report(ex);
        }
      });
    });
  }

  /** An Upgrade request (WebSocket): judged and substituted like any request, then relayed both ways unread after a 101. */
  async onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, inner: boolean): Promise<void> {
    const ctx = this.#ctx;
    const conn = ctx.conns.get(req.socket) ?? ctx.conns.get(socket);
    if (!conn || conn.sb.removed) return void socket.destroy();
    ctx.disarmIdle(socket);
    const ex = this.#begin(conn, req, inner);
    const abort = new AbortController();
    socket.once('close', () => abort.abort());
    const refuse = (err: SandglassError) => {
      if (REFUSALS.has(err.code)) ex.allowed = false;
      ex.code = err.code;
      ex.status = err.status;
      if (!ex.reason) ex.reason = err.message;
      if (!REFUSALS.has(err.code)) ex.error = err.message;
      ctx.report(ex);
      replyRawAndClose(socket, errorReply(err));
    };
    let prepared: PrepareResult;
    try {
      prepared = await this.#prepare(conn, req, ex, abort.signal, undefined);
    } catch (err) {
      return refuse(
        err instanceof SandglassError ? err : new SandglassError('internal', 'The egress proxy failed while handling this upgrade.', { cause: err }),
      );
    }
    if (socket.destroyed) return;
    const { dest, addresses, prep } = prepared;
    const headers = prep.headers.filter(([k]) => !['connection', 'content-length', 'transfer-encoding'].includes(k.toLowerCase()));
    headers.push(['connection', 'Upgrade']);
    // An upgrade is never recorded (its bytes flow both ways unread), so a replay's fork is refused where it would connect.
    let upReq: ReturnType<typeof upstreamRequest>;
    try {
      upReq = upstreamRequest(ctx, ex, dest, addresses[0]!, { ...prep, headers });
    } catch (err) {
      return refuse(err as SandglassError);
    }
    const watcher = watch(upReq, dest, ctx.limits, refuse);
    socket.once('close', () => upReq.destroy());
    upReq.end();
    upReq.once('upgrade', (upRes: IncomingMessage, upSocket: Duplex, upHead: Buffer) => {
      watcher.responded();
      ex.status = upRes.statusCode ?? 101;
      const outHeaders = prep.sensitive.length
        ? pairsOf(upRes.rawHeaders).map(([k, v]): [string, string] => [k, maskText(v, prep.sensitive)])
        : pairsOf(upRes.rawHeaders);
      socket.write(rawHead(ex.status, outHeaders, upRes.statusMessage));
      if (upHead.length) socket.write(upHead);
      if (head.length) upSocket.write(head);
      upSocket.on('data', (c: Buffer) => (ex.bytesDown += c.length));
      socket.on('data', (c: Buffer) => (ex.bytesUp += c.length));
      upSocket.pipe(socket);
      socket.pipe(upSocket);
      const close = () => {
        upSocket.destroy();
        socket.destroy();
        ctx.report(ex);
      };
      upSocket.once('close', close);
      socket.once('close', close);
      upSocket.on('error', close);
      (upSocket as Partial<net.Socket>).setTimeout?.(ctx.limits.idleTimeoutMs, close);
    });
    upReq.once('response', (upRes: IncomingMessage) => {
      // The upstream declined the upgrade: pass its answer on (checked like any response) and close.
      watcher.responded();
      let guest: { headers: HeaderPairs; body: Readable };
      try {
        guest = forGuest(
          upRes,
          prep,
          endToEnd(pairsOf(upRes.rawHeaders)).filter(([k]) => k.toLowerCase() !== 'content-length'),
          ctx.limits.maxDecodedBodyBytes,
          () => socket.destroy(),
        );
      } catch (err) {
        upRes.destroy();
        return refuse(err as SandglassError);
      }
      ex.status = upRes.statusCode ?? 502;
      socket.write(rawHead(ex.status, [...guest.headers, ['connection', 'close']], upRes.statusMessage));
      upRes.on('data', (c: Buffer) => (ex.bytesDown += c.length));
      guest.body.pipe(socket);
      guest.body.once('end', () => ctx.report(ex));
    });
  }
}

function tooLarge(ex: Ex, max: number): SandglassError {
  ex.allowed = false;
  ex.reason = 'scanned body too large';
  return new SandglassError(
    'payload_too_large',
    `Bodies of this type are searched for secret placeholders and may be at most ${max} bytes; this one is larger.`,
    {
      details: { limit: max },
    },
  );
}

function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}
