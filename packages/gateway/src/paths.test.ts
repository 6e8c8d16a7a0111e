// Guest paths are checked on the host before the agent sees them.
import { describe, expect, it } from 'vitest';
import { guestPath } from './paths.js';

describe('guestPath', () => {
  it('accepts absolute paths and normalises them', () => {
    expect(guestPath('/root//a/./b')).toBe('/root/a/b');
    expect(guestPath('/')).toBe('/');
  });
  it.each(['relative/x', '', '/a/../../etc', '/a\0b', `/${'x'.repeat(5000)}`])('refuses %j', (p) => {
    expect(() => guestPath(p)).toThrowError(expect.objectContaining({ code: 'path_outside_sandbox' }));
  });
});
