// `sandglass gateway`: run one node of a cluster (VMs, data plane, internal API) against a separate control plane.
import { Option, type Command } from 'commander';
import type { Act } from './shared.js';

interface GatewayFlags {
  controlPlane: string;
  nodeId: string;
  nodeSecretFile: string;
  nodeKeyFile?: string;
  enrolToken?: string;
  store: string;
  listen: string;
  internalListen: string;
  advertiseUrl?: string;
  advertiseInternalUrl?: string;
  controlPlaneCaFile?: string;
}

const HELP = `
What each part needs:
  control plane   --control-plane: the API URL of \`sandglass control-plane\` (any replica, or a load balancer in
                  front of them); this node registers there, heartbeats, and sends its events, which a local
                  outbox in $SANDGLASS_HOME/outbox keeps until they are acknowledged (an outage delays, never loses them).
  node key        --enrol-token, once: the one-time token \`sandglass nodes enroll <node id>\` prints for this node id.
                  The node enrols with it and keeps the key it receives in --node-key-file (default
                  $SANDGLASS_HOME/node-key, mode 0600); every later start reads that file and needs no token. The key
                  speaks only for this node id; tenant keys and secret values reach the node sealed to its own key
                  pair. \`sandglass nodes revoke <node id>\` refuses it from the next request.
  node secret     --node-secret-file: the cluster's node-secret file, the same bytes the control plane has (64 hex
                  digits, mode 0600), from which the internal API's bearer and data-plane access tokens derive. It
                  is never created here.
  chunk store     --store: where snapshots live, shared by every node and the control plane: s3://bucket/prefix
                  (SANDGLASS_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or file:/abs/path on shared storage.
  data plane      --listen host:port: SDKs connect here with access tokens; --advertise-url if they reach it by another name.
  internal API    --internal-listen host:port: only the control plane calls it (with the internal bearer derived
                  from the node secret); keep it on a private network. --advertise-internal-url as above.
  node id         --node-id: stable across restarts of this host; the control plane knows the node by it.
Stopping (SIGINT/SIGTERM) stops the VMs without ending their sandboxes: the control plane moves them to another node
from their newest snapshot once this node's heartbeats stop.`;

export function registerGatewayCommand(program: Command, act: Act): void {
  program
    .command('gateway')
    .description('run one node of a cluster: its VMs, data plane and internal API, joined to a control plane')
    .addOption(new Option('--control-plane <url>', 'control plane API URL (http:// or https://)').env('SANDGLASS_CONTROL_PLANE_URL').makeOptionMandatory())
    .addOption(new Option('--node-id <id>', "this node's id: lowercase letters, digits, '-'").env('SANDGLASS_NODE_ID').makeOptionMandatory())
    .addOption(
      new Option('--node-secret-file <path>', "the cluster's node secret (shared with the control plane)")
        .env('SANDGLASS_NODE_SECRET_FILE')
        .makeOptionMandatory(),
    )
    .addOption(
      new Option('--node-key-file <path>', "this node's own key, written at enrolment (default $SANDGLASS_HOME/node-key)").env('SANDGLASS_NODE_KEY_FILE'),
    )
    .addOption(new Option('--enrol-token <token>', 'one-time token from `sandglass nodes enroll` (first start only)').env('SANDGLASS_ENROL_TOKEN'))
    .addOption(new Option('--store <url>', 'shared chunk store: s3://bucket/prefix or file:/abs/path').env('SANDGLASS_STORE').makeOptionMandatory())
    .addOption(new Option('--listen <host:port>', 'data plane address').env('SANDGLASS_LISTEN').makeOptionMandatory())
    .addOption(
      new Option('--internal-listen <host:port>', 'internal API address (the control plane only)').env('SANDGLASS_INTERNAL_LISTEN').makeOptionMandatory(),
    )
    .addOption(new Option('--advertise-url <url>', 'data plane URL handed to clients (default: http://<listen>)').env('SANDGLASS_ADVERTISE_URL'))
    .addOption(
      new Option('--advertise-internal-url <url>', 'internal API URL the control plane calls (default: http://<internal-listen>)').env(
        'SANDGLASS_ADVERTISE_INTERNAL_URL',
      ),
    )
    .addOption(new Option('--control-plane-ca-file <path>', 'PEM CA for an https:// control plane with a private CA').env('SANDGLASS_CONTROL_PLANE_CA_FILE'))
    .addHelpText('after', HELP)
    .action(
      act(async (flags: GatewayFlags) => {
        // Loaded only here: every other command is a plain client and must start fast.
        const { gatewayNode } = await import('@sandglass/server');
        // Resolves once the node has stopped (Ctrl-C, SIGTERM).
        await gatewayNode({
          controlPlaneUrl: flags.controlPlane,
          nodeId: flags.nodeId,
          nodeSecretFile: flags.nodeSecretFile,
          nodeKeyFile: flags.nodeKeyFile,
          enrolToken: flags.enrolToken,
          store: flags.store,
          listen: flags.listen,
          internalListen: flags.internalListen,
          advertiseUrl: flags.advertiseUrl,
          advertiseInternalUrl: flags.advertiseInternalUrl,
          controlPlaneCaFiles: flags.controlPlaneCaFile ? [flags.controlPlaneCaFile] : undefined,
        });
      }),
    );
}
