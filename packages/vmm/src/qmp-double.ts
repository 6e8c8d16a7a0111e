// For tests: a QMP server that plays QEMU's monitor (honest by default, scripted to lie) and a Vm driven by it, no QEMU.
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { ConsoleLink } from './console.js';
import { noCgroup } from './cgroup.js';
import { Vm } from './qemu.js';
import { QmpClient } from './qmp.js';

type Handler = (args: Record<string, unknown>) => unknown;

/**
 * Answers the QMP commands a live snapshot sends the way QEMU does: `query-block` reports `chain` (active layer
 * first), `blockdev-snapshot-sync` and `block-commit` change it as QEMU would, `migrate` streams a few bytes of
 * device state. A test lies by setting `chain` or a handler in `on`; `commands` lists what the host asked.
 */
export class QmpDouble {
  chain: string[];
  readonly on = new Map<string, Handler>();
  readonly commands: Array<{ execute: string; arguments: Record<string, unknown> }> = [];
  private conn?: Socket;

  private constructor(
    private readonly server: Server,
    chain: string[],
  ) {
    this.chain = chain;
  }

  static async listen(path: string, chain: string[]): Promise<QmpDouble> {
    let double!: QmpDouble;
    const server = createServer((conn) => double.serve(conn));
    double = new QmpDouble(server, chain);
    await new Promise<void>((resolve, reject) => server.listen(path, resolve).once('error', reject));
    return double;
  }

  event(event: string, data: Record<string, unknown>): void {
    this.conn?.write(`${JSON.stringify({ event, data, timestamp: { seconds: 0, microseconds: 0 } })}\n`);
  }

  close(): void {
    this.conn?.destroy();
    this.server.close();
  }

  private serve(conn: Socket): void {
    this.conn = conn;
    conn.setEncoding('utf8');
    conn.on('error', () => {});
    conn.write(`${JSON.stringify({ QMP: { version: { qemu: { major: 0, minor: 0, micro: 0 } }, capabilities: [] } })}\n`);
    let buf = '';
    conn.on('data', (chunk: string) => {
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const msg = JSON.parse(buf.slice(0, nl)) as { execute: string; arguments?: Record<string, unknown> };
        buf = buf.slice(nl + 1);
        const args = msg.arguments ?? {};
        this.commands.push({ execute: msg.execute, arguments: args });
        let reply: unknown;
        try {
          reply = { return: (this.on.get(msg.execute) ?? ((a: Record<string, unknown>) => this.honest(msg.execute, a)))(args) ?? {} };
        } catch (err) {
          reply = { error: { class: 'GenericError', desc: (err as Error).message } };
        }
        conn.write(`${JSON.stringify(reply)}\n`);
      }
    });
  }

  private honest(cmd: string, args: Record<string, unknown>): unknown {
    switch (cmd) {
      case 'query-block': {
        let image: Record<string, unknown> | undefined;
        for (const filename of [...this.chain].reverse()) image = { filename, 'virtual-size': 1 << 30, ...(image ? { 'backing-image': image } : {}) };
        return [{ device: 'root', inserted: { image } }];
      }
      case 'blockdev-snapshot-sync':
        // QEMU creates the new active layer's file; what it holds does not matter here (captures never read it).
        writeFileSync(String(args['snapshot-file']), '');
        this.chain.unshift(String(args['snapshot-file']));
        return {};
      case 'block-commit': {
        const from = this.chain.indexOf(String(args.top));
        const to = this.chain.indexOf(String(args.base));
        this.chain.splice(from, to - from);
        setImmediate(() => this.event('BLOCK_JOB_COMPLETED', { device: args['job-id'] }));
        return {};
      }
      case 'migrate': {
        const sock = connect(String(args.uri).slice('unix:'.length));
        sock.on('error', () => {});
        sock.end(Buffer.from('device state'), () => this.event('MIGRATION', { status: 'completed' }));
        return {};
      }
      default:
        return {};
    }
  }
}

/**
 * A running Vm named `id` in `dir` whose monitor is `double` and whose root disk's active layer is `rootLayer`: the
 * driver's own code, with no QEMU behind it. kill() ends it as a SIGKILL would.
 */
export async function vmOnQmpDouble(opts: {
  id: string;
  dir: string;
  memPath: string;
  rootLayer: string;
  chain: string[];
}): Promise<{ vm: Vm; qmp: QmpDouble }> {
  const qmp = await QmpDouble.listen(join(opts.dir, 'qmp.sock'), opts.chain);
  const child = Object.assign(new EventEmitter(), {
    exitCode: null,
    signalCode: null,
    kill: () => setImmediate(() => child.emit('exit', null, 'SIGKILL')),
  }) as unknown as ChildProcess;
  const consoleLink = await ConsoleLink.listen(join(opts.dir, 'console.sock'), () => {});
  const vm = new Vm(opts.id, { memoryMib: 1, vcpus: 1, accel: 'tcg' }, child, noCgroup('a QMP double'), opts.dir, opts.memPath, consoleLink, opts.rootLayer);
  vm.qmp = await QmpClient.connect(vm.paths.qmpSocket, { timeoutMs: 5000 });
  void vm.exited.then(() => qmp.close());
  return { vm, qmp };
}
