// The upstream side of an exchange: the request out with its timers, failures in words, and the response as the guest may see it.
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import { Transform, pipeline, type Duplex, type Readable, type TransformCallback } from 'node:stream';
import zlib from 'node:zlib';
import { failpoint, SandglassError } from '@sandglass/core';
import { destName } from './address.js';
import type { Ex, ProxyContext } from './context.js';
import type { Dest } from './decision.js';
import type { EgressLimits } from './proxy.js';
import { recordedUrl } from './record.js';
import { ValueMask } from './secrets.js';
import { maskText, type Prepared } from './substitute.js';
import type { HeaderPairs } from './wire.js';

export class UpstreamTimeout extends Error {
  constructor(readonly phase: 'connect' | 'response' | 'idle') {
    super(phase);
  }
}

export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new UpstreamTimeout('connect')), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e) => (clearTimeout(t), reject(e)),
    );
  });
}

const CERT_ERRORS = /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ALTNAME|HOSTNAME/;

/** Why an upstream exchange failed, in words a developer can act on. */
export function upstreamError(
  err: unknown,
  dest: Pick<Dest, 'host' | 'port' | 'scheme'>,
  ms: { connect: number; response: number; idle: number },
  tlsStarted: boolean,
): SandglassError {
  const name = destName(dest);
  if (err instanceof SandglassError) return err;
  if (err instanceof UpstreamTimeout) {
    const msg = {
      connect: `The upstream ${name} did not complete a connection (${dest.scheme === 'https' ? 'TCP and TLS' : 'TCP'}) within ${ms.connect} ms.`,
      response: `The upstream ${name} did not answer within ${ms.response} ms.`,
      idle: `The upstream ${name} sent and received nothing for ${ms.idle} ms.`,
    }[err.phase];
    return new SandglassError('timeout', msg, { details: { host: dest.host.host, port: dest.port, phase: err.phase } });
  }
  const code = String((err as NodeJS.ErrnoException)?.code ?? 'unknown');
  const details = { host: dest.host.host, port: dest.port, cause: code };
  if (CERT_ERRORS.test(code)) {
    return new SandglassError('gateway_unavailable', `The upstream ${name} presented a certificate that is not trusted for ${dest.host.host} (${code}).`, {
      details,
    });
  }
  if (tlsStarted || code.startsWith('ERR_SSL') || code === 'EPROTO') {
    return new SandglassError('gateway_unavailable', `The TLS handshake with upstream ${name} failed (${code}); does the port speak TLS?`, { details });
  }
  if (code === 'ECONNREFUSED') return new SandglassError('gateway_unavailable', `The upstream ${name} refused the connection.`, { details });
  return new SandglassError('gateway_unavailable', `The connection to upstream ${name} failed (${code}).`, { details });
}

/**
 * Every upstream connection starts here, whatever the path (a plain forward, an upgrade to ws:// or wss://, either
 * inside a CONNECT tunnel, declined by the upstream or not): the request to a vetted address on the sandbox's
 * keep-alive agents, TLS verified for the destination's name. A replay's fork (a kept one too) is refused here,
 * before any socket exists, so no path, present or added later, can reach an upstream from a replay.
 */
export function upstreamRequest(ctx: ProxyContext, ex: Ex, dest: Dest, address: string, prep: Prepared): http.ClientRequest {
  const sb = ex.sb;
  if (sb.replay) throw ctx.replayUnrecorded(ex, recordedUrl(dest, prep), prep.body?.length ?? 0);
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of prep.headers) {
    const cur = headers[k];
    headers[k] = cur === undefined ? v : Array.isArray(cur) ? [...cur, v] : [cur, v];
  }
  const common = { host: address, port: dest.port, method: ex.method, path: prep.path, headers, setHost: false, maxHeaderSize: ctx.limits.maxHeaderBytes };
  if (dest.scheme === 'https') {
    return https.request({ ...common, agent: sb.httpsAgent, ...(dest.host.kind === 'name' ? { servername: dest.host.host } : {}) });
  }
  return http.request({ ...common, agent: sb.httpAgent });
}

/** Arms the connect, response and idle timers of an upstream request; `onError` gets a mapped error once. */
export function watch(upReq: http.ClientRequest, dest: Dest, limits: Required<EgressLimits>, onError: (err: SandglassError) => void): { responded(): void } {
  let tlsStarted = false;
  let connectTimer: NodeJS.Timeout | undefined;
  let responseTimer: NodeJS.Timeout | undefined;
  let failed = false;
  const ms = { connect: limits.connectTimeoutMs, response: limits.upstreamResponseTimeoutMs, idle: limits.idleTimeoutMs };
  const fail = (err: unknown) => {
    if (failed) return;
    failed = true;
    clearTimeout(connectTimer);
    clearTimeout(responseTimer);
    onError(upstreamError(err, dest, ms, tlsStarted));
  };
  upReq.on('socket', (s: net.Socket) => {
    if (upReq.reusedSocket) return;
    connectTimer = setTimeout(() => upReq.destroy(new UpstreamTimeout('connect')), limits.connectTimeoutMs);
    if (dest.scheme === 'https') {
      s.once('connect', () => (tlsStarted = true));
      s.once('secureConnect', () => {
        tlsStarted = false;
        clearTimeout(connectTimer);
      });
    } else s.once('connect', () => clearTimeout(connectTimer));
  });
  upReq.setTimeout(limits.idleTimeoutMs, () => upReq.destroy(new UpstreamTimeout('idle')));
  upReq.once('finish', () => {
    responseTimer = setTimeout(() => upReq.destroy(new UpstreamTimeout('response')), limits.upstreamResponseTimeoutMs);
  });
  upReq.on('error', fail);
  if (failpoint('egress.upstream') === 'reset') {
    // The upstream resets the connection once the request is out: the guest gets a clean error, no hang, no leak.
    upReq.once('finish', () => upReq.destroy(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })));
  }
  return {
    responded: () => {
      clearTimeout(connectTimer);
      clearTimeout(responseTimer);
    },
  };
}

/**
 * A response as the guest may see it. Untouched unless the exchange carried a secret; then every header is masked and
 * the body is decoded (gzip, deflate, br — at most maxDecodedBodyBytes, or it is cut) and masked, so an echoed value
 * reaches the guest in no encoding. A body in a coding the proxy cannot read is refused (gateway_unavailable).
 */
export function forGuest(
  upRes: IncomingMessage,
  prep: Prepared,
  headers: HeaderPairs,
  maxDecodedBodyBytes: number,
  onBodyError: () => void,
): { headers: HeaderPairs; body: Readable } {
  if (prep.sensitive.length === 0) return { headers, body: upRes };
  let out: HeaderPairs = headers.map(([k, v]) => [k, maskText(v, prep.sensitive)]);
  const codings = (upRes.headers['content-encoding'] ?? '')
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  const stages: Duplex[] = [];
  if (codings.length > 0) {
    // Codings are listed in the order they were applied: undo the last first.
    for (const c of [...codings].reverse()) stages.push(decoderFor(c, upRes));
    stages.push(new ByteCap(maxDecodedBodyBytes));
    out = out.filter(([k]) => !['content-encoding', 'content-length'].includes(k.toLowerCase()));
  }
  stages.push(new ValueMask(prep.sensitive));
  const body = pipeline([upRes, ...stages] as unknown as [Readable, ...Duplex[]], (err) => {
    if (err) onBodyError();
  }) as unknown as Readable;
  return { headers: out, body };
}

const DECODERS: Record<string, () => Duplex> = {
  gzip: () => zlib.createGunzip(),
  'x-gzip': () => zlib.createGunzip(),
  deflate: () => zlib.createInflate(),
  br: () => zlib.createBrotliDecompress(),
};

function decoderFor(coding: string, upRes: IncomingMessage): Duplex {
  const make = DECODERS[coding];
  if (!make) {
    throw new SandglassError(
      'gateway_unavailable',
      `The upstream answered a request that carried a secret in the '${coding.slice(0, 40)}' content coding, which the proxy cannot read to keep the secret out of it; the response was withheld.`,
      {
        details: { contentEncoding: String(upRes.headers['content-encoding']).slice(0, 100) },
      },
    );
  }
  return make();
}

/** Fails the stream once more than `maxBytes` pass: a decompression bomb stops here. */
class ByteCap extends Transform {
  #seen = 0;
  constructor(readonly maxBytes: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.#seen += chunk.length;
    if (this.#seen > this.maxBytes) return cb(new Error(`decoded body larger than ${this.maxBytes} bytes`));
    cb(null, chunk);
  }
}
