// CONNECT tunnels: judged and vetted before the 200, then TLS inside terminated with a leaf from the sandbox's CA, or plain HTTP.
import type { IncomingMessage } from 'node:http';
import type net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import { SandglassError } from '@sandglass/core';
import { parseHostPort } from './address.js';
import { REFUSALS, type ProxyContext } from './context.js';
import { decideConnect, refusalError, type AddressFacts, type ConnectFacts, type TunnelFacts } from './decision.js';
import { upstreamError } from './upstream.js';
import { errorReply, replyRawAndClose } from './wire.js';

const TLS_HANDSHAKE = 0x16;

export class Tunnels {
  readonly #ctx: ProxyContext;
  /** Hands a tunnel's inner stream (decrypted TLS, or plain HTTP) to the server for requests inside tunnels. */
  readonly #serveInner: (socket: Duplex) => void;

  constructor(ctx: ProxyContext, serveInner: (socket: Duplex) => void) {
    this.#ctx = ctx;
    this.#serveInner = serveInner;
  }

  async onConnect(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const ctx = this.#ctx;
    const conn = ctx.conns.get(socket);
    if (!conn) return void socket.destroy();
    const { sb } = conn;
    ctx.disarmIdle(socket);
    const started = ctx.clock.nowMs();
    const target = parseHostPort(req.url ?? '');
    if (!target) {
      const err = new SandglassError('invalid_argument', `CONNECT target '${(req.url ?? '').slice(0, 300)}' is not host:port with a port from 1 to 65535.`, {
        details: { field: 'target', rule: 'host:port, port 1-65535' },
      });
      ctx.rejected(sb, { reason: err.message, status: 400, code: err.code });
      return replyRawAndClose(socket, errorReply(err));
    }
    const ex = ctx.newEx(sb, started, { host: target.host.host, port: target.port, scheme: 'tunnel', method: 'CONNECT', path: '' });
    const refuse = (err: SandglassError) => {
      ex.status = err.status;
      ex.code = err.code;
      ex.allowed = ex.allowed && !REFUSALS.has(err.code);
      if (!REFUSALS.has(err.code)) ex.error = err.message;
      ctx.report(ex);
      replyRawAndClose(socket, errorReply(err));
    };
    const facts: ConnectFacts = { policy: sb.policy, privateAllow: ctx.privateAllow, target };
    const judged = decideConnect(facts);
    ctx.account(ex, judged.account);
    if (judged.verdict === 'refuse') {
      ex.allowed = false;
      return refuse(refusalError(judged.refusal));
    }
    // The leaf is minted while DNS answers (cached per host afterwards).
    const leaf = sb.ca.leafContext(target.host.host);
    leaf.catch(() => undefined);
    let addresses: AddressFacts;
    try {
      addresses = await ctx.addressFacts(target);
    } catch (err) {
      return refuse(err instanceof SandglassError ? err : upstreamError(err, { ...target, scheme: 'https' }, ctx.timeoutsMs(), false));
    }
    const d = decideConnect({ ...facts, addresses });
    ctx.account(ex, d.account);
    if (d.verdict === 'refuse') {
      ex.allowed = false;
      return refuse(refusalError(d.refusal));
    }
    if (socket.destroyed || sb.removed) return;
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length) socket.unshift(head);
    const first = await this.#firstByte(socket);
    if (first === undefined) return void socket.destroy();
    const tunnel: TunnelFacts = { host: target.host, port: target.port, addresses: d.addresses, tls: first === TLS_HANDSHAKE };
    if (!tunnel.tls) {
      // Plain HTTP through the tunnel (ws:// and http:// clients behind a proxy): same rules, no interception needed.
      ctx.conns.set(socket, { sb, tunnel });
      ctx.armIdle(socket);
      this.#serveInner(socket);
      return;
    }
    let context: tls.SecureContext;
    try {
      context = await leaf;
    } catch (err) {
      ctx.log.error({ err, sandboxId: sb.id }, 'minting a leaf certificate failed');
      return void socket.destroy();
    }
    if (socket.destroyed || sb.removed) return;
    const tlsSocket = new tls.TLSSocket(socket as net.Socket, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    ctx.conns.set(tlsSocket, { sb, tunnel });
    let secure = false;
    tlsSocket.on('error', (err: NodeJS.ErrnoException) => {
      if (!secure) ctx.rejected(sb, { reason: `client TLS handshake failed (${err.code ?? err.message})`, host: target.host.host, port: target.port });
      tlsSocket.destroy();
      socket.destroy();
    });
    tlsSocket.once('secure', () => {
      secure = true;
      (socket as Partial<net.Socket>).setTimeout?.(0);
      ctx.armIdle(tlsSocket);
      this.#serveInner(tlsSocket);
    });
    (socket as Partial<net.Socket>).setTimeout?.(ctx.limits.idleTimeoutMs, () => {
      if (!secure) socket.destroy();
    });
  }

  /** The first byte the client sends inside the tunnel (0x16 starts a TLS handshake), left unread; undefined if none comes. */
  #firstByte(socket: Duplex): Promise<number | undefined> {
    return new Promise((resolve) => {
      const done = (v: number | undefined) => {
        clearTimeout(timer);
        socket.off('readable', onReadable);
        socket.off('end', onEnd);
        socket.off('close', onEnd);
        resolve(v);
      };
      const onReadable = () => {
        const chunk = socket.read() as Buffer | null;
        if (chunk === null) return;
        socket.unshift(chunk);
        done(chunk[0]);
      };
      const onEnd = () => done(undefined);
      const timer = setTimeout(() => done(undefined), this.#ctx.limits.idleTimeoutMs);
      socket.on('readable', onReadable);
      socket.once('end', onEnd);
      socket.once('close', onEnd);
      onReadable();
    });
  }
}
