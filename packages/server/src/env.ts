// Settings read from the environment by every process that runs a gateway (`sandglass up`, `sandglass gateway`).
import { readFileSync } from 'node:fs';
import { lookup as dnsLookup } from 'node:dns/promises';
import { DEFAULT_CONSOLE_LIMITS, type ConsoleLimits } from '@sandglass/control-plane';
import { DEFAULT_HEALTH, DEFAULT_RECORDING_CAP_BYTES, type HealthPolicy } from '@sandglass/gateway';

/** An integer setting from the environment, within [min, max]; a bad value stops start-up with the rule it broke. */
export function intFromEnv(name: string, dflt: number, min: number, max: number): number {
  const v = process.env[name];
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  return n;
}

/** SANDGLASS_RECORDING_CAP_BYTES: input bytes each sandbox records for replay (default 256 MiB; 0 turns recording off). */
export function recordingCapFromEnv(): number {
  return intFromEnv('SANDGLASS_RECORDING_CAP_BYTES', DEFAULT_RECORDING_CAP_BYTES, 0, Number.MAX_SAFE_INTEGER);
}

/**
 * The console's caps: SANDGLASS_CONSOLE_STREAMS_PER_SESSION, SANDGLASS_CONSOLE_STREAMS_PER_TENANT (event streams open at
 * once) and SANDGLASS_CONSOLE_SESSIONS_PER_KEY (signing in past it ends the key's oldest session).
 */
export function consoleLimitsFromEnv(): ConsoleLimits {
  const d = DEFAULT_CONSOLE_LIMITS;
  return {
    streamsPerSession: intFromEnv('SANDGLASS_CONSOLE_STREAMS_PER_SESSION', d.streamsPerSession, 1, 100_000),
    streamsPerTenant: intFromEnv('SANDGLASS_CONSOLE_STREAMS_PER_TENANT', d.streamsPerTenant, 1, 100_000),
    sessionsPerKey: intFromEnv('SANDGLASS_CONSOLE_SESSIONS_PER_KEY', d.sessionsPerKey, 1, 100_000),
  };
}

/** SANDGLASS_HEALTH_INTERVAL_MS / SANDGLASS_HEALTH_TIMEOUT_MS tune hang detection (tests shorten it). */
export function healthFromEnv(): HealthPolicy {
  return {
    intervalMs: intFromEnv('SANDGLASS_HEALTH_INTERVAL_MS', DEFAULT_HEALTH.intervalMs, 1, 3_600_000),
    timeoutMs: intFromEnv('SANDGLASS_HEALTH_TIMEOUT_MS', DEFAULT_HEALTH.timeoutMs, 1, 3_600_000),
    misses: DEFAULT_HEALTH.misses,
  };
}

/**
 * Egress settings from the environment: SANDGLASS_EGRESS_HOSTS ("name=ip,…", a static resolver override consulted
 * before DNS, for on-prem names and tests; its answers are vetted like DNS's), SANDGLASS_EGRESS_PRIVATE_ALLOW
 * ("ip:port,…": the only internal destinations sandboxes may reach; no API can add one), SANDGLASS_EGRESS_CA_FILES
 * (PEM files of extra CAs trusted for upstreams),
 * SANDGLASS_APPROVAL_TIMEOUT_MS, SANDGLASS_EGRESS_RECORD=1 (record each exchange, secrets redacted).
 */
export function egressFromEnv(): {
  lookup: (host: string) => Promise<string[]>;
  privateAllow: string[];
  upstreamCAs?: string[];
  approvalTimeoutMs?: number;
  recordExchanges: boolean;
} {
  const hosts = new Map<string, string[]>();
  for (const entry of (process.env.SANDGLASS_EGRESS_HOSTS ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const [name, ip] = entry.split('=');
    if (!name || !ip) throw new Error(`SANDGLASS_EGRESS_HOSTS: ${JSON.stringify(entry)} is not name=ip`);
    hosts.set(name.toLowerCase(), [...(hosts.get(name.toLowerCase()) ?? []), ip]);
  }
  const caFiles = (process.env.SANDGLASS_EGRESS_CA_FILES ?? '')
    .split(',')
    .map((f) => f.trim())
    .filter(Boolean);
  return {
    lookup: async (host) => hosts.get(host.toLowerCase()) ?? (await dnsLookup(host, { all: true })).map((a) => a.address),
    privateAllow: (process.env.SANDGLASS_EGRESS_PRIVATE_ALLOW ?? '')
      .split(',')
      .map((e) => e.trim())
      .filter(Boolean),
    upstreamCAs: caFiles.length ? caFiles.map((f) => readFileSync(f, 'utf8')) : undefined,
    approvalTimeoutMs: process.env.SANDGLASS_APPROVAL_TIMEOUT_MS ? intFromEnv('SANDGLASS_APPROVAL_TIMEOUT_MS', 300_000, 100, 86_400_000) : undefined,
    recordExchanges: process.env.SANDGLASS_EGRESS_RECORD === '1',
  };
}
