// The QEMU `microvm` driver: cold boot, save a snapshot (RAM stays in its file, device state to a stream), restore.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  constants as fsc,
  createWriteStream,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  existsSync,
  rmSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SandglassError, processStartTime } from '@sandglass/core';
import { QmpClient, type QmpEvent } from './qmp.js';
import { createCgroup, noCgroup, type Cgroup } from './cgroup.js';
import { ConsoleLink } from './console.js';
import type { Accel } from './host.js';
import {
  chownToVm,
  jailContext,
  jailerArgv,
  vmIdentity,
  qemuHostFiles,
  readRecord,
  recordPath,
  releaseVmIdentity,
  writeRecord,
  type JailContext,
} from './jail.js';

const execFileP = promisify(execFile);

export interface VmConfig {
  memoryMib: number;
  vcpus: number;
  accel: Accel;
  /** QEMU `-cpu` model: the one the accelerator probe proved (see accel.ts); default `host` under KVM, `max` under TCG. */
  cpu?: string;
}

/** One image of a block device's chain, as QMP `query-block` describes it (the fields Sandglass reads). */
interface QueryBlockImage {
  filename: string;
  'virtual-size': number;
  'backing-image'?: QueryBlockImage;
}

/** Files of one VM's runtime directory. */
export interface VmPaths {
  dir: string;
  qmpSocket: string;
  agentSocket: string;
  /** Where QEMU's serial console connects (the gateway listens: see ConsoleLink). */
  consoleSocket: string;
  disk: string;
}

export function vmPaths(dir: string): VmPaths {
  return {
    dir,
    qmpSocket: join(dir, 'qmp.sock'),
    agentSocket: join(dir, 'agent.sock'),
    consoleSocket: join(dir, 'console.sock'),
    disk: join(dir, 'disk.qcow2'),
  };
}

export interface BootSpec {
  id: string;
  dir: string;
  config: VmConfig;
  kernelPath: string;
  initrdPath: string;
  append: string;
  /** Raw root filesystem image; the VM writes to a qcow2 overlay over it in `dir`. */
  rootfsPath: string;
  /** File that holds guest RAM, mapped shared so the snapshot reads it without copying. */
  memPath: string;
}

/** A snapshot as the driver needs it: RAM file, device-state stream, frozen disk layer, and the config they were taken with. */
export interface SnapshotFiles {
  memPath: string;
  statePath: string;
  diskPath: string;
  config: VmConfig;
}

/**
 * What a restore starts from, all prepared by the caller: the VM's own RAM file (mapped shared, so the VM's live
 * snapshots read it directly), the device-state stream, and the VM's own qcow2 disk overlay.
 */
export interface RestoreSpec {
  id: string;
  dir: string;
  config: VmConfig;
  memPath: string;
  statePath: string;
  diskPath: string;
  /**
   * Runs once QEMU is up and before the snapshot is loaded. Connecting the agent's socket here means the
   * migrated "host connected" state of the virtio-serial port stays true, so the guest agent never sees a hangup.
   */
  beforeLoad?: (vm: Vm) => Promise<void>;
  /**
   * Resolves once `memPath` holds the snapshot's RAM and `diskPath` exists (the caller is still making them): the
   * jail is built meanwhile, and QEMU starts only after. Absent: both are complete already.
   */
  filesReady?: Promise<void>;
  /**
   * Set when `diskPath` is a new overlay the caller is still creating onto this image: the jail mirrors this image
   * and its chain, which is what the overlay's header will name, instead of reading a header not yet written.
   */
  diskBacking?: string;
  /**
   * Maps `memPath` privately (QEMU's `share=off`): guest writes go to QEMU's own copy-on-write pages and the file is
   * never written, so VMs restored from one template image share its unwritten pages. Only without the jail (a
   * measurement, docs/design/density.md): QEMU 7.2 opens a private RAM file read-write, and a jailed QEMU given a
   * shared image writable could change every other VM's unwritten pages. Snapshots read guest RAM from the file, so
   * the VM refuses them (`Vm.privateRam`).
   */
  privateRam?: boolean;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when we asked it to stop. */
  expected: boolean;
  stderrTail: string;
}

const SANDBOX_ARGS = 'on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny';
/**
 * TCG's translation cache in MiB. Its pages become resident as code is translated and stay so (a full cache is
 * flushed and refilled from the start), so it bounds what translation costs each VM in host memory; too small and
 * the guest's working set of code is re-translated over and over. SANDGLASS_TCG_TB_MIB overrides it (1–1024).
 * Measurements: docs/design/density.md.
 */
export const DEFAULT_TCG_TB_MIB = 32;

export function tcgTbMib(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.SANDGLASS_TCG_TB_MIB;
  if (raw === undefined || raw === '') return DEFAULT_TCG_TB_MIB;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < 1 || v > 1024)
    throw new SandglassError('invalid_argument', `SANDGLASS_TCG_TB_MIB must be an integer from 1 to 1024, got ${JSON.stringify(raw)}`);
  return v;
}
/**
 * glibc's allocator settings for QEMU (GLIBC_TUNABLES): none, glibc's defaults. SANDGLASS_QEMU_GLIBC_TUNABLES sets
 * them, to measure again (docs/design/density.md: one arena saved 0.2 MiB per VM, rejected).
 */
export const DEFAULT_QEMU_GLIBC_TUNABLES = '';

/**
 * Whether QEMU may have transparent huge pages (SANDGLASS_QEMU_THP=on|off, default off). QEMU asks for them
 * (MADV_HUGEPAGE) on its TCG code buffer and its RAM blocks, and a huge page is resident whole however little of it
 * is used: the ACPI table block holds 4 KiB of tables in a 2 MiB block, and cost 2 MiB per VM. Off needs the jailer
 * (PR_SET_THP_DISABLE); QEMU run directly keeps the host's setting. Measurements: docs/design/density.md.
 */
export const DEFAULT_QEMU_THP: 'on' | 'off' = 'off';

export function qemuThp(env: NodeJS.ProcessEnv = process.env): boolean {
  const raw = env.SANDGLASS_QEMU_THP || DEFAULT_QEMU_THP;
  if (raw !== 'on' && raw !== 'off') throw new SandglassError('invalid_argument', `SANDGLASS_QEMU_THP must be on or off, got ${JSON.stringify(raw)}`);
  return raw === 'on';
}

/** The environment QEMU runs with, besides PATH. */
export function qemuEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const tunables = env.SANDGLASS_QEMU_GLIBC_TUNABLES ?? DEFAULT_QEMU_GLIBC_TUNABLES;
  if (!/^[A-Za-z0-9_.=:]{0,256}$/.test(tunables)) {
    throw new SandglassError('invalid_argument', `SANDGLASS_QEMU_GLIBC_TUNABLES must be glibc's name=value:… list, got ${JSON.stringify(tunables)}`);
  }
  return tunables === '' ? {} : { GLIBC_TUNABLES: tunables };
}
// QEMU itself (device emulation, TCG cache, page tables) on top of guest RAM.
const VMM_OVERHEAD_MIB = 192;

function machineArgs(id: string, paths: VmPaths, config: VmConfig, memPath: string, diskPath: string, shareRam = true): string[] {
  // biome-ignore format: QEMU arguments read as one flag and its value per line
  return [
    '-name', `sandglass-${id}`,
    '-M', 'microvm,pic=off,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem',
    ...(config.accel === 'kvm' ? ['-accel', 'kvm'] : ['-accel', `tcg,tb-size=${tcgTbMib()}`]),
    '-cpu', config.cpu ?? (config.accel === 'kvm' ? 'host' : 'max'),
    '-smp', String(config.vcpus),
    '-m', `${config.memoryMib}M`,
    '-object', `memory-backend-file,id=mem,size=${config.memoryMib}M,mem-path=${memPath},share=${shareRam ? 'on' : 'off'}`,
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    '-sandbox', SANDBOX_ARGS,
    '-chardev', `socket,id=qmp,path=${paths.qmpSocket},server=on,wait=off`,
    '-mon', 'chardev=qmp,mode=control',
    // Not a file: a guest printing forever would fill the host's disk. The gateway keeps a bounded ring instead.
    '-chardev', `socket,id=console,path=${paths.consoleSocket},server=off`,
    '-serial', 'chardev:console',
    '-drive', `id=root,file=${diskPath},format=qcow2,if=none,discard=unmap`,
    '-device', 'virtio-blk-device,drive=root',
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=agent,path=${paths.agentSocket},server=on,wait=off`,
    // Named so QMP can address the port (query its state, VSERPORT_CHANGE events).
    '-device', 'virtserialport,id=agentport,chardev=agent,name=agent',
  ];
}

/** Creates VM `vmId`'s runtime directory, owned by the VM's own uid (QEMU creates its sockets and files there). */
export function prepareVmDir(dir: string, vmId: string): VmPaths {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chownToVm(dir, vmId);
  return vmPaths(dir);
}

export async function createOverlay(path: string, backing: string, backingFormat: 'raw' | 'qcow2', vmId: string): Promise<void> {
  try {
    await execFileP('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', backingFormat, '-b', backing, path]);
  } catch (err) {
    throw new SandglassError('internal', `qemu-img create failed: ${(err as { stderr?: string }).stderr ?? err}`, { cause: err });
  }
  chownToVm(path, vmId);
}

export interface LiveCapture {
  /** The disk layer that was active until the capture: frozen now, holding the writes since the previous capture. */
  frozenLayer: string;
  stateBytes: number;
  freezeMs: number;
  stateMs: number;
  /** From stop until the RAM copy finished (it overlaps the freeze and the device state). */
  copyMs: number;
  /** From `stop` to `cont` answered: how long the guest did not run. */
  pausedMs: number;
}

/**
 * Copies a file keeping its holes: guest RAM files are mostly untouched pages. The copies run in one long-lived
 * helper (helpers/sparse-copy.py: SEEK_DATA/SEEK_HOLE + copy_file_range): spawning a process per copy costs
 * 15–25 ms on these hosts, which a live snapshot would add to the guest's pause.
 */
export async function copySparse(from: string, to: string): Promise<void> {
  const out = await copier.run(from, to);
  if (out === '') return;
  if (/No space left|Disk quota/.test(out)) throw new SandglassError('storage_full', `copying guest memory failed: ${out}`);
  throw new SandglassError('internal', `copying guest memory failed: ${out}`);
}

/** How long an exited QEMU's console may take to deliver its last bytes. */
const CONSOLE_DRAIN_MS = 1000;

class Copier {
  private shell?: ChildProcess;
  private readonly waiting = new Map<number, (out: string) => void>();
  private nextId = 1;

  run(from: string, to: string): Promise<string> {
    if (/[\n\0]/.test(from + to)) return Promise.resolve('path contains a newline or NUL');
    const shell = this.ensure();
    const id = this.nextId++;
    this.hold(true);
    return new Promise((resolve) => {
      this.waiting.set(id, (out) => {
        if (this.waiting.size === 0) this.hold(false);
        resolve(out);
      });
      shell.stdin!.write(`${id}\n${from}\n${to}\n`);
    });
  }

  /** The idle shell must not keep the process alive; one with a copy in flight must. */
  private hold(on: boolean): void {
    const sh = this.shell;
    if (!sh) return;
    for (const h of [sh, sh.stdin, sh.stdout] as unknown as Array<{ ref?: () => void; unref?: () => void }>) {
      if (on) h.ref?.();
      else h.unref?.();
    }
  }

  private ensure(): ChildProcess {
    if (this.shell) return this.shell;
    // Its own process group: a Ctrl-C at the terminal signals the whole foreground group, and the server's orderly
    // stop that follows still copies RAM files. It ends with its stdin when this process does.
    const shell = spawn('python3', ['-u', fileURLToPath(new URL('../../vmm/helpers/sparse-copy.py', import.meta.url))], {
      stdio: ['pipe', 'pipe', 'ignore'],
      detached: true,
    });
    let buffered = '';
    shell.stdout!.setEncoding('utf8');
    shell.stdout!.on('data', (chunk: string) => {
      buffered += chunk;
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        const sp = line.indexOf(' ');
        const id = Number(line.slice(0, sp));
        const resolve = this.waiting.get(id);
        this.waiting.delete(id);
        resolve?.(line.slice(sp + 1).trim());
      }
    });
    // A helper that is gone (a signal, the OOM killer, a failed spawn) fails the copies waiting on it, and a write to
    // its stdin then fails with EPIPE: that must reach those copies as an error, never crash the gateway. The next copy
    // starts a new helper.
    const gone = (why: string) => {
      if (this.shell !== shell) return;
      this.shell = undefined;
      const pending = [...this.waiting.values()];
      this.waiting.clear();
      for (const resolve of pending) resolve(why);
    };
    shell.stdin!.on('error', (err) => gone(`the copy helper is gone: ${err.message}`));
    shell.on('error', (err) => gone(`the copy helper could not run: ${err.message}`));
    shell.once('exit', () => gone('the copy helper exited'));
    this.shell = shell;
    return shell;
  }
}

const copier = new Copier();

/** Starts the copy helper ahead of the first snapshot (Python takes a few hundred ms to start). */
export function warmCopier(): void {
  void copier.run('/dev/null', '/dev/null');
}

/** A one-off copy that also turns zero-filled blocks into holes (GNU cp reads every block): slower, smaller. */
export async function copyCompacting(from: string, to: string): Promise<void> {
  try {
    await execFileP('cp', ['--sparse=always', '--reflink=never', from, to]);
  } catch (err) {
    throw new SandglassError('internal', `copying ${from} failed: ${String((err as { stderr?: string }).stderr ?? err).trim()}`, { cause: err });
  }
}

export class Vm {
  readonly paths: VmPaths;
  readonly exited: Promise<ExitInfo>;
  qmp?: QmpClient;
  /** Why the guest went down, from QEMU's SHUTDOWN event (guest-panic, guest-reset, guest-shutdown …). */
  shutdownReason?: string;
  private stopping = false;
  private stderr = '';
  /**
   * The root disk's layers this VM owns, active first, as the host named them: the driver's record, never QEMU's
   * word. Every one lies directly in the VM's run directory; the frozen layer they sit on belongs to someone else.
   */
  readonly #layers: string[];

  constructor(
    readonly id: string,
    readonly config: VmConfig,
    readonly child: ChildProcess,
    readonly cgroup: Cgroup,
    dir: string,
    /** The file that holds guest RAM (mapped shared by QEMU). */
    readonly memPath: string,
    private readonly console: ConsoleLink,
    /** The root disk's active layer as the host created it, in `dir`. */
    rootLayer: string,
  ) {
    this.paths = vmPaths(dir);
    this.#layers = [rootLayer];
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (s: string) => {
      this.stderr = (this.stderr + s).slice(-4096);
    });
    child.stdout?.resume();
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.qmp?.close();
        // Read what QEMU wrote to the console before it went (a failure report's tail), then close.
        void this.console.drained(CONSOLE_DRAIN_MS).then(() => this.console.close());
        this.cgroup.remove();
        if (this.record) rmSync(this.record, { force: true });
        releaseVmIdentity(id);
        resolve({ code, signal, expected: this.stopping, stderrTail: this.stderr.trim() });
      });
    });
  }

  /** Where this VM's record lies (see VmRecord): it names QEMU's pid, which under the jailer is not the child's. */
  record?: string;
  /** RAM mapped privately (RestoreSpec.privateRam): the file is not the guest's memory, so nothing may be read from it. */
  privateRam = false;
  private qemuPid?: number;

  /** QEMU's pid (the jailer's child once it exec'd QEMU, or the child itself without a jail). */
  get pid(): number {
    if (this.qemuPid === undefined && this.record) this.qemuPid = readRecord(this.record)?.pid;
    return this.qemuPid ?? this.child.pid!;
  }

  get isRunning(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The last bytes of the guest's serial console, for failure reports (from the ring: at most its size). */
  consoleTail(maxBytes = 4096): string {
    return this.console.ring.tail(maxBytes).toString('utf8');
  }

  /** The console's tail once QEMU has exited and the last bytes it wrote have arrived (bounded): a failure's report. */
  async consoleTailAtExit(maxBytes = 4096): Promise<string> {
    await this.exited;
    await this.console.drained(CONSOLE_DRAIN_MS);
    return this.consoleTail(maxBytes);
  }

  /** Bytes the guest printed on its console since this VM started; the host keeps only the ring's worth. */
  get consoleBytes(): number {
    return this.console.ring.totalBytes;
  }

  /** Proportional set size of the QEMU process: its fair share of memory shared with other VMs. */
  pssBytes(): number | undefined {
    try {
      const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${this.pid}/smaps_rollup`, 'utf8'));
      return m ? Number(m[1]) * 1024 : undefined;
    } catch {
      return undefined;
    }
  }

  /** Stops the VM: QMP quit, then SIGKILL if it lingers. Resolves once the process is gone. */
  async stop(graceMs = 2000): Promise<ExitInfo> {
    this.stopping = true;
    if (this.isRunning) {
      this.qmp?.execute('quit').catch(() => {});
      const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
      const info = await this.exited;
      clearTimeout(timer);
      return info;
    }
    return this.exited;
  }

  kill(): void {
    this.stopping = true;
    this.child.kill('SIGKILL');
  }

  /**
   * Saves device state to `statePath` while guest RAM stays in its shared file (`x-ignore-shared`):
   * the stream is small and the pause is short. The VM is left stopped.
   */
  async saveSnapshot(statePath: string): Promise<{ pausedMs: number; stateBytes: number }> {
    this.#requireSharedRam();
    const t0 = performance.now();
    await this.requireQmp().execute('stop');
    const stateBytes = await this.#migrateDeviceState(statePath);
    return { pausedMs: performance.now() - t0, stateBytes };
  }

  /**
   * A live snapshot of a running VM, consistent across RAM, devices and disk. While the guest is stopped: the disk's
   * active qcow2 layer is frozen (new writes go to `newLayerPath`), device state is migrated to `statePath`, and,
   * at the same time, the RAM file is copied sparsely to `memCopyPath` (tmpfs to tmpfs; holes stay holes). Then the
   * guest continues; the caller reads the frozen layer and the copy at leisure. The pause is the stop plus the longer
   * of the copy and freeze + device state. If anything fails the guest is continued and the error thrown.
   */
  async captureLive(opts: { statePath: string; memCopyPath: string; newLayerPath: string }): Promise<LiveCapture> {
    const qmp = this.requireQmp();
    this.#requireSharedRam();
    if (dirname(opts.newLayerPath) !== this.paths.dir) throw new SandglassError('internal', `a new disk layer must lie in ${this.paths.dir}`);
    const frozenLayer = this.#layers[0]!;
    const t0 = performance.now();
    await qmp.execute('stop');
    let capture: LiveCapture;
    try {
      // The RAM copy (another process) runs while QEMU freezes the disk and streams device state: both only need
      // the guest stopped, and on two cores they overlap instead of adding up.
      const copied = copySparse(this.memPath, opts.memCopyPath).then(() => performance.now() - t0);
      copied.catch(() => {});
      await qmp.execute('blockdev-snapshot-sync', { device: 'root', 'snapshot-file': opts.newLayerPath, format: 'qcow2', mode: 'absolute-paths' });
      this.#layers.unshift(opts.newLayerPath);
      const tFrozen = performance.now();
      const stateBytes = await this.#migrateDeviceState(opts.statePath);
      const tState = performance.now();
      const copyMs = await copied;
      capture = { frozenLayer, stateBytes, freezeMs: tFrozen - t0, stateMs: tState - tFrozen, copyMs, pausedMs: 0 };
    } finally {
      await qmp.execute('cont').catch(() => {});
    }
    capture.pausedMs = performance.now() - t0;
    return capture;
  }

  /**
   * Freezes the disk's active qcow2 layer alone (new writes go to `newLayerPath`): a disk-only snapshot, with no RAM
   * copy and no device state. `stop` flushes QEMU's own caches first, so the frozen layer is whole on its own; what the
   * guest still holds in its page cache is not in it (the caller syncs the guest first). The guest then continues.
   */
  async freezeDisk(newLayerPath: string): Promise<{ frozenLayer: string; pausedMs: number }> {
    const qmp = this.requireQmp();
    if (dirname(newLayerPath) !== this.paths.dir) throw new SandglassError('internal', `a new disk layer must lie in ${this.paths.dir}`);
    const frozenLayer = this.#layers[0]!;
    const t0 = performance.now();
    await qmp.execute('stop');
    try {
      await qmp.execute('blockdev-snapshot-sync', { device: 'root', 'snapshot-file': newLayerPath, format: 'qcow2', mode: 'absolute-paths' });
      this.#layers.unshift(newLayerPath);
    } finally {
      await qmp.execute('cont').catch(() => {});
    }
    return { frozenLayer, pausedMs: performance.now() - t0 };
  }

  /** The root disk's active layer as QMP `query-block` reports it, with its backing images below it. */
  async #rootImage(): Promise<QueryBlockImage> {
    const blocks = await this.requireQmp().execute<Array<{ device: string; inserted?: { image: QueryBlockImage } }>>('query-block');
    const root = blocks.find((b) => b.device === 'root');
    if (!root?.inserted) throw new SandglassError('vm_failed', `VM ${this.id} has no root disk`);
    return root.inserted.image;
  }

  /** The root disk's size as the guest sees it (the active layer's virtual size). */
  async diskBytes(): Promise<number> {
    return (await this.#rootImage())['virtual-size'];
  }

  /**
   * Makes the root disk `bytes` long while the guest runs: the active layer grows (the layers under it keep their
   * size; reads past them are zeros) and the guest gets a config-change interrupt. Its filesystem grows separately.
   */
  async growDisk(bytes: number): Promise<void> {
    await this.requireQmp().execute('block_resize', { device: 'root', size: bytes });
  }

  /**
   * This VM's own disk layers, active first, as the host created them: what the host may read into a snapshot and
   * delete after a merge. First QEMU's `query-block` must report exactly that chain down to `base` (the frozen layer
   * they sit on; below it lies the template's own chain, not looked at), and each layer must be a plain file in the
   * run directory, not a symlink: a compromised QEMU naming another VM's layer or a template's, or pointing one of its
   * own names elsewhere, is refused (vm_reply_refused) before host code opens any of them. The names returned are the
   * host's, never the strings QEMU sent.
   */
  async ownDiskLayers(base: string): Promise<string[]> {
    const expected = [...this.#layers, base];
    const reported: unknown[] = [];
    // Down to the base only: what lies below it (the template's own chain) is never read or deleted here.
    for (let img: unknown = await this.#rootImage(); isObject(img) && reported.length < expected.length; img = img['backing-image']) {
      reported.push(img.filename);
    }
    const at = expected.findIndex((p, i) => reported[i] !== p);
    if (at >= 0) {
      throw chainRefused(
        this.id,
        `QEMU reports ${JSON.stringify(String(reported[at] ?? 'nothing')).slice(0, 300)} at depth ${at} of the root disk, not ${JSON.stringify(expected[at])}`,
      );
    }
    const dir = realpathSync(this.paths.dir);
    for (const layer of this.#layers) {
      const st = lstatSync(layer, { throwIfNoEntry: false });
      if (dirname(layer) !== this.paths.dir || !st?.isFile() || realpathSync(layer) !== join(dir, basename(layer))) {
        throw chainRefused(this.id, `disk layer ${layer} is not a plain file of the VM's run directory (a symlink, or replaced)`);
      }
    }
    return [...this.#layers];
  }

  /**
   * Merges the disk layer `top` into the layer below it, `base`, while the guest runs (QEMU block-commit of an
   * intermediate layer), so the chain never grows past template ← base ← active however many snapshots are taken.
   */
  async commitLayer(top: string, base: string, timeoutMs = 120_000): Promise<void> {
    const qmp = this.requireQmp();
    const jobId = `commit-${Date.now().toString(36)}`;
    const done = qmp.waitForEvent('BLOCK_JOB_COMPLETED', (d) => d.device === jobId, timeoutMs);
    const from = this.#layers.indexOf(top);
    const to = this.#layers.indexOf(base);
    if (from < 1 || to <= from) throw new SandglassError('internal', `${top} and ${base} are not intermediate layers of VM ${this.id}'s disk, top above base`);
    await qmp.execute('block-commit', { 'job-id': jobId, device: 'root', top, base });
    const ev = await done;
    if (ev.data?.error) throw new SandglassError('vm_failed', `merging disk layer ${top} failed: ${String(ev.data.error)}`);
    // The layers from top down to above base are out of the chain now; base holds their writes.
    this.#layers.splice(from, to - from);
  }

  /** Streams the device state (RAM excluded: it is in the shared file) to `statePath`; the VM must be stopped. */
  async #migrateDeviceState(statePath: string): Promise<number> {
    const qmp = this.requireQmp();
    const migSock = join(this.paths.dir, 'migrate.sock');
    rmSync(migSock, { force: true });
    // The state file may lie in the VM's run directory, which a running QEMU can write: a link there is refused.
    const out = createWriteStream(statePath, { fd: openSync(statePath, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC | fsc.O_NOFOLLOW, 0o600) });
    let received = 0;
    const server = createServer((conn) => {
      conn.on('data', (d: Buffer) => (received += d.length));
      conn.pipe(out);
    });
    await new Promise<void>((resolve, reject) => server.listen(migSock, resolve).once('error', reject));
    // QEMU runs and can write this directory: the socket is handed over without following a link it swapped in,
    // and not chmod'ed (that would follow one); its owner alone may connect (write permission), as umask leaves it.
    chownToVm(migSock, this.id);
    if (!lstatSync(migSock).isSocket()) throw new SandglassError('vm_reply_refused', `VM ${this.id} replaced its migration socket; no snapshot was taken.`);
    const streamDone = new Promise<void>((resolve, reject) => {
      out.once('finish', resolve);
      out.once('error', reject);
    });
    try {
      await qmp.execute('migrate-set-capabilities', {
        capabilities: [
          { capability: 'x-ignore-shared', state: true },
          { capability: 'events', state: true },
        ],
      });
      const done = qmp.waitForEvent('MIGRATION', (d) => d.status === 'completed' || d.status === 'failed', 60_000);
      await qmp.execute('migrate', { uri: `unix:${migSock}` });
      const ev = await done;
      if (ev.data?.status !== 'completed') {
        const info = await qmp.execute<{ 'error-desc'?: string }>('query-migrate').catch(() => ({}) as { 'error-desc'?: string });
        throw new SandglassError('vm_failed', `snapshot migration failed: ${info['error-desc'] ?? 'unknown'}`);
      }
      await streamDone;
    } finally {
      server.close();
      out.destroy();
    }
    const fd = openSync(statePath, 'r');
    fsyncSync(fd);
    closeSync(fd);
    return received;
  }

  /** A snapshot reads guest RAM from the VM's file: with a private mapping that file lacks every page the guest wrote. */
  #requireSharedRam(): void {
    if (this.privateRam) throw new SandglassError('internal', `VM ${this.id} maps its RAM privately; its RAM file is not its memory and no snapshot is taken`);
  }

  requireQmp(): QmpClient {
    if (!this.qmp || this.qmp.isClosed) throw new SandglassError('vm_failed', `VM ${this.id} has no QMP connection`);
    return this.qmp;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

function chainRefused(vmId: string, why: string): SandglassError {
  return new SandglassError('vm_reply_refused', `VM ${vmId}'s disk chain was refused: ${why}; nothing was read or deleted.`, {
    details: { field: 'query-block' },
  });
}

/** What a VM reads besides its own run directory and RAM file, all mirrored read-only into its jail. */
interface VmFiles {
  /** The active disk layer; the jail mirrors its backing chain. */
  disk: string;
  readOnly?: string[];
  /** Descriptors passed on as 3, 4, …: a restore's device-state stream. */
  extraFds?: number[];
  /** The image whose backing chain the jail mirrors, when not `disk`'s own (an overlay not yet written). */
  chainOf?: string;
  /** QEMU must not start before this resolves (its files are being made); the jailer builds the jail meanwhile. */
  ready?: Promise<void>;
}

/**
 * The VM's cgroup. With the jailer, limits that cannot be applied fail the start (SANDGLASS_CGROUPS=off, for
 * development, is the only way round); without it (not root) there were never going to be any.
 */
export function vmCgroup(ctx: JailContext, id: string, config: VmConfig): Cgroup {
  const cgroup = createCgroup(id, vmLimits(config));
  if (cgroup.kind === 'none' && ctx.mode === 'jailed' && ctx.cgroups) {
    throw new SandglassError(
      'vm_failed',
      `VM ${id} cannot start: its memory and CPU limits cannot be applied (${cgroup.reason}). SANDGLASS_CGROUPS=off runs VMs without limits (development only).`,
    );
  }
  return cgroup;
}

export function vmLimits(config: VmConfig): { memoryBytes: number; cpus: number } {
  return { memoryBytes: (config.memoryMib + VMM_OVERHEAD_MIB) * 1024 * 1024, cpus: config.vcpus };
}

// RLIMIT_AS on top of guest RAM: QEMU reserves address space it never touches (thread stacks, malloc arenas, the
// TCG translation buffer), so this bounds mappings, not use; the cgroup bounds use.
const ADDRESS_SPACE_OVERHEAD_MIB = 2048;

async function spawnQemu(id: string, dir: string, config: VmConfig, memPath: string, args: string[], files: VmFiles): Promise<Vm> {
  const ctx = jailContext();
  const early = ctx.mode === 'jailed' && files.ready !== undefined;
  // Without the jailer there is nothing to build while the files fill: QEMU would run at once.
  if (!early) await files.ready;
  // Listening before QEMU starts: its console chardev connects once, at start, and QEMU exits if nobody answers.
  const consoleLink = await ConsoleLink.listen(vmPaths(dir).consoleSocket, (p) => chownToVm(p, id));
  let cgroup: Cgroup;
  try {
    cgroup = ctx.cgroups ? vmCgroup(ctx, id, config) : noCgroup('SANDGLASS_CGROUPS=off');
  } catch (err) {
    consoleLink.close();
    throw err;
  }
  const qemu = qemuHostFiles();
  // With `ready` pending, the jailer's stdin is the pipe that releases QEMU (--start-on-stdin).
  const stdio: Array<'ignore' | 'pipe' | number> = [early ? 'pipe' : 'ignore', 'pipe', 'pipe', ...(files.extraFds ?? [])];
  // A record beside the run directory, never in it: the VM can write there.
  const record = recordPath(ctx, id) ?? `${dir}.vm.json`;
  let child: ChildProcess;
  if (ctx.mode === 'jailed') {
    const argv = jailerArgv(
      ctx,
      {
        id,
        identity: vmIdentity(id),
        cgroupDirs: cgroup.kind === 'none' ? null : cgroup.dirs,
        writable: [dir, memPath],
        readOnly: files.readOnly ?? [],
        sharedReadOnly: qemu.data,
        disks: [files.chainOf ?? files.disk],
        kvm: config.accel === 'kvm',
        addressSpaceBytes: (config.memoryMib + ADDRESS_SPACE_OVERHEAD_MIB) * 1024 * 1024,
        keepFds: files.extraFds?.length ?? 0,
        record,
        env: qemuEnv(),
        noThp: !qemuThp(),
        startOnStdin: early,
      },
      [qemu.binary, ...args],
    );
    child = spawn(ctx.jailerPath, argv, { stdio, env: {} });
  } else {
    child = spawn(qemu.binary, args, { stdio, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...qemuEnv() } });
    if (child.pid) {
      // Without the jailer QEMU joins its cgroup only now, before it allocates guest memory.
      try {
        cgroup.addProcess(child.pid);
      } catch {
        // The process died at once; the exit handler reports why.
      }
      const startTime = processStartTime(child.pid);
      if (startTime) writeRecord(record, { vm: id, instance: ctx.instanceId, pid: child.pid, startTime });
    }
  }
  const vm = new Vm(id, config, child, cgroup, dir, memPath, consoleLink, files.disk);
  vm.record = record;
  if (early) {
    // A jailer that died already makes the write fail with EPIPE: its exit says why, from attachQmp.
    child.stdin!.on('error', () => {});
    try {
      await files.ready;
    } catch (err) {
      // Stdin's EOF tells the jail to end without running QEMU; the kill makes sure of it.
      child.stdin!.destroy();
      vm.kill();
      await vm.exited;
      throw err;
    }
    child.stdin!.end(Buffer.from([1]));
  }
  return vm;
}

async function attachQmp(vm: Vm, timeoutMs: number): Promise<QmpClient> {
  const early = vm.exited.then((e) => {
    throw new SandglassError('vm_failed', `QEMU exited at start (code ${e.code}, signal ${e.signal}): ${e.stderrTail}`);
  });
  vm.qmp = await Promise.race([QmpClient.connect(vm.paths.qmpSocket, { timeoutMs }), early]);
  vm.qmp.on('event', (ev: QmpEvent) => {
    if (ev.event === 'SHUTDOWN') vm.shutdownReason = String(ev.data?.reason ?? 'unknown');
  });
  return vm.qmp;
}

/** Cold-boots a VM from kernel + initramfs + root image. Used only to build templates; sandboxes restore. */
export async function bootVm(spec: BootSpec): Promise<Vm> {
  const paths = prepareVmDir(spec.dir, spec.id);
  if (!existsSync(paths.disk)) await createOverlay(paths.disk, spec.rootfsPath, 'raw', spec.id);
  // biome-ignore format: QEMU arguments read as one flag and its value per line
  const args = [
    ...machineArgs(spec.id, paths, spec.config, spec.memPath, paths.disk),
    '-kernel', spec.kernelPath,
    '-initrd', spec.initrdPath,
    '-append', spec.append,
  ];
  const vm = await spawnQemu(spec.id, spec.dir, spec.config, spec.memPath, args, { disk: paths.disk, readOnly: [spec.kernelPath, spec.initrdPath] });
  await attachQmp(vm, 10_000);
  return vm;
}

/**
 * Restores a snapshot into a new VM from files the caller prepared (see RestoreSpec): device state is read from its
 * stream, RAM is already in the VM's own file. The VM is left paused: the caller links the agent, then calls `resume`.
 */
export async function restoreVm(spec: RestoreSpec): Promise<Vm> {
  if (spec.privateRam && jailContext().mode === 'jailed') {
    throw new SandglassError(
      'internal',
      `VM ${spec.id}: a privately mapped RAM image needs QEMU outside the jail (SANDGLASS_JAIL=off); see docs/design/density.md`,
    );
  }
  const paths = prepareVmDir(spec.dir, spec.id);
  const stateFd = openSync(spec.statePath, 'r');
  let vm: Vm;
  try {
    const args = [...machineArgs(spec.id, paths, spec.config, spec.memPath, spec.diskPath, !spec.privateRam), '-incoming', 'defer'];
    vm = await spawnQemu(spec.id, spec.dir, spec.config, spec.memPath, args, {
      disk: spec.diskPath,
      // The overlay's own backing file, then that file's chain: exactly what the overlay's header will name.
      ...(spec.diskBacking ? { readOnly: [spec.diskBacking], chainOf: spec.diskBacking } : {}),
      extraFds: [stateFd],
      ready: spec.filesReady,
    });
    vm.privateRam = spec.privateRam === true;
  } finally {
    closeSync(stateFd);
  }
  try {
    const qmp = await attachQmp(vm, 10_000);
    await spec.beforeLoad?.(vm);
    await qmp.execute('migrate-set-capabilities', {
      capabilities: [
        { capability: 'x-ignore-shared', state: true },
        { capability: 'events', state: true },
      ],
    });
    const done = qmp.waitForEvent('MIGRATION', (d) => d.status === 'completed' || d.status === 'failed', 60_000);
    // fd 3 of the child is the state stream we passed at spawn.
    await qmp.execute('migrate-incoming', { uri: 'fd:3' });
    const ev = await done;
    if (ev.data?.status !== 'completed') throw new SandglassError('vm_failed', 'restoring the snapshot failed');
    return vm;
  } catch (err) {
    vm.kill();
    const exit = await vm.exited;
    if (err instanceof SandglassError && exit.stderrTail) {
      throw new SandglassError(err.code, `${err.message}: ${exit.stderrTail}`, { cause: err });
    }
    throw err;
  }
}

export async function resumeVm(vm: Vm): Promise<void> {
  await vm.requireQmp().execute('cont');
}
