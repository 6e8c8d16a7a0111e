// `port-forward`, `ports` and `port-public`: reaching what a sandbox serves from this machine.
import net from 'node:net';
import { InvalidArgumentError, type Command } from 'commander';
import { Sandbox } from '@sandglass/sdk';
import type { Act } from './shared.js';

/** `[local:]remote`, like kubectl port-forward: local 0 picks a free port; without one, the same number as remote. */
export function parseForward(spec: string): { localPort: number; remotePort: number } {
  const m = /^(?:(\d{1,5}):)?(\d{1,5})$/.exec(spec);
  const local = m?.[1] === undefined ? undefined : Number(m[1]);
  const remote = m ? Number(m[2]) : Number.NaN;
  if (!m || remote < 1 || remote > 65535 || (local !== undefined && local > 65535)) {
    throw new InvalidArgumentError('must be [local:]remote, ports 1-65535 (local 0: any free port)');
  }
  return { localPort: local ?? remote, remotePort: remote };
}

function parsePort(value: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) < 1 || Number(value) > 65535) throw new InvalidArgumentError('must be a port from 1 to 65535');
  return Number(value);
}

function parseBool(value: string): boolean {
  if (value === 'on' || value === 'true') return true;
  if (value === 'off' || value === 'false') return false;
  throw new InvalidArgumentError('must be on or off');
}

export function registerPortCommands(program: Command, act: Act): void {
  program
    .command('port-forward')
    .description('listen on 127.0.0.1 and tunnel each connection to a port in the sandbox (raw TCP), until interrupted')
    .argument('<id>', 'sandbox id')
    .argument('<ports>', '[local:]remote', parseForward)
    .action(
      act(async (id: string, spec: { localPort: number; remotePort: number }) => {
        const sbx = await Sandbox.connect(id);
        const server = net.createServer((local) => {
          local.pause();
          sbx.ports.connect(spec.remotePort).then(
            (remote) => {
              local.pipe(remote).pipe(local);
              const close = () => {
                local.destroy();
                remote.destroy();
              };
              local.on('error', close).on('close', close);
              remote.on('error', close).on('close', close);
              local.resume();
            },
            (err: Error) => {
              process.stderr.write(`sandglass: port-forward: ${err.message}\n`);
              local.destroy();
            },
          );
        });
        await new Promise<void>((resolve, reject) => server.once('error', reject).listen(spec.localPort, '127.0.0.1', resolve));
        const { port } = server.address() as net.AddressInfo;
        process.stdout.write(`Forwarding from 127.0.0.1:${port} -> ${id}:${spec.remotePort}\n`);
        await new Promise<void>((resolve) => {
          const stop = () => server.close(() => resolve());
          process.once('SIGINT', stop).once('SIGTERM', stop);
        });
      }),
    );

  program
    .command('ports')
    .description('list the TCP ports listening in the sandbox')
    .argument('<id>', 'sandbox id')
    .action(
      act(async (id: string) => {
        const sbx = await Sandbox.connect(id);
        for (const p of await sbx.ports.list()) process.stdout.write(`${p.port}\t${p.address}\t${p.public ? 'public' : 'private'}\n`);
      }),
    );

  program
    .command('port-public')
    .description('open a sandbox port to requests without credentials (on), or make it private again (off)')
    .argument('<id>', 'sandbox id')
    .argument('<port>', 'guest port', parsePort)
    .argument('<on|off>', 'on or off', parseBool)
    .action(
      act(async (id: string, port: number, open: boolean) => {
        await (await Sandbox.connect(id)).ports.setPublic(port, open);
      }),
    );
}
