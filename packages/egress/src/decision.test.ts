// The egress decision without sockets: what proxy.test.ts proves through real connections, judged from the facts alone.
import { describe, expect, it } from 'vitest';
import { ManualClock, Redacted } from '@sandglass/core';
import { canonicalHost, parsePrivateAllow } from './address.js';
import { ApprovalBroker } from './approvals.js';
import {
  decideConnect,
  decideRequest,
  type AddressFacts,
  type ApprovalFact,
  type Need,
  type RequestDecision,
  type RequestFacts,
  type TunnelFacts,
} from './decision.js';
import { Policy, parsePolicy, type PolicyInput } from './policy.js';
import { compileSecret, newPlaceholder, type CompiledSecret, type SecretConfig, type UnusableSecret } from './secrets.js';
import type { HeaderPairs } from './wire.js';

const VALUE = 'sk_live_T0p+Secret/Value=42&more';
const PH = newPlaceholder();
const PH2 = newPlaceholder();
const PUBLIC = '93.184.216.34';
const DNS: Record<string, string[]> = {
  'api.example.test': [PUBLIC],
  'other.example.test': ['93.184.216.35'],
  'internal.example.test': ['127.0.0.1'],
  'private.example.test': ['10.1.2.3'],
  'meta.example.test': ['169.254.169.254'],
  'mixed.example.test': [PUBLIC, '127.0.0.1'],
  'mapped.example.test': ['::ffff:127.0.0.1'],
  'odd.example.test': ['not-an-ip'],
};
const OPEN: PolicyInput = { allow: ['api.example.test:*', 'other.example.test:*'] };

function host(name: string) {
  return canonicalHost(name)!;
}

function tunnel(name: string, port: number, tls = true): TunnelFacts {
  return { host: host(name), port, tls, addresses: DNS[name] ?? [name] };
}

function secret(cfg: Partial<SecretConfig> = {}, name = 'secret0', placeholder = PH): CompiledSecret {
  return compileSecret({ name, placeholder }, { hosts: ['api.example.test:*'], approval: 'none', value: async () => new Redacted(VALUE), ...cfg });
}

/** Facts of a request through an HTTPS tunnel to api.example.test:443 unless overridden. */
function facts(over: Partial<Omit<RequestFacts, 'policy'>> & { policy?: PolicyInput | Policy } = {}): RequestFacts {
  const { policy = OPEN, ...rest } = over;
  return {
    policy: policy instanceof Policy ? policy : parsePolicy(policy),
    privateAllow: new Set(),
    tunnel: tunnel('api.example.test', 443),
    url: '/echo',
    method: 'GET',
    headers: [['Host', 'api.example.test']],
    hasBody: false,
    upgrade: false,
    ...rest,
  };
}

interface Supply {
  nodeAddresses?: ReadonlySet<string> | undefined;
  secrets?: (CompiledSecret | UnusableSecret)[];
  body?: Buffer;
  approvals?: Record<string, ApprovalFact>;
  values?: Record<string, string>;
}

/**
 * Answers what the decision asks for, as the proxy would (DNS from the table above), until it allows or refuses;
 * returns the final decision and every fact it asked for, in order.
 */
function run(f: RequestFacts, s: Supply = {}): { d: Exclude<RequestDecision, { verdict: 'need' }>; asked: Need['fact'][] } {
  const asked: Need['fact'][] = [];
  const approvals = new Map<string, ApprovalFact>();
  const values = new Map<string, string>();
  const all: RequestFacts = { ...f, approvals, values };
  for (;;) {
    const d = decideRequest(all);
    if (d.verdict !== 'need') return { d, asked };
    asked.push(d.need.fact);
    const n = d.need;
    switch (n.fact) {
      case 'addresses':
        all.addresses = addressFacts(n.dest, s);
        break;
      case 'secrets':
        all.secrets = s.secrets ?? [];
        break;
      case 'body':
        all.body = s.body ?? Buffer.alloc(0);
        break;
      case 'approval':
        approvals.set(n.secret, s.approvals?.[n.secret] ?? { result: 'timeout', requestId: 'apr_test' });
        break;
      case 'value':
        values.set(n.secret.name, s.values?.[n.secret.name] ?? VALUE);
        break;
    }
  }
}

function addressFacts(dest: { host: { kind: string; host: string }; pinned?: readonly string[] }, s: Supply = {}): AddressFacts {
  const answers = dest.pinned ?? (dest.host.kind === 'name' ? (DNS[dest.host.host] ?? []) : [dest.host.host]);
  return { answers, nodeAddresses: 'nodeAddresses' in s ? s.nodeAddresses : new Set(['192.0.2.10']) };
}

function refusalOf(r: ReturnType<typeof run>) {
  if (r.d.verdict !== 'refuse') throw new Error(`expected a refusal, got ${r.d.verdict}`);
  return r.d.refusal;
}

function allowedOf(r: ReturnType<typeof run>) {
  if (r.d.verdict !== 'allow') throw new Error(`expected an allow, got ${r.d.verdict}: ${r.d.verdict === 'refuse' ? r.d.refusal.reason : ''}`);
  return r.d.allowed;
}

describe('policy', () => {
  it('allows what a rule allows, reports the rule, and asks for nothing a refusal would not need', () => {
    const ok = run(facts());
    expect(allowedOf(ok)).toMatchObject({ dest: { host: { host: 'api.example.test' }, port: 443, scheme: 'https' }, addresses: [PUBLIC], target: '/echo' });
    expect(ok.d.account).toEqual({
      host: 'api.example.test',
      port: 443,
      scheme: 'https',
      path: '/echo',
      rule: 'api.example.test:*',
      reason: 'allowed by rule',
      secrets: [],
    });
    expect(ok.asked).toEqual(['addresses', 'secrets']);
    const none = run(facts({ policy: { allow: ['other.example.test'] } }));
    expect(refusalOf(none)).toMatchObject({
      code: 'egress_denied',
      reason: 'no rule allows',
      details: { host: 'api.example.test', port: 443, reason: 'no rule allows' },
    });
    expect(refusalOf(none).message).toContain('GET api.example.test:443/echo');
    // Refused on policy: no DNS, no secret store, no approval.
    expect(none.asked).toEqual([]);
  });

  it('lets deny win over allow, and names the denying rule', () => {
    const r = run(facts({ policy: { allow: ['api.example.test:*'], deny: ['api.example.test GET /echo'] } }));
    expect(refusalOf(r)).toMatchObject({ code: 'egress_denied', reason: 'denied by rule', details: { rule: 'api.example.test:* GET /echo' } });
    expect(r.d.account.rule).toBe('api.example.test:* GET /echo');
    expect(allowedOf(run(facts({ policy: { allow: ['api.example.test:*'], deny: ['api.example.test GET /echo'] }, method: 'POST' })))).toBeDefined();
  });

  it('judges the path the upstream will see, and refuses encoded or ambiguous paths where a path rule applies', () => {
    const policy = { allow: ['api.example.test:* GET /echo'] };
    // Dot segments are resolved before judging, and what is sent is what was judged.
    const resolved = run(facts({ url: '/x/./y/../echo?q=1' }));
    expect(allowedOf(resolved).target).toBe('/x/echo?q=1');
    expect(resolved.d.account.path).toBe('/x/echo');
    expect(allowedOf(run(facts({ policy, url: '/%65cho' }))).target).toBe('/%65cho');
    expect(refusalOf(run(facts({ policy, url: '/echoes' }))).reason).toBe('no rule allows');
    for (const [sneaky, why] of [
      ['/echo/../admin', 'a dot segment'],
      ['/echo/%2e%2e/admin', 'a dot segment'],
      ['/echo\\..\\admin', 'a backslash'],
      ['/echo/%2e%2e%2Fadmin', 'an encoded slash'],
      ['/echo%2f..%2fadmin', 'an encoded slash'],
      ['/echo/..%5cadmin', 'an encoded backslash'],
      ['/echo/%252e%252e/admin', 'a dot segment'],
      ['/echo/..;/admin', 'a dot segment'],
      ['/echo/./x/../y', 'a dot segment'],
      ['//echo/../admin', 'an empty segment (//)'],
      ['/echo//x', 'an empty segment (//)'],
    ]) {
      const r = run(facts({ policy, url: sneaky! }));
      expect(refusalOf(r), sneaky).toMatchObject({
        code: 'egress_denied',
        reason: `ambiguous path (${why})`,
        details: { rule: 'api.example.test:* GET /echo' },
      });
      expect(r.asked, sneaky).toEqual([]);
    }
    expect(refusalOf(run(facts({ policy, method: 'POST' }))).reason).toBe('no rule allows');
    // A host without path rules takes such paths (GitLab-style %2F ids).
    expect(allowedOf(run(facts({ url: '/projects/a%2Fb' }))).target).toBe('/projects/a%2Fb');
  });

  it('refuses a CONNECT the policy does not allow before asking for its addresses', () => {
    const policy = parsePolicy({ allow: ['api.example.test:*'], deny: ['other.example.test'] });
    const no = decideConnect({ policy, privateAllow: new Set(), target: { host: host('nowhere.example.test'), port: 443 } });
    expect(no).toMatchObject({
      verdict: 'refuse',
      refusal: { code: 'egress_denied', details: { host: 'nowhere.example.test', port: 443, reason: 'no rule allows' } },
    });
    expect(no.verdict === 'refuse' && no.refusal.message).toContain('nowhere.example.test:443');
    expect(decideConnect({ policy, privateAllow: new Set(), target: { host: host('other.example.test'), port: 8443 } })).toMatchObject({
      verdict: 'refuse',
      refusal: { reason: 'denied by rule', details: { rule: 'other.example.test:*' } },
    });
    const target = { host: host('api.example.test'), port: 443 };
    expect(decideConnect({ policy, privateAllow: new Set(), target })).toMatchObject({ verdict: 'need', need: { fact: 'addresses' } });
    expect(decideConnect({ policy, privateAllow: new Set(), target, addresses: addressFacts(target) })).toMatchObject({
      verdict: 'allow',
      addresses: [PUBLIC],
      account: { rule: 'api.example.test:*', reason: 'allowed by rule' },
    });
  });
});

describe('destinations', () => {
  const hosts = ['internal.example.test', 'private.example.test', 'meta.example.test', 'mixed.example.test', 'mapped.example.test'];

  it('refuses loopback, private, metadata, mapped and mixed answers whatever the policy', () => {
    const policy = parsePolicy({ allow: hosts.map((h) => `${h}:*`) });
    for (const h of hosts) {
      const target = { host: host(h), port: 8080 };
      const c = decideConnect({ policy, privateAllow: new Set(), target, addresses: addressFacts(target) });
      expect(c, h).toMatchObject({ verdict: 'refuse', refusal: { code: 'egress_denied', reason: 'internal address', details: { rule: `${h}:*` } } });
      const p = run(facts({ policy, tunnel: undefined, url: `http://${h}:8080/`, headers: [['host', `${h}:8080`]] }));
      expect(refusalOf(p), h).toMatchObject({ reason: 'internal address' });
      expect(p.asked, h).toEqual(['addresses']);
    }
    const meta = decideConnect({
      policy,
      privateAllow: new Set(),
      target: { host: host('meta.example.test'), port: 80 },
      addresses: addressFacts({ host: host('meta.example.test') }),
    });
    expect(meta.verdict === 'refuse' && meta.refusal.message).toContain('cloud metadata');
    // The tunnel's pinned addresses are vetted again on every request inside it.
    expect(refusalOf(run(facts({ policy, tunnel: tunnel('mixed.example.test', 443), headers: [['host', 'mixed.example.test']] }))).details).toMatchObject({
      address: '127.0.0.1',
    });
  });

  it('refuses an answer that is not an address, and every destination when the node addresses cannot be listed', () => {
    const policy = parsePolicy({ allow: ['odd.example.test:*', 'api.example.test:*'] });
    const target = { host: host('odd.example.test'), port: 443 };
    expect(decideConnect({ policy, privateAllow: new Set(), target, addresses: addressFacts(target) })).toMatchObject({
      verdict: 'refuse',
      refusal: { reason: 'resolver returned a non-address' },
    });
    const api = { host: host('api.example.test'), port: 443 };
    expect(decideConnect({ policy, privateAllow: new Set(), target: api, addresses: { answers: [PUBLIC], nodeAddresses: undefined } })).toMatchObject({
      verdict: 'refuse',
      refusal: { reason: 'internal address', message: expect.stringContaining('could not be listed') },
    });
  });

  it("refuses the node's own addresses even when they are public", () => {
    const policy = parsePolicy({ allow: ['public.example.test:*', `${PUBLIC}:*`] });
    for (const target of [
      { host: host('public.example.test'), port: 443 },
      { host: host(PUBLIC), port: 7071 },
    ]) {
      const d = decideConnect({ policy, privateAllow: new Set(), target, addresses: { answers: [PUBLIC], nodeAddresses: new Set([PUBLIC]) } });
      expect(d, target.host.host).toMatchObject({
        verdict: 'refuse',
        refusal: { reason: 'internal address', details: { range: `this node's own address (${PUBLIC})` } },
      });
    }
  });

  it("opens exactly the operator's ip:port, and only where the policy allows the destination", () => {
    const policy = parsePolicy({ allow: ['internal.example.test:*'] });
    const privateAllow = new Set(parsePrivateAllow('127.0.0.1:8080'));
    const at = (port: number) =>
      run(
        facts({
          policy,
          privateAllow,
          tunnel: undefined,
          url: `http://internal.example.test:${port}/echo`,
          headers: [['host', `internal.example.test:${port}`]],
        }),
      );
    expect(allowedOf(at(8080)).addresses).toEqual(['127.0.0.1']);
    expect(refusalOf(at(8081))).toMatchObject({ reason: 'internal address', details: { address: '127.0.0.1' } });
    // The operator's opening is no allow rule.
    expect(
      refusalOf(run(facts({ privateAllow, tunnel: undefined, url: 'http://internal.example.test:8080/', headers: [['host', 'internal.example.test:8080']] })))
        .reason,
    ).toBe('no rule allows');
  });
});

describe('targets and Host', () => {
  it('refuses a Host header that differs from the CONNECT target, and an absolute target naming another host', () => {
    const host = run(facts({ headers: [['Host', 'other.example.test']] }));
    expect(refusalOf(host)).toMatchObject({ code: 'egress_denied', reason: 'Host header does not match the target', details: { host: 'api.example.test' } });
    expect(host.asked).toEqual([]);
    expect(refusalOf(run(facts({ headers: [['Host', 'api.example.test:8443']] }))).reason).toBe('Host header does not match the target');
    const abs = run(facts({ url: 'https://other.example.test/echo', headers: [['Host', 'other.example.test']] }));
    expect(refusalOf(abs)).toMatchObject({ reason: 'target does not match the CONNECT target' });
    // The same host and port in absolute form is fine: the tunnel's target decides.
    expect(allowedOf(run(facts({ url: 'https://api.example.test/echo?x' }))).target).toBe('/echo?x');
    expect(refusalOf(run(facts({ headers: [] })))).toMatchObject({ code: 'invalid_argument', details: { field: 'host' } });
    expect(
      refusalOf(
        run(
          facts({
            headers: [
              ['host', 'api.example.test'],
              ['host', 'api.example.test'],
            ],
          }),
        ),
      ).code,
    ).toBe('invalid_argument');
  });

  it('takes plain requests only in absolute http:// form, to a host and port that match their Host', () => {
    const plain = (url: string, h: string) => run(facts({ tunnel: undefined, url, headers: [['host', h]] }));
    expect(allowedOf(plain('http://api.example.test:8080/x', 'api.example.test:8080')).dest).toMatchObject({ port: 8080, scheme: 'http' });
    expect(allowedOf(plain('http://api.example.test', 'api.example.test')).target).toBe('/');
    expect(refusalOf(plain('http://api.example.test:8080/x', 'other.example.test')).reason).toBe('Host header does not match the target');
    for (const [url, rule] of [
      ['/x', 'absolute-form http:// URI or CONNECT'],
      ['https://api.example.test/x', 'http:// (https through CONNECT)'],
      ['http://user@api.example.test/x', 'no userinfo'],
      ['http://0x7f.1:8080/', 'host[:port], port 1-65535'],
      ['http://2130706433:8080/', 'host[:port], port 1-65535'],
    ]) {
      const r = plain(url!, 'api.example.test');
      expect(refusalOf(r), url).toMatchObject({ code: 'invalid_argument', details: { field: 'target', rule } });
      expect(r.d.account.reason, url).toBe(refusalOf(r).message);
    }
    expect(refusalOf(run(facts({ url: 'echo' }))).details).toEqual({ field: 'target', rule: 'origin-form' });
  });
});

describe('secret scope', () => {
  const headerUse = (over: Partial<RequestFacts> = {}, cfg: Partial<SecretConfig> = {}) =>
    run(
      facts({
        headers: [
          ['Host', 'api.example.test'],
          ['x-api-key', PH],
        ],
        ...over,
      }),
      { secrets: [secret(cfg)] },
    );

  it('substitutes a placeholder for its scoped host, found in headers, the URL and Basic credentials', () => {
    const r = run(
      facts({
        url: `/echo?key=${PH}`,
        headers: [
          ['Host', 'api.example.test'],
          ['authorization', `Basic ${Buffer.from(`git:${PH2}`).toString('base64')}`],
        ],
      }),
      { secrets: [secret(), secret({}, 'secret1', PH2)] },
    );
    const a = allowedOf(r);
    expect([...a.used.values()].map((u) => [u.secret.binding.name, u.inHead, u.inBody])).toEqual([
      ['secret1', true, false],
      ['secret0', true, false],
    ]);
    expect(r.d.account.secrets).toEqual(['secret1', 'secret0']);
    expect(r.asked).toEqual(['addresses', 'secrets', 'value', 'value']);
  });

  it('blocks a placeholder bound for another host (header, URL or scanned body) and names where it was', () => {
    const other = { tunnel: tunnel('other.example.test', 443), headers: [['Host', 'other.example.test']] as HeaderPairs };
    const s = [secret({ bodyContentTypes: ['application/json'] })];
    const h = run(facts({ ...other, headers: [...other.headers, ['x-api-key', PH]] }), { secrets: s });
    expect(refusalOf(h)).toMatchObject({
      code: 'egress_secret_scope',
      reason: 'secret placeholder outside its scope',
      details: { host: 'other.example.test', secrets: ['secret0'], reason: 'not scoped to this host and port' },
      strays: [{ secret: 'secret0', where: 'header', reason: 'not scoped to this host and port' }],
    });
    expect(h.asked).not.toContain('value');
    expect(refusalOf(run(facts({ ...other, url: `/?k=${PH}` }), { secrets: s })).strays).toMatchObject([{ where: 'url' }]);
    const body = run(facts({ ...other, method: 'POST', hasBody: true, contentType: 'application/json; charset=utf-8' }), {
      secrets: s,
      body: Buffer.from(JSON.stringify({ token: PH })),
    });
    expect(refusalOf(body).strays).toMatchObject([{ where: 'body' }]);
    expect(body.asked).toEqual(['addresses', 'secrets', 'body']);
  });

  it('scopes a secret without a port to 443, and one with a port to that port', () => {
    expect(allowedOf(headerUse({}, { hosts: ['api.example.test'] })).used.size).toBe(1);
    expect(
      refusalOf(
        headerUse(
          {
            tunnel: tunnel('api.example.test', 8443),
            headers: [
              ['Host', 'api.example.test:8443'],
              ['x-api-key', PH],
            ],
          },
          { hosts: ['api.example.test'] },
        ),
      ),
    ).toMatchObject({ details: { reason: 'not scoped to this host and port' } });
    expect(
      allowedOf(
        headerUse(
          {
            tunnel: tunnel('api.example.test', 8443),
            headers: [
              ['Host', 'api.example.test:8443'],
              ['x-api-key', PH],
            ],
          },
          { hosts: ['api.example.test:8443'] },
        ),
      ).used.size,
    ).toBe(1);
    expect(refusalOf(headerUse({}, { hosts: ['api.example.test:8443'] })).details).toMatchObject({ reason: 'not scoped to this host and port' });
  });

  it('substitutes only into requests that go upstream over TLS unless the secret allows plaintext', () => {
    const plainTunnel = {
      tunnel: tunnel('api.example.test', 8080, false),
      headers: [
        ['Host', 'api.example.test:8080'],
        ['x-api-key', PH],
      ] as HeaderPairs,
    };
    const absolute = {
      tunnel: undefined,
      url: 'http://api.example.test:8080/echo',
      headers: [
        ['host', 'api.example.test:8080'],
        ['x-api-key', PH],
      ] as HeaderPairs,
    };
    for (const over of [plainTunnel, absolute]) {
      expect(refusalOf(headerUse(over))).toMatchObject({
        code: 'egress_secret_scope',
        details: { reason: 'the request goes upstream in clear text and the secret does not allow plaintext' },
      });
      expect(allowedOf(headerUse(over, { allowPlaintext: true })).used.size).toBe(1);
    }
    // A configured header is simply not added in clear text.
    const injected = run(facts({ tunnel: undefined, url: 'http://api.example.test:8080/echo', headers: [['host', 'api.example.test:8080']] }), {
      secrets: [secret({ header: 'x-injected' })],
    });
    expect(allowedOf(injected).used.size).toBe(0);
    expect(allowedOf(run(facts(), { secrets: [secret({ header: 'x-injected' })] })).used.size).toBe(1);
  });

  it('refuses secrets on protocol upgrades unless the secret allows them, and adds no configured header to one', () => {
    const upgrade = {
      upgrade: true,
      headers: [
        ['Host', 'api.example.test'],
        ['connection', 'Upgrade'],
        ['upgrade', 'echo'],
        ['x-api-key', PH],
      ] as HeaderPairs,
    };
    expect(refusalOf(headerUse(upgrade))).toMatchObject({
      details: { reason: 'the request asks for a protocol upgrade and the secret does not allow upgrades' },
    });
    const ok = allowedOf(headerUse(upgrade, { allowUpgrade: true }));
    expect(ok.used.size).toBe(1);
    // The Upgrade header is kept for an upgrade, dropped (hop-by-hop) otherwise.
    expect(ok.headers.map(([k]) => k)).toContain('upgrade');
    expect(allowedOf(run(facts({ headers: upgrade.headers.slice(0, 3) }))).headers.map(([k]) => k)).not.toContain('upgrade');
    expect(allowedOf(run(facts({ upgrade: true, headers: upgrade.headers.slice(0, 3) }), { secrets: [secret({ header: 'x-injected' })] })).used.size).toBe(0);
  });

  it('blocks the placeholder of a secret that cannot be used now, everywhere', () => {
    const gone: UnusableSecret = { binding: { name: 'gone', placeholder: PH }, unusable: 'the secret no longer exists' };
    expect(
      refusalOf(
        run(
          facts({
            headers: [
              ['Host', 'api.example.test'],
              ['x-api-key', PH],
            ],
          }),
          { secrets: [gone] },
        ),
      ).details,
    ).toMatchObject({
      secrets: ['gone'],
      reason: 'the secret no longer exists',
    });
    expect(allowedOf(run(facts(), { secrets: [gone] })).used.size).toBe(0);
  });

  it('reads bodies only of declared types, and refuses such a body when it is compressed', () => {
    const json = { method: 'POST', hasBody: true, contentType: 'application/json' };
    const s = [secret({ bodyContentTypes: ['application/json'] })];
    const r = run(facts(json), { secrets: s, body: Buffer.from(JSON.stringify({ token: PH })) });
    expect([...allowedOf(r).used.values()][0]).toMatchObject({ inBody: true, inHead: false });
    expect(r.asked).toEqual(['addresses', 'secrets', 'body', 'value']);
    const text = run(facts({ ...json, contentType: 'text/plain' }), { secrets: s });
    expect(text.asked).not.toContain('body');
    const gz = run(facts({ ...json, contentEncoding: 'gzip' }), { secrets: s });
    expect(refusalOf(gz)).toMatchObject({ code: 'egress_denied', reason: 'compressed body cannot be scanned' });
    expect(gz.asked).toEqual(['addresses', 'secrets']);
  });

  it('refuses a value too short to mask, or one with control characters bound for a header', () => {
    expect(
      refusalOf(
        run(
          facts({
            headers: [
              ['Host', 'api.example.test'],
              ['x', PH],
            ],
          }),
          { secrets: [secret()], values: { secret0: 'abc' } },
        ),
      ).reason,
    ).toBe('secret value too short');
    expect(
      refusalOf(
        run(
          facts({
            headers: [
              ['Host', 'api.example.test'],
              ['x', PH],
            ],
          }),
          { secrets: [secret()], values: { secret0: 'ab\ncd' } },
        ),
      ).reason,
    ).toBe('secret value cannot be sent in a header');
  });
});

describe('approvals', () => {
  const needsApproval = [secret({ approval: 'required', header: 'x-token' })];

  it('asks for approval only once the scope allows, and reads the value only after approval', () => {
    const approved = run(facts(), { secrets: needsApproval, approvals: { secret0: { result: 'approved', requestId: 'apr_1' } } });
    expect(allowedOf(approved).used.size).toBe(1);
    expect(approved.asked).toEqual(['addresses', 'secrets', 'approval', 'value']);
    const denied = run(facts(), { secrets: needsApproval, approvals: { secret0: { result: 'denied', requestId: 'apr_2' } } });
    expect(refusalOf(denied)).toMatchObject({
      code: 'egress_approval_denied',
      reason: 'approval denied',
      details: { secret: 'secret0', decision: 'denied', requestId: 'apr_2' },
    });
    expect(denied.asked).not.toContain('value');
    const late = run(facts(), { secrets: needsApproval, approvals: { secret0: { result: 'timeout', requestId: 'apr_3' } } });
    expect(refusalOf(late)).toMatchObject({
      reason: 'approval timed out',
      details: { decision: 'timeout' },
      message: expect.stringContaining('none came in time'),
    });
    // Out of scope: blocked, and nobody is asked.
    expect(
      run(
        facts({
          tunnel: tunnel('other.example.test', 443),
          headers: [
            ['Host', 'other.example.test'],
            ['x', PH],
          ],
        }),
        { secrets: needsApproval },
      ).asked,
    ).not.toContain('approval');
  });

  it('lets a time-boxed approval from the broker cover the same secret until it expires', async () => {
    const clock = new ManualClock(1_000_000);
    const broker = new ApprovalBroker({ clock, timeoutMs: 60_000 });
    // The proxy's loop, with the broker answering the approval question.
    const decideWith = async (decision?: 'approve' | 'deny', ttlMs?: number) => {
      const approvals = new Map<string, ApprovalFact>();
      const f: RequestFacts = { ...facts(), secrets: needsApproval, approvals, values: new Map([['secret0', VALUE]]) };
      f.addresses = addressFacts({ host: host('api.example.test'), pinned: [PUBLIC] });
      for (;;) {
        const d = decideRequest(f);
        if (d.verdict !== 'need') return d;
        if (d.need.fact !== 'approval') throw new Error(`unexpected need ${d.need.fact}`);
        const asked = broker.request({ sandboxId: 'sbx_1', secret: d.need.secret, host: 'api.example.test', port: 443, method: 'GET', path: '/echo' });
        const pending = broker.pending('sbx_1')[0];
        if (pending && decision) broker.decide(pending.requestId, decision, ttlMs ? { ttlMs } : {});
        approvals.set(d.need.secret, { result: await asked });
      }
    };
    expect((await decideWith('approve', 60_000)).verdict).toBe('allow');
    for (let i = 0; i < 3; i++) expect((await decideWith()).verdict).toBe('allow');
    clock.advance(60_001);
    expect(await decideWith('deny')).toMatchObject({ verdict: 'refuse', refusal: { code: 'egress_approval_denied' } });
    // A single approval without a time box covers one request.
    expect((await decideWith('approve')).verdict).toBe('allow');
    expect(await decideWith('deny')).toMatchObject({ verdict: 'refuse' });
  });
});
