// `sandglass mcp`'s transports: the tool set served over stdio (one client, the process that started it) or over
// streamable HTTP (sessions of clients that present the API key as a bearer token), with the official MCP SDK.
import { randomUUID, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { type ConnectionConfig, resolveConfig } from '@sandglass/sdk';
import { ToolSet } from './tools.js';

/** One MCP server (one per client session) over a shared tool set. */
function mcpServer(tools: ToolSet, version: string): Server {
  const server = new Server({ name: 'sandglass', version }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: tools.list() }));
  server.setRequestHandler(CallToolRequestSchema, (req, extra) => {
    const { name, arguments: args, _meta } = req.params;
    if (!tools.has(name)) throw new McpError(ErrorCode.InvalidParams, `unknown tool ${name}: tools/list names the tools`);
    const token = _meta?.progressToken;
    // Progress must grow with each notification: it counts the output's bytes so far.
    let progress = 0;
    return tools.call(name, args, {
      signal: extra.signal,
      output: async (stream, text) => {
        if (token === undefined) return;
        progress += Buffer.byteLength(text);
        await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, message: text, _meta: { stream } } });
      },
    });
  });
  return server;
}

/** Until the signal or `done` (whichever first), then `stop`. */
function untilStopped(done: Promise<void>, stop: () => Promise<void>): Promise<void> {
  return new Promise<void>((resolve) => {
    const end = () => {
      process.off('SIGINT', end).off('SIGTERM', end);
      stop().finally(resolve);
    };
    process.once('SIGINT', end).once('SIGTERM', end);
    done.then(end);
  });
}

/** Serves over stdin/stdout until stdin ends; stdout carries the protocol alone, so nothing else may print there. */
export async function serveStdio(version: string, config: ConnectionConfig = {}): Promise<void> {
  const server = mcpServer(new ToolSet(config), version);
  await server.connect(new StdioServerTransport());
  const ended = new Promise<void>((resolve) => process.stdin.once('end', resolve).once('close', resolve));
  await untilStopped(ended, () => server.close());
}

export interface HttpOptions {
  host: string;
  port: number;
}

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]']);

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Serves streamable HTTP at `/mcp` until interrupted. A request needs `Authorization: Bearer <the API key this server
 * uses>`: the endpoint drives sandboxes with that key, so holding it is what lets a client in. A browser's request
 * from a page not on loopback is refused by its Origin, or (bound to loopback) by its Host: the DNS-rebinding
 * defence the MCP spec asks for.
 */
export async function serveHttp(version: string, opts: HttpOptions, config: ConnectionConfig = {}): Promise<void> {
  const resolved = await resolveConfig(config);
  const tools = new ToolSet(resolved);
  const expected = Buffer.from(`Bearer ${resolved.apiKey}`);
  const sessions = new Map<string, StreamableHTTPServerTransport>();

  const refuse = (res: http.ServerResponse, status: number, message: string) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
  };
  const authorized = (req: http.IncomingMessage) => {
    const got = Buffer.from(req.headers.authorization ?? '');
    return got.length === expected.length && timingSafeEqual(got, expected);
  };
  // Bound to loopback, a request naming another host reached it through a name rebound to 127.0.0.1 (a browser's
  // same-origin GET carries no Origin, so the Host is what shows it).
  const onLoopback = isLoopback(opts.host);
  const hostAllowed = (req: http.IncomingMessage) => {
    if (!onLoopback) return true;
    try {
      return LOOPBACK_NAMES.has(new URL(`http://${req.headers.host ?? ''}`).hostname);
    } catch {
      return false;
    }
  };
  const fromLoopbackPage = (req: http.IncomingMessage) => {
    const origin = req.headers.origin;
    if (origin === undefined) return true;
    try {
      return LOOPBACK_NAMES.has(new URL(origin).hostname);
    } catch {
      return false;
    }
  };

  const serve = (transport: StreamableHTTPServerTransport, req: http.IncomingMessage, res: http.ServerResponse) =>
    transport.handleRequest(req, res).catch((err: unknown) => {
      process.stderr.write(`sandglass mcp: HTTP request failed: ${String(err)}\n`);
      if (!res.headersSent) refuse(res, 500, 'internal: the MCP server failed on this request');
    });

  const httpServer = http.createServer((req, res) => {
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/mcp') return refuse(res, 404, 'not found: the MCP endpoint is /mcp');
    if (!hostAllowed(req)) return refuse(res, 403, 'forbidden: this server answers only to a loopback host name');
    if (!fromLoopbackPage(req)) return refuse(res, 403, 'forbidden: requests from a web page off loopback are refused');
    if (!authorized(req)) return refuse(res, 401, 'unauthenticated: send Authorization: Bearer <the Sandglass API key of this server>');
    const sessionId = req.headers['mcp-session-id'];
    if (typeof sessionId === 'string') {
      const transport = sessions.get(sessionId);
      if (!transport) return refuse(res, 404, 'session not found: initialize a new one');
      return void serve(transport, req, res);
    }
    // No session yet: this must be an initialize request, which the new transport checks.
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (id) => void sessions.set(id, transport),
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    void mcpServer(tools, version)
      .connect(transport)
      .then(
        () => serve(transport, req, res),
        (err: unknown) => {
          process.stderr.write(`sandglass mcp: a session failed to start: ${String(err)}\n`);
          refuse(res, 500, 'internal: the MCP server failed to start a session');
        },
      );
  });
  await new Promise<void>((resolve, reject) => httpServer.once('error', reject).listen(opts.port, opts.host, resolve));
  const { address, port } = httpServer.address() as AddressInfo;
  process.stderr.write(`sandglass mcp: streamable HTTP on http://${address.includes(':') ? `[${address}]` : address}:${port}/mcp\n`);
  await untilStopped(new Promise<void>(() => undefined), async () => {
    await Promise.all([...sessions.values()].map((t) => t.close()));
    await new Promise<void>((resolve) => httpServer.close(() => resolve()).closeAllConnections());
  });
}
