// Every size a node serves is created without a silent stall (its template built once, in the background, waited on
// with progress), sizes it does not serve are refused at once, and a stopped or crashed build leaves no temporaries.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox, type CreateProgress } from '@sandglass/sdk';
import { createLogger, homeLayout } from '@sandglass/core';
import { TemplateStore, vmConfig } from '@sandglass/gateway';
import { defaultKernelArgs, ensureGuestImage } from '@sandglass/images';
import { api, config, home } from './helpers.js';

const layout = homeLayout(home);
const made: Sandbox[] = [];
const scratch = mkdtempSync(join(tmpdir(), 'sg-sizes-'));

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
  rmSync(scratch, { recursive: true, force: true });
});

/** MemTotal and the CPU count the guest itself sees. */
async function guestShape(sbx: Sandbox): Promise<{ totalMib: number; cpus: number }> {
  const r = await sbx.commands.run("free -m | awk '/^Mem:/ { print $2 }'; nproc");
  const [total, cpus] = r.stdout.trim().split('\n').map(Number);
  return { totalMib: total!, cpus: cpus! };
}

/** An artifacts directory with the guest image's parts only (links to the suite's), so its template cache is empty. */
function emptyTemplateCache(name: string): string {
  const dir = join(scratch, name, 'artifacts');
  mkdirSync(dir, { recursive: true });
  for (const entry of readdirSync(layout.artifacts)) {
    if (!entry.startsWith('template-') && entry !== 'accel.json') symlinkSync(join(layout.artifacts, entry), join(dir, entry));
  }
  return dir;
}

const temporaries = (dir: string) => readdirSync(dir).filter((n) => /^template-.*\.tmp-/.test(n));

describe('sandbox sizes', () => {
  it('creates 256, 512 and 1024 MiB and 2-vCPU sandboxes in one run, each the size it asked for', async () => {
    const progress: CreateProgress[] = [];
    for (const [memoryMib, vcpus] of [
      [256, 1],
      [512, 1],
      [1024, 1],
      [256, 2],
    ] as const) {
      const sbx = await Sandbox.create({ ...config(), memoryMib, vcpus, onProgress: (p) => progress.push(p) });
      made.push(sbx);
      expect(await sbx.getInfo()).toMatchObject({ memoryMib, vcpus });
      const shape = await guestShape(sbx);
      // MemTotal is RAM less what the kernel reserved for itself at boot (its image, the page tables of memory).
      expect(shape.totalMib, `${memoryMib} MiB guest`).toBeGreaterThan(memoryMib * 0.8);
      expect(shape.totalMib, `${memoryMib} MiB guest`).toBeLessThanOrEqual(memoryMib);
      expect(shape.cpus).toBe(vcpus);
    }
    // Each progress answer the SDK waited on named a build phase of a size being built, never of the base.
    for (const p of progress) {
      expect(p.phase).toMatch(/^(start|boot|sync|prep|snapshot|publish|fetch)$/);
      expect([256, 512, 1024]).toContain(p.memoryMib);
    }
  });

  it('refuses a size the node does not serve at once, naming the field and what it serves, and records nothing', async () => {
    const before = (await api('GET', '/v1/sandboxes')).body!.sandboxes.length;
    for (const [body, field] of [
      [{ memoryMib: 384 }, 'memoryMib'],
      [{ vcpus: 3 }, 'vcpus'],
    ] as const) {
      const res = await api('POST', '/v1/sandboxes', { body });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body!.error.code).toBe('size_unsupported');
      expect(res.body!.error.details.field).toBe(field);
      expect(res.body!.error.details.allowed).toContain(field === 'memoryMib' ? 256 : 1);
    }
    expect((await api('GET', '/v1/sandboxes')).body!.sandboxes.length).toBe(before);
  });
});

describe('template builds', () => {
  it('leave no temporary directory when the node stops mid-build, nor after a crash', async () => {
    const artifacts = emptyTemplateCache('stop');
    const image = await ensureGuestImage({ home });
    // The accelerator the suite's server chose (its probe's verdict), so this build runs as that server's do.
    const probed = join(layout.artifacts, 'accel.json');
    const accel = existsSync(probed) ? (JSON.parse(readFileSync(probed, 'utf8')) as { accel: 'kvm' | 'tcg'; cpu: string }) : undefined;
    const log = createLogger('test', 'warn');
    const store = new TemplateStore(artifacts, image, defaultKernelArgs().join(' '), log);
    const cfg = vmConfig(512, 1, accel?.accel ?? 'tcg', accel?.cpu ?? 'max');
    const build = store.ensure('base', cfg);
    build.catch(() => undefined);
    // Stop once the build's VM is booting (its temporary directory exists, and beside it the jail's record of the VM
    // once jailed), not after some guessed delay.
    await expect.poll(() => temporaries(artifacts).length, { timeout: 60_000, interval: 50 }).toBeGreaterThan(0);
    await store.close();
    await expect(build).rejects.toThrow(/node is stopping/);
    expect(temporaries(artifacts)).toEqual([]);

    // A crashed build's directory (its process is gone) goes when the next store opens the same artifacts.
    const dead = join(artifacts, `template-${'0'.repeat(16)}.tmp-999999999`);
    mkdirSync(dead);
    writeFileSync(join(dead, 'mem.raw'), 'half a template');
    new TemplateStore(artifacts, image, defaultKernelArgs().join(' '), log);
    expect(temporaries(artifacts)).toEqual([]);
  });
});
