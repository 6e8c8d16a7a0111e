// What every file driving the unmodified `e2b` SDK needs: the loopback guard (every DNS lookup of a non-local name and
// every connection off loopback is refused before any packet, and recorded so the file fails) and the environment
// variables an E2B user sets to switch to Sandglass, the API key aside (each file sets its own).
import dns from 'node:dns';
import net from 'node:net';
import { apiUrl, gatewayUrl } from './helpers.js';

export const offLoopback: string[] = [];
const isLocal = (host: string) => host === 'localhost' || host.startsWith('127.') || host === '::1' || host === '[::1]';
const refused = (host: string) => Object.assign(new Error(`the test refused to resolve ${host}: only loopback is allowed`), { code: 'ENOTFOUND' });
const realLookup = dns.lookup;
(dns as unknown as { lookup: unknown }).lookup = (host: string, ...rest: unknown[]) => {
  if (isLocal(host)) return (realLookup as (...a: unknown[]) => unknown)(host, ...rest);
  offLoopback.push(`lookup ${host}`);
  const cb = rest.at(-1) as (err: Error) => void;
  process.nextTick(() => cb(refused(host)));
  return {};
};
const realPromisesLookup = dns.promises.lookup;
(dns.promises as unknown as { lookup: unknown }).lookup = async (host: string, ...rest: unknown[]) => {
  if (isLocal(host)) return (realPromisesLookup as (...a: unknown[]) => unknown)(host, ...rest);
  offLoopback.push(`lookup ${host}`);
  throw refused(host);
};
const realConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
  const first = args[0] as { host?: string; path?: string } | number | string;
  const host =
    typeof first === 'object' && first !== null ? (first.path ? undefined : (first.host ?? 'localhost')) : typeof args[1] === 'string' ? args[1] : 'localhost';
  if (host !== undefined && net.isIP(host) !== 0 && !isLocal(host)) {
    offLoopback.push(`connect ${host}`);
    throw refused(host);
  }
  return (realConnect as (...a: unknown[]) => net.Socket).apply(this, args);
} as typeof net.Socket.prototype.connect;

// Read by the SDK whenever it builds a connection.
process.env.E2B_API_URL = `${apiUrl}/e2b`;
process.env.E2B_SANDBOX_URL = `${gatewayUrl}/e2b`;
delete process.env.E2B_DOMAIN;
delete process.env.E2B_DEBUG;
