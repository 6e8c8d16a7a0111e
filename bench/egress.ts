// `npx tsx bench/egress.ts`: what egress interception costs per request on a kept-alive HTTPS connection (BENCH_QUICK=1: fewer).
import https from 'node:https';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import type { Duplex } from 'node:stream';
import Table from 'cli-table3';
import { Redacted } from '@sandglass/core';
import { ApprovalBroker, EgressProxy, SandboxCa, newPlaceholder, parsePolicy } from '@sandglass/egress';

const quick = process.env.BENCH_QUICK === '1';
const N = quick ? 300 : 3000;
const WARMUP = quick ? 50 : 300;
const HOST = 'api.example.test';
const SECRET = 'sk_bench_0123456789abcdefghijklmnopqrstuv';

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** Opens a CONNECT tunnel over the proxy's unix socket and speaks TLS in it; keep-alive, one socket. */
class TunnelAgent extends https.Agent {
  constructor(
    private readonly socketPath: string,
    private readonly caPem: string,
  ) {
    super({ keepAlive: true, maxSockets: 1 });
  }
  override createConnection(options: https.RequestOptions, cb?: (err: Error | null, socket: Duplex) => void): undefined {
    const raw = net.connect(this.socketPath);
    const target = `${options.host}:${options.port}`;
    raw.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      if (!buf.includes('\r\n\r\n')) return;
      raw.off('data', onData);
      if (!buf.startsWith('HTTP/1.1 200')) return cb?.(new Error(`CONNECT: ${buf.split('\r\n')[0]}`), raw);
      const s = tls.connect({ socket: raw, servername: String(options.host), ca: this.caPem }, () => cb?.(null, s));
      s.once('error', (err) => cb?.(err, s));
    };
    raw.on('data', onData);
    return undefined;
  }
}

function get(agent: https.Agent, opts: https.RequestOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.request({ agent, method: 'GET', path: '/v1/thing', ...opts }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode ?? 0));
    });
    req.once('error', reject);
    req.end();
  });
}

async function measure(label: string, one: () => Promise<number>): Promise<{ label: string; lat: number[]; rps: number }> {
  for (let i = 0; i < WARMUP; i++) await one();
  const lat: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const s = performance.now();
    const status = await one();
    if (status !== 200) throw new Error(`${label}: HTTP ${status}`);
    lat.push(performance.now() - s);
  }
  return { label, lat, rps: N / ((performance.now() - t0) / 1000) };
}

export interface EgressBenchResult {
  label: string;
  n: number;
  rps: number;
  p50Ms: number;
  p95Ms: number;
}

/** Direct vs through the proxy, one kept-alive connection each, in one process; `npm run bench` includes it. */
export async function egressBench(): Promise<EgressBenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sg-bench-egress-'));
  // The "real" upstream's CA: any CA will do; the sandbox CA class makes one in a line.
  const upstreamCa = await SandboxCa.generate({ name: 'bench upstream' });
  const leaf = await upstreamCa.leafContext(HOST);
  const body = Buffer.alloc(512, 'x');
  const upstream = https.createServer({ SNICallback: (_name, cb) => cb(null, leaf) }, (req, res) => {
    if (req.headers['x-api-key'] !== undefined && req.headers['x-api-key'] !== SECRET && req.headers['x-api-key'] !== 'direct') res.statusCode = 401;
    res.setHeader('content-type', 'application/octet-stream');
    res.end(body);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', () => r()));
  const port = (upstream.address() as net.AddressInfo).port;

  const placeholder = newPlaceholder();
  const proxy = new EgressProxy({
    lookup: async (h) => (h === HOST ? ['127.0.0.1'] : []),
    privateAllow: [`127.0.0.1:${port}`],
    upstreamCAs: [upstreamCa.certPem],
    approvals: new ApprovalBroker(),
    onEvent: () => {},
  });
  const sbx = await proxy.addSandbox('sbx_bench', {
    policy: parsePolicy({ allow: [`${HOST}:${port}`] }),
    secrets: [{ name: 'key', placeholder, current: async () => ({ hosts: [`${HOST}:${port}`], approval: 'none', value: async () => new Redacted(SECRET) }) }],
  });
  const socketPath = join(dir, 'egress.sock');
  const close = await sbx.listen(socketPath);

  const direct = new https.Agent({ keepAlive: true, maxSockets: 1, ca: upstreamCa.certPem });
  const viaProxy = new TunnelAgent(socketPath, sbx.caCertPem);
  const headers = { host: `${HOST}:${port}` };
  const d = await measure('direct (kept-alive TLS)', () =>
    get(direct, { host: '127.0.0.1', port, servername: HOST, headers: { ...headers, 'x-api-key': 'direct' } }),
  );
  const p = await measure('through egress proxy (CONNECT + interception + substitution)', () =>
    get(viaProxy, { host: HOST, port, headers: { ...headers, 'x-api-key': placeholder } }),
  );

  direct.destroy();
  viaProxy.destroy();
  await close();
  proxy.close();
  upstream.close();
  rmSync(dir, { recursive: true, force: true });
  return [d, p].map((r) => ({ label: r.label, n: N, rps: r.rps, p50Ms: pct(r.lat, 50), p95Ms: pct(r.lat, 95) }));
}

async function main(): Promise<void> {
  const [d, p] = await egressBench();
  const table = new Table({ head: ['path', 'n', 'req/s', 'p50', 'p95'], style: { head: [], border: [] } });
  for (const r of [d!, p!]) table.push([r.label, r.n, r.rps.toFixed(0), `${r.p50Ms.toFixed(3)} ms`, `${r.p95Ms.toFixed(3)} ms`]);
  console.log(`egress interception, ${process.platform} ${cpus().length} cores, node ${process.version}${quick ? ' (BENCH_QUICK)' : ''}`);
  console.log(table.toString());
  console.log(`added p50: ${(p!.p50Ms - d!.p50Ms).toFixed(3)} ms per request (target < 2 ms)`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
