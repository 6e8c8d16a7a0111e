// Connecting to an agent over a unix socket (QEMU's chardev socket, or `sandglass-agent --listen`).
import net from 'node:net';
import { AgentClient, type AgentClientOptions } from './client.js';
import { AgentError } from './errors.js';

export interface ConnectUnixOptions extends AgentClientOptions {
  /** Give up after this long; the socket may not exist yet while QEMU starts. */
  timeoutMs?: number;
  retryIntervalMs?: number;
}

const RETRYABLE = new Set(['ENOENT', 'ECONNREFUSED', 'EAGAIN']);

/** Connects to path, retrying while the socket does not exist or refuses connections. */
export function connectUnixSocket(path: string, opts: ConnectUnixOptions = {}): Promise<net.Socket> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const retryIntervalMs = opts.retryIntervalMs ?? 20;
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      const socket = net.createConnection(path);
      socket.once('connect', () => {
        socket.removeAllListeners('error');
        resolve(socket);
      });
      socket.once('error', (err: NodeJS.ErrnoException) => {
        socket.destroy();
        if (!RETRYABLE.has(err.code ?? '')) {
          reject(new AgentError('agent_disconnected', `connect ${path}: ${err.message}`, { cause: err }));
        } else if (Date.now() >= deadline) {
          reject(new AgentError('agent_timeout', `no agent socket at ${path} within ${timeoutMs} ms (${err.code})`, { cause: err }));
        } else {
          setTimeout(attempt, retryIntervalMs);
        }
      });
    };
    attempt();
  });
}

/** Connects and wraps the socket in an AgentClient; the caller sends hello (and sync after a restore). */
export async function connectUnix(path: string, opts: ConnectUnixOptions = {}): Promise<AgentClient> {
  const socket = await connectUnixSocket(path, opts);
  return new AgentClient(socket, opts);
}
