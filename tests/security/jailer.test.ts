// A hostile program run exactly as a jailed VM's QEMU would be (the jailer, a uid of its own, its cgroup, mirrored
// paths), next to a real server's VMs: everything it tries must be refused, and every attempt must work unjailed
// (the control), so no assertion passes for a reason other than the jail. A second `up` on the same home refuses and
// leaves the first server's sandboxes running.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import {
  configureJail,
  createCgroup,
  createOverlay,
  jailerArgv,
  qemuHostFiles,
  releaseVmIdentity,
  vmIdentity,
  type Cgroup,
  type JailContext,
  type JailSpec,
} from '@sandglass/vmm';
import { apiUrl, checkResponsesAgainstSpec, config, home } from '../helpers.js';

checkResponsesAgainstSpec();

const root = fileURLToPath(new URL('../..', import.meta.url));
const isRoot = process.getuid?.() === 0;
const HOSTILE_ID = `hostile_${process.pid}`;
const LIMIT_MIB = 64;

let sbx: Sandbox;
let ctx: JailContext;
let cgroup: Cgroup;
let hostile: string;
let jailDir: string;
let spec: JailSpec;
let serverPid: number;
let sharedDir: string;

/** Runs the hostile program: jailed like a VM, or (the control) directly as root. */
function attempt(jailed: boolean, ...args: string[]): { ok: boolean; out: string; signal: NodeJS.Signals | null } {
  const r = jailed
    ? spawnSync(ctx.jailerPath, jailerArgv(ctx, spec, [hostile, ...args]), { encoding: 'utf8', env: {}, timeout: 60_000 })
    : spawnSync(hostile, args, { encoding: 'utf8', timeout: 60_000 });
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}`, signal: r.signal };
}

function expectRefusedOnlyInJail(...args: string[]): string {
  const control = attempt(false, ...args);
  expect(control.ok, `unjailed ${args.join(' ')} should work: ${control.out}`).toBe(true);
  const jailed = attempt(true, ...args);
  expect(jailed.ok, `jailed ${args.join(' ')} should be refused: ${jailed.out}`).toBe(false);
  return jailed.out;
}

function shmDir(): string {
  return join('/dev/shm', `sandglass-${createHash('sha256').update(home).digest('hex').slice(0, 12)}`);
}

describe.skipIf(!isRoot)('the jail a VM runs in', () => {
  beforeAll(async () => {
    sbx = await Sandbox.create({ ...config(), timeoutS: 600 });
    serverPid = (JSON.parse(readFileSync(join(home, 'server.json'), 'utf8')) as { pid: number }).pid;
    jailDir = join(home, 'test-jail', HOSTILE_ID);
    rmSync(jailDir, { recursive: true, force: true });
    mkdirSync(jailDir, { recursive: true });
    hostile = join(home, 'test-jail', 'hostile');
    execFileSync('go', ['build', '-buildvcs=false', '-o', hostile, '.'], {
      cwd: join(root, 'tests/security/hostile'),
      env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '', GOPROXY: 'off' },
    });
    ctx = configureJail();
    expect(ctx.mode).toBe('jailed');
    // What a restored VM gets: its run directory and RAM file writable, an overlay over the template's frozen
    // layer (whose chain is mirrored read-only), QEMU's data, a uid of its own, its own cgroup.
    const template = readdirSync(join(home, 'artifacts')).find((n) => /^template-[0-9a-f]{16}$/.test(n))!;
    const overlay = join(jailDir, 'disk.qcow2');
    await createOverlay(overlay, join(home, 'artifacts', template, 'disk.qcow2'), 'qcow2', HOSTILE_ID);
    const identity = vmIdentity(HOSTILE_ID);
    execFileSync('chown', ['-R', `${identity.uid}:${identity.gid}`, jailDir]);
    cgroup = createCgroup(HOSTILE_ID, { memoryBytes: LIMIT_MIB << 20, cpus: 1 });
    expect(cgroup.kind).not.toBe('none');
    sharedDir = join(home, 'test-jail', 'shared');
    mkdirSync(sharedDir, { recursive: true });
    writeFileSync(join(sharedDir, 'firmware.bin'), 'shared by every jail');
    spec = {
      id: HOSTILE_ID,
      identity,
      cgroupDirs: cgroup.dirs,
      writable: [jailDir],
      readOnly: [],
      // As every VM gets QEMU's data: through the jailer's shared read-only base, with a file of the test's own in it.
      sharedReadOnly: [...qemuHostFiles().data, sharedDir],
      disks: [overlay],
      kvm: false,
      addressSpaceBytes: 4096 * 1024 * 1024,
      keepFds: 0,
    };
  }, 180_000);

  afterAll(async () => {
    await sbx?.kill();
    cgroup?.remove();
    releaseVmIdentity(HOSTILE_ID);
    rmSync(join(home, 'test-jail'), { recursive: true, force: true });
  });

  it('cannot connect to any address, loopback and the server itself included', () => {
    const port = new URL(apiUrl).port;
    expect(expectRefusedOnlyInJail('connect', `127.0.0.1:${port}`)).toMatch(/unreachable|refused|not permitted/i);
  });

  it("cannot read another VM's RAM file, list its directory or connect to its sockets", () => {
    const mem = readdirSync(shmDir()).find((n) => n.endsWith('.mem'))!;
    expect(mem).toBeDefined();
    expectRefusedOnlyInJail('read', join(shmDir(), mem));
    const vmDir = readdirSync(join(home, 'run'))
      .map((n) => join(home, 'run', n))
      .find((d) => existsSync(join(d, 'qmp.sock')))!;
    expectRefusedOnlyInJail('list', vmDir);
    expectRefusedOnlyInJail('unix', join(vmDir, 'qmp.sock'));
    expectRefusedOnlyInJail('unix', join(vmDir, 'agent.sock'));
  });

  it('cannot read the database, the keys or the chunk store', () => {
    expectRefusedOnlyInJail('read', join(home, 'sandglass.db'));
    expectRefusedOnlyInJail('list', join(home, 'keys'));
    expectRefusedOnlyInJail('read', join(home, 'admin-key'));
    expectRefusedOnlyInJail('list', join(home, 'store'));
  });

  it('cannot write the template it backs onto, though it can read it', () => {
    const template = readdirSync(join(home, 'artifacts')).find((n) => /^template-[0-9a-f]{16}$/.test(n))!;
    const disk = join(home, 'artifacts', template, 'disk.qcow2');
    const read = attempt(true, 'read', disk);
    expect(read.ok, read.out).toBe(true);
    expect(expectRefusedOnlyInJail('write', disk)).toMatch(/read-only|permission denied/i);
  });

  it('cannot change what every jail shares (the program, its libraries, QEMU data), though it reads it', () => {
    const file = join(sharedDir, 'firmware.bin');
    const read = attempt(true, 'read', file);
    expect(read.ok, read.out).toBe(true);
    expect(expectRefusedOnlyInJail('write', file)).toMatch(/read-only|permission denied/i);
  });

  it('cannot use more memory than its cgroup allows: it is killed', () => {
    expect(attempt(false, 'alloc', String(LIMIT_MIB * 4)).ok).toBe(true);
    const jailed = attempt(true, 'alloc', String(LIMIT_MIB * 4));
    expect(jailed.ok).toBe(false);
    expect(jailed.signal, jailed.out).toBe('SIGKILL');
  });

  it('cannot see host processes', () => {
    expectRefusedOnlyInJail('signal', String(serverPid));
    expectRefusedOnlyInJail('list', `/proc/${serverPid}`);
  });

  it('still reaches its own run directory', () => {
    const own = attempt(true, 'list', jailDir);
    expect(own.ok, own.out).toBe(true);
  });
});

describe('one home, one server', () => {
  it('a second `up` on a running home refuses, naming the running server, and its sandboxes keep running', async () => {
    const first = await Sandbox.create({ ...config(), timeoutS: 300 });
    try {
      const owner = (JSON.parse(readFileSync(join(home, 'server.json'), 'utf8')) as { pid: number }).pid;
      const second = spawn(join(root, 'bin/sandglass'), ['up', '--port', String(Number(new URL(apiUrl).port) + 7)], {
        env: { ...process.env, SANDGLASS_HOME: home },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      second.stdout!.on('data', (d: Buffer) => (out += d));
      second.stderr!.on('data', (d: Buffer) => (out += d));
      const code = await new Promise<number | null>((resolve) => second.once('exit', resolve));
      expect(code).not.toBe(0);
      expect(out).toContain(`Another Sandglass server is running on ${home}: pid ${owner}`);
      const r = await first.commands.run('echo still here');
      expect(r.stdout).toBe('still here\n');
    } finally {
      await first.kill();
    }
  }, 120_000);
});
