// Policy grammar, refusal of broad or malformed rules, the fail-closed decision, and internal address ranges.
import { describe, expect, it } from 'vitest';
import { SandglassError } from '@sandglass/core';
import { canonicalHost, internalRange, parseHostPort } from './address.js';
import { allowsInternalAddress, decide, parsePolicy, type Policy } from './policy.js';

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
      allow: ['API.GitHub.com.', '*.pypi.org', 'example.com:8443', 'api.github.com GET /repos/', 'api.github.com/gists POST', '10.0.0.5:5432', '[::1]:8080', '::1', '127.0.0.1:*'],
      deny: ['*', '*.com', 'evil.example.com'],
    });
    expect(p.toJSON()).toEqual({
      allow: ['api.github.com', '*.pypi.org', 'example.com:8443', 'api.github.com GET /repos', 'api.github.com POST /gists', '10.0.0.5:5432', '[::1]:8080', '[::1]', '127.0.0.1:*'],
      deny: ['*:*', '*.com:*', 'evil.example.com:*'],
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
    ['api.example.com /a/../b', 'dot segments'],
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
    allow: ['api.github.com', '*.pypi.org', 'example.com:8443', 'git.example.com GET /repos/acme', 'files.example.com /public', '10.0.0.5:5432'],
    deny: ['evil.pypi.org', 'git.example.com /repos/acme/secret'],
  });

  it('allows what a rule names, on the default ports 80 and 443 unless a port is given', () => {
    expect(decide(p, { host: 'api.github.com', port: 443 })).toEqual({ allowed: true, rule: 'api.github.com', reason: 'allowed by rule' });
    expect(decide(p, { host: 'API.GITHUB.COM.', port: 80 }).allowed).toBe(true);
    expect(decide(p, { host: 'api.github.com', port: 8443 })).toEqual({ allowed: false, reason: 'no rule allows' });
    expect(decide(p, { host: 'example.com', port: 8443 }).allowed).toBe(true);
    expect(decide(p, { host: 'example.com', port: 443 }).allowed).toBe(false);
    expect(decide(p, { host: '10.0.0.5', port: 5432 }).allowed).toBe(true);
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

  it('admits an internal address only through a rule naming that IP (and port), unless denied', () => {
    const q = parsePolicy({ allow: ['127.0.0.1:8080', '*.example.com', '[::1]:*'], deny: ['10.1.1.1:*'] });
    expect(allowsInternalAddress(q, '127.0.0.1', 8080)).toEqual({ rule: '127.0.0.1:8080' });
    expect(allowsInternalAddress(q, '127.0.0.1', 8081)).toBeUndefined();
    expect(allowsInternalAddress(q, '0:0:0:0:0:0:0:1', 9)).toEqual({ rule: '[::1]:*' });
    expect(allowsInternalAddress(q, '10.1.1.1', 80)).toBeUndefined();
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
    ['255.255.255.255', 'reserved'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['64:ff9b::a9fe:a9fe', 'link-local'],
    ['2002:0a00:0001::1', 'private'],
    ['fd00:ec2::254', 'metadata'],
    ['fc00::1', 'unique-local'],
    ['fe80::1', 'link-local'],
    ['ff02::1', 'multicast'],
  ])('%s is internal (%s)', (ip, what) => {
    expect(internalRange(ip)).toContain(what);
  });

  it.each(['93.184.216.34', '8.8.8.8', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '::ffff:8.8.8.8'])('%s is public', (ip) => {
    expect(internalRange(ip)).toBeUndefined();
  });

  it('parses CONNECT targets strictly', () => {
    expect(parseHostPort('api.example.com:443')).toEqual({ host: { kind: 'name', host: 'api.example.com' }, port: 443 });
    expect(parseHostPort('[::1]:8080')).toEqual({ host: { kind: 'ipv6', host: '::1' }, port: 8080 });
    for (const bad of ['api.example.com', 'api.example.com:', 'api.example.com:0', 'api.example.com:65536', ':443', 'bad_host!:443', '[::1]', '::1:443', 'a b:443', '127.1:80']) {
      expect(parseHostPort(bad), bad).toBeUndefined();
    }
    expect(canonicalHost('fe80::1%eth0')).toBeUndefined();
  });
});
