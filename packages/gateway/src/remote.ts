// What a gateway in a cluster obtains from the control plane at the moment of use: tenant keys and secret values (sealed for this node), and templates.
import { Redacted, SandglassError, type Clock } from '@sandglass/core';
import { KEY_PURPOSES, openForNode, type KeyProvider, type KeyPurpose } from '@sandglass/kms';
import type { NodeApiClient } from './node-api-client.js';
import type { ResolvedSecret, SecretResolver } from './network.js';
import type { TemplateRef, TemplateRegistry } from './templates.js';

/** Base64 of a seal to this node's public key, opened only with its private key and exactly the associated data. */
function openSealed(privateKey: string, sealedB64: string, aad: string): Buffer {
  return openForNode(privateKey, Buffer.from(sealedB64, 'base64'), Buffer.from(aad, 'utf8'));
}

export interface RemoteKeysOptions {
  client: NodeApiClient;
  /** Base64 PKCS#8 of this node's X25519 transport key (its key file), never sent anywhere. */
  transportPrivateKey: string;
  clock: Clock;
  /** How long a key obtained stays in memory; default 60 s. */
  cacheMs?: number;
  /** How long the tenant's current version is trusted before it is asked again (a rotation elsewhere); default 5 s. */
  versionCacheMs?: number;
}

/**
 * A tenant's purpose keys from the control plane (`POST /node/v1/tenants/{t}/data-keys/{purpose}?version=n`), sealed
 * for this node with `<node>/<tenant>/<purpose>/v<n>` as associated data, so a reply meant for another node, tenant,
 * purpose or version does not open. Kept in memory for cacheMs: one chunk-store operation asks for three keys and a
 * capture runs every minute per sandbox; a revocation drops them at once (forget) and the control plane refuses any
 * more. Never written to disk. `verify` asks the control plane to ask the tenant's provider (an HSM round trip) and is
 * never cached: every boot and the node's poll go through it. A refusal is the control plane's `key_revoked`; every
 * other failure is `key_unavailable`, as the KeyProvider contract says: nothing proceeds without the key.
 */
export class RemoteKeys implements KeyProvider {
  readonly name = 'node-api';
  readonly #client: NodeApiClient;
  readonly #transport: string;
  readonly #clock: Clock;
  readonly #cacheMs: number;
  readonly #versionCacheMs: number;
  readonly #cache = new Map<string, { key: Promise<Buffer>; untilMs: number }>();
  readonly #versions = new Map<string, { version: number; untilMs: number }>();

  constructor(opts: RemoteKeysOptions) {
    this.#client = opts.client;
    this.#transport = opts.transportPrivateKey;
    this.#clock = opts.clock;
    this.#cacheMs = opts.cacheMs ?? 60_000;
    this.#versionCacheMs = opts.versionCacheMs ?? 5_000;
  }

  dataKey(tenantId: string, purpose: KeyPurpose, version?: number): Promise<Buffer> {
    if (!(KEY_PURPOSES as readonly string[]).includes(purpose)) {
      return Promise.reject(new SandglassError('invalid_argument', `purpose: must be one of ${KEY_PURPOSES.join(', ')}`));
    }
    if (version !== undefined && !(Number.isInteger(version) && version >= 1)) {
      return Promise.reject(new SandglassError('invalid_argument', 'version: must be a whole number from 1'));
    }
    // Chunk ids are always those of version 1 (the provider's rule): one cache entry, whatever is asked.
    const v = purpose === 'chunk-id' ? 1 : version;
    const id = `${tenantId}/${purpose}/${v ?? 'current'}`;
    const nowMs = this.#clock.nowMs();
    const hit = this.#cache.get(id);
    if (hit && hit.untilMs > nowMs) return hit.key;
    const key = this.#fetch(tenantId, purpose, v);
    this.#cache.set(id, { key, untilMs: nowMs + this.#cacheMs });
    // A failure is never cached, and the keys cached before it go too: the control plane just said no.
    key.catch(() => {
      if (this.#cache.get(id)?.key === key) this.forget(tenantId);
    });
    return key;
  }

  async keyVersion(tenantId: string): Promise<number> {
    const hit = this.#versions.get(tenantId);
    if (hit && hit.untilMs > this.#clock.nowMs()) return hit.version;
    return this.#ask(tenantId, false);
  }

  async verify(tenantId: string): Promise<void> {
    await this.#ask(tenantId, true);
  }

  /** Drops every key and version of the tenant held here (its key was revoked). */
  forget(tenantId: string): void {
    for (const id of [...this.#cache.keys()]) if (id.startsWith(`${tenantId}/`)) this.#cache.delete(id);
    this.#versions.delete(tenantId);
  }

  /** A node holds no key it could destroy: crypto-shredding happens where the keys live, on the control plane. */
  async revoke(tenantId: string): Promise<void> {
    throw new SandglassError('permission_denied', `A node cannot revoke tenant ${tenantId}'s key; revoke it on the control plane.`);
  }

  async #ask(tenantId: string, verify: boolean): Promise<number> {
    let currentVersion: number;
    try {
      ({ currentVersion } = await this.#client.tenantKey(tenantId, { verify }));
    } catch (err) {
      this.forget(tenantId);
      throw asKeyError(err, `Tenant ${tenantId}'s key could not be ${verify ? 'verified' : 'looked up'} with the control plane`);
    }
    this.#versions.set(tenantId, { version: currentVersion, untilMs: this.#clock.nowMs() + this.#versionCacheMs });
    return currentVersion;
  }

  async #fetch(tenantId: string, purpose: KeyPurpose, version: number | undefined): Promise<Buffer> {
    let reply: { sealed: string; version: number };
    try {
      reply = await this.#client.dataKey(tenantId, purpose, version);
    } catch (err) {
      throw asKeyError(err, `Tenant ${tenantId}'s ${purpose} key could not be obtained from the control plane`);
    }
    // A key of another version than the one asked for would seal (or fail to open) data under the wrong version.
    if (version !== undefined && reply.version !== version) {
      throw new SandglassError(
        'key_unavailable',
        `The control plane answered version ${reply.version} of tenant ${tenantId}'s ${purpose} key, not ${version}.`,
      );
    }
    let key: Buffer;
    try {
      key = openSealed(this.#transport, reply.sealed, `${this.#client.nodeId}/${tenantId}/${purpose}/v${reply.version}`);
    } catch (err) {
      throw new SandglassError('key_unavailable', `Tenant ${tenantId}'s ${purpose} key from the control plane was not sealed for this node and tenant.`, {
        cause: err,
      });
    }
    if (key.length !== 32)
      throw new SandglassError('key_unavailable', `Tenant ${tenantId}'s ${purpose} key from the control plane is ${key.length} bytes, not 32.`);
    return key;
  }
}

/** The control plane's key_revoked and key_unavailable pass through; anything else (unreachable, refused) fails closed. */
function asKeyError(err: unknown, what: string): SandglassError {
  if (err instanceof SandglassError && (err.code === 'key_unavailable' || err.code === 'key_revoked')) return err;
  return new SandglassError('key_unavailable', `${what}: ${(err as Error).message}`, { cause: err });
}

/**
 * A tenant's secrets through the control plane: the rules on every resolve (so a narrowed or removed secret applies
 * to the next request) and the value only inside value(), sealed for `<node>/<tenant>/<name>`, opened into a
 * Redacted and never cached. Any failure throws, and the egress proxy then refuses the request (fail closed).
 */
export class RemoteSecrets implements SecretResolver {
  readonly #client: NodeApiClient;
  readonly #transport: string;

  constructor(opts: { client: NodeApiClient; transportPrivateKey: string }) {
    this.#client = opts.client;
    this.#transport = opts.transportPrivateKey;
  }

  async resolve(tenantId: string, name: string): Promise<ResolvedSecret> {
    const info = await this.#client.secretInfo(tenantId, name);
    return {
      name: info.name,
      hosts: info.hosts,
      header: info.header,
      format: info.format,
      bodyContentTypes: info.bodyContentTypes,
      approval: info.approval,
      allowPlaintext: info.allowPlaintext,
      allowUpgrade: info.allowUpgrade,
      value: () => this.value(tenantId, name),
    };
  }

  private async value(tenantId: string, name: string): Promise<Redacted<string>> {
    const sealed = await this.#client.secretValue(tenantId, name);
    try {
      return new Redacted(openSealed(this.#transport, sealed, `${this.#client.nodeId}/${tenantId}/${name}`).toString('utf8'));
    } catch (err) {
      throw new SandglassError('internal', `Secret ${name}'s value from the control plane was not sealed for this node and tenant.`, { cause: err });
    }
  }
}

/** Which snapshot is each template, as the control plane records it (`/node/v1/templates/{key}`). */
export class RemoteTemplateRegistry implements TemplateRegistry {
  constructor(private readonly client: NodeApiClient) {}

  lookup(key: string): Promise<TemplateRef | undefined> {
    return this.client.templateLookup(key);
  }

  /** The node is named by the call's own header, not the body: the spec's record is the snapshot alone. */
  async publish(key: string, rec: TemplateRef & { nodeId: string }): Promise<TemplateRef> {
    return this.client.templatePublish(key, { tenantId: rec.tenantId, snapshotId: rec.snapshotId });
  }
}
