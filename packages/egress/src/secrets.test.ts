// Secret bindings: validation, placeholders, masking across chunk boundaries and redaction of encoded forms.
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { Redacted, SandglassError } from '@sandglass/core';
import { REDACTED, Redactor, ValueMask, checkBindings, compileSecret, inScope, newPlaceholder, type SecretBinding, type SecretConfig } from './secrets.js';

const config = (over: Partial<SecretConfig> = {}): SecretConfig => ({
  hosts: ['api.github.com'],
  approval: 'none',
  value: async () => new Redacted('v'),
  ...over,
});
const binding = (over: Partial<SecretBinding> = {}): SecretBinding => ({ name: 'gh', placeholder: newPlaceholder(), current: async () => config(), ...over });

describe('secret bindings', () => {
  it('makes long, distinct placeholders', () => {
    const a = newPlaceholder();
    expect(a).toMatch(/^sg_placeholder_[a-z2-7]{32}$/);
    expect(newPlaceholder()).not.toBe(a);
  });

  it.each([
    [{ name: '' }, 'secrets[0].name'],
    [{ placeholder: 'sg_placeholder_short' }, 'secrets[0].placeholder'],
    [{ current: undefined as unknown as SecretBinding['current'] }, 'secrets[0].current'],
  ])('refuses the binding %j naming %s', (over, field) => {
    try {
      checkBindings([binding(over)]);
      throw new Error('accepted');
    } catch (err) {
      expect(err).toBeInstanceOf(SandglassError);
      expect((err as SandglassError).details).toMatchObject({ field });
    }
  });

  it.each([
    [{ hosts: [] }, 's.hosts'],
    [{ hosts: ['*.com'] }, 's.hosts[0]'],
    [{ hosts: ['api.github.com GET /x'] }, 's.hosts[0]'],
    [{ hosts: ['127.0.0.1:8080'] }, 's.hosts[0]'],
    [{ header: 'Bad Header' }, 's.header'],
    [{ header: 'Host' }, 's.header'],
    [{ header: 'Authorization', format: 'Bearer' }, 's.format'],
    [{ format: 'Bearer {value}' }, 's.format'],
    [{ bodyContentTypes: ['json'] }, 's.bodyContentTypes[0]'],
    [{ approval: 'maybe' as 'none' }, 's.approval'],
    [{ allowPlaintext: 'yes' as unknown as boolean }, 's.allowPlaintext'],
  ])('refuses the configuration %j naming %s', (over, field) => {
    try {
      compileSecret({ name: 'gh', placeholder: newPlaceholder() }, config(over), 's');
      throw new Error('accepted');
    } catch (err) {
      expect(err).toBeInstanceOf(SandglassError);
      expect((err as SandglassError).details).toMatchObject({ field });
    }
  });

  it('refuses duplicate names and placeholders', () => {
    const p = newPlaceholder();
    expect(() => checkBindings([binding({ placeholder: p }), binding({ name: 'other', placeholder: p })])).toThrow(/placeholder/);
    expect(() => checkBindings([binding(), binding()])).toThrow(/not unique/);
  });

  it('scopes a host without a port to 443, and to verified TLS unless the secret allows plaintext', () => {
    const b = { name: 'gh', placeholder: newPlaceholder() };
    const host = { kind: 'name' as const, host: 'api.github.com' };
    const bare = compileSecret(b, config());
    expect(inScope(bare, host, 443, 'https')).toBe(true);
    expect(inScope(bare, host, 8443, 'https')).toBe(false);
    expect(inScope(bare, host, 443, 'http')).toBe(false);
    expect(inScope(bare, host, 80, 'http')).toBe(false);
    const plain = compileSecret(b, config({ hosts: ['api.github.com:80', 'api.github.com'], allowPlaintext: true }));
    expect(inScope(plain, host, 80, 'http')).toBe(true);
    expect(inScope(plain, host, 443, 'http')).toBe(true);
    expect(inScope(plain, host, 8080, 'http')).toBe(false);
    const any = compileSecret(b, config({ hosts: ['api.github.com:*'] }));
    expect(inScope(any, host, 8443, 'https')).toBe(true);
    expect(inScope(any, host, 8443, 'http')).toBe(false);
  });
});

describe('ValueMask', () => {
  it('masks a value split across chunks, keeping the length', async () => {
    const value = 'SECRET-VALUE-1234';
    const text = `aa${value}bb${value}`;
    const chunks = [text.slice(0, 5), text.slice(5, 9), text.slice(9, 25), text.slice(25)].map((s) => Buffer.from(s));
    const mask = new ValueMask([value]);
    const out: Buffer[] = [];
    for await (const c of Readable.from(chunks).pipe(mask)) out.push(c as Buffer);
    const joined = Buffer.concat(out).toString();
    expect(joined).toBe(`aa${'*'.repeat(value.length)}bb${'*'.repeat(value.length)}`);
    expect(mask.masked).toBe(2);
  });
});

describe('Redactor', () => {
  it('redacts values, their encodings (also inside longer base64) and placeholders', () => {
    const value = 'tok+en/=&x y';
    const ph = newPlaceholder();
    const r = new Redactor([value], [ph]);
    const basic = Buffer.from(`user:${value}`).toString('base64');
    const text = [value, encodeURIComponent(value), Buffer.from(value).toString('base64'), basic, JSON.stringify(value), ph].join(' | ');
    const out = r.text(text);
    expect(out).not.toContain(value);
    expect(out).not.toContain(encodeURIComponent(value));
    expect(out).not.toContain(Buffer.from(value).toString('base64'));
    expect(out).not.toContain(ph);
    expect(out).toContain(REDACTED);
    expect(r.buffer(Buffer.from(text)).toString()).toBe(out);
  });
});
