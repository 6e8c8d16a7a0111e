// Guest paths are checked on the host before the agent sees them.
import { describe, expect, it } from 'vitest';
import { guestPath } from './paths.js';
import { checkDefaults } from './sandbox.js';

describe('guestPath', () => {
  it('accepts absolute paths and normalises them', () => {
    expect(guestPath('/root//a/./b')).toBe('/root/a/b');
    expect(guestPath('/')).toBe('/');
  });
  it.each(['relative/x', '', '/a/../../etc', '/a\0b', `/${'x'.repeat(5000)}`])('refuses %j', (p) => {
    expect(() => guestPath(p)).toThrowError(expect.objectContaining({ code: 'path_outside_sandbox' }));
  });
});

describe('guestPath under a workdir', () => {
  it('takes a relative path under the workdir and leaves an absolute one alone', () => {
    expect(guestPath('notes/./plan.txt', 'path', '/srv/www')).toBe('/srv/www/notes/plan.txt');
    expect(guestPath('/etc/hosts', 'path', '/srv/www')).toBe('/etc/hosts');
    expect(guestPath('.', 'cwd', '/srv/www')).toBe('/srv/www');
  });
  it.each(['../etc/shadow', 'a/../../etc', '', 'a\0b'])('refuses %j', (p) => {
    expect(() => guestPath(p, 'path', '/srv/www')).toThrowError(expect.objectContaining({ code: 'path_outside_sandbox' }));
  });
});

describe('checkDefaults', () => {
  it('keeps a user name and a clean workdir', () => {
    expect(checkDefaults({ user: 'app', workdir: '/srv//www/' })).toEqual({ user: 'app', workdir: '/srv/www/' });
    expect(checkDefaults({})).toEqual({});
  });
  it.each([
    [{ workdir: '/srv/../etc' }, 'path_outside_sandbox', 'defaults.workdir'],
    [{ workdir: 'srv' }, 'path_outside_sandbox', 'defaults.workdir'],
    [{ user: 'Root;id' }, 'invalid_argument', 'defaults.user'],
  ])('refuses %j', (value, code, field) => {
    expect(() => checkDefaults(value)).toThrowError(expect.objectContaining({ code, details: expect.objectContaining({ field }) }));
  });
});
