// A sandbox's guest ports: the sockets listening in the guest, each opened in a new tab through a short-lived signed
// URL (never the API key or the access token in an address), and made public or private again.
import { useCallback, useEffect, useState } from 'react';
import { ApiError } from './api.js';
import { access, gatewayJson } from './gateway.tsx';

/** How long a link opens its port: the cookie its first use sets lasts as long. */
const LINK_LIFETIME_S = 600;

interface PortsReply {
  ports: Array<{ port: number; address: string; public: boolean }>;
  publicPorts: number[];
  domain: string;
}

interface PortUrlReply {
  port: number;
  host: string;
  token: string;
  expiresAt: string;
}

/** A port as the panel shows it: where it listens (none when only its public setting is left) and who may open it. */
interface PortRow {
  port: number;
  addresses: string[];
  public: boolean;
}

/** One row per port: a port listening on IPv4 and IPv6 is one thing to open; a public port no longer listening stays. */
function rows(reply: PortsReply): PortRow[] {
  const byPort = new Map<number, PortRow>();
  for (const p of reply.ports) {
    const row = byPort.get(p.port) ?? { port: p.port, addresses: [], public: p.public };
    row.addresses.push(p.address);
    byPort.set(p.port, row);
  }
  for (const port of reply.publicPorts) if (!byPort.has(port)) byPort.set(port, { port, addresses: [], public: true });
  return [...byPort.values()].sort((a, b) => a.port - b.port);
}

/**
 * The host form of a signed URL, `<port>-<id>.<domain>`: an origin of its own per sandbox port, so the guest's page
 * shares no origin with the gateway, the console or another sandbox, and its cookie is that host's alone.
 */
function hostFormUrl(gatewayUrl: string, reply: PortUrlReply): string {
  const gateway = new URL(gatewayUrl);
  return `${gateway.protocol}//${reply.host}${gateway.port ? `:${gateway.port}` : ''}/?sandglass_url_token=${encodeURIComponent(reply.token)}`;
}

/** `version` changes when the page's event stream saw a port's visibility change: the list reloads once then. */
export function Ports({ sandboxId, version }: { sandboxId: string; version: number }) {
  const [ports, setPorts] = useState<PortRow[]>([]);
  const [opened, setOpened] = useState<Record<number, string>>({});
  const [error, setError] = useState('');
  const fail = useCallback((e: Error) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : e.message), []);
  const load = useCallback(() => {
    setError('');
    gatewayJson<PortsReply>(sandboxId, '/ports').then((r) => setPorts(rows(r)), fail);
  }, [sandboxId, fail]);
  // biome-ignore lint/correctness/useExhaustiveDependencies: version is the reload signal itself.
  useEffect(load, [load, version]);

  const open = async (port: number) => {
    try {
      const reply = await gatewayJson<PortUrlReply>(sandboxId, '/port-urls', { method: 'POST', json: { port, expiresInS: LINK_LIFETIME_S } });
      // noopener: the guest's page gets no handle on this tab; noreferrer: it learns nothing of the console's address.
      window.open(hostFormUrl((await access(sandboxId)).gatewayUrl, reply), '_blank', 'noopener,noreferrer');
      setOpened((o) => ({ ...o, [port]: reply.expiresAt }));
    } catch (e) {
      fail(e as Error);
    }
  };
  const setPublic = (port: number, open: boolean) =>
    gatewayJson(sandboxId, `/public-ports/${port}`, { method: 'PUT', json: { public: open } }).then(load, fail);

  return (
    <section aria-label="Ports">
      <h2>Ports</h2>
      <p>
        Sockets listening in the guest. Open one in a new tab: the link works for {LINK_LIFETIME_S / 60} minutes, in that browser only. A public port answers
        anyone who can reach the gateway, with no credential.
      </p>
      <div className="toolbar">
        <button type="button" onClick={load}>
          Refresh ports
        </button>
      </div>
      {error && <p role="alert">{error}</p>}
      <table data-testid="ports">
        <thead>
          <tr>
            <th>Port</th>
            <th>Listening on</th>
            <th>Public</th>
            <th>Open</th>
          </tr>
        </thead>
        <tbody>
          {ports.map((p) => (
            <tr key={p.port} data-testid="port-row">
              <td>{p.port}</td>
              <td>{p.addresses.length > 0 ? p.addresses.join(', ') : 'not listening'}</td>
              <td>
                <input type="checkbox" aria-label={`Public port ${p.port}`} checked={p.public} onChange={(e) => setPublic(p.port, e.target.checked)} />
              </td>
              <td>
                <button type="button" onClick={() => open(p.port)} disabled={p.addresses.length === 0}>
                  Open port {p.port}
                </button>
                {opened[p.port] && <small> opened, until {new Date(opened[p.port]!).toLocaleTimeString()}</small>}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {ports.length === 0 && <p>Nothing listens in the guest yet.</p>}
    </section>
  );
}
