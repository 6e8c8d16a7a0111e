// Each node's own credential: a one-time enrolment token the operator issues, then a key bound to one node id.
import { createHash, randomBytes } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import { SandglassError, type Clock } from '@sandglass/core';
import { toIso, type NodeCredentialRow, type Schema } from '@sandglass/db';
import { nodePublicKey } from '@sandglass/kms';

export const NODE_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
const TOKEN = /^sgne_[A-Za-z0-9_-]{43}$/;
const KEY = /^sgnk_[A-Za-z0-9_-]{43}$/;
/** An enrolment token is for the moment a node is set up: an hour unless the operator asks for another span. */
export const DEFAULT_ENROLMENT_TTL_S = 3600;

/** As for API keys, unkeyed SHA-256 suffices: each is 256 random bits, nothing to guess or precompute. */
function hash(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** What the node API knows of the caller once its key matched: the one node id it may speak as. */
export interface NodeIdentity {
  nodeId: string;
  /** Base64 X25519 SPKI DER: keys and secret values are sealed to it. */
  publicKey: string;
}

export interface NodeInfo {
  id: string;
  state: 'enrolling' | 'alive' | 'dead' | 'revoked';
  url: string | null;
  enrolledAt: string | null;
  revokedAt: string | null;
  lastSeenAt: string | null;
}

export class NodeCredentials {
  constructor(
    private readonly db: Kysely<Schema>,
    private readonly clock: Clock,
  ) {}

  /** A one-time token for `nodeId`, shown only in this answer; the operator hands it to the node being set up. */
  async issueEnrolment(nodeId: string, ttlS: number = DEFAULT_ENROLMENT_TTL_S): Promise<{ nodeId: string; token: string; expiresAt: string }> {
    checkNodeId(nodeId, 'nodeId');
    const token = `sgne_${randomBytes(32).toString('base64url')}`;
    const now = this.clock.nowMs();
    const expiresAt = toIso(now + ttlS * 1000);
    await this.db
      .insertInto('node_enrolments')
      .values({ token_hash: hash(token), node_id: nodeId, created_at: toIso(now), expires_at: expiresAt, used_at: null })
      .execute();
    return { nodeId, token, expiresAt };
  }

  /**
   * Spends the token for the node id it was issued for and binds a new key (and the node's public key) to that id,
   * replacing any earlier credential of it. A token that is unknown, spent, expired or for another id is refused alike.
   */
  async enrol(nodeId: string, token: string, publicKey: string): Promise<{ nodeKey: string }> {
    checkNodeId(nodeId, 'x-sandglass-node');
    try {
      nodePublicKey(publicKey);
    } catch {
      throw new SandglassError('invalid_argument', 'publicKey must be an X25519 public key, base64 of its SPKI DER.', { details: { field: 'publicKey' } });
    }
    const refused = () =>
      new SandglassError(
        'unauthenticated',
        `The enrolment token is unknown, used, expired or not for node ${nodeId}; ask the operator for a new one (sandglass nodes enroll ${nodeId}).`,
      );
    if (!TOKEN.test(token)) throw refused();
    const nodeKey = `sgnk_${randomBytes(32).toString('base64url')}`;
    const now = toIso(this.clock.nowMs());
    await this.db.transaction().execute(async (trx) => {
      // One conditional UPDATE spends the token: two nodes racing with it cannot both enrol.
      const spent = await trx
        .updateTable('node_enrolments')
        .set({ used_at: now })
        .where('token_hash', '=', hash(token))
        .where('node_id', '=', nodeId)
        .where('used_at', 'is', null)
        .where('expires_at', '>', now)
        .executeTakeFirst();
      if (spent.numUpdatedRows !== 1n) throw refused();
      await trx.deleteFrom('node_credentials').where('node_id', '=', nodeId).execute();
      await trx
        .insertInto('node_credentials')
        .values({ node_id: nodeId, key_hash: hash(nodeKey), public_key: publicKey, enrolled_at: now, revoked_at: null })
        .execute();
    });
    return { nodeKey };
  }

  /** The node a bearer key belongs to; unknown and revoked keys are refused alike, from the request after a revocation. */
  async authenticate(bearer: string): Promise<NodeIdentity> {
    const row = KEY.test(bearer)
      ? await this.db.selectFrom('node_credentials').select(['node_id', 'public_key', 'revoked_at']).where('key_hash', '=', hash(bearer)).executeTakeFirst()
      : undefined;
    if (!row || row.revoked_at !== null) {
      throw new SandglassError(
        'unauthenticated',
        'The node API wants the key this node received at enrolment (sandglass nodes enroll); it is unknown or revoked.',
      );
    }
    return { nodeId: row.node_id, publicKey: row.public_key };
  }

  /**
   * Refuses the node's key from its next request and fences it at once: declared dead (epoch bumped) in the same
   * transaction, so failover moves its sandboxes as a dead node's and a heartbeat it still sends is node_fenced.
   */
  async revoke(nodeId: string): Promise<NodeInfo> {
    checkNodeId(nodeId, 'id');
    const now = toIso(this.clock.nowMs());
    await this.db.transaction().execute(async (trx) => {
      const r = await trx
        .updateTable('node_credentials')
        .set({ revoked_at: now })
        .where('node_id', '=', nodeId)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      if (r.numUpdatedRows !== 1n) {
        const known = await trx.selectFrom('node_credentials').select('node_id').where('node_id', '=', nodeId).executeTakeFirst();
        if (!known) throw new SandglassError('not_found', `No node ${nodeId} has enrolled.`);
      }
      // Unused tokens for it go too: revoking a node is not undone by a token issued before.
      await trx.deleteFrom('node_enrolments').where('node_id', '=', nodeId).where('used_at', 'is', null).execute();
      await trx
        .updateTable('nodes')
        .set({ state: 'dead', epoch: sql<number>`epoch + 1`, dead_at: now })
        .where('id', '=', nodeId)
        .where('state', '=', 'alive')
        .execute();
    });
    return (await this.list()).find((n) => n.id === nodeId)!;
  }

  /** Every node enrolled or heard from, with its credential's state. */
  async list(): Promise<NodeInfo[]> {
    const creds = new Map<string, NodeCredentialRow>((await this.db.selectFrom('node_credentials').selectAll().execute()).map((c) => [c.node_id, c]));
    const nodes = new Map((await this.db.selectFrom('nodes').selectAll().execute()).map((n) => [n.id, n]));
    const ids = [...new Set([...creds.keys(), ...nodes.keys()])].sort();
    return ids.map((id) => {
      const c = creds.get(id);
      const n = nodes.get(id);
      return {
        id,
        state: c?.revoked_at ? 'revoked' : (n?.state ?? 'enrolling'),
        url: n?.url ?? null,
        enrolledAt: c?.enrolled_at ?? null,
        revokedAt: c?.revoked_at ?? null,
        lastSeenAt: n?.last_seen_at ?? null,
      };
    });
  }
}

function checkNodeId(nodeId: string, field: string): void {
  if (!NODE_ID.test(nodeId)) {
    throw new SandglassError('invalid_argument', `${field} must name the node: lowercase letters, digits and -, at most 63.`, { details: { field } });
  }
}
