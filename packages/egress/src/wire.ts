// HTTP/1.1 details the proxy needs beyond node's parser: hop-by-hop headers, raw responses on detached sockets, errors.
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { SandglassError } from '@sandglass/core';

export type HeaderPairs = [string, string][];

// RFC 9110 §7.6.1: meaningful for one connection only, never forwarded.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export function pairsOf(raw: string[]): HeaderPairs {
  const out: HeaderPairs = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i]!, raw[i + 1]!]);
  return out;
}

/** Headers with the hop-by-hop ones removed, including those the Connection header names. */
export function endToEnd(pairs: HeaderPairs, keep: readonly string[] = []): HeaderPairs {
  const named = new Set<string>();
  for (const [k, v] of pairs) {
    if (k.toLowerCase() === 'connection') for (const t of v.split(',')) named.add(t.trim().toLowerCase());
  }
  for (const k of keep) named.delete(k);
  return pairs.filter(([k]) => {
    const l = k.toLowerCase();
    return keep.includes(l) || (!HOP_BY_HOP.has(l) && !named.has(l));
  });
}

export function headerValues(pairs: HeaderPairs, name: string): string[] {
  const n = name.toLowerCase();
  return pairs.filter(([k]) => k.toLowerCase() === n).map(([, v]) => v);
}

export function statusLine(status: number, message?: string): string {
  return `HTTP/1.1 ${status} ${message ?? STATUS_CODES[status] ?? 'Unknown'}\r\n`;
}

export function rawHead(status: number, pairs: HeaderPairs, message?: string): string {
  return statusLine(status, message) + pairs.map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n';
}

export interface ErrorReply {
  status: number;
  headers: HeaderPairs;
  body: string;
}

export function errorReply(err: SandglassError, status = err.status): ErrorReply {
  const body = JSON.stringify(err.toBody());
  return {
    status,
    headers: [
      ['content-type', 'application/json'],
      ['content-length', String(Buffer.byteLength(body))],
      ['x-sandglass-error', err.code],
    ],
    body,
  };
}

/** Answers on a socket no HTTP server owns any more (CONNECT, Upgrade, parse errors) and closes it. */
export function replyRawAndClose(socket: Duplex, reply: ErrorReply): void {
  if (socket.destroyed) return;
  socket.on('error', () => socket.destroy());
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  socket.end(rawHead(reply.status, [...reply.headers, ['connection', 'close']]) + reply.body);
  // A peer that never reads must not hold the socket open.
  setTimeout(() => socket.destroy(), 5_000).unref();
}
