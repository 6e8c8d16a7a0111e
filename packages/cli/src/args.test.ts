// Argument parsing of the CLI: --env K=V, integers, times, fork sources, cp endpoints, and how commander applies them.
import { InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import {
  UsageError,
  collectEnv,
  collectList,
  collectMetadata,
  collectRepeated,
  parseCpEndpoint,
  parseDurationS,
  parseKeyExpiryS,
  parseForkArg,
  parseNonNegativeInt,
  parsePositiveInt,
  parseTime,
  planCp,
  secretValueFromStdin,
} from './args.js';

describe('--env K=V', () => {
  it('accumulates pairs and keeps everything after the first = as the value', () => {
    let envs = collectEnv('A=1');
    envs = collectEnv('B_2=x=y', envs);
    envs = collectEnv('EMPTY=', envs);
    expect(envs).toEqual({ A: '1', B_2: 'x=y', EMPTY: '' });
    expect(collectEnv('A=2', envs).A).toBe('2');
  });

  it.each(['A', '=1', '1A=x', 'A-B=1', 'A B=1'])('rejects %j', (v) => {
    expect(() => collectEnv(v)).toThrow(InvalidArgumentError);
  });

  it('metadata keys may be anything non-empty', () => {
    expect(collectMetadata('team.name=ml ops')).toEqual({ 'team.name': 'ml ops' });
    expect(() => collectMetadata('=x')).toThrow(InvalidArgumentError);
  });
});

describe('integers', () => {
  it('accepts whole numbers only', () => {
    expect(parseNonNegativeInt('0')).toBe(0);
    expect(parsePositiveInt('512')).toBe(512);
    for (const bad of ['-1', '1.5', 'abc', '', '1e3', '99999999999999999999']) expect(() => parseNonNegativeInt(bad)).toThrow(InvalidArgumentError);
    expect(() => parsePositiveInt('0')).toThrow(InvalidArgumentError);
  });
});

describe('times and fork sources', () => {
  const sbx = 'sbx_abcdefghijklmnopqrst';
  const snap = 'snap_abcdefghijklmnopqrst';

  it('reads ISO 8601 with a zone exactly, and a zoneless time as local time', () => {
    expect(parseTime('2025-06-01T12:00:30Z')).toBe('2025-06-01T12:00:30.000Z');
    expect(parseTime('2025-06-01T14:00:30+02:00')).toBe('2025-06-01T12:00:30.000Z');
    expect(parseTime('2025-06-01 14:00:30')).toBe(new Date(2025, 5, 1, 14, 0, 30).toISOString());
    for (const bad of ['', '1', 'June 1', 'yesterday', '2025-13-45T00:00:00Z', '12:00']) expect(() => parseTime(bad), bad).toThrow(InvalidArgumentError);
  });

  it('takes a snapshot, a sandbox, or a sandbox at a time, made UTC', () => {
    expect(parseForkArg(snap)).toBe(snap);
    expect(parseForkArg(sbx)).toBe(sbx);
    expect(parseForkArg(`${sbx}@2025-06-01T14:00:00+02:00`)).toBe(`${sbx}@2025-06-01T12:00:00.000Z`);
    for (const bad of ['tpl_x', `${sbx}@`, `${sbx}@soon`, `${snap}@2025-06-01T12:00:00Z`, '@2025-06-01T12:00:00Z']) {
      expect(() => parseForkArg(bad), bad).toThrow(InvalidArgumentError);
    }
  });
});

describe('cp paths', () => {
  const id = 'sbx_abcdefghijklmnopqrst';

  it('tells sandbox paths, local paths and stdio apart', () => {
    expect(parseCpEndpoint(`${id}:/root/a b.txt`)).toEqual({ kind: 'remote', sandboxId: id, path: '/root/a b.txt' });
    expect(parseCpEndpoint(`${id}:/x:y`)).toEqual({ kind: 'remote', sandboxId: id, path: '/x:y' });
    expect(parseCpEndpoint('-')).toEqual({ kind: 'stdio' });
    expect(parseCpEndpoint('./sbx_abc:/x')).toEqual({ kind: 'local', path: './sbx_abc:/x' });
    expect(parseCpEndpoint('C:/x')).toEqual({ kind: 'local', path: 'C:/x' });
    expect(parseCpEndpoint('notes:today')).toEqual({ kind: 'local', path: 'notes:today' });
  });

  it('wants absolute sandbox paths', () => {
    expect(() => parseCpEndpoint(`${id}:root/x`)).toThrow(UsageError);
    expect(() => parseCpEndpoint(`${id}:`)).toThrow(/absolute/);
  });

  it('plans one direction with exactly one side in a sandbox', () => {
    expect(planCp('a.txt', `${id}:/tmp/`)).toMatchObject({ direction: 'upload', from: { kind: 'local', path: 'a.txt' }, to: { path: '/tmp/' } });
    expect(planCp(`${id}:/etc/os-release`, '-')).toMatchObject({ direction: 'download', to: { kind: 'stdio' } });
    expect(() => planCp('a', 'b')).toThrow(/one side must be in a sandbox/);
    expect(() => planCp(`${id}:/a`, `${id}:/b`)).toThrow(/between two sandboxes/);
    expect(() => planCp('-', `${id}:/tmp/`)).toThrow(/file name/);
  });
});

describe('egress options', () => {
  it('collects repeated rules as given, and comma-separated hosts across repeats', () => {
    expect(collectRepeated('api.github.com GET /repos', collectRepeated('*.pypi.org'))).toEqual(['*.pypi.org', 'api.github.com GET /repos']);
    expect(() => collectRepeated(' ')).toThrow(InvalidArgumentError);
    expect(collectList('c.example', collectList('a.example, b.example:8443'))).toEqual(['a.example', 'b.example:8443', 'c.example']);
    for (const bad of ['', 'a,,b', 'a,']) expect(() => collectList(bad), bad).toThrow(InvalidArgumentError);
  });

  it('reads durations in seconds, from 1 s to 1 d', () => {
    expect([parseDurationS('90'), parseDurationS('30s'), parseDurationS('10m'), parseDurationS('2h'), parseDurationS('1d')]).toEqual([
      90, 30, 600, 7200, 86400,
    ]);
    for (const bad of ['0', '0m', '25h', '2d', '1.5h', '10 min', '-1', 'm', '']) expect(() => parseDurationS(bad), bad).toThrow(InvalidArgumentError);
  });

  it('reads key lifetimes from a second to ten years', () => {
    expect([parseKeyExpiryS('3600'), parseKeyExpiryS('90m'), parseKeyExpiryS('12h'), parseKeyExpiryS('30d'), parseKeyExpiryS('3650d')]).toEqual([
      3600, 5400, 43200, 2592000, 315360000,
    ]);
    for (const bad of ['0', '0s', '0d', '3651d', '1.5d', '30 days', '-1d', 'd', '']) expect(() => parseKeyExpiryS(bad), bad).toThrow(InvalidArgumentError);
  });

  it('takes a secret value from stdin without one trailing newline, and refuses an empty one', () => {
    expect(secretValueFromStdin('ghp_abc\n')).toBe('ghp_abc');
    expect(secretValueFromStdin('ghp_abc\r\n')).toBe('ghp_abc');
    expect(secretValueFromStdin('line1\nline2\n\n')).toBe('line1\nline2\n');
    expect(secretValueFromStdin(' spaced ')).toBe(' spaced ');
    for (const empty of ['', '\n', '\r\n']) expect(() => secretValueFromStdin(empty)).toThrow(UsageError);
  });
});
