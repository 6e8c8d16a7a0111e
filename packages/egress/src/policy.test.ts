// Policy grammar, refusal of broad or malformed rules, the fail-closed decision, and internal address ranges.
import { describe, expect, it } from 'vitest';
import { SandglassError } from '@sandglass/core';
import { canonicalHost, internalRange, parseHostPort, parsePrivateAllow, vetAddress } from './address.js';
import { decide, inspectPath, parsePolicy, type Policy } from './policy.js';

function refusal(fn: () => unknown): SandglassError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SandglassError);
    return err as SandglassError;
  }
  throw new Error('expected a refusal');
}

describe('parsePolicy', () => {
  it('accepts hosts, suffix wildcards, ports, methods, paths and IP literals, and writes them back canonically', () => {
    const p = parsePolicy({
      allow: [
        'API.GitHub.com.',
        '*.pypi.org',
        'example.com:8443',
        'api.github.com GET /repos/',
        'api.github.com/gists POST',
        '93.184.216.34:5432',
        '[2606:4700::1111]:8080',
        '2606:4700::1111',
      ],
      deny: ['*', '*.com', 'evil.example.com', '127.0.0.1'],
    });
    expect(p.toJSON()).toEqual({
      allow: [
        'api.github.com',
        '*.pypi.org',
        'example.com:8443',
        'api.github.com GET /repos',
        'api.github.com POST /gists',
        '93.184.216.34:5432',
        '[2606:4700::1111]:8080',
        '[2606:4700::1111]',
      ],
      deny: ['*:*', '*.com:*', 'evil.example.com:*', '127.0.0.1:*'],
    });
    expect(parsePolicy(p.toJSON()).toJSON()).toEqual(p.toJSON());
  });

  it.each([
    ['*', 'too broad'],
    ['*.com', 'public suffix'],
    ['*.co.uk', 'public suffix'],
    ['*.github.io', 'public suffix'],
    ['*.internal', 'public suffix'],
    ['', 'empty'],
    ['   ', 'empty'],
    ['api.example.com:0', 'invalid port'],
    ['api.example.com:70000', 'invalid port'],
    ['api.example.com:http', 'invalid port'],
    ['https://api.example.com', 'URL'],
    ['a*.example.com', '"*"'],
    ['*.*.example.com', '"*"'],
    ['api..example.com', 'valid host'],
    ['127.1', 'valid host'],
    ['2130706433', 'valid host'],
    ['0x7f.0.0.1', 'valid host'],
    ['*.10.0.0.1', 'IP'],
    ['api.example.com GET POST', 'unexpected part'],
    ['api.example.com /a /b', 'more than one path'],
    ['api.example.com /a/../b', 'dot segment'],
    ['api.example.com /a/%2e%2e/b', 'dot segment'],
    ['api.example.com /a%2fb', 'encoded slash'],
    ['127.0.0.1:7071', 'loopback'],
    ['127.0.0.1:*', 'loopback'],
    ['10.0.0.5:5432', 'private'],
    ['[::1]:8080', 'loopback'],
    ['::1', 'loopback'],
    ['169.254.169.254', 'metadata'],
    ['[::ffff:127.0.0.1]:80', 'loopback'],
    ['[64:ff9b:1::1]', 'NAT64'],
    ['[2001::1]', 'Teredo'],
    ['[2002:7f00:1::1]', '6to4'],
    ['100.64.0.1', 'CGNAT'],
    ['0177.0.0.1', 'valid host'],
    ['0x7f.1', 'valid host'],
    ['api.example.com /a?x=1', 'query'],
  ])('refuses %j (%s) naming the field and the rule', (rule, problem) => {
    const err = refusal(() => parsePolicy({ allow: ['ok.example.com', 'fine.example.org', rule] }));
    expect(err.code).toBe('policy_invalid');
    expect(err.status).toBe(400);
    expect(err.details).toMatchObject({ field: 'allow[2]', rule });
    expect(err.message).toContain('allow[2]');
    expect(err.message).toContain(problem);
  });

  it('refuses non-lists, non-strings and unknown fields', () => {
    expect(refusal(() => parsePolicy({ allow: 'api.example.com' as unknown as string[] })).details).toMatchObject({ field: 'allow' });
    expect(refusal(() => parsePolicy({ deny: [42 as unknown as string] })).details).toMatchObject({ field: 'deny[0]' });
    expect(refusal(() => parsePolicy({ allows: [] } as never)).details).toMatchObject({ field: 'allows' });
  });
});

describe('decide', () => {
  const p: Policy = parsePolicy({
    allow: ['api.github.com', '*.pypi.org', 'example.com:8443', 'git.example.com GET /repos/acme', 'files.example.com /public', '93.184.216.34:5432'],
    deny: ['evil.pypi.org', 'git.example.com /repos/acme/secret'],
  });

  it('allows what a rule names, on the default ports 80 and 443 unless a port is given', () => {
    expect(decide(p, { host: 'api.github.com', port: 443 })).toEqual({ allowed: true, rule: 'api.github.com', reason: 'allowed by rule' });
    expect(decide(p, { host: 'API.GITHUB.COM.', port: 80 }).allowed).toBe(true);
    expect(decide(p, { host: 'api.github.com', port: 8443 })).toEqual({ allowed: false, reason: 'no rule allows' });
    expect(decide(p, { host: 'example.com', port: 8443 }).allowed).toBe(true);
    expect(decide(p, { host: 'example.com', port: 443 }).allowed).toBe(false);
    expect(decide(p, { host: '93.184.216.34', port: 5432 }).allowed).toBe(true);
  });

  it('matches wildcards on subdomains only, never the apex, a look-alike or an IP', () => {
    expect(decide(p, { host: 'files.pypi.org', port: 443 }).allowed).toBe(true);
    expect(decide(p, { host: 'a.b.pypi.org', port: 443 }).allowed).toBe(true);
    expect(decide(p, { host: 'pypi.org', port: 443 }).allowed).toBe(false);
    expect(decide(p, { host: 'evilpypi.org', port: 443 }).allowed).toBe(false);
    expect(decide(p, { host: 'pypi.org.evil.com', port: 443 }).allowed).toBe(false);
  });

  it('lets deny rules win', () => {
    expect(decide(p, { host: 'evil.pypi.org', port: 443 })).toEqual({ allowed: false, rule: 'evil.pypi.org:*', reason: 'denied by rule' });
    expect(decide(p, { host: 'evil.pypi.org', port: 8443 }).allowed).toBe(false);
    expect(decide(p, { host: 'git.example.com', port: 443, method: 'GET', path: '/repos/acme/secret/x' }).allowed).toBe(false);
  });

  it('matches methods and path prefixes at segment boundaries, after resolving dot segments', () => {
    const git = (method: string, path: string) => decide(p, { host: 'git.example.com', port: 443, method, path }).allowed;
    expect(git('GET', '/repos/acme')).toBe(true);
    expect(git('get', '/repos/acme/x?y=1')).toBe(true);
    expect(git('POST', '/repos/acme')).toBe(false);
    expect(git('GET', '/repos/acmecorp')).toBe(false);
    expect(git('GET', '/repos/acme/../other')).toBe(false);
    expect(git('GET', '/repos/acme/%2e%2e/other')).toBe(false);
    expect(git('GET', '/repos/acme\\..\\other')).toBe(false);
    expect(decide(p, { host: 'files.example.com', port: 443, method: 'PUT', path: '/public/a' }).allowed).toBe(true);
    // Before the request is known (CONNECT), a method- or path-restricted rule may still allow; the request is judged later.
    expect(decide(p, { host: 'git.example.com', port: 443 }).allowed).toBe(true);
  });

  it('fails closed on nonsense', () => {
    expect(decide(p, { host: 'not a host', port: 443 }).allowed).toBe(false);
    expect(decide(p, { host: 'api.github.com', port: 0 }).allowed).toBe(false);
    expect(decide(p, { host: 'api.github.com', port: Number.NaN }).allowed).toBe(false);
    expect(decide(null as unknown as Policy, { host: 'api.github.com', port: 443 })).toEqual({ allowed: false, reason: 'policy error' });
    expect(decide(parsePolicy({}), { host: 'api.github.com', port: 443 }).allowed).toBe(false);
  });

  it('refuses encoded slashes, backslashes, empty and dot segments wherever a rule with a path applies to the host', () => {
    const q = parsePolicy({ allow: ['api.github.com GET /repos/acme', 'other.example.com'], deny: ['api.github.com /repos/acme/admin'] });
    const at = (path: string, host = 'api.github.com') => decide(q, { host, port: 443, method: 'GET', path });
    expect(at('/repos/acme/x').allowed).toBe(true);
    expect(at('/repos/acme/%78').allowed).toBe(true);
    for (const sneaky of [
      '/repos/acme/%2e%2e%2Fadmin',
      '/repos/acme/..%2fadmin',
      '/repos/acme%2F..%2Fother',
      '/repos/acme/..%5cadmin',
      '/repos/acme\\..\\other',
      '/repos/acme/%2e%2e/other',
      '/repos/acme/.%2e/other',
      '/repos/acme/%252e%252e/other',
      '/repos/acme/..;/other',
      '/repos/acme/./admin',
      '/repos/acme//admin',
      '//repos/acme/x',
      '/repos/acme/%zz',
    ]) {
      const d = at(sneaky);
      expect(d.allowed, sneaky).toBe(false);
      expect(d.reason, sneaky).toMatch(/ambiguous path/);
    }
    // An escaped unreserved letter is that letter: the deny rule still applies.
    expect(at('/repos/acme/%61dmin')).toMatchObject({ allowed: false, reason: 'denied by rule' });
    // A host no rule with a path applies to: the path is not the policy's business.
    expect(at('/a%2Fb', 'other.example.com').allowed).toBe(true);
  });
});

describe('paths', () => {
  it.each([
    ['/a/b', '/a/b', undefined],
    ['/a/./b', '/a/b', 'dot segment'],
    ['/a/%2E%2E/b', '/b', 'dot segment'],
    ['/a%2fb', '/a%2Fb', 'encoded slash'],
    ['/a%5Cb', '/a%5Cb', 'encoded backslash'],
    ['/a\\b', '/a/b', 'backslash'],
    ['/%61%7e%2d', '/a~-', undefined],
    ['/a%20b', '/a%20b', undefined],
    ['/a/b/', '/a/b/', undefined],
    ['//x/y', '//x/y', 'empty segment'],
  ])('%s reads as %s (ambiguous: %s)', (raw, path, ambiguous) => {
    const r = inspectPath(raw);
    expect(r.path).toBe(path);
    if (ambiguous === undefined) expect(r.ambiguous).toBeUndefined();
    else expect(r.ambiguous).toContain(ambiguous);
  });
});

describe('addresses', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.1.2', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'metadata'],
    ['169.254.1.1', 'link-local'],
    ['100.64.0.1', 'CGNAT'],
    ['100.100.100.200', 'metadata'],
    ['0.0.0.0', 'this-network'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.0.8', 'IETF'],
    ['192.0.2.1', 'documentation'],
    ['198.51.100.1', 'documentation'],
    ['203.0.113.1', 'documentation'],
    ['198.18.0.1', 'benchmarking'],
    ['192.88.99.1', '6to4 relay'],
    ['100.127.255.255', 'CGNAT'],
    ['0.1.2.3', 'this-network'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['::7f00:1', 'IPv4-compatible'],
    ['::8.8.8.8', 'IPv4-compatible'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:169.254.169.254', 'metadata'],
    ['64:ff9b::7f00:1', 'loopback'],
    ['64:ff9b:1::808:808', 'local-use NAT64'],
    ['2001::1', 'Teredo'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'Teredo'],
    ['2001:2::1', 'IETF'],
    ['2001:10::1', 'IETF'],
    ['2001:db8::1', 'documentation'],
    ['2002:808:808::1', '6to4'],
    ['2002:7f00:1::1', '6to4'],
    ['3fff::1', 'documentation'],
    ['100::1', 'discard'],
    ['fec0::1', 'site-local'],
    ['febf::1', 'link-local'],
    ['ff05::1:3', 'multicast'],
    ['4000::1', 'not global unicast'],
    ['1::1', 'not global unicast'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['64:ff9b::a9fe:a9fe', 'metadata'],
    ['2002:0a00:0001::1', '6to4'],
    ['fd00:ec2::254', 'metadata'],
    ['fc00::1', 'unique-local'],
    ['fe80::1', 'link-local'],
    ['ff02::1', 'multicast'],
  ])('%s is internal (%s)', (ip, what) => {
    expect(internalRange(ip)).toContain(what);
  });

  it.each([
    '93.184.216.34',
    '8.8.8.8',
    '172.32.0.1',
    '100.128.0.1',
    '2606:4700::1111',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
    '2001:200::1',
    '2a00:1450::1',
    '3ffe::1',
  ])('%s is public', (ip) => {
    expect(internalRange(ip)).toBeUndefined();
  });

  it('only the operator list opens an internal ip:port, and the node’s own addresses are refused even when public', () => {
    const v = { privateAllow: new Set(parsePrivateAllow('10.1.2.3:5432, [::1]:8080')), nodeAddresses: new Set(['93.184.216.34', '127.0.0.1']) };
    expect(vetAddress('10.1.2.3', 5432, v)).toBeUndefined();
    expect(vetAddress('10.1.2.3', 5433, v)).toContain('private');
    expect(vetAddress('0:0:0:0:0:0:0:1', 8080, v)).toBeUndefined();
    expect(vetAddress('::ffff:10.1.2.3', 5432, v)).toContain('private');
    expect(vetAddress('93.184.216.34', 443, v)).toContain("node's own address");
    expect(vetAddress('127.0.0.1', 7071, v)).toContain('loopback');
    expect(vetAddress('8.8.8.8', 443, v)).toBeUndefined();
    expect(vetAddress('not-an-ip', 443, v)).toBe('not an IP address');
    for (const bad of ['10.1.2.3', 'db.internal:5432', '10.0.0.0/8:5432', '10.1.2.3:*', '::1:8080'])
      expect(() => parsePrivateAllow(bad), bad).toThrow(/SANDGLASS_EGRESS_PRIVATE_ALLOW/);
  });

  it.each(['2130706433', '0177.0.0.1', '0x7f.1', '0x7f000001', '127.1', '127.0.1', '017700000001', '127.0.0.1.', '0x7f.0.0.1', '1.2.3.04'])(
    'refuses the IPv4 spelling %s as a host at all (only dotted quads are addresses)',
    (spelling) => {
      expect(canonicalHost(spelling)).toBeUndefined();
      expect(decide(parsePolicy({ allow: ['api.github.com'] }), { host: spelling, port: 80 })).toMatchObject({
        allowed: false,
        reason: 'not a valid host name or IP address',
      });
    },
  );

  it('parses CONNECT targets strictly', () => {
    expect(parseHostPort('api.example.com:443')).toEqual({ host: { kind: 'name', host: 'api.example.com' }, port: 443 });
    expect(parseHostPort('[::1]:8080')).toEqual({ host: { kind: 'ipv6', host: '::1' }, port: 8080 });
    for (const bad of [
      'api.example.com',
      'api.example.com:',
      'api.example.com:0',
      'api.example.com:65536',
      ':443',
      'bad_host!:443',
      '[::1]',
      '::1:443',
      'a b:443',
      '127.1:80',
    ]) {
      expect(parseHostPort(bad), bad).toBeUndefined();
    }
    expect(canonicalHost('fe80::1%eth0')).toBeUndefined();
  });
});
