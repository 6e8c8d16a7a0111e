// Guest ports (BENCH_ONLY=ports in bench/run.ts): an HTTP request through the port route next to the same request made
// inside the guest and an exec round trip, requests per second on one kept-alive connection and on 32, and a download
// next to the file-read path, all in one run.
import { createHash } from 'node:crypto';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { type ConnectionConfig, Sandbox } from '@sandglass/sdk';

export interface PortsRow {
  what: string;
  samplesMs: number[];
  note: string;
}

const MiB = 1024 * 1024;
const PORT = 8000;
/** Connections of the concurrent measure. */
const CONNECTIONS = 32;

// The handler of `python3 -m http.server`, in a server whose listen backlog holds a burst of CONNECTIONS: the module's
// own backlog of 5 overflows under it on a TCG guest, the kernel drops SYNs, and a connect that waits past the agent's
// 5 s is answered 504 `timeout` (before the agent told the two apart, a 502 `port_not_listening`).
const SERVER = `
import http.server, sys
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 64
S(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
`;

function p50(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(s.length / 2) - 1)]!;
}

// The in-guest baseline: the same GET made by a guest program to localhost, timed there (urllib; curl is not in the image).
const IN_GUEST = `
import sys, time, urllib.request
n = int(sys.argv[1]); xs = []
for _ in range(n):
    t = time.perf_counter(); urllib.request.urlopen('http://127.0.0.1:${PORT}/hello.txt').read(); xs.append((time.perf_counter() - t) * 1000)
print(' '.join('%.3f' % x for x in xs))
`;

export async function portsBench(config: ConnectionConfig, opts: { n: number; bigMib: number }): Promise<PortsRow[]> {
  const { n, bigMib } = opts;
  const sbx = await Sandbox.create({ ...config, timeoutS: 900 });
  try {
    // The token a browser or a program of the user's would send; the SDK keeps its own out of reach.
    const res = await fetch(`${config.apiUrl}/v1/sandboxes/${sbx.id}/access`, { method: 'POST', headers: { authorization: `Bearer ${config.apiKey}` } });
    const access = (await res.json()) as { token: string; gatewayUrl: string };
    const gw = new URL(access.gatewayUrl);
    await sbx.files.write('/tmp/www/hello.txt', 'hello from the guest\n');
    await sbx.commands.run(`head -c ${bigMib * MiB} /dev/urandom > /tmp/www/big.bin`, { timeoutMs: 0 });
    await sbx.files.write('/tmp/in-guest.py', IN_GUEST);
    await sbx.files.write('/tmp/server.py', SERVER);
    await sbx.commands.run(`cd /tmp/www && exec python3 /tmp/server.py ${PORT}`, { background: true, timeoutMs: 0 });
    while (!(await sbx.ports.list()).some((p) => p.port === PORT)) await new Promise((r) => setTimeout(r, 200));

    const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
    const get = (path: string, sink?: (c: Buffer) => void) =>
      new Promise<number>((resolve, reject) => {
        const t0 = performance.now();
        http
          .get(
            {
              host: gw.hostname,
              port: gw.port,
              path: `/v1/sandboxes/${sbx.id}/ports/${PORT}${path}`,
              agent,
              headers: { 'x-sandglass-access-token': access.token },
            },
            (res) => {
              const body: Buffer[] = [];
              res.on('data', (c: Buffer) => (sink ? sink(c) : body.push(c)));
              res.on('end', () =>
                res.statusCode === 200
                  ? resolve(performance.now() - t0)
                  : reject(new Error(`HTTP ${res.statusCode} on ${path}: ${Buffer.concat(body).toString().slice(0, 300)}`)),
              );
            },
          )
          .on('error', reject);
      });
    const timed = async (fn: () => Promise<unknown>) => {
      const t0 = performance.now();
      await fn();
      return performance.now() - t0;
    };

    await get('/hello.txt');
    const viaPort: number[] = [];
    for (let i = 0; i < n; i++) viaPort.push(await get('/hello.txt'));
    const inGuestOut = await sbx.commands.run(`python3 /tmp/in-guest.py ${n}`, { timeoutMs: 0 });
    const inGuest = inGuestOut.stdout.trim().split(/\s+/).map(Number);
    const viaExec: number[] = [];
    for (let i = 0; i < n; i++) viaExec.push(await timed(() => sbx.commands.run('cat /tmp/www/hello.txt')));
    const viaFile: number[] = [];
    for (let i = 0; i < n; i++) viaFile.push(await timed(() => sbx.files.read('/tmp/www/hello.txt')));

    // Each request's latency, and the rate over the whole run.
    const oneConn: number[] = [];
    const oneConnMs = await timed(async () => {
      for (let i = 0; i < n; i++) oneConn.push(await get('/hello.txt'));
    });
    const concurrent: number[] = [];
    const concurrentMs = await timed(() =>
      Promise.all(
        Array.from({ length: CONNECTIONS }, async () => {
          for (let i = 0; i < Math.ceil(n / 8); i++) concurrent.push(await get('/hello.txt'));
        }),
      ),
    );

    const portHash = createHash('sha256');
    const bigPortMs = await get('/big.bin', (c) => portHash.update(c));
    const fileHash = createHash('sha256');
    const bigFileMs = await timed(async () => {
      const s = await sbx.files.read('/tmp/www/big.bin', { format: 'stream' });
      for await (const c of s as AsyncIterable<Uint8Array>) fileHash.update(c);
    });
    if (portHash.digest('hex') !== fileHash.digest('hex')) throw new Error('the port route and the file read disagree on big.bin');
    agent.destroy();

    const base = p50(inGuest);
    const port = p50(viaPort);
    return [
      { what: 'GET 21 B through the port route (kept-alive client)', samplesMs: viaPort, note: `${(port / base).toFixed(1)}× in-guest (p50)` },
      { what: 'same GET inside the guest (urllib → localhost)', samplesMs: inGuest, note: 'baseline' },
      { what: 'exec round trip (cat the file)', samplesMs: viaExec, note: `${(p50(viaExec) / port).toFixed(1)}× port route` },
      { what: 'files.read of the file', samplesMs: viaFile, note: `${(p50(viaFile) / port).toFixed(1)}× port route` },
      { what: 'GETs on one kept-alive connection, back to back', samplesMs: oneConn, note: `${((n / oneConnMs) * 1000).toFixed(0)} req/s` },
      {
        what: `GETs on ${CONNECTIONS} kept-alive connections at once`,
        samplesMs: concurrent,
        note: `${((concurrent.length / concurrentMs) * 1000).toFixed(0)} req/s`,
      },
      { what: `${bigMib} MiB download, port route`, samplesMs: [bigPortMs], note: `${((bigMib / bigPortMs) * 1000).toFixed(1)} MiB/s` },
      {
        what: `${bigMib} MiB download, files.read`,
        samplesMs: [bigFileMs],
        note: `${((bigMib / bigFileMs) * 1000).toFixed(1)} MiB/s (${(bigFileMs / bigPortMs).toFixed(2)}× port time)`,
      },
    ];
  } finally {
    await sbx.kill();
  }
}
