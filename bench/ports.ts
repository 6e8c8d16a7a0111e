// Guest ports' figures against a running server (SANDGLASS_HOME or SANDGLASS_URL/SANDGLASS_API_KEY): an HTTP request
// through the port route next to the same request made inside the guest and an exec round trip, requests per second on
// one kept-alive connection and on 32, and a 64 MiB download next to the file-read path, all in one run.
import { createHash } from 'node:crypto';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import Table from 'cli-table3';
import { Sandbox, resolveConfig } from '@sandglass/sdk';

const MiB = 1024 * 1024;
const PORT = 8000;
const N = Number(process.env.BENCH_N ?? 50);
const BIG_MIB = Number(process.env.BENCH_BIG_MIB ?? 64);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const fmt = (x: number) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;

// The in-guest baseline: the same GET made by a guest program to localhost, timed there (urllib; curl is not in the image).
const IN_GUEST = `
import sys, time, urllib.request
n = int(sys.argv[1]); xs = []
for _ in range(n):
    t = time.perf_counter(); urllib.request.urlopen('http://127.0.0.1:${PORT}/hello.txt').read(); xs.append((time.perf_counter() - t) * 1000)
print(' '.join('%.3f' % x for x in xs))
`;

async function main(): Promise<void> {
  const sbx = await Sandbox.create({ timeoutS: 900 });
  try {
    // The token a browser or a program of the user's would send; the SDK keeps its own out of reach.
    const cfg = await resolveConfig();
    const res = await fetch(`${cfg.apiUrl}/v1/sandboxes/${sbx.id}/access`, { method: 'POST', headers: { authorization: `Bearer ${cfg.apiKey}` } });
    const access = (await res.json()) as { token: string; gatewayUrl: string };
    const gw = new URL(access.gatewayUrl);
    await sbx.files.write('/tmp/www/hello.txt', 'hello from the guest\n');
    await sbx.commands.run(`head -c ${BIG_MIB * MiB} /dev/urandom > /tmp/www/big.bin`, { timeoutMs: 0 });
    await sbx.files.write('/tmp/in-guest.py', IN_GUEST);
    await sbx.commands.run(`cd /tmp/www && exec python3 -m http.server ${PORT} --bind 127.0.0.1`, { background: true, timeoutMs: 0 });
    while (!(await sbx.ports.list()).some((p) => p.port === PORT)) await new Promise((r) => setTimeout(r, 200));

    const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
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
    for (let i = 0; i < N; i++) viaPort.push(await get('/hello.txt'));
    const inGuestOut = await sbx.commands.run(`python3 /tmp/in-guest.py ${N}`, { timeoutMs: 0 });
    const inGuest = inGuestOut.stdout.trim().split(/\s+/).map(Number);
    const viaExec: number[] = [];
    for (let i = 0; i < N; i++) viaExec.push(await timed(() => sbx.commands.run('cat /tmp/www/hello.txt')));
    const viaFile: number[] = [];
    for (let i = 0; i < N; i++) viaFile.push(await timed(() => sbx.files.read('/tmp/www/hello.txt')));

    const oneConnMs = await timed(async () => {
      for (let i = 0; i < N; i++) await get('/hello.txt');
    });
    const concurrentMs = await timed(() =>
      Promise.all(
        Array.from({ length: 32 }, async () => {
          for (let i = 0; i < Math.ceil(N / 8); i++) await get('/hello.txt');
        }),
      ),
    );
    const concurrentN = 32 * Math.ceil(N / 8);

    const portHash = createHash('sha256');
    const bigPortMs = await get('/big.bin', (c) => portHash.update(c));
    const fileHash = createHash('sha256');
    const bigFileMs = await timed(async () => {
      const s = await sbx.files.read('/tmp/www/big.bin', { format: 'stream' });
      for await (const c of s as AsyncIterable<Uint8Array>) fileHash.update(c);
    });
    if (portHash.digest('hex') !== fileHash.digest('hex')) throw new Error('the port route and the file read disagree on big.bin');
    agent.destroy();

    const t = new Table({ head: ['what', 'n', 'p50', 'p95', 'ratio / rate'] });
    const base = pct(inGuest, 50);
    t.push([
      'GET 21 B through the port route (kept-alive client)',
      N,
      fmt(pct(viaPort, 50)),
      fmt(pct(viaPort, 95)),
      `${(pct(viaPort, 50) / base).toFixed(1)}× in-guest`,
    ]);
    t.push(['same GET inside the guest (urllib → localhost)', inGuest.length, fmt(base), fmt(pct(inGuest, 95)), 'baseline']);
    t.push([
      'exec round trip (cat the file)',
      N,
      fmt(pct(viaExec, 50)),
      fmt(pct(viaExec, 95)),
      `${(pct(viaExec, 50) / pct(viaPort, 50)).toFixed(1)}× port route`,
    ]);
    t.push(['files.read of the file', N, fmt(pct(viaFile, 50)), fmt(pct(viaFile, 95)), `${(pct(viaFile, 50) / pct(viaPort, 50)).toFixed(1)}× port route`]);
    t.push(['requests/s, one kept-alive connection', N, '', '', `${((N / oneConnMs) * 1000).toFixed(0)} req/s`]);
    t.push(['requests/s, 32 connections', concurrentN, '', '', `${((concurrentN / concurrentMs) * 1000).toFixed(0)} req/s`]);
    t.push([`${BIG_MIB} MiB download, port route`, 1, fmt(bigPortMs), '', `${((BIG_MIB / bigPortMs) * 1000).toFixed(1)} MiB/s`]);
    t.push([
      `${BIG_MIB} MiB download, files.read`,
      1,
      fmt(bigFileMs),
      '',
      `${((BIG_MIB / bigFileMs) * 1000).toFixed(1)} MiB/s (${(bigFileMs / bigPortMs).toFixed(2)}× port time)`,
    ]);
    process.stdout.write(`${t.toString()}\n`);
  } finally {
    await sbx.kill();
  }
}

await main();
