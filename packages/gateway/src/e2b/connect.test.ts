// The Connect codec and the proto3 JSON of envd's messages, against what @connectrpc and the e2b SDK expect.
import { describe, expect, it } from 'vitest';
import {
  ConnectError,
  EnvelopeReader,
  FLAG_END_STREAM,
  encodeEnvelope,
  endStreamEnvelope,
  messageEnvelope,
  parseKeepaliveS,
  parseTimeoutMs,
} from './connect.js';
import {
  bytesFromJson,
  dataEvent,
  endEvent,
  entryInfo,
  enumFromJson,
  EVENT_TYPE,
  listDirRequest,
  permissionsString,
  processEvent,
  processSelector,
  sendInputRequest,
  sendSignalRequest,
  SIGNAL,
  startRequest,
  watcherIdRequest,
  watchRequest,
} from './messages.js';
import { multipartBoundary } from './multipart.js';

const json = (b: Buffer) => JSON.parse(b.toString('utf8'));

describe('envelopes', () => {
  it('reassembles envelopes split anywhere across chunks, several per chunk', () => {
    const a = messageEnvelope({ event: { start: { pid: 7 } } });
    const b = messageEnvelope({ event: { data: { stdout: 'aGk=' } } });
    const end = endStreamEnvelope();
    const all = Buffer.concat([a, b, end]);
    for (let cut1 = 0; cut1 <= all.length; cut1++) {
      const cut2 = Math.min(all.length, cut1 + 3);
      const r = new EnvelopeReader(1024);
      const got = [...r.push(all.subarray(0, cut1)), ...r.push(all.subarray(cut1, cut2)), ...r.push(all.subarray(cut2))];
      expect(got.map((e) => e.flags)).toEqual([0, 0, FLAG_END_STREAM]);
      expect(json(got[0]!.payload)).toEqual({ event: { start: { pid: 7 } } });
      expect(json(got[1]!.payload)).toEqual({ event: { data: { stdout: 'aGk=' } } });
      expect(r.pendingBytes).toBe(0);
    }
  });

  it('feeds one byte at a time', () => {
    const all = Buffer.concat([messageEnvelope({ a: 1 }), messageEnvelope({})]);
    const r = new EnvelopeReader(1024);
    const got = [...all].flatMap((byte) => r.push(Buffer.from([byte])));
    expect(got.map((e) => json(e.payload))).toEqual([{ a: 1 }, {}]);
  });

  it('refuses a declared length over the bound as soon as the header arrives', () => {
    const r = new EnvelopeReader(10);
    const head = encodeEnvelope(0, Buffer.alloc(11)).subarray(0, 5);
    expect(() => r.push(head)).toThrowError(expect.objectContaining({ code: 'resource_exhausted' }));
  });

  it('keeps a cut-short envelope pending', () => {
    const r = new EnvelopeReader(1024);
    expect(r.push(messageEnvelope({ a: 1 }).subarray(0, 8))).toEqual([]);
    expect(r.pendingBytes).toBe(8);
  });

  it('end of stream: {} on success, the error with its string code otherwise', () => {
    const ok = endStreamEnvelope();
    expect(ok[0]).toBe(FLAG_END_STREAM);
    expect(ok.readUInt32BE(1)).toBe(ok.length - 5);
    expect(json(ok.subarray(5))).toEqual({});
    const failed = endStreamEnvelope(new ConnectError('deadline_exceeded', 'too slow'));
    expect(failed[0]).toBe(FLAG_END_STREAM);
    expect(json(failed.subarray(5))).toEqual({ error: { code: 'deadline_exceeded', message: 'too slow' } });
  });

  it('errors carry the HTTP status of their code', () => {
    expect(new ConnectError('not_found', '').status).toBe(404);
    expect(new ConnectError('already_exists', '').status).toBe(409);
    expect(new ConnectError('deadline_exceeded', '').status).toBe(504);
    expect(new ConnectError('unimplemented', '').status).toBe(501);
    expect(new ConnectError('unauthenticated', '').status).toBe(401);
    expect(new ConnectError('canceled', '').status).toBe(499);
  });
});

describe('headers', () => {
  it('Connect-Timeout-Ms: none when absent or 0, ms otherwise, malformed refused', () => {
    expect(parseTimeoutMs(undefined)).toBeUndefined();
    expect(parseTimeoutMs('0')).toBeUndefined();
    expect(parseTimeoutMs('60000')).toBe(60_000);
    expect(() => parseTimeoutMs('-5')).toThrowError(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => parseTimeoutMs('12345678901')).toThrowError(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => parseTimeoutMs('1e3')).toThrowError(expect.objectContaining({ code: 'invalid_argument' }));
  });

  it('Keepalive-Ping-Interval in seconds; nonsense means no keepalives', () => {
    expect(parseKeepaliveS('50')).toBe(50);
    expect(parseKeepaliveS('0')).toBeUndefined();
    expect(parseKeepaliveS('x')).toBeUndefined();
    expect(parseKeepaliveS(undefined)).toBeUndefined();
  });

  it('multipart boundary, quoted or not', () => {
    expect(multipartBoundary('multipart/form-data; boundary=----abc')).toBe('----abc');
    expect(multipartBoundary('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(multipartBoundary('application/octet-stream')).toBeUndefined();
    expect(multipartBoundary('multipart/form-data')).toBeUndefined();
  });
});

describe('process messages', () => {
  it('StartRequest: config, optional pty/tag/stdin, unknown fields ignored', () => {
    expect(
      startRequest({
        process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo hi'], envs: { A: '1' }, cwd: 'work' },
        pty: { size: { cols: 80, rows: 24 } },
        tag: 't1',
        stdin: true,
        somethingNew: 1,
      }),
    ).toEqual({
      process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo hi'], envs: { A: '1' }, cwd: 'work' },
      pty: { cols: 80, rows: 24 },
      tag: 't1',
      stdin: true,
    });
    expect(startRequest({ process: { cmd: 'ls' } })).toEqual({
      process: { cmd: 'ls', args: [], envs: {}, cwd: undefined },
      pty: undefined,
      tag: undefined,
      stdin: false,
    });
    expect(() => startRequest({ process: {} })).toThrowError(/process.cmd/);
    expect(() => startRequest({ process: { cmd: 'ls', envs: { A: 1 } } })).toThrowError(/process.envs.A/);
    expect(() => startRequest({ process: { cmd: 'ls', args: 'x' } })).toThrowError(/process.args/);
    expect(() => startRequest({ process: { cmd: 'ls' }, pty: { size: { cols: 0, rows: 5 } } })).toThrowError(/pty.size/);
  });

  it('selectors: pid as a number or decimal string, or tag; exactly one', () => {
    expect(processSelector({ pid: 42 })).toEqual({ pid: 42 });
    expect(processSelector({ pid: '42' })).toEqual({ pid: 42 });
    expect(processSelector({ tag: 'web' })).toEqual({ tag: 'web' });
    expect(() => processSelector({})).toThrowError(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => processSelector({ pid: 1, tag: 'x' })).toThrowError(/exactly one/);
    expect(() => processSelector({ pid: -1 })).toThrowError(/unsigned/);
    expect(() => processSelector({ pid: 1.5 })).toThrowError(/unsigned/);
  });

  it('bytes: standard or URL-safe base64, padded or not', () => {
    expect(bytesFromJson('aGk=', 'x').toString()).toBe('hi');
    expect(bytesFromJson('aGk', 'x').toString()).toBe('hi');
    expect(bytesFromJson('-_8=', 'x')).toEqual(Buffer.from([0xfb, 0xff]));
    expect(bytesFromJson('+/8=', 'x')).toEqual(Buffer.from([0xfb, 0xff]));
    expect(bytesFromJson('', 'x')).toEqual(Buffer.alloc(0));
    expect(() => bytesFromJson('a', 'x')).toThrowError(/base64/);
    expect(() => bytesFromJson('a$b=', 'x')).toThrowError(/base64/);
    expect(() => bytesFromJson(5, 'x')).toThrowError(/base64/);
  });

  it('SendInput: stdin or pty bytes', () => {
    expect(sendInputRequest({ process: { pid: 3 }, input: { stdin: 'aGk=' } })).toEqual({ process: { pid: 3 }, input: Buffer.from('hi'), pty: false });
    expect(sendInputRequest({ process: { tag: 't' }, input: { pty: 'aGk=' } })).toEqual({ process: { tag: 't' }, input: Buffer.from('hi'), pty: true });
    expect(() => sendInputRequest({ process: { pid: 3 }, input: {} })).toThrowError(/exactly one of stdin or pty/);
  });

  it('enums: by name or number; SendSignal takes SIGTERM and SIGKILL only', () => {
    expect(enumFromJson('EVENT_TYPE_WRITE', EVENT_TYPE, 'type')).toBe(2);
    expect(enumFromJson(4, EVENT_TYPE, 'type')).toBe(4);
    expect(() => enumFromJson('EVENT_TYPE_NOPE', EVENT_TYPE, 'type')).toThrowError(/must be one of/);
    expect(sendSignalRequest({ process: { pid: 1 }, signal: 'SIGNAL_SIGKILL' }).signal).toBe('SIGKILL');
    expect(sendSignalRequest({ process: { pid: 1 }, signal: 9 }).signal).toBe('SIGKILL');
    expect(sendSignalRequest({ process: { pid: 1 }, signal: SIGNAL.SIGNAL_SIGTERM }).signal).toBe('SIGTERM');
    expect(() => sendSignalRequest({ process: { pid: 1 } })).toThrowError(/SIGNAL_SIGTERM or SIGNAL_SIGKILL/);
    expect(() => sendSignalRequest({ process: { pid: 1 }, signal: 2 })).toThrowError(/SIGNAL_SIGTERM or SIGNAL_SIGKILL/);
  });

  it('events: oneofs as the one set field, bytes as base64', () => {
    expect(processEvent({ start: { pid: 42 } })).toEqual({ event: { start: { pid: 42 } } });
    expect(dataEvent('stdout', Buffer.from('hi'))).toEqual({ event: { data: { stdout: 'aGk=' } } });
    expect(dataEvent('stderr', Buffer.from([0xff]))).toEqual({ event: { data: { stderr: '/w==' } } });
    expect(dataEvent('pty', Buffer.from('x'))).toEqual({ event: { data: { pty: 'eA==' } } });
    expect(processEvent({ keepalive: {} })).toEqual({ event: { keepalive: {} } });
  });

  it('end events worded like Go os.ProcessState.String()', () => {
    expect(endEvent({ exitCode: 0, signal: null })).toEqual({ end: { exitCode: 0, exited: true, status: 'exit status 0' } });
    expect(endEvent({ exitCode: 1, signal: null })).toEqual({ end: { exitCode: 1, exited: true, status: 'exit status 1', error: 'exit status 1' } });
    expect(endEvent({ exitCode: null, signal: 'SIGKILL' })).toEqual({
      end: { exitCode: -1, exited: false, status: 'signal: killed', error: 'signal: killed' },
    });
    expect(endEvent({ exitCode: null, signal: 'SIGTERM' })).toMatchObject({ end: { status: 'signal: terminated' } });
  });
});

describe('filesystem messages', () => {
  it('EntryInfo: type enum, size as a decimal string, permission bits, Go mode string, RFC 3339 time', () => {
    const e = entryInfo({
      name: 'a.txt',
      path: '/home/user/a.txt',
      type: 'file',
      sizeBytes: 2 ** 40,
      mode: 0o644,
      mtimeMs: Date.UTC(2024, 0, 2, 3, 4, 5, 6),
      owner: 'user',
      group: 'user',
    });
    expect(e).toEqual({
      name: 'a.txt',
      type: 'FILE_TYPE_FILE',
      path: '/home/user/a.txt',
      size: '1099511627776',
      mode: 0o644,
      permissions: '-rw-r--r--',
      owner: 'user',
      group: 'user',
      modifiedTime: '2024-01-02T03:04:05.006Z',
    });
    const link = entryInfo({ name: 'l', path: '/l', type: 'symlink', sizeBytes: 3, mode: 0o777, mtimeMs: 0, symlinkTarget: '/x' });
    expect(link).toMatchObject({ type: 'FILE_TYPE_SYMLINK', permissions: 'Lrwxrwxrwx', symlinkTarget: '/x', owner: '', group: '' });
    // The absolute path a relative link resolves to, from the link's own directory, as envd reports it.
    const rel = (symlinkTarget: string) =>
      entryInfo({ name: 'l', path: '/home/user/dir/l', type: 'symlink', sizeBytes: 3, mode: 0o777, mtimeMs: 0, symlinkTarget }).symlinkTarget;
    expect([rel('t.txt'), rel('../other/./t.txt'), rel('/etc//passwd'), rel('../../../../..')]).toEqual([
      '/home/user/dir/t.txt',
      '/home/user/other/t.txt',
      '/etc/passwd',
      '/',
    ]);
    expect(entryInfo({ name: 'd', path: '/d', type: 'dir', sizeBytes: 4096, mode: 0o755, mtimeMs: 0 }).type).toBe('FILE_TYPE_DIRECTORY');
  });

  it('permissions like Go FileMode.String(): setuid, setgid, sticky, other', () => {
    expect(permissionsString('dir', 0o755)).toBe('drwxr-xr-x');
    expect(permissionsString('file', 0o4755)).toBe('urwxr-xr-x');
    expect(permissionsString('dir', 0o1777)).toBe('dtrwxrwxrwx');
    expect(permissionsString('file', 0o2750)).toBe('grwxr-x---');
    expect(permissionsString('file', 0)).toBe('----------');
    expect(permissionsString('other', 0o600)).toBe('?rw-------');
  });

  it('requests: JSON names and proto names, depth defaulting to 1', () => {
    expect(listDirRequest({ path: '/x' })).toEqual({ path: '/x', depth: 1 });
    expect(listDirRequest({ path: '/x', depth: 3 })).toEqual({ path: '/x', depth: 3 });
    expect(() => listDirRequest({})).toThrowError(/path/);
    expect(watchRequest({ path: '/x', recursive: true, include_entry: true })).toEqual({ path: '/x', recursive: true, includeEntry: true });
    expect(watcherIdRequest({ watcher_id: 'w' })).toEqual({ watcherId: 'w' });
    expect(watcherIdRequest({ watcherId: 'w' })).toEqual({ watcherId: 'w' });
  });
});
