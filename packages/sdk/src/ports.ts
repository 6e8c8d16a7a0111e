// What a sandbox serves: its listening ports, their URLs (by host name or path, signed for browsers) and who may open them.
import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import type { DataPlane } from './client.js';
import { errorFromResponse } from './errors.js';
import { connectionError } from './http.js';
import type { GatewayReply } from './replies.js';

/** The gateway's default port domain (SANDGLASS_PORT_DOMAIN on the gateway sets another). */
export const DEFAULT_PORT_DOMAIN = 'sandglass.localhost';

/** The upgrade the gateway's tunnel route answers (raw TCP after it). */
const TUNNEL_PROTOCOL = 'sandglass-tcp';

export type ListeningPort = GatewayReply<'listPorts'>['ports'][number];

export interface PortUrlOptions {
  /** How long the URL opens the port; default 600, at most 86400. */
  expiresInS?: number;
  /**
   * `host` (default): `<port>-<id>.<domain>`, an origin of its own per sandbox port (what a browser should open);
   * `path`: `<gateway>/v1/sandboxes/{id}/ports/{port}/`, no DNS needed, but on the gateway's origin.
   */
  form?: 'path' | 'host';
}

export interface PortUrl {
  url: string;
  expiresAt: string;
}

export class Ports {
  /** The domain the gateway last named (list, url); the default until then. */
  private domain = DEFAULT_PORT_DOMAIN;

  constructor(private readonly dataPlane: DataPlane) {}

  /** The guest's listening TCP sockets, each with whether it is public. */
  async list(): Promise<ListeningPort[]> {
    const reply = await this.dataPlane.json<GatewayReply<'listPorts'>>('GET', '/ports');
    this.domain = reply.domain;
    return reply.ports;
  }

  /**
   * A short-lived URL a browser can open: its first use sets a cookie for that sandbox port and drops the token from
   * the address. Anyone holding the URL opens the port until it expires.
   */
  async url(port: number, opts: PortUrlOptions = {}): Promise<PortUrl> {
    const reply = await this.dataPlane.json<GatewayReply<'createPortUrl'>>('POST', '/port-urls', { json: { port, expiresInS: opts.expiresInS } });
    this.domain = reply.host.slice(reply.host.indexOf('.') + 1);
    const gateway = new URL((await this.dataPlane.access()).gatewayUrl);
    if (opts.form !== 'path') {
      return {
        url: `${gateway.protocol}//${reply.host}${gateway.port ? `:${gateway.port}` : ''}/?sandglass_url_token=${reply.token}`,
        expiresAt: reply.expiresAt,
      };
    }
    return { url: new URL(reply.path, gateway).toString(), expiresAt: reply.expiresAt };
  }

  /** Opens the port to requests without any credential (true) or makes it private again; each change is an event. */
  async setPublic(port: number, open: boolean): Promise<void> {
    await this.dataPlane.json<GatewayReply<'setPortPublic'>>('PUT', `/public-ports/${port}`, { json: { public: open } });
  }

  /**
   * A raw TCP connection to a guest port (a database, a debugger: anything, not only HTTP), tunnelled through the
   * gateway and the agent to the guest's loopback. Rejects with port_not_listening when nothing listens there.
   */
  async connect(port: number): Promise<Duplex> {
    const access = await this.dataPlane.access();
    const url = new URL(`/v1/sandboxes/${encodeURIComponent(this.dataPlane.sandboxId)}/tunnel/${port}`, access.gatewayUrl);
    const mod = url.protocol === 'https:' ? https : http;
    return new Promise<Duplex>((resolve, reject) => {
      const req = mod.request(url, {
        headers: { connection: 'Upgrade', upgrade: TUNNEL_PROTOCOL, 'x-sandglass-access-token': access.token },
      });
      req.on('upgrade', (_res, socket, head) => {
        if (head.length > 0) socket.unshift(head);
        resolve(socket);
      });
      req.on('response', (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => {
          let body: unknown;
          try {
            body = JSON.parse(Buffer.concat(parts).toString('utf8'));
          } catch {
            body = Buffer.concat(parts).toString('utf8');
          }
          reject(errorFromResponse(res.statusCode ?? 0, body));
        });
      });
      req.on('error', (err) => reject(connectionError(url, err)));
      req.end();
    });
  }

  /** `<port>-<sandbox id>.<domain>[:gateway port]`: the host name form of a port (send the access token, or make it public). */
  host(port: number, gatewayUrl: string): string {
    const gateway = new URL(gatewayUrl);
    return `${port}-${this.dataPlane.sandboxId}.${this.domain}${gateway.port ? `:${gateway.port}` : ''}`;
  }
}
