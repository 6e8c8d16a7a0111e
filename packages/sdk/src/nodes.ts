// The cluster's nodes, for the operator: issue a node's one-time enrolment token, list nodes, revoke one.
import type * as ControlPlaneApi from './api/control-plane.generated.js';
import { ControlPlane } from './client.js';
import type { ConnectionConfig } from './config.js';
import type { ControlPlaneReply } from './replies.js';

/** A node as listed: its credential's state and its membership, never a key. */
export type NodeInfo = ControlPlaneApi.components['schemas']['NodeInfo'];
/** A one-time enrolment token, shown only in this answer. */
export type NodeEnrolment = ControlPlaneReply<'createNodeEnrolment'>;

export class Nodes {
  private constructor() {}

  /** A token `sandglass gateway --node-id <nodeId> --enrol-token` spends once for a key bound to that id. */
  static async enroll(nodeId: string, opts: ConnectionConfig & { ttlS?: number } = {}): Promise<NodeEnrolment> {
    const { ttlS, ...config } = opts;
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'createNodeEnrolment'>>('POST', '/v1/nodes/enrolments', { json: { nodeId, ttlS } });
  }

  static async list(config?: ConnectionConfig): Promise<NodeInfo[]> {
    const cp = await ControlPlane.open(config);
    return (await cp.json<ControlPlaneReply<'listNodes'>>('GET', '/v1/nodes')).nodes;
  }

  /** Refuses the node's key from its next request and fences it: its sandboxes fail over as a dead node's. */
  static async revoke(nodeId: string, config?: ConnectionConfig): Promise<NodeInfo> {
    const cp = await ControlPlane.open(config);
    return cp.json<ControlPlaneReply<'revokeNode'>>('POST', `/v1/nodes/${encodeURIComponent(nodeId)}/revoke`);
  }
}
