// A scriptable HTTP + WebSocket server for the SDK's unit tests: one process plays both control plane and gateway.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

export interface Recorded {
  method: string;
  path: string;
  query: URLSearchParams;
  auth: string | undefined;
  headers: IncomingMessage['headers'];
}

export type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void | Promise<void>;
export type WsHandler = (ws: WebSocket, url: URL, req: IncomingMessage) => void;

export interface TestServer {
  url: string;
  requests: Recorded[];
  /** Routes by "METHOD /path" (no query); a missing route answers 404 not_found in the wire format. */
  on(route: string, handler: Handler): void;
  /** WebSocket upgrades by path; `reject` answers the upgrade with an HTTP error instead. */
  onWs(path: string, handler: WsHandler | { reject: { status: number; body: unknown } }): void;
  close(): Promise<void>;
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, text ? { 'content-type': 'application/json' } : {});
  res.end(text);
}

export function wireError(res: ServerResponse, status: number, code: string, message = code): void {
  sendJson(res, status, { error: { code, message, requestId: 'req_test' } });
}

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** One binary output frame: fd, offset (u64 BE), bytes. */
export function frame(fd: 1 | 2, offset: number, data: string | Buffer): Buffer {
  const bytes = typeof data === 'string' ? Buffer.from(data) : data;
  const head = Buffer.alloc(9);
  head[0] = fd;
  head.writeBigUInt64BE(BigInt(offset), 1);
  return Buffer.concat([head, bytes]);
}

export async function startTestServer(): Promise<TestServer> {
  const routes = new Map<string, Handler>();
  const wsRoutes = new Map<string, WsHandler | { reject: { status: number; body: unknown } }>();
  const requests: Recorded[] = [];
  const record = (req: IncomingMessage, url: URL) =>
    requests.push({ method: req.method ?? '', path: url.pathname, query: url.searchParams, auth: req.headers.authorization, headers: req.headers });

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    record(req, url);
    const handler = routes.get(`${req.method} ${url.pathname}`);
    if (!handler) return wireError(res, 404, 'not_found', `no route ${req.method} ${url.pathname}`);
    Promise.resolve(handler(req, res, url)).catch((err: unknown) => wireError(res, 500, 'internal', String(err)));
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://x');
    record(req, url);
    const route = wsRoutes.get(url.pathname);
    if (!route || 'reject' in route) {
      const status = route ? route.reject.status : 404;
      const body = JSON.stringify(route ? route.reject.body : { error: { code: 'not_found', message: 'no ws route' } });
      socket.end(
        `HTTP/1.1 ${status} Error\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => route(ws, url, req));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    on: (route, handler) => routes.set(route, handler),
    onWs: (path, handler) => wsRoutes.set(path, handler),
    close: async () => {
      for (const c of wss.clients) c.terminate();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
