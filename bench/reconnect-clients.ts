// The reconnect bench's clients: each operation and its byte checks, run by a share of the 32 clients in whatever thread calls runShare.
import { type Agent, request } from 'node:http';
import WebSocket from 'ws';
import { Sandbox } from '@sandglass/sdk';

/** One kind of operation the clients repeat; plain data, so it crosses to a worker thread as it is. */
export type Job =
  | { kind: 'ws-finished' | 'http-finished'; url: string; token: string; size: number }
  | { kind: 'ws-writing' | 'http-writing'; url: string; token: string }
  | { kind: 'health'; url: string }
  | { kind: 'get' | 'fetch'; url: string; apiKey: string; sandboxId: string }
  | { kind: 'connect'; apiUrl: string; apiKey: string; sandboxId: string };

/** What one thread's clients measured: each operation's latency, when the first began and the last ended (epoch ms), the bytes checked. */
export interface ShareResult {
  samplesMs: number[];
  startMs: number;
  endMs: number;
  checkedBytes: number;
}

/**
 * State every thread's clients share: the next operation's index (so threads take work as they free up, as the
 * in-process clients do) and the newest byte of the writing command any client saw (the offset reconnects go behind).
 */
export interface Shared {
  next: Int32Array;
  seen: BigInt64Array;
}
export function sharedState(buffer = new SharedArrayBuffer(16)): Shared & { buffer: SharedArrayBuffer } {
  return { buffer, next: new Int32Array(buffer, 0, 1), seen: new BigInt64Array(buffer, 8, 1) };
}

/** The writer's line i is `%09d\n` of i, so the byte at any offset is known and every reconnect's bytes are checked. */
const LINE_BYTES = 10;

/** The writer's sequence, built once per thread and grown as needed: answers are compared with a slice of it. */
let sequence = Buffer.alloc(0);
export function expected(from: number, to: number): Buffer {
  if (to > sequence.length) {
    const lines = Math.ceil((Math.max(to, 2 * sequence.length) + LINE_BYTES) / LINE_BYTES);
    const b = Buffer.allocUnsafe(lines * LINE_BYTES);
    for (let i = 0; i < lines; i++) b.write(`${String(i).padStart(9, '0')}\n`, i * LINE_BYTES, 'latin1');
    sequence = b;
  }
  return sequence.subarray(from, to);
}

export interface Answer {
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
export function httpReconnect(agent: Agent, url: URL, token: string, fromOffset: number): Promise<Answer> {
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

/** Checks a reconnect to the writing command: it starts where asked and every byte is the writer's; moves `seen` on. */
export function checkWriting(shared: Shared, from: number, a: Answer): number {
  if (a.startOffset !== from) throw new Error(`started at ${a.startOffset}, asked ${from}`);
  if (!a.bytes.equals(expected(from, from + a.bytes.length))) throw new Error(`bytes ${from}..${from + a.bytes.length} differ from the writer's`);
  const to = BigInt(from + a.bytes.length);
  for (let cur = Atomics.load(shared.seen, 0); cur < to; ) {
    const was = Atomics.compareExchange(shared.seen, 0, cur, to);
    if (was === cur) break;
    cur = was;
  }
  return a.bytes.length;
}

/** The operation a job names, as a function of the operation's index; it resolves with the bytes it checked. */
function operation(job: Job, agent: Agent, shared: Shared): (i: number) => Promise<number> {
  switch (job.kind) {
    case 'ws-finished':
    case 'http-finished': {
      const want = expected(0, job.size);
      const url = new URL(job.url);
      const check = (a: Answer) => {
        if (!a.exit || a.startOffset !== 0 || !a.bytes.equals(want))
          throw new Error(`${job.url}: wrong answer (${a.bytes.length} bytes, exit ${JSON.stringify(a.exit)})`);
        return a.bytes.length;
      };
      return job.kind === 'ws-finished'
        ? async () => check(await wsReconnect(job.url, job.token, 0, 0))
        : async () => check(await httpReconnect(agent, url, job.token, 0));
    }
    case 'ws-writing':
    case 'http-writing': {
      // A client that dropped a moment ago: up to 16 KiB behind the newest byte any client saw.
      const behind = (i: number) => Math.max(0, Number(Atomics.load(shared.seen, 0)) - ((i * 7919) % (16 * 1024)));
      const url = new URL(job.url);
      return job.kind === 'ws-writing'
        ? async (i) => {
            const from = behind(i);
            return checkWriting(shared, from, await wsReconnect(job.url, job.token, from, 1));
          }
        : async (i) => {
            const from = behind(i);
            return checkWriting(shared, from, await httpReconnect(agent, url, job.token, from));
          };
    }
    case 'health': {
      const url = new URL(job.url);
      return async () => {
        await get(agent, url);
        return 0;
      };
    }
    case 'get':
    case 'fetch': {
      const url = new URL(job.url);
      const auth = { authorization: `Bearer ${job.apiKey}` };
      const checkId = (body: string) => {
        if ((JSON.parse(body) as { id: string }).id !== job.sandboxId) throw new Error('connected to another sandbox');
        return 0;
      };
      return job.kind === 'get'
        ? async () => checkId(await get(agent, url, auth))
        : async () => {
            const res = await fetch(url, { headers: auth });
            if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
            return checkId(await res.text());
          };
    }
    case 'connect': {
      const config = { apiUrl: job.apiUrl, apiKey: job.apiKey };
      return async () => {
        const s = await Sandbox.connect(job.sandboxId, config);
        if (s.id !== job.sandboxId) throw new Error('connected to another sandbox');
        return 0;
      };
    }
  }
}

const now = () => performance.timeOrigin + performance.now();

/** `clients` concurrent clients in this thread take operations until `n` were taken (by every thread together). */
export async function runShare(job: Job, n: number, clients: number, agent: Agent, shared: Shared): Promise<ShareResult> {
  const op = operation(job, agent, shared);
  const samplesMs: number[] = [];
  let checkedBytes = 0;
  const startMs = now();
  let endMs = startMs;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      for (let i = Atomics.add(shared.next, 0, 1); i < n; i = Atomics.add(shared.next, 0, 1)) {
        const t = performance.now();
        // Not `checkedBytes += await op(i)`: that reads the sum before the await and drops the other clients' bytes.
        const bytes = await op(i);
        samplesMs.push(performance.now() - t);
        checkedBytes += bytes;
      }
      endMs = Math.max(endMs, now());
    }),
  );
  return { samplesMs, startMs, endMs, checkedBytes };
}
