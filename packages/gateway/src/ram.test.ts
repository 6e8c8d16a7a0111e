// The node's tmpfs RAM files: one template image per key, however many restores ask for it at once.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { RamFiles } from './ram.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

it('makes one tmpfs copy of a template for restores that ask for it at the same time', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sg-ram-'));
  dirs.push(dir);
  const mem = join(dir, 'mem.raw');
  writeFileSync(mem, Buffer.concat([Buffer.alloc(1 << 20), Buffer.alloc(1 << 20, 7)]));
  const ram = new RamFiles(join(dir, 'home'), dir);
  const paths = await Promise.all(Array.from({ length: 6 }, () => ram.templateImage('0123456789abcdef', mem)));
  expect(new Set(paths).size).toBe(1);
  expect(readFileSync(paths[0]!).equals(readFileSync(mem))).toBe(true);
  expect(readdirSync(ram.root).filter((n) => n.includes('.tmp-'))).toEqual([]);
});
