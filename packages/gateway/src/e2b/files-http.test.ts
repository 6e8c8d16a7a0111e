// Unit tests of envd 0.6.2's upload metadata headers: what is kept, and what is refused before any byte is written.
import { describe, expect, it } from 'vitest';
import { EnvdHttpError, uploadMetadata } from './files-http.js';

const refused = (raw: string[]) => {
  try {
    uploadMetadata(raw);
  } catch (err) {
    return err instanceof EnvdHttpError ? `${err.status} ${err.message}` : String(err);
  }
  return 'accepted';
};

describe('uploadMetadata', () => {
  it('keeps X-Metadata-* headers, keys lower-cased, and nothing else', () => {
    expect(uploadMetadata(['X-Metadata-Run-Id', 'c8', 'x-metadata-origin', 'up load', 'X-Access-Token', 't'])).toEqual({ 'run-id': 'c8', origin: 'up load' });
    expect(uploadMetadata(['Content-Type', 'application/octet-stream'])).toBeUndefined();
    expect(uploadMetadata(['X-Metadata-empty', ''])).toEqual({ empty: '' });
  });

  it('refuses, naming the key, what the SDK would have refused and what the guest could not keep', () => {
    expect(refused(['X-Metadata-', 'v'])).toMatch(/^400 metadata key ""/);
    expect(refused(['X-Metadata-a(b', 'v'])).toMatch(/^400 metadata key "a\(b"/);
    expect(refused(['X-Metadata-k', 'caf\u00e9'])).toMatch(/^400 metadata value of "k"/);
    expect(refused(['X-Metadata-k', 'x'.repeat(4097)])).toMatch(/^400 metadata value of "k"/);
    expect(refused([`X-Metadata-${'k'.repeat(251)}`, 'v'])).toMatch(/^400 metadata key/);
    expect(refused(['X-Metadata-k', 'a', 'x-metadata-K', 'b'])).toMatch(/^400 metadata key "k" is sent twice/);
    const many = Array.from({ length: 65 }, (_, i) => [`X-Metadata-k${i}`, 'v']).flat();
    expect(refused(many)).toMatch(/^400 metadata: at most 64/);
  });
});
