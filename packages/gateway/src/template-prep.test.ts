// What a template's guest runs before its snapshot, and that it is part of the template's key.
import { describe, expect, it } from 'vitest';
import type { GuestImage } from '@sandglass/images';
import { TEMPLATE_ZERO_FILL_MIB, templateKey, templatePrep, vmConfig } from './templates.js';

const image = { key: 'img-test' } as GuestImage;

describe('templatePrep', () => {
  it('turns address-space randomization off under TCG only, and frees memory as zeros under both', () => {
    const tcg = templatePrep('tcg', {})!;
    const kvm = templatePrep('kvm', {})!;
    expect(tcg).toContain('randomize_va_space');
    expect(kvm).not.toContain('randomize_va_space');
    for (const p of [tcg, kvm]) {
      expect(p).toContain('drop_caches');
      expect(p).toMatch(/cat \/dev\/zero > \/mnt\/zero/);
      expect(p.indexOf('umount /mnt')).toBeGreaterThan(p.indexOf('/dev/zero'));
    }
  });

  it('fills at most TEMPLATE_ZERO_FILL_MIB whatever the guest size, so a large guest costs no more to prepare', () => {
    const p = templatePrep('tcg', {})!;
    const cap = `${TEMPLATE_ZERO_FILL_MIB * 1024}`;
    expect(p).toContain(`fill_kib < ${cap} ? fill_kib : ${cap}`);
  });

  it('is skipped with SANDGLASS_TEMPLATE_PREP=off, and a template built either way has its own key', () => {
    expect(templatePrep('tcg', { SANDGLASS_TEMPLATE_PREP: 'off' })).toBeUndefined();
    const config = vmConfig(256, 1, 'tcg', 'max');
    const saved = process.env.SANDGLASS_TEMPLATE_PREP;
    try {
      delete process.env.SANDGLASS_TEMPLATE_PREP;
      const withPrep = templateKey(image, config, 'console=ttyS0');
      process.env.SANDGLASS_TEMPLATE_PREP = 'off';
      const without = templateKey(image, config, 'console=ttyS0');
      expect(withPrep).not.toBe(without);
    } finally {
      if (saved === undefined) delete process.env.SANDGLASS_TEMPLATE_PREP;
      else process.env.SANDGLASS_TEMPLATE_PREP = saved;
    }
  });
});
