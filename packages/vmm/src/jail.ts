// How QEMU is confined: each VM gets its own uid/gid and is started through the jailer (jailer/, a static Go binary)
// when the gateway is root; VM records let a later gateway find what a dead one left running.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  lchownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { constants as fsc } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { SandglassError, processStartTime } from '@sandglass/core';

export interface VmIdentity {
  uid: number;
  gid: number;
}

export interface JailContext {
  /** `jailed`: every QEMU starts through the jailer as its own uid. `direct`: QEMU runs as this process's user. */
  mode: 'jailed' | 'direct';
  /** Why there is no jail, when there is none: said loudly at start. */
  reason?: string;
  /** False only with SANDGLASS_CGROUPS=off: VMs then run without memory and CPU limits. */
  cgroups: boolean;
  jailerPath: string;
  /** Where VM records go (one JSON file per running VM); unset: no records (benchmarks and one-off boots). */
  recordDir?: string;
  /** Names this gateway process in its VMs' records. */
  instanceId: string;
  uidBase: number;
  uidCount: number;
}

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const DEFAULT_UID_BASE = 2_000_000;
const DEFAULT_UID_COUNT = 65_536;
// Claims of VM uids, host-wide: two servers on one host (different homes) must not hand out the same uid either.
const CLAIM_DIR = '/run/sandglass/vm-ids';

let context: JailContext | undefined;

function intEnv(name: string, dflt: number, min: number, max: number): number {
  const v = process.env[name];
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  return n;
}

/**
 * Decides how this process starts VMs, once. Root gets the jailer (SANDGLASS_JAIL=off, a development switch, turns it
 * off); anyone else runs QEMU directly as themselves, with the reason in `reason`. SANDGLASS_CGROUPS=off (development
 * only) lets VMs start without limits; otherwise a VM whose limits cannot be applied does not start.
 */
export function configureJail(opts: { recordDir?: string } = {}): JailContext {
  const root = process.getuid?.() === 0;
  const off = process.env.SANDGLASS_JAIL === 'off';
  const uidBase = intEnv('SANDGLASS_VM_UID_BASE', DEFAULT_UID_BASE, 1000, 2 ** 31);
  const uidCount = intEnv('SANDGLASS_VM_UID_COUNT', DEFAULT_UID_COUNT, 1, 2 ** 24);
  const ctx: JailContext = {
    mode: root && !off ? 'jailed' : 'direct',
    reason: !root
      ? 'not running as root: QEMU runs directly as this user, without a jail, its own uid or cgroup limits set before it starts'
      : off
        ? 'SANDGLASS_JAIL=off: QEMU runs directly as root, without a jail (development only)'
        : undefined,
    cgroups: process.env.SANDGLASS_CGROUPS !== 'off',
    jailerPath: process.env.SANDGLASS_JAILER ?? join(repoRoot, 'jailer/build/sandglass-jailer'),
    recordDir: opts.recordDir,
    instanceId: `${process.pid}-${randomBytes(6).toString('hex')}`,
    uidBase,
    uidCount,
  };
  if (ctx.mode === 'jailed') ensureJailer(ctx.jailerPath);
  if (ctx.recordDir) ensurePrivateDir(ctx.recordDir);
  context = ctx;
  return ctx;
}

export function jailContext(): JailContext {
  return context ?? configureJail();
}

/** Builds the jailer when it is missing or older than its sources (setup builds it too; this covers a bare checkout). */
function ensureJailer(path: string): void {
  const srcDir = join(repoRoot, 'jailer');
  if (process.env.SANDGLASS_JAILER) {
    if (!existsSync(path)) throw new Error(`SANDGLASS_JAILER=${path} does not exist`);
    return;
  }
  const built = existsSync(path) ? statSync(path).mtimeMs : -1;
  const newest = Math.max(
    ...readdirSync(srcDir)
      .filter((f) => f.endsWith('.go') || f === 'go.mod' || f === 'build.sh')
      .map((f) => statSync(join(srcDir, f)).mtimeMs),
  );
  if (built >= newest) return;
  try {
    execFileSync('bash', [join(srcDir, 'build.sh'), path], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    throw new Error(`building the jailer (jailer/build.sh) failed: ${String((err as { stderr?: Buffer }).stderr ?? err)}`);
  }
}

/** A directory only this process's user can enter, refused if someone else made it or it is a symlink. */
export function ensurePrivateDir(dir: string, modes: number[] = [0o700]): void {
  mkdirSync(dir, { recursive: true, mode: modes[0] });
  const st = lstatSync(dir);
  const uid = process.getuid?.() ?? st.uid;
  if (!st.isDirectory() || st.isSymbolicLink() || st.uid !== uid || !modes.includes(st.mode & 0o7777)) {
    throw new SandglassError(
      'internal',
      `${dir} must be a directory owned by uid ${uid} with mode ${modes.map((m) => m.toString(8)).join(' or ')} (it is ${st.isSymbolicLink() ? 'a symlink' : `uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)}`}); remove it and start again`,
    );
  }
}

// ---- per-VM identities -------------------------------------------------------------------------------------------

const identities = new Map<string, number>();
let cursor = 0;

function selfIdentity(): VmIdentity {
  return { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
}

/**
 * The uid and gid VM `vmId` runs as (the same number, from the configured range; no passwd entry needed), claimed
 * host-wide on first use so no two running VMs share one. Without a jail: this process's own.
 */
export function vmIdentity(vmId: string): VmIdentity {
  const ctx = jailContext();
  if (ctx.mode !== 'jailed') return selfIdentity();
  let uid = identities.get(vmId);
  if (uid === undefined) {
    uid = claimUid(ctx);
    identities.set(vmId, uid);
  }
  return { uid, gid: uid };
}

/** Gives VM `vmId`'s uid back once nothing of it runs and its files are gone. */
export function releaseVmIdentity(vmId: string): void {
  const uid = identities.get(vmId);
  if (uid === undefined) return;
  identities.delete(vmId);
  rmSync(join(CLAIM_DIR, String(uid)), { force: true });
}

function ownerTag(): string {
  return `${process.pid} ${processStartTime(process.pid)}\n`;
}

function claimUid(ctx: JailContext): number {
  ensurePrivateDir(dirname(CLAIM_DIR));
  ensurePrivateDir(CLAIM_DIR);
  const tag = ownerTag();
  // Round robin from where the last claim ended: a uid just given back is the last to be handed out again.
  for (let i = 0; i < ctx.uidCount; i++) {
    const uid = ctx.uidBase + ((cursor + i) % ctx.uidCount);
    const file = join(CLAIM_DIR, String(uid));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
        writeSync(fd, tag);
        closeSync(fd);
        cursor = (cursor + i + 1) % ctx.uidCount;
        return uid;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      // Held: by a live process (next uid), or by a dead one (its claim is stale: take it over).
      const [pid, start] = readFileSync(file, 'utf8').trim().split(' ');
      if (processStartTime(Number(pid)) === start) break;
      rmSync(file, { force: true });
    }
  }
  throw new SandglassError('capacity_exhausted', `all ${ctx.uidCount} VM uids from ${ctx.uidBase} are in use (SANDGLASS_VM_UID_BASE, SANDGLASS_VM_UID_COUNT)`);
}

/**
 * Hands a file or directory the VM writes to (its run directory, overlay, RAM file, sockets) to VM `vmId`. Never
 * through a symlink: a running VM can swap one of its run directory's names for a link to any host file.
 */
export function chownToVm(path: string, vmId: string): void {
  if (jailContext().mode !== 'jailed') return;
  const who = vmIdentity(vmId);
  lchownSync(path, who.uid, who.gid);
}

/**
 * Makes a finished template read-only to every VM: owned by this process's user, the disk layer VMs back onto
 * readable (VMs see it only through the jail's read-only bind), everything else private to the gateway.
 */
export function sealTemplate(dir: string): void {
  if (jailContext().mode !== 'jailed') return;
  const me = selfIdentity();
  const st = lstatSync(dir);
  if (st.uid === me.uid && (st.mode & 0o7777) === 0o755) return;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    // The build VM could write here: a link it left would hand its target to the gateway's user (chmod follows
    // links). A template holds none of its own, so one is removed, never followed. QEMU has exited by now.
    if (lstatSync(p).isSymbolicLink()) {
      rmSync(p);
      continue;
    }
    chownSync(p, me.uid, me.gid);
    chmodSync(p, name === 'disk.qcow2' ? 0o644 : 0o600);
  }
  chownSync(dir, me.uid, me.gid);
  chmodSync(dir, 0o755);
}

// ---- the jailer's command line -------------------------------------------------------------------------------------

export interface JailSpec {
  id: string;
  identity: VmIdentity;
  /** cgroup directories to join before the program exists; null with SANDGLASS_CGROUPS=off. */
  cgroupDirs: string[] | null;
  /** The VM's own run directory and RAM file: the only writable paths. */
  writable: string[];
  readOnly: string[];
  /** Read-only paths the same for every VM (QEMU's firmware and modules): the jailer keeps them in its shared base. */
  sharedReadOnly?: string[];
  /** qcow2 images whose backing chains the VM reads. */
  disks: string[];
  kvm: boolean;
  /** RLIMIT_AS: guest RAM plus what QEMU maps on top. */
  addressSpaceBytes: number;
  /** Descriptors 3 … 3+n-1 passed on (a restore's device-state stream is fd 3). */
  keepFds: number;
  record?: string;
  /** Transparent huge pages off for the program (PR_SET_THP_DISABLE, inherited across exec). */
  noThp?: boolean;
  /** Variables the program gets besides PATH; the jailer accepts only GLIBC_TUNABLES. */
  env?: Record<string, string>;
  /** The jail is built at once, the program run only after one byte on the jailer's stdin (EOF: never). */
  startOnStdin?: boolean;
}

export const JAIL_NOFILE = 1024;

/** argv for the jailer running `program` with exactly the confinement `spec` describes. */
export function jailerArgv(ctx: JailContext, spec: JailSpec, program: string[]): string[] {
  return [
    '--id',
    spec.id,
    '--uid',
    String(spec.identity.uid),
    '--gid',
    String(spec.identity.gid),
    ...(spec.cgroupDirs === null ? ['--no-cgroups'] : spec.cgroupDirs.flatMap((d) => ['--cgroup', d])),
    ...spec.writable.flatMap((p) => ['--rw', p]),
    ...spec.readOnly.flatMap((p) => ['--ro', p]),
    ...(spec.sharedReadOnly ?? []).flatMap((p) => ['--shared-ro', p]),
    ...spec.disks.flatMap((p) => ['--disk', p]),
    ...(spec.kvm ? ['--kvm'] : []),
    '--nofile',
    String(JAIL_NOFILE),
    '--as-bytes',
    String(spec.addressSpaceBytes),
    '--keep-fds',
    String(spec.keepFds),
    ...(spec.record ? ['--record', spec.record, '--instance', ctx.instanceId] : []),
    ...(spec.noThp ? ['--no-thp'] : []),
    ...(spec.startOnStdin ? ['--start-on-stdin'] : []),
    ...Object.entries(spec.env ?? {}).flatMap(([k, v]) => ['--env', `${k}=${v}`]),
    '--',
    ...program,
  ];
}

let qemuFiles: { binary: string; data: string[] } | undefined;

/** The QEMU binary by absolute path, and the data it loads at run time (firmware, accelerator modules). */
export function qemuHostFiles(): { binary: string; data: string[] } {
  if (qemuFiles) return qemuFiles;
  const binary = (process.env.PATH ?? '/usr/bin:/bin')
    .split(delimiter)
    .map((d) => join(d, 'qemu-system-x86_64'))
    .find((p) => existsSync(p));
  if (!binary) throw new SandglassError('internal', 'qemu-system-x86_64 is not on PATH: run `npm run setup`');
  const data = ['/usr/share/qemu', '/usr/share/seabios', '/usr/lib/ipxe/qemu', '/usr/lib/x86_64-linux-gnu/qemu'].filter((d) => existsSync(d));
  qemuFiles = { binary, data };
  return qemuFiles;
}

// ---- VM records ----------------------------------------------------------------------------------------------------

/** Written by the jailer (or by the gateway for a direct QEMU) beside no VM file: in the gateway's own directory. */
export interface VmRecord {
  vm: string;
  instance: string;
  pid: number;
  startTime: string;
  jailerPid?: number;
  jailerStartTime?: string;
}

export function recordPath(ctx: JailContext, vmId: string): string | undefined {
  return ctx.recordDir ? join(ctx.recordDir, `${vmId}.json`) : undefined;
}

export function readRecord(path: string): VmRecord | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as VmRecord;
  } catch {
    return undefined;
  }
}

/** For a QEMU started without the jailer: the same record the jailer would write. */
export function writeRecord(path: string, rec: VmRecord): void {
  const tmp = `${path}.tmp`;
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
  writeSync(fd, JSON.stringify(rec) + '\n');
  closeSync(fd);
  renameSync(tmp, path);
}

/**
 * Kills the VMs a dead predecessor left running, as its records name them: a process is killed only when its pid
 * and start time both still match (a reused pid is someone else), and never one of this instance's. Returns the
 * pids killed.
 */
export function killLeftoverVms(ctx: JailContext): Array<{ vm: string; pid: number }> {
  if (!ctx.recordDir) return [];
  const killed: Array<{ vm: string; pid: number }> = [];
  for (const name of readdirSync(ctx.recordDir)) {
    const file = join(ctx.recordDir, name);
    const rec = name.endsWith('.json') ? readRecord(file) : undefined;
    if (rec && rec.instance !== ctx.instanceId) {
      for (const [pid, start] of [
        [rec.jailerPid, rec.jailerStartTime],
        [rec.pid, rec.startTime],
      ] as const) {
        if (pid === undefined || start === undefined || processStartTime(pid) !== start) continue;
        try {
          process.kill(pid, 'SIGKILL');
          killed.push({ vm: rec.vm, pid });
        } catch {
          // Gone between the check and the kill.
        }
      }
    }
    if (!rec || rec.instance !== ctx.instanceId) unlinkQuiet(file);
  }
  return killed;
}

function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Already gone.
  }
}
