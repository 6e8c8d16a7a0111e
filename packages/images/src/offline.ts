// Air-gapped hosts: a Sandglass unpacked from an offline bundle (npm run bundle) must never reach for the network.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SandglassError } from '@sandglass/core';

/** Written by scripts/bundle.mjs at the root of every bundle; its presence is what makes a checkout "offline". */
const BUNDLE_MARKER = fileURLToPath(new URL('../../../bundle/bundle.json', import.meta.url));

/** Whether this Sandglass must work from what it carries: an offline bundle, or SANDGLASS_OFFLINE=1. */
export function isOffline(): boolean {
  return process.env.SANDGLASS_OFFLINE === '1' || existsSync(BUNDLE_MARKER);
}

/** Refuses a build step that would download (apt, debootstrap) on an offline host, naming what the bundle lacks. */
export function requireOnline(what: string): void {
  if (!isOffline()) return;
  throw new SandglassError(
    'internal',
    `${what} would download from the Debian archive, and this host is offline (${existsSync(BUNDLE_MARKER) ? 'an offline bundle' : 'SANDGLASS_OFFLINE=1'}): make the bundle again with npm run bundle on a connected machine`,
  );
}
