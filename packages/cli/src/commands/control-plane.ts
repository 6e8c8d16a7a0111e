// `sandglass control-plane`: one replica of a cluster's control plane; gateways join it with `sandglass gateway`.
import { Option, type Command } from 'commander';
import { parsePositiveInt } from '../args.js';
import type { Act } from './shared.js';

interface ControlPlaneFlags {
  db: string;
  listen: string;
  nodeSecretFile: string;
  keysDir: string;
  adminKeyFile?: string;
  deadAfterS: number;
  heartbeatIntervalS: number;
  store?: string;
}

const HELP = `
What each part needs:
  database        --db: postgres://user@host:port/db, shared by every replica (they hold no state of their own,
                  so any number of them can run behind a load balancer). sqlite:/path works for a single replica.
  node secret     --node-secret-file: created (mode 0600) when absent; copy the same file to every replica and to
                  every gateway (\`sandglass gateway --node-secret-file\`).
  keys            --keys-dir: the local keyring (master key, wrapped tenant keys); every replica must see the same
                  directory (shared storage, or copied before the first tenant exists).
  operator key    --admin-key-file: written on the first start, read on later ones (SANDGLASS_API_KEY for the CLI).
  chunk store     --store: the gateways' shared store (s3://bucket/prefix or file:/abs/path). Snapshot retention and
                  chunk GC run here, one replica at a time, every SANDGLASS_MAINTENANCE_INTERVAL_S (default 600);
                  without --store nothing is thinned or collected.
  failover        a gateway silent for --dead-after-s is declared dead (by exactly one replica) and each of its
                  sandboxes is resumed on another gateway from its newest snapshot.`;

export function registerControlPlaneCommand(program: Command, act: Act): void {
  program
    .command('control-plane')
    .description('run one replica of the control plane of a cluster (PostgreSQL; gateways join with `sandglass gateway`)')
    .addOption(new Option('--db <url>', 'database URL (postgres://…)').env('SANDGLASS_DB').makeOptionMandatory())
    .addOption(new Option('--listen <host:port>', 'API address (also the node API for gateways)').env('SANDGLASS_LISTEN').default('127.0.0.1:7070'))
    .addOption(new Option('--node-secret-file <path>', "the cluster's node secret").env('SANDGLASS_NODE_SECRET_FILE').makeOptionMandatory())
    .addOption(new Option('--keys-dir <path>', 'local keyring directory, shared by every replica').env('SANDGLASS_KEYS_DIR').makeOptionMandatory())
    .addOption(new Option('--admin-key-file <path>', 'operator API key file (written on first start)').env('SANDGLASS_ADMIN_KEY_FILE'))
    .addOption(
      new Option('--dead-after-s <n>', 'seconds without a heartbeat before a gateway is declared dead')
        .env('SANDGLASS_DEAD_AFTER_S')
        .argParser(parsePositiveInt)
        .default(30),
    )
    .addOption(
      new Option('--heartbeat-interval-s <n>', 'seconds between gateway heartbeats')
        .env('SANDGLASS_HEARTBEAT_INTERVAL_S')
        .argParser(parsePositiveInt)
        .default(2),
    )
    .addOption(new Option('--store <url>', 'shared chunk store (retention and GC run here): s3://bucket/prefix or file:/abs/path').env('SANDGLASS_STORE'))
    .addHelpText('after', HELP)
    .action(
      act(async (flags: ControlPlaneFlags) => {
        // Loaded only here: every other command is a plain client and must start fast.
        const { controlPlaneNode } = await import('@sandglass/server');
        await controlPlaneNode({
          db: flags.db,
          listen: flags.listen,
          nodeSecretFile: flags.nodeSecretFile,
          keysDir: flags.keysDir,
          adminKeyFile: flags.adminKeyFile,
          deadAfterS: flags.deadAfterS,
          heartbeatIntervalS: flags.heartbeatIntervalS,
          store: flags.store,
        });
      }),
    );
}
