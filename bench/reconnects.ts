// Reconnects to a command's output: the HTTP route served from the gateway's output hub next to the WebSocket route (the old path), 32 clients, same run; and Sandbox.connect.
import { Agent, request } from 'node:http';
import WebSocket from 'ws';
import { Sandbox, type ConnectionConfig } from '@sandglass/sdk';

export interface ReconnectRow {
  what: string;
  samplesMs: number[];
  perSecond: number;
  note: string;
}

const CLIENTS = 32;
/** The writer's line i is `%09d\n` of i, so the byte at any offset is known and every reconnect's bytes are checked. */
const LINE_BYTES = 10;

/** The writer's sequence, built once and grown as needed: answers are compared with a slice of it. */
let sequence = Buffer.alloc(0);
function expected(from: number, to: number): Buffer {
  if (to > sequence.length) {
    const lines = Math.ceil((Math.max(to, 2 * sequence.length) + LINE_BYTES) / LINE_BYTES);
    const b = Buffer.allocUnsafe(lines * LINE_BYTES);
    for (let i = 0; i < lines; i++) b.write(`${String(i).padStart(9, '0')}\n`, i * LINE_BYTES, 'latin1');
    sequence = b;
  }
  return sequence.subarray(from, to);
}

interface Answer {
  startOffset: number;
  bytes: Buffer;
  exit?: { exitCode: number | null; endOffset: number };
}

/** Parses the output route's records, checking that the data is contiguous from its start. */
function parseRecords(body: Buffer): Answer {
  const parts: Buffer[] = [];
  let startOffset = -1;
  let at = 0;
  let next = -1;
  let exit: Answer['exit'];
  while (at < body.length) {
    const len = body.readUInt32BE(at);
    const frame = body.subarray(at + 4, at + 4 + len);
    at += 4 + len;
    if (frame[0] === 0) {
      const msg = JSON.parse(frame.subarray(1).toString('utf8'));
      if (msg.type === 'start') next = startOffset = msg.startOffset;
      else if (msg.type === 'exit') exit = msg;
      else throw new Error(`the output route answered an error: ${JSON.stringify(msg)}`);
      continue;
    }
    const offset = Number(frame.readBigUInt64BE(1));
    if (offset !== next) throw new Error(`output jumped from ${next} to ${offset}`);
    parts.push(frame.subarray(9));
    next += len - 9;
  }
  return { startOffset, bytes: Buffer.concat(parts), exit };
}

/** A reconnect over the WebSocket route: from `fromOffset` until the exit, or (running command) until `minBytes` arrived. */
function wsReconnect(url: string, token: string, fromOffset: number, minBytes: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url}?fromOffset=${fromOffset}`, { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
    const parts: Buffer[] = [];
    let startOffset = -1;
    let next = -1;
    let n = 0;
    const done = (a: Answer) => {
      ws.terminate();
      resolve(a);
    };
    ws.on('message', (data: Buffer, isBinary) => {
      if (!isBinary) {
        const msg = JSON.parse(data.toString('utf8'));
        if (msg.type === 'start') next = startOffset = Math.max(fromOffset, msg.startOffset);
        else if (msg.type === 'exit') done({ startOffset, bytes: Buffer.concat(parts), exit: msg });
        else reject(new Error(JSON.stringify(msg)));
        return;
      }
      const offset = Number(data.readBigUInt64BE(1));
      let bytes = data.subarray(9);
      if (offset > next) return reject(new Error(`ws output jumped from ${next} to ${offset}`));
      bytes = bytes.subarray(next - offset);
      parts.push(bytes);
      next += bytes.length;
      n += bytes.length;
      if (minBytes > 0 && n >= minBytes) done({ startOffset, bytes: Buffer.concat(parts) });
    });
    ws.on('error', reject);
  });
}

/** A reconnect over the HTTP route: one GET on a kept-alive connection. */
function httpReconnect(agent: Agent, url: URL, token: string, fromOffset: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { agent, host: url.hostname, port: url.port, path: `${url.pathname}?fromOffset=${fromOffset}`, headers: { authorization: `Bearer ${token}` } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode !== 200)
            return reject(new Error(`output route answered ${res.statusCode}: ${Buffer.concat(chunks).toString('utf8').slice(0, 300)}`));
          try {
            resolve(parseRecords(Buffer.concat(chunks)));
          } catch (err) {
            reject(err);
          }
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** n operations by `CLIENTS` concurrent clients: each one's latency, and operations per second over the whole run. */
async function load(n: number, op: (i: number) => Promise<void>): Promise<{ samplesMs: number[]; perSecond: number }> {
  const samplesMs: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        await op(i);
        samplesMs.push(performance.now() - t);
      }
    }),
  );
  return { samplesMs, perSecond: n / ((performance.now() - t0) / 1000) };
}

const rate = (x: { perSecond: number }) => `${x.perSecond.toFixed(0)}/s`;
const progress = (what: string) => console.error(`[reconnects] ${new Date().toISOString().slice(11, 19)} ${what}`);

export async function reconnectsBench(opts: { config: ConnectionConfig; quick: boolean; connectOnly?: boolean }): Promise<ReconnectRow[]> {
  const sbx = await Sandbox.create({ ...opts.config, timeoutS: 3600 });
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  const rows: ReconnectRow[] = [];
  try {
    // BENCH_RECONNECTS=connect: the Sandbox.connect rows alone.
    if (!opts.connectOnly) await outputRows(sbx, opts, agent, rows);
    await connectRows(sbx, opts, agent, rows);
    return rows;
  } finally {
    agent.destroy();
    await sbx.kill().catch(() => undefined);
  }
}

/** Reconnects to a command's output, over the WebSocket and over the HTTP route. */
async function outputRows(sbx: Sandbox, opts: { config: ConnectionConfig; quick: boolean }, agent: Agent, rows: ReconnectRow[]): Promise<void> {
  const res = await fetch(`${opts.config.apiUrl!.replace(/\/+$/, '')}/v1/sandboxes/${sbx.id}/access`, {
    method: 'POST',
    headers: { authorization: `Bearer ${opts.config.apiKey}` },
  });
  if (!res.ok) throw new Error(`access answered ${res.status}`);
  const access = (await res.json()) as { token: string; gatewayUrl: string };
  const base = `${access.gatewayUrl.replace(/\/+$/, '')}/v1/sandboxes/${sbx.id}/commands`;
  const wsBase = base.replace(/^http/, 'ws');
  // The WebSocket rows are the baseline's rate, which this many samples measure; the HTTP rows run longer.
  const n = opts.quick ? 2_000 : 5_000;
  const nWs = opts.quick ? 300 : 500;

  // Finished commands: no output, and 65 KiB replayed from offset 0.
  const silent = await sbx.commands.run('true', { background: true });
  await silent.wait();
  await sbx.files.write('/root/writer.py', writerScript(6554, 0));
  const full = await sbx.commands.run('python3 /root/writer.py', { background: true, retainOutput: false });
  await full.wait();
  for (const [label, id, size] of [
    ['finished command, no output', silent.id, 0],
    ['finished command, 65 KiB output', full.id, 65_540],
  ] as const) {
    const want = expected(0, size);
    const check = (a: Answer) => {
      if (!a.exit || a.startOffset !== 0 || !a.bytes.equals(want))
        throw new Error(`${label}: wrong answer (${a.bytes.length} bytes, exit ${JSON.stringify(a.exit)})`);
    };
    progress(`${label}: WebSocket`);
    const ws = await load(nWs, async () => check(await wsReconnect(`${wsBase}/${id}/stream`, access.token, 0, 0)));
    progress(`${label}: HTTP`);
    const url = new URL(`${base}/${id}/output`);
    await httpReconnect(agent, url, access.token, 0);
    const http = await load(n, async () => check(await httpReconnect(agent, url, access.token, 0)));
    rows.push({ what: `reconnect, ${label}: WebSocket (baseline)`, ...ws, note: rate(ws) });
    rows.push({
      what: `reconnect, ${label}: HTTP, gateway hub`,
      ...http,
      note: `${rate(http)}; ×${(http.perSecond / ws.perSecond).toFixed(1)} the WebSocket`,
    });
  }

  // A command still writing: each reconnect re-attaches from an offset behind the newest the client saw (a client that
  // dropped), and every byte it gets is checked against the writer's sequence.
  await sbx.files.write('/root/writer.py', writerScript(100_000_000, 0.05));
  const writer = await sbx.commands.run('python3 /root/writer.py', { background: true, retainOutput: false, timeoutMs: 0 });
  try {
    let seen = 0;
    let checkedBytes = 0;
    const checkRunning = (from: number, a: Answer) => {
      if (a.startOffset !== from) throw new Error(`started at ${a.startOffset}, asked ${from}`);
      if (!a.bytes.equals(expected(from, from + a.bytes.length))) throw new Error(`bytes ${from}..${from + a.bytes.length} differ from the writer's`);
      checkedBytes += a.bytes.length;
      seen = Math.max(seen, from + a.bytes.length);
    };
    // A client that dropped a moment ago: up to 16 KiB behind the newest byte any client saw.
    const behind = (i: number) => Math.max(0, seen - ((i * 7919) % (16 * 1024)));
    while (seen < 300_000) checkRunning(seen, await httpReconnect(agent, new URL(`${base}/${writer.id}/output`), access.token, seen));
    progress('while writing: WebSocket');
    const ws = await load(nWs, async (i) => {
      const from = behind(i);
      checkRunning(from, await wsReconnect(`${wsBase}/${writer.id}/stream`, access.token, from, 1));
    });
    const wsBytes = checkedBytes;
    checkedBytes = 0;
    const url = new URL(`${base}/${writer.id}/output`);
    const nWriting = opts.quick ? 10_000 : 100_000;
    progress('while writing: HTTP');
    const http = await load(nWriting, async (i) => {
      const from = behind(i);
      checkRunning(from, await httpReconnect(agent, url, access.token, from));
    });
    rows.push({
      what: 'reconnect while the command writes: WebSocket (baseline)',
      ...ws,
      note: `${rate(ws)}; ${(wsBytes / 1024 / 1024).toFixed(0)} MiB checked`,
    });
    rows.push({
      what: `reconnect while the command writes: HTTP, gateway hub (${nWriting.toLocaleString('en')} reconnects)`,
      ...http,
      note: `${rate(http)}; ×${(http.perSecond / ws.perSecond).toFixed(1)} the WebSocket; ${(checkedBytes / 1024 / 1024).toFixed(0)} MiB checked, 0 lost or repeated`,
    });
  } finally {
    await writer.kill().catch(() => undefined);
  }
}

/** Sandbox.connect and its baselines. */
async function connectRows(sbx: Sandbox, opts: { config: ConnectionConfig; quick: boolean }, agent: Agent, rows: ReconnectRow[]): Promise<void> {
  // Sandbox.connect: the control plane's GET /v1/sandboxes/{id} with the API key. Baselines in the same run: its health
  // route (no auth, no database: the machine's ceiling), and the same GET sent by hand over a kept-alive node:http
  // agent (the floor for this request) and over fetch (the SDK's transport before it moved to node:http). The four
  // take turns in rounds, so that a change in the host's load falls on each alike.
  const health = new URL(`${opts.config.apiUrl!.replace(/\/+$/, '')}/v1/health`);
  const sandboxUrl = new URL(`${opts.config.apiUrl!.replace(/\/+$/, '')}/v1/sandboxes/${sbx.id}`);
  const auth = { authorization: `Bearer ${opts.config.apiKey}` };
  const checkId = (body: string) => {
    if ((JSON.parse(body) as { id: string }).id !== sbx.id) throw new Error('connected to another sandbox');
  };
  const variants: Array<[string, (i: number) => Promise<void>]> = [
    ['control plane GET /v1/health (baseline)', async () => void (await get(agent, health))],
    ['GET /v1/sandboxes/{id} over node:http, kept alive (baseline)', async () => checkId(await get(agent, sandboxUrl, auth))],
    [
      'GET /v1/sandboxes/{id} over fetch (baseline: the old SDK transport)',
      async () => {
        const res = await fetch(sandboxUrl, { headers: auth });
        if (res.status !== 200) throw new Error(`${sandboxUrl} answered ${res.status}`);
        checkId(await res.text());
      },
    ],
    [
      'Sandbox.connect (API key → sandbox)',
      async () => {
        const s = await Sandbox.connect(sbx.id, opts.config);
        if (s.id !== sbx.id) throw new Error('connected to another sandbox');
      },
    ],
  ];
  progress('Sandbox.connect');
  const nConnect = opts.quick ? 1_000 : 5_000;
  const rounds = 4;
  const measured = variants.map(() => ({ samplesMs: [] as number[], seconds: 0 }));
  for (const [, op] of variants) await load(200, op);
  for (let r = 0; r < rounds; r++) {
    for (const [k, [, op]] of variants.entries()) {
      const m = await load(nConnect / rounds, op);
      measured[k]!.samplesMs.push(...m.samplesMs);
      measured[k]!.seconds += m.samplesMs.length / m.perSecond;
    }
  }
  const perSecond = measured.map((m) => m.samplesMs.length / m.seconds);
  const [, raw, viaFetch, connect] = perSecond as [number, number, number, number];
  for (const [k, [what]] of variants.entries()) {
    const note =
      k === 3
        ? `${perSecond[k]!.toFixed(0)}/s; ×${(connect / viaFetch).toFixed(2)} fetch, ×${(connect / raw).toFixed(2)} node:http by hand`
        : `${perSecond[k]!.toFixed(0)}/s`;
    rows.push({ what, samplesMs: measured[k]!.samplesMs, perSecond: perSecond[k]!, note });
  }
}

/** One GET on a kept-alive connection; resolves with the body of its 200. */
function get(agent: Agent, url: URL, headers: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ agent, host: url.hostname, port: url.port, path: url.pathname, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks).toString('utf8')) : reject(new Error(`${url} answered ${res.statusCode}`))));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Prints `%09d\n` lines 0..lines-1, pausing `pauseS` every 500 lines (0: none). */
function writerScript(lines: number, pauseS: number): string {
  return [
    'import sys, time',
    'out = sys.stdout.buffer',
    `for i in range(${lines}):`,
    "    out.write(b'%09d\\n' % i)",
    '    if i % 500 == 499:',
    '        out.flush()',
    pauseS > 0 ? `        time.sleep(${pauseS})` : '        pass',
    'out.flush()',
    '',
  ].join('\n');
}
