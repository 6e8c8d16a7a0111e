// Test peers for the egress proxy: an upstream PKI of its own, local upstream servers and clients that go through the proxy.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createHash, webcrypto } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

export interface Pki {
  caPem: string;
  keyPem: string;
  certPem: string;
}

/** A CA of the "real world" and one leaf for the test host names and 127.0.0.1, made with @peculiar/x509. */
export async function makeUpstreamPki(names: string[]): Promise<Pki> {
  const alg = { name: 'ECDSA', namedCurve: 'P-256' };
  const sign = { name: 'ECDSA', hash: 'SHA-256' };
  const caKeys = (await webcrypto.subtle.generateKey(alg, false, ['sign', 'verify'])) as CryptoKeyPair;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=Upstream Test Root',
    keys: caKeys,
    signingAlgorithm: sign,
    notBefore: new Date(Date.now() - 3600_000),
    notAfter: new Date(Date.now() + 86400_000),
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)],
  });
  const leafKeys = (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as CryptoKeyPair;
  const leaf = await x509.X509CertificateGenerator.create({
    subject: `CN=${names[0]}`,
    issuer: ca.subject,
    publicKey: leafKeys.publicKey,
    signingKey: caKeys.privateKey,
    signingAlgorithm: sign,
    notBefore: new Date(Date.now() - 3600_000),
    notAfter: new Date(Date.now() + 86400_000),
    extensions: [
      new x509.SubjectAlternativeNameExtension([...names.map((value) => ({ type: 'dns' as const, value })), { type: 'ip', value: '127.0.0.1' }]),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
    ],
  });
  const keyPem = x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', leafKeys.privateKey), 'PRIVATE KEY');
  return { caPem: ca.toString('pem'), keyPem, certPem: leaf.toString('pem') };
}

export interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  bodyBytes: number;
  bodySha256: string;
  body: string;
  firstByteAtMs?: number;
}

export interface Upstream {
  port: number;
  seen: Seen[];
  /** TCP connections accepted so far (for TLS: those whose handshake completed). */
  connections: number;
  /** TCP sockets accepted so far, handshake or not: a trap that a replay, which connects nowhere, must leave at 0. */
  sockets: number;
  close(): Promise<void>;
}

/** Content codings the test upstream can answer in, whatever the request's Accept-Encoding says. */
const ENCODERS: Record<string, (b: Buffer) => Buffer> = {
  gzip: gzipSync,
  deflate: deflateSync,
  br: brotliCompressSync,
  'gzip, br': (b) => brotliCompressSync(gzipSync(b)),
  // A coding nobody can read: the bytes are the body reversed.
  'x-reverse': (b) => Buffer.from(b).reverse(),
};

/**
 * Routes: /echo[?gzip | ?encoding=gzip|deflate|br|gzip, br|x-reverse] (JSON of what arrived, in that content coding
 * even when the client asked for identity), /bytes?n=N[&chunked] (N bytes, streamed), /hang (never answers), else: echo.
 * Upgrades answer 101 and echo bytes back; on /ws-headers the first bytes after the 101 are the request's headers as
 * JSON; on /decline the upgrade is declined with a 400 whose body is the request's headers as JSON.
 */
function handler(seen: Seen[]): http.RequestListener {
  return (req, res) => {
    const hash = createHash('sha256');
    let bytes = 0;
    const keep: Buffer[] = [];
    const entry: Seen = { method: req.method!, url: req.url!, headers: req.headers, bodyBytes: 0, bodySha256: '', body: '' };
    seen.push(entry);
    req.on('data', (c: Buffer) => {
      entry.firstByteAtMs ??= Date.now();
      bytes += c.length;
      hash.update(c);
      if (bytes <= 64 * 1024) keep.push(c);
    });
    req.on('end', () => {
      entry.bodyBytes = bytes;
      entry.bodySha256 = hash.digest('hex');
      entry.body = Buffer.concat(keep).toString('utf8');
      const url = new URL(req.url!, 'http://x');
      if (url.pathname === '/hang') return;
      if (url.pathname === '/bytes') {
        const n = Number(url.searchParams.get('n'));
        // ?chunked: no Content-Length, so the response is chunked.
        res.writeHead(200, { 'content-type': 'application/octet-stream', ...(url.searchParams.has('chunked') ? {} : { 'content-length': String(n) }) });
        const chunk = Buffer.alloc(64 * 1024, 7);
        let left = n;
        const pump = () => {
          while (left > 0) {
            const c = chunk.subarray(0, Math.min(left, chunk.length));
            left -= c.length;
            if (!res.write(c)) return void res.once('drain', pump);
          }
          res.end();
        };
        return pump();
      }
      const body = JSON.stringify({ method: req.method, url: req.url, headers: req.headers, bodyBytes: bytes, bodySha256: entry.bodySha256, body: entry.body });
      const coding = url.searchParams.has('gzip') ? 'gzip' : url.searchParams.get('encoding');
      const encode = coding ? ENCODERS[coding] : undefined;
      res.writeHead(200, {
        'content-type': 'application/json',
        'x-upstream': 'yes',
        'x-echo-auth': String(req.headers.authorization ?? ''),
        ...(encode ? { 'content-encoding': coding! } : {}),
      });
      res.end(encode ? encode(Buffer.from(body)) : body);
    });
  };
}

function onUpgrade(seen: Seen[]) {
  return (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, bodyBytes: 0, bodySha256: '', body: '' });
    const headers = JSON.stringify(req.headers);
    if (req.url!.startsWith('/decline')) {
      socket.end(
        `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(headers)}\r\nx-echo-auth: ${String(req.headers.authorization ?? '')}\r\nconnection: close\r\n\r\n${headers}`,
      );
      return;
    }
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n');
    if (req.url!.startsWith('/ws-headers')) socket.write(headers);
    if (head.length) socket.write(head);
    socket.pipe(socket);
  };
}

async function listen(server: net.Server, port = 0): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return (server.address() as net.AddressInfo).port;
}

function upstreamOf(server: net.Server, seen: Seen[], port: number, counter: { n: number }): Upstream {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  server.on('connection', (s: net.Socket) => {
    accepted++;
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  return {
    port,
    seen,
    get connections() {
      return counter.n;
    },
    get sockets() {
      return accepted;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** port: a fixed one (the node operator opened exactly these for the integration tests); default: any free one. */
export async function startHttpsUpstream(pki: Pki, port = 0): Promise<Upstream> {
  const seen: Seen[] = [];
  const counter = { n: 0 };
  const server = https.createServer({ key: pki.keyPem, cert: pki.certPem }, handler(seen));
  server.on('secureConnection', () => counter.n++);
  server.on('upgrade', onUpgrade(seen));
  return upstreamOf(server, seen, await listen(server, port), counter);
}

export async function startHttpUpstream(port = 0): Promise<Upstream> {
  const seen: Seen[] = [];
  const counter = { n: 0 };
  const server = http.createServer(handler(seen));
  server.on('connection', () => counter.n++);
  server.on('upgrade', onUpgrade(seen));
  return upstreamOf(server, seen, await listen(server, port), counter);
}

/** A TCP server that accepts connections and never says anything (a hung upstream). */
export async function startSilentServer(): Promise<Upstream> {
  const counter = { n: 0 };
  const server = net.createServer(() => counter.n++);
  const port = await listen(server);
  return upstreamOf(server, [], port, counter);
}

export interface RawAnswer {
  status: number;
  head: string;
  body: string;
  socket: net.Socket;
}

/** Sends `data` on a fresh connection to the proxy's unix socket and reads one HTTP response head (and a sized body). */
export function rawExchange(socketPath: string, data: string | Buffer): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    let buf = Buffer.alloc(0);
    socket.on('error', reject);
    socket.write(data);
    const onData = (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.subarray(0, end).toString('latin1');
      const m = /content-length:\s*(\d+)/i.exec(head);
      const want = m ? Number(m[1]) : 0;
      if (buf.length < end + 4 + want) return;
      socket.off('data', onData);
      socket.off('end', onEnd);
      const rest = buf.subarray(end + 4 + want);
      if (rest.length) socket.unshift(rest);
      resolve({ status: Number(head.split(' ')[1]), head, body: buf.subarray(end + 4, end + 4 + want).toString('utf8'), socket });
    };
    const onEnd = () => reject(new Error(`connection ended before a response: ${JSON.stringify(buf.toString('latin1'))}`));
    socket.on('data', onData);
    socket.once('end', onEnd);
  });
}

export class ConnectError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`CONNECT answered ${status}: ${body}`);
  }
}

/** Opens a CONNECT tunnel through the proxy and speaks TLS in it, trusting only `caPem` (the sandbox's CA). */
export async function tlsTunnel(socketPath: string, target: string, caPem: string, servername = target.replace(/:\d+$/, '')): Promise<tls.TLSSocket> {
  const answer = await rawExchange(socketPath, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  if (answer.status !== 200) {
    answer.socket.destroy();
    throw new ConnectError(answer.status, answer.body);
  }
  return new Promise((resolve, reject) => {
    const t = tls.connect({ socket: answer.socket, servername, ca: caPem, ALPNProtocols: ['http/1.1'] }, () => resolve(t));
    t.once('error', reject);
  });
}

/** An https.Agent whose connections are CONNECT tunnels through the proxy: keep-alive, one socket, counted. */
export class TunnelAgent extends https.Agent {
  tunnels = 0;
  constructor(
    readonly socketPath: string,
    readonly caPem: string,
  ) {
    super({ keepAlive: true, maxSockets: 1 });
  }

  override createConnection(options: https.RequestOptions, cb?: (err: Error | null, socket: Duplex) => void): undefined {
    this.tunnels++;
    const target = `${options.host}:${options.port}`;
    tlsTunnel(this.socketPath, target, this.caPem, options.servername ?? String(options.host)).then(
      (s) => cb?.(null, s),
      (err: Error) => cb?.(err, undefined as unknown as Duplex),
    );
    return undefined;
  }
}

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  json<T = Record<string, unknown>>(): T;
}

export function answerOf(res: http.IncomingMessage): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    res.on('data', (c: Buffer) => parts.push(c));
    res.once('error', reject);
    res.once('end', () => {
      const body = Buffer.concat(parts);
      resolve({ status: res.statusCode!, headers: res.headers, body, json: <T>() => JSON.parse(body.toString('utf8')) as T });
    });
  });
}

/** One HTTPS request through a TunnelAgent. */
export function viaTunnel(agent: TunnelAgent, url: string, opts: https.RequestOptions & { body?: Buffer | string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const { body, ...rest } = opts;
    const req = https.request(url, { agent: agent as https.Agent, ...rest }, (res) => answerOf(res).then(resolve, reject));
    req.once('error', reject);
    req.end(body);
  });
}

/** One plain HTTP request in absolute form through the proxy's unix socket. */
export function viaPlainProxy(socketPath: string, url: string, opts: http.RequestOptions & { body?: Buffer | string } = {}): Promise<Answer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const { body, headers, ...rest } = opts;
    const req = http.request({ socketPath, path: url, headers: { host: u.host, ...headers }, agent: false, ...rest }, (res) =>
      answerOf(res).then(resolve, reject),
    );
    req.once('error', reject);
    req.end(body);
  });
}
