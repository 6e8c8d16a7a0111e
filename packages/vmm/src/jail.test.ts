import { spawn } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { processStartTime } from '@sandglass/core';
import { chownToVm, jailContext, jailerArgv, killLeftoverVms, releaseVmIdentity, sealTemplate, type JailContext } from './jail.js';
import { restoreVm } from './qemu.js';

function ctx(recordDir?: string): JailContext {
  return { mode: 'jailed', cgroups: true, jailerPath: '/x/jailer', recordDir, instanceId: 'me', uidBase: 2_000_000, uidCount: 10 };
}

describe('leftover VMs', () => {
  it('kills exactly the processes its records name by pid and start time, never this instance’s', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sg-vms-'));
    const [dead, reused, mine] = [spawn('sleep', ['30']), spawn('sleep', ['30']), spawn('sleep', ['30'])];
    await Promise.all([dead, reused, mine].map((p) => new Promise((r) => p.once('spawn', r))));
    try {
      const rec = (vm: string, instance: string, pid: number, startTime: string) =>
        writeFileSync(join(dir, `${vm}.json`), JSON.stringify({ vm, instance, pid, startTime }));
      rec('a', 'old', dead.pid!, processStartTime(dead.pid!)!);
      // The same pid with another start time is another process: a pid the old VM had, reused since.
      rec('b', 'old', reused.pid!, '1');
      rec('c', 'me', mine.pid!, processStartTime(mine.pid!)!);
      const killed = killLeftoverVms(ctx(dir));
      expect(killed).toEqual([{ vm: 'a', pid: dead.pid }]);
      await new Promise((r) => dead.once('exit', r));
      expect(processStartTime(reused.pid!)).toBeDefined();
      expect(processStartTime(mine.pid!)).toBeDefined();
      expect(existsSync(join(dir, 'a.json'))).toBe(false);
      expect(existsSync(join(dir, 'c.json'))).toBe(true);
    } finally {
      for (const p of [dead, reused, mine]) p.kill('SIGKILL');
    }
  });
});

describe('jailer argv', () => {
  it('passes every part of the confinement, and turns cgroups off only explicitly', () => {
    const spec = {
      id: 'sbx_1',
      identity: { uid: 2_000_003, gid: 2_000_003 },
      cgroupDirs: ['/sys/fs/cgroup/sandglass/sbx_1'],
      writable: ['/h/run/sbx_1', '/dev/shm/s/sbx_1.mem'],
      readOnly: ['/usr/share/qemu'],
      disks: ['/h/run/sbx_1/disk.qcow2'],
      kvm: true,
      addressSpaceBytes: 1 << 30,
      keepFds: 1,
      record: '/h/vms/sbx_1.json',
    };
    const argv = jailerArgv(ctx('/h/vms'), spec, ['/usr/bin/qemu-system-x86_64', '-nodefaults']);
    expect(argv.join(' ')).toBe(
      '--id sbx_1 --uid 2000003 --gid 2000003 --cgroup /sys/fs/cgroup/sandglass/sbx_1 --rw /h/run/sbx_1 --rw /dev/shm/s/sbx_1.mem ' +
        '--ro /usr/share/qemu --disk /h/run/sbx_1/disk.qcow2 --kvm --nofile 1024 --as-bytes 1073741824 --keep-fds 1 ' +
        '--record /h/vms/sbx_1.json --instance me -- /usr/bin/qemu-system-x86_64 -nodefaults',
    );
    expect(jailerArgv(ctx(), { ...spec, cgroupDirs: null }, ['/bin/true'])).toContain('--no-cgroups');
    const memory = jailerArgv(ctx(), { ...spec, noThp: true, env: { GLIBC_TUNABLES: 'glibc.malloc.arena_max=1' } }, ['/bin/true']).join(' ');
    expect(memory).toContain('--no-thp --env GLIBC_TUNABLES=glibc.malloc.arena_max=1 -- /bin/true');
    expect(jailerArgv(ctx(), { ...spec, startOnStdin: true }, ['/bin/true']).join(' ')).toContain('--start-on-stdin -- /bin/true');
  });
});

// Only a jailed gateway (root) hands files to VM uids; without the jailer both calls do nothing at all.
describe.runIf(jailContext().mode === 'jailed')('files a VM could have swapped for links', () => {
  it('hands a VM its names without following a link to a host file, and a sealed template keeps no link', () => {
    const root = mkdtempSync(join(tmpdir(), 'sg-links-'));
    try {
      const host = join(root, 'host-file');
      writeFileSync(host, 'host');
      chmodSync(host, 0o640);
      const run = join(root, 'run');
      mkdirSync(run);
      symlinkSync(host, join(run, 'migrate.sock'));
      chownToVm(join(run, 'migrate.sock'), 'sbx_links');
      releaseVmIdentity('sbx_links');
      expect(statSync(host).uid).toBe(process.getuid!());
      const tpl = join(root, 'template');
      mkdirSync(tpl);
      writeFileSync(join(tpl, 'disk.qcow2'), 'disk');
      symlinkSync(host, join(tpl, 'planted'));
      chmodSync(tpl, 0o700);
      sealTemplate(tpl);
      expect(existsSync(join(tpl, 'planted'))).toBe(false);
      expect(statSync(host).mode & 0o777).toBe(0o640);
      expect(lstatSync(join(tpl, 'disk.qcow2')).mode & 0o777).toBe(0o644);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

// The gateway builds a VM's jail while it still copies the VM's RAM: the program must run only once released.
describe.runIf(jailContext().mode === 'jailed')('a jail started before its files are complete', () => {
  const touch = (dir: string, stdin: (w: NodeJS.WritableStream) => void) => {
    const child = spawn(
      jailContext().jailerPath,
      [
        '--id',
        'startgate',
        '--uid',
        '2000999',
        '--gid',
        '2000999',
        '--no-cgroups',
        '--rw',
        dir,
        '--as-bytes',
        '4000000000',
        '--start-on-stdin',
        '--',
        '/usr/bin/touch',
        join(dir, 'ran'),
      ],
      { stdio: ['pipe', 'ignore', 'pipe'], env: {} },
    );
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d));
    stdin(child.stdin!);
    return new Promise<{ code: number | null; stderr: string }>((r) => child.once('exit', (code) => r({ code, stderr })));
  };

  it('never runs the program when the gateway gives up (EOF), and runs it once released', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sg-startgate-'));
    try {
      chmodSync(dir, 0o777);
      const abandoned = await touch(dir, (w) => setTimeout(() => w.end(), 100));
      expect(abandoned.code).toBe(125);
      expect(abandoned.stderr).toMatch(/did not release the program/);
      expect(existsSync(join(dir, 'ran'))).toBe(false);
      const released = await touch(dir, (w) => setTimeout(() => w.end(Buffer.from([1])), 100));
      expect(released).toEqual({ code: 0, stderr: '' });
      expect(existsSync(join(dir, 'ran'))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a privately mapped RAM image', () => {
  // QEMU 7.2 opens a private RAM file read-write: a jailed QEMU given a shared template image could rewrite every
  // other VM's unwritten pages. The refusal comes before anything is created or started.
  it.runIf(jailContext().mode === 'jailed')('is refused for a jailed QEMU, and no run directory is made', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'sg-private-ram-')), 'vm');
    try {
      const spec = {
        id: 'privram',
        dir,
        config: { memoryMib: 16, vcpus: 1, accel: 'tcg' as const },
        memPath: '/nonexistent.img',
        statePath: '/nonexistent',
        diskPath: '/nonexistent.qcow2',
      };
      await expect(restoreVm({ ...spec, privateRam: true })).rejects.toMatchObject({ code: 'internal', message: expect.stringMatching(/outside the jail/) });
      expect(existsSync(dir)).toBe(false);
    } finally {
      rmSync(dirname(dir), { recursive: true, force: true });
    }
  });
});
