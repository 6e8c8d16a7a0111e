// Secret bindings: validation, placeholders, masking across chunk boundaries and redaction of encoded forms.
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { Redacted, SandglassError } from '@sandglass/core';
import { REDACTED, Redactor, ValueMask, compileSecrets, newPlaceholder, type SecretBinding } from './secrets.js';

const binding = (over: Partial<SecretBinding> = {}): SecretBinding => ({
  name: 'gh',
  placeholder: newPlaceholder(),
  hosts: ['api.github.com'],
  approval: 'none',
  value: async () => new Redacted('v'),
  ...over,
});

describe('secret bindings', () => {
  it('makes long, distinct placeholders', () => {
    const a = newPlaceholder();
    expect(a).toMatch(/^sg_placeholder_[a-z2-7]{32}$/);
    expect(newPlaceholder()).not.toBe(a);
  });

  it.each([
    [{ name: '' }, 'secrets[0].name'],
    [{ placeholder: 'sg_placeholder_short' }, 'secrets[0].placeholder'],
    [{ hosts: [] }, 'secrets[0].hosts'],
    [{ hosts: ['*.com'] }, 'secrets[0].hosts[0]'],
    [{ hosts: ['api.github.com GET /x'] }, 'secrets[0].hosts[0]'],
    [{ header: 'Bad Header' }, 'secrets[0].header'],
    [{ header: 'Host' }, 'secrets[0].header'],
    [{ header: 'Authorization', format: 'Bearer' }, 'secrets[0].format'],
    [{ format: 'Bearer {value}' }, 'secrets[0].format'],
    [{ bodyContentTypes: ['json'] }, 'secrets[0].bodyContentTypes[0]'],
    [{ approval: 'maybe' as 'none' }, 'secrets[0].approval'],
  ])('refuses %j naming %s', (over, field) => {
    try {
      compileSecrets([binding(over)]);
      throw new Error('accepted');
    } catch (err) {
      expect(err).toBeInstanceOf(SandglassError);
      expect((err as SandglassError).details).toMatchObject({ field });
    }
  });

  it('refuses duplicate names and placeholders', () => {
    const p = newPlaceholder();
    expect(() => compileSecrets([binding({ placeholder: p }), binding({ name: 'other', placeholder: p })])).toThrow(/placeholder/);
    expect(() => compileSecrets([binding(), binding()])).toThrow(/not unique/);
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
