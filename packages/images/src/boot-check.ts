// Developer check, not product code: boots the guest image once under QEMU microvm and asks the agent `hello` (`npx tsx packages/images/src/boot-check.ts [--bzimage] [--agent-dir DIR]`).
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec } from './exec.js';
import { ensureGuestImage } from './guest-image.js';
import { defaultKernelArgs } from './kernel-args.js';

const READY_LINE = 'sandglass-agent ready';
const TIMEOUT_MS = 60_000;

function helloFrame(callId: number): Buffer {
  const payload = Buffer.from(JSON.stringify({ method: 'hello', params: { version: 1 } }));
  const head = Buffer.alloc(9);
  head.writeUInt32BE(payload.length + 5, 0);
  head.writeUInt8(1, 4); // CALL
  head.writeUInt32BE(callId, 5);
  return Buffer.concat([head, payload]);
}

/** Connects to the agent socket and returns the first REPLY's JSON. */
function hello(socketPath: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const sock = connect(socketPath);
    let buf = Buffer.alloc(0);
    sock.on('connect', () => sock.write(helloFrame(1)));
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
        const len = buf.readUInt32BE(0);
        const type = buf[4];
        const body = buf.subarray(9, 4 + len).toString('utf8');
        buf = buf.subarray(4 + len);
        if (type === 2) {
          sock.destroy();
          resolve(JSON.parse(body));
          return;
        }
      }
    });
    sock.on('error', reject);
  });
}

async function main(): Promise<void> {
  const useBzImage = process.argv.includes('--bzimage');
  const agentDirAt = process.argv.indexOf('--agent-dir');
  const agentDir = agentDirAt > 0 ? process.argv[agentDirAt + 1] : undefined;
  const t0 = performance.now();
  const image = await ensureGuestImage({ agentDir, onProgress: (p) => p.message && console.log(`[${p.step}] ${p.message}`) });
  console.log(`image ${image.key} ready in ${Math.round(performance.now() - t0)} ms`, image);
  const dir = await mkdtemp(join(tmpdir(), 'sg-boot-'));
  try {
    const overlay = join(dir, 'overlay.qcow2');
    await exec('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', image.rootfsPath, '-F', 'raw', overlay]);
    const consoleLog = join(dir, 'console.log');
    const agentSock = join(dir, 'agent.sock');
    const kernel = useBzImage ? join(image.kernelPath, '..', 'vmlinuz') : image.kernelPath;
    // biome-ignore format: QEMU arguments read as one flag and its value per line
    const args = [
      '-M', 'microvm,pic=off,x-option-roms=off', '-nodefaults', '-no-user-config', '-nographic', '-m', '256', '-cpu', 'max',
      '-kernel', kernel, '-initrd', image.initramfsPath, '-append', defaultKernelArgs().join(' '),
      '-serial', `file:${consoleLog}`,
      '-drive', `id=root,file=${overlay},format=qcow2,if=none`, '-device', 'virtio-blk-device,drive=root',
      '-device', 'virtio-serial-device',
      '-chardev', `socket,id=agent,path=${agentSock},server=on,wait=off`,
      '-device', 'virtserialport,chardev=agent,name=agent',
    ];
    const tStart = performance.now();
    const qemu = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'inherit', 'inherit'] });
    let exited = false;
    qemu.on('exit', () => (exited = true));
    try {
      let readyMs: number | undefined;
      while (readyMs === undefined) {
        if (exited) throw new Error(`qemu exited before the agent was ready:\n${await readFile(consoleLog, 'utf8').catch(() => '')}`);
        if (performance.now() - tStart > TIMEOUT_MS) throw new Error(`no "${READY_LINE}" in ${TIMEOUT_MS} ms:\n${await readFile(consoleLog, 'utf8')}`);
        if ((await readFile(consoleLog, 'utf8').catch(() => '')).includes(READY_LINE)) readyMs = performance.now() - tStart;
        else await new Promise((r) => setTimeout(r, 5));
      }
      const reply = await hello(agentSock);
      const helloMs = performance.now() - tStart;
      console.log(`kernel ${kernel}`);
      console.log(`agent ready after ${Math.round(readyMs)} ms, hello answered after ${Math.round(helloMs)} ms:`, JSON.stringify(reply));
      console.log('--- console ---\n' + (await readFile(consoleLog, 'utf8')));
    } finally {
      qemu.kill('SIGKILL');
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
