// `nodes enroll|ls|revoke`: the operator's side of each cluster node's own credential.
import type { Command } from 'commander';
import { Nodes } from '@sandglass/sdk';
import { printJson, printTable, shortTime } from '../output.js';
import type { Act } from './shared.js';

export function registerNodeCommands(program: Command, act: Act): void {
  const nodes = program.command('nodes').description("the cluster's gateway nodes and their credentials (operator key)");
  nodes
    .command('enroll')
    .description('issue a one-time token for a node id and print it: pass it to that node as `sandglass gateway --enrol-token`')
    .argument('<node-id>', "the node's id, as its --node-id")
    .option('--ttl <seconds>', 'how long the token may be spent (default 3600)', (v) => Number(v))
    .option('--json', 'print the token and its expiry as JSON')
    .action(
      act(async (nodeId: string, flags: { ttl?: number; json?: boolean }) => {
        const enrolment = await Nodes.enroll(nodeId, { ttlS: flags.ttl });
        if (flags.json) return printJson(enrolment);
        process.stdout.write(`${enrolment.token}\n`);
        process.stderr.write(`one-time enrolment token for node ${enrolment.nodeId}, until ${enrolment.expiresAt}: it is not shown again\n`);
      }),
    );
  nodes
    .command('ls')
    .description('list nodes: enrolled or heard from, with their state')
    .option('--json', 'print JSON')
    .action(
      act(async (flags: { json?: boolean }) => {
        const list = await Nodes.list();
        if (flags.json) return printJson(list);
        await printTable(
          ['ID', 'STATE', 'URL', 'ENROLLED', 'LAST SEEN', 'REVOKED'],
          list.map((n) => [n.id, n.state, n.url ?? '', shortTime(n.enrolledAt), shortTime(n.lastSeenAt), shortTime(n.revokedAt)]),
        );
      }),
    );
  nodes
    .command('revoke')
    .description('revoke a node: its key is refused from the next request and its sandboxes fail over')
    .argument('<node-id>', "the node's id")
    .action(
      act(async (nodeId: string) => {
        await Nodes.revoke(nodeId);
      }),
    );
}
