// Console streams (BENCH_ONLY=console): the API's latency while one member holds 2,000 console stream attempts open,
// next to the same server idle, in one run.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { start } from '@sandglass/server';

export interface ConsoleRow {
  what: string;
  samplesMs: number[];
  note: string;
}

const ATTEMPTS = 2_000;
/** Sign-ins of the one member: as many sessions as a key may hold by default, so the attempts spread over all of them. */
const SESSIONS = 8;

/**
 * The attacker, in a process of its own so its sockets cost the server's thread nothing: every attempt on a socket of
 * its own, kept alive, each answer's status counted; it prints the counts once every attempt has one, then holds on.
 */
const HOLDER = `
const http = require('node:http');
const [url, n, ...cookies] = process.argv.slice(1);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const counts = {};
let answered = 0;
const count = (what) => {
  counts[what] = (counts[what] ?? 0) + 1;
  if (++answered === Number(n)) console.log(JSON.stringify(counts));
};
for (let i = 0; i < Number(n); i++) {
  const req = http.get(url + '/console/api/stream?afterSeq=0', { agent, headers: { cookie: cookies[i % cookies.length], 'x-sandglass-console': '1' } }, (res) => {
    count(String(res.statusCode));
    res.resume();
  });
  req.on('error', () => count('error'));
}
`;

/** `n` requests one after another, each timed. */
async function latencies(url: string, apiKey: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await fetch(url, { headers: { authorization: `Bearer ${apiKey}` } });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`GET ${url} answered ${res.status}`);
    out.push(performance.now() - t0);
  }
  return out;
}

/** Open descriptors of this process, which is the server's. */
const descriptors = () => readdirSync('/proc/self/fd').length;

export async function consoleBench(opts: { home: string; port: number; quick: boolean }): Promise<ConsoleRow[]> {
  const running = await start({ home: opts.home, port: opts.port, warmPoolSize: 0 });
  const apiKey = readFileSync(running.adminKeyFile, 'utf8').trim();
  const samples = opts.quick ? 50 : 300;
  const list = `${running.url}/v1/sandboxes`;
  try {
    const cookies: string[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const res = await fetch(`${running.url}/console/api/session`, {
        method: 'POST',
        headers: { 'x-sandglass-console': '1', 'content-type': 'application/json' },
        body: JSON.stringify({ apiKey }),
      });
      if (res.status !== 201) throw new Error(`signing in answered ${res.status}`);
      cookies.push((res.headers.get('set-cookie') ?? '').split(';')[0]!);
    }
    await latencies(list, apiKey, 20);
    const idleFds = descriptors();
    const idle = await latencies(list, apiKey, samples);

    const holder = spawn(process.execPath, ['-e', HOLDER, running.url, String(ATTEMPTS), ...cookies], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const counts = await new Promise<Record<string, number>>((resolve, reject) => {
        let out = '';
        holder.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          if (out.includes('\n')) resolve(JSON.parse(out) as Record<string, number>);
        });
        holder.on('exit', (code) => reject(new Error(`the stream holder exited with ${code} before every attempt was answered`)));
      });
      const heldFds = descriptors();
      const loaded = await latencies(list, apiKey, samples);
      const answers = Object.entries(counts)
        .map(([status, n]) => `${n} × ${status}`)
        .join(', ');
      holder.kill();
      // The idle measure once more, after the attacker left: the two idle rows bracket the drift of this shared host.
      const after = await latencies(list, apiKey, samples);
      return [
        { what: 'GET /v1/sandboxes, idle', samplesMs: idle, note: `${idleFds} descriptors open` },
        {
          what: `GET /v1/sandboxes, ${ATTEMPTS} stream attempts held`,
          samplesMs: loaded,
          note: `attempts answered ${answers} over ${SESSIONS} sessions of one key; ${heldFds} descriptors open`,
        },
        { what: 'GET /v1/sandboxes, idle again', samplesMs: after, note: 'after the attempts were closed' },
      ];
    } finally {
      holder.kill();
    }
  } finally {
    await running.stop();
  }
}
