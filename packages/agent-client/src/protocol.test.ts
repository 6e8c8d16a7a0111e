// The shared protocol examples (spec/agent-protocol.examples.json) against the TypeScript side: frames decode and
// re-encode to the same bytes, and every example message has the fields of its type here. agent/protocol_test.go holds
// the agent to the same file, so a field renamed on either side fails one of the two.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { encodeFrame, FrameDecoder } from './frame.js';
import type { AgentMethod, AgentParams, AgentResults, ErrorInfo, FileStat, FileWrittenEvent, ProcExitEvent, ProcInfo } from './types.js';

/**
 * A description of type T that the compiler holds to T (every field listed, optional ones marked) and the test holds
 * each example to.
 */
type Shape<T> = T extends string
  ? 'string'
  : T extends number
    ? 'number'
    : T extends boolean
      ? 'boolean'
      : T extends null
        ? 'null'
        : T extends readonly (infer E)[]
          ? { items: Shape<E> }
          : string extends keyof T
            ? { values: Shape<T[keyof T]> }
            : { fields: { [K in keyof T]-?: undefined extends T[K] ? { optional: FieldShape<Exclude<T[K], undefined>> } : FieldShape<T[K]> } };
/** A field of a union type may list the members its examples use. */
type FieldShape<T> = Shape<T> | { anyOf: Shape<T>[] };
type AnyShape =
  | 'string'
  | 'number'
  | 'boolean'
  | 'null'
  | { anyOf: AnyShape[] }
  | { items: AnyShape }
  | { values: AnyShape }
  | { fields: Record<string, AnyShape | { optional: AnyShape }> };

const NONE = { fields: {} } as const;
const NUMBER_OR_NULL: FieldShape<number | null> = { anyOf: ['number', 'null'] };
const STRING_OR_NULL: FieldShape<string | null> = { anyOf: ['string', 'null'] };
const opt = <const S>(s: S) => ({ optional: s });
const FILE_STAT: Shape<FileStat> = {
  fields: {
    name: 'string',
    path: 'string',
    type: 'string',
    sizeBytes: 'number',
    mode: 'number',
    mtimeMs: 'number',
    uid: 'number',
    gid: 'number',
    owner: 'string',
    group: 'string',
    symlinkTarget: opt('string'),
    xattrs: opt({ values: 'string' }),
  },
};
const PROC_INFO: Shape<ProcInfo> = {
  fields: {
    id: 'string',
    pid: 'number',
    argv: { items: 'string' },
    exited: 'boolean',
    exitCode: NUMBER_OR_NULL,
    signal: STRING_OR_NULL,
    outputBytes: 'number',
    pty: 'boolean',
  },
};
const OUTPUT_OFFSET = { fields: { outputOffset: 'number' } } as const;
const STREAM_READ = { fields: { path: 'string', streamId: 'number', window: opt('number') } } as const;

const PARAMS: { [M in AgentMethod]: Shape<AgentParams[M]> } = {
  hello: { fields: { version: 'number', resync: opt('string') } },
  ping: NONE,
  sync: { fields: { timeUnixNs: 'string', entropy: 'string' } },
  'proc.start': {
    fields: {
      id: 'string',
      argv: { items: 'string' },
      env: opt({ values: 'string' }),
      cwd: opt('string'),
      user: opt('string'),
      stdin: opt('boolean'),
      pty: opt({ fields: { cols: 'number', rows: 'number' } }),
      bufferBytes: opt('number'),
    },
  },
  'proc.attach': { fields: { id: 'string', streamId: 'number', fromOffset: 'number', window: opt('number') } },
  'proc.detach': { fields: { streamId: 'number' } },
  'proc.stdin': { fields: { id: 'string', data: opt('string'), eof: opt('boolean') } },
  'proc.signal': { fields: { id: 'string', signal: 'string' } },
  'proc.resize': { fields: { id: 'string', cols: 'number', rows: 'number' } },
  'proc.list': NONE,
  'proc.forget': { fields: { id: 'string' } },
  'file.stat': { fields: { path: 'string' } },
  'file.list': { fields: { path: 'string', depth: opt('number') } },
  'file.mkdir': { fields: { path: 'string', parents: opt('boolean'), owner: opt('string') } },
  'file.remove': { fields: { path: 'string', recursive: opt('boolean') } },
  'file.rename': { fields: { from: 'string', to: 'string' } },
  'file.read': STREAM_READ,
  'file.readTar': STREAM_READ,
  'file.write': {
    fields: {
      path: 'string',
      streamId: 'number',
      mode: opt('number'),
      parents: opt('boolean'),
      append: opt('boolean'),
      owner: opt('string'),
      xattrs: opt({ values: 'string' }),
    },
  },
  'file.writeTar': { fields: { path: 'string', streamId: 'number', owner: opt('string') } },
  'fs.watch': { fields: { watchId: 'string', path: 'string', recursive: opt('boolean') } },
  'fs.unwatch': { fields: { watchId: 'string' } },
  'env.defaults': { fields: { env: { values: 'string' } } },
  'disk.grow': { fields: { bytes: 'number' } },
  'net.listen': { fields: { port: 'number', address: opt('string'), window: opt('number') } },
  'net.close': NONE,
  'net.dial': { fields: { streamId: 'number', port: 'number', address: opt('string'), window: opt('number') } },
  'net.ports': NONE,
  'sys.stats': NONE,
};

const RESULTS: { [M in AgentMethod]: Shape<AgentResults[M]> } = {
  hello: { fields: { version: 'number', agentVersion: 'string', bootId: 'string', uptimeMs: 'number' } },
  ping: NONE,
  sync: { fields: { skipped: opt('boolean') } },
  'proc.start': { fields: { pid: 'number' } },
  'proc.attach': { fields: { startOffset: 'number', endOffset: 'number', exited: 'boolean' } },
  'proc.detach': NONE,
  'proc.stdin': OUTPUT_OFFSET,
  'proc.signal': OUTPUT_OFFSET,
  'proc.resize': OUTPUT_OFFSET,
  'proc.list': { fields: { processes: { items: PROC_INFO } } },
  'proc.forget': NONE,
  'file.stat': FILE_STAT,
  'file.list': { fields: { entries: { items: FILE_STAT } } },
  'file.mkdir': { fields: { created: 'boolean' } },
  'file.remove': NONE,
  'file.rename': NONE,
  'file.read': { fields: { sizeBytes: 'number' } },
  'file.readTar': NONE,
  'file.write': { fields: { window: 'number' } },
  'file.writeTar': { fields: { window: 'number' } },
  'fs.watch': NONE,
  'fs.unwatch': NONE,
  'env.defaults': NONE,
  'disk.grow': { fields: { bytes: 'number' } },
  'net.listen': { fields: { port: 'number' } },
  'net.close': NONE,
  'net.dial': { fields: { recvWindow: 'number', peer: 'string' } },
  'net.ports': { fields: { ports: { items: { fields: { port: 'number', address: 'string' } } } } },
  'sys.stats': {
    fields: {
      cpuCount: 'number',
      cpuTotalTicks: opt('number'),
      cpuIdleTicks: opt('number'),
      memTotalBytes: opt('number'),
      memUsedBytes: opt('number'),
      memCacheBytes: opt('number'),
      diskTotalBytes: opt('number'),
      diskUsedBytes: opt('number'),
    },
  },
};

const ERROR: Shape<ErrorInfo> = { fields: { code: 'string', message: 'string' } };
const EVENTS: Record<string, AnyShape> = {
  'proc.exit': {
    fields: {
      event: 'string',
      id: 'string',
      exitCode: NUMBER_OR_NULL,
      signal: STRING_OR_NULL,
      outputBytes: 'number',
      output: { fields: { sha256: 'string', stdoutSha256: 'string', stderrSha256: 'string', stdoutBytes: 'number', stderrBytes: 'number' } },
    },
  } satisfies Shape<ProcExitEvent>,
  'file.written': {
    fields: { event: 'string', streamId: 'number', path: 'string', sizeBytes: 'number', entries: opt('number') },
  } satisfies Shape<FileWrittenEvent>,
};

/** Why `value` does not fit `shape` (undefined when it does): a field missing or unknown, or of another kind. */
function misfit(value: unknown, shape: AnyShape, at: string): string | undefined {
  if (typeof shape === 'object' && 'anyOf' in shape) {
    return shape.anyOf.some((s) => misfit(value, s, at) === undefined) ? undefined : `${at} fits none of ${JSON.stringify(shape.anyOf)}`;
  }
  if (typeof shape === 'string') {
    const kind = value === null ? 'null' : typeof value;
    return kind === shape ? undefined : `${at} is ${kind}, want ${shape}`;
  }
  if ('items' in shape) {
    if (!Array.isArray(value)) return `${at} is not an array`;
    for (const [i, v] of value.entries()) {
      const m = misfit(v, shape.items, `${at}[${i}]`);
      if (m) return m;
    }
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return `${at} is not an object`;
  const fields = value as Record<string, unknown>;
  if ('values' in shape) {
    for (const [k, v] of Object.entries(fields)) {
      const m = misfit(v, shape.values, `${at}.${k}`);
      if (m) return m;
    }
    return undefined;
  }
  for (const k of Object.keys(fields)) if (!(k in shape.fields)) return `${at}.${k} is not a field of the type`;
  for (const [k, s] of Object.entries(shape.fields)) {
    const optional = typeof s === 'object' && 'optional' in s;
    if (!(k in fields)) {
      if (optional) continue;
      return `${at}.${k} is missing`;
    }
    const m = misfit(fields[k], optional ? s.optional : s, `${at}.${k}`);
    if (m) return m;
  }
  return undefined;
}

interface ExampleFrame {
  name: string;
  hex: string;
  type: number;
  channel: number;
  json?: unknown;
  payloadHex?: string;
}
interface Exchange {
  call: { method: AgentMethod; params: unknown };
  reply: { result?: unknown; error?: unknown };
  events?: { event: string }[];
}
const examples = JSON.parse(readFileSync(new URL('../../../spec/agent-protocol.examples.json', import.meta.url), 'utf8')) as {
  frames: ExampleFrame[];
  exchanges: Exchange[];
};

describe('the shared agent protocol examples', () => {
  it.each(examples.frames.map((f) => [f.name, f] as const))('%s decodes and re-encodes to the same bytes', (_name, f) => {
    const bytes = Buffer.from(f.hex, 'hex');
    const frames = new FrameDecoder().push(bytes);
    expect(frames).toHaveLength(1);
    const [frame] = frames;
    expect({ type: frame!.type, channel: frame!.channel }).toEqual({ type: f.type, channel: f.channel });
    if (f.json !== undefined) {
      expect(JSON.parse(frame!.payload.toString('utf8'))).toEqual(f.json);
      expect(JSON.stringify(f.json)).toBe(frame!.payload.toString('utf8'));
    } else expect(frame!.payload.toString('hex')).toBe(f.payloadHex);
    expect(encodeFrame(frame!.type, frame!.channel, frame!.payload).toString('hex')).toBe(f.hex);
  });

  it.each(examples.exchanges.map((x, i) => [`${i} ${x.call.method}`, x] as const))('exchange %s has the fields of the protocol types', (_name, x) => {
    const shapes = { params: PARAMS[x.call.method], result: RESULTS[x.call.method] };
    // An unknown method is an example of the error reply only.
    if (shapes.params) expect(misfit(x.call.params, shapes.params as AnyShape, 'params')).toBeUndefined();
    if (x.reply.error !== undefined) expect(misfit(x.reply.error, ERROR, 'error')).toBeUndefined();
    else expect(misfit(x.reply.result, shapes.result as AnyShape, 'result')).toBeUndefined();
    for (const e of x.events ?? []) {
      const shape = EVENTS[e.event];
      expect(shape, `a type for event ${e.event}`).toBeDefined();
      expect(misfit(e, shape!, e.event)).toBeUndefined();
    }
  });

  it('has an example of every method but those that need a guest (disk.grow), a PTY (proc.resize) or a guest server (net.dial)', () => {
    const covered = new Set(examples.exchanges.map((x) => x.call.method));
    expect((Object.keys(PARAMS) as AgentMethod[]).filter((m) => !covered.has(m))).toEqual(['proc.resize', 'disk.grow', 'net.dial']);
  });
});
