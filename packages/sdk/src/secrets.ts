// Tenant secrets: stored sealed on the server, bound to sandboxes by name; a value goes in and never comes back.
import { ControlPlane } from './client.js';
import type { ConnectionConfig } from './config.js';
import { NotFoundError } from './errors.js';
import type { ControlPlaneReply } from './replies.js';
import type { SecretInfo } from './types.js';

export interface SecretSetOptions extends ConnectionConfig {
  /** Where the value may be sent: 'api.github.com', '*.example.com', 'host:8443' (no port: 443 only). 1…32 of them. */
  hosts: string[];
  /** Add this header to every request to those hosts, as `format`. */
  header?: string;
  /** Contains '{value}', e.g. 'Bearer {value}'; default '{value}'; only with header. */
  format?: string;
  /** Media types whose request bodies are searched for the placeholder ('application/json', 'text/*'). */
  bodyContentTypes?: string[];
  /** required: every use waits until approved (Sandbox.approve). Default none. */
  approval?: 'none' | 'required';
  /** Also substitute into requests sent upstream in clear text (http://). Default false: only over verified TLS. */
  allowPlaintext?: boolean;
  /** Also substitute into WebSocket (upgrade) requests; frames after the 101 are not masked. Default false. */
  allowUpgrade?: boolean;
}

const secretPath = (name: string) => `/v1/secrets/${encodeURIComponent(name)}`;

export class Secrets {
  private constructor() {}

  /** Creates or replaces the secret NAME (^[A-Z_][A-Z0-9_]{0,63}$); answers its configuration, never the value. */
  static async set(name: string, value: string, opts: SecretSetOptions): Promise<SecretInfo> {
    const { hosts, header, format, bodyContentTypes, approval, allowPlaintext, allowUpgrade, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'putSecret'>>('PUT', secretPath(name), {
      json: { value, hosts, header, format, bodyContentTypes, approval, allowPlaintext, allowUpgrade },
    });
  }

  static async list(config?: ConnectionConfig): Promise<SecretInfo[]> {
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listSecrets'>>('GET', '/v1/secrets')).secrets;
  }

  /** Removes the secret; false when there is none by that name. */
  static async remove(name: string, config?: ConnectionConfig): Promise<boolean> {
    const cp = await ControlPlane.open(config);
    try {
      await cp.request('DELETE', secretPath(name));
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && err.code === 'secret_not_found') return false;
      throw err;
    }
  }
}
