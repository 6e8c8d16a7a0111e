// A sandbox's own certificate authority: P-256, its private key never leaves this process, and leaf certificates per host.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { randomBytes, webcrypto } from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';
import { systemClock, type Clock } from '@sandglass/core';
import { canonicalHost } from './address.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const EC = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 3600 * 1000;
const CA_VALIDITY_MS = 3650 * DAY_MS;
const LEAF_VALIDITY_MS = 30 * DAY_MS;
// Clocks in guests restored from old snapshots can lag: leaves are valid from a day before they were minted.
const BACKDATE_MS = DAY_MS;
const MAX_CACHED_LEAVES = 512;

function serial(): string {
  const b = randomBytes(16);
  b[0] = b[0]! & 0x7f; // positive
  return b.toString('hex');
}

function pkcs8Pem(der: ArrayBuffer): string {
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

interface Leaf {
  context: SecureContext;
  renewAtMs: number;
}

export class SandboxCa {
  /** The CA certificate to install in the guest's trust store. */
  readonly certPem: string;
  readonly #cert: x509.X509Certificate;
  readonly #key: CryptoKey;
  // One leaf key pair per CA: minting a leaf is then one signature (~1–2 ms) instead of a key generation.
  readonly #leafPublicKey: CryptoKey;
  readonly #leafKeyPem: string;
  readonly #authorityKeyId: x509.Extension;
  readonly #clock: Clock;
  readonly #leaves = new Map<string, Promise<Leaf>>();

  private constructor(cert: x509.X509Certificate, key: CryptoKey, authorityKeyId: x509.Extension, leafPublicKey: CryptoKey, leafKeyPem: string, clock: Clock) {
    this.#cert = cert;
    this.#authorityKeyId = authorityKeyId;
    this.certPem = cert.toString('pem');
    this.#key = key;
    this.#leafPublicKey = leafPublicKey;
    this.#leafKeyPem = leafKeyPem;
    this.#clock = clock;
  }

  /** A fresh CA. Its signing key is not extractable: nothing can export it, not even this process. */
  static async generate(opts: { name?: string; clock?: Clock } = {}): Promise<SandboxCa> {
    const clock = opts.clock ?? systemClock;
    const now = clock.nowMs();
    const caKeys = (await webcrypto.subtle.generateKey(EC, false, ['sign', 'verify'])) as CryptoKeyPair;
    const name = `CN=${(opts.name ?? 'Sandglass sandbox').replace(/[,+="\\<>;#]/g, ' ')} egress CA, O=Sandglass`;
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: serial(),
      name,
      notBefore: new Date(now - BACKDATE_MS),
      notAfter: new Date(now + CA_VALIDITY_MS),
      signingAlgorithm: SIGNING,
      keys: caKeys,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
      ],
    });
    const leafKeys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as CryptoKeyPair;
    const leafKeyPem = pkcs8Pem(await webcrypto.subtle.exportKey('pkcs8', leafKeys.privateKey));
    const authorityKeyId = await x509.AuthorityKeyIdentifierExtension.create(cert, false);
    return new SandboxCa(cert, caKeys.privateKey, authorityKeyId, leafKeys.publicKey, leafKeyPem, clock);
  }

  /** A TLS server context presenting a leaf certificate for `host` (a name or IP literal), cached per host. */
  leafContext(host: string): Promise<SecureContext> {
    const now = this.#clock.nowMs();
    const cached = this.#leaves.get(host);
    if (cached) {
      // Refresh recency (Map order is the LRU order) and renew leaves close to expiry.
      this.#leaves.delete(host);
      this.#leaves.set(host, cached);
      return cached.then((leaf) => (leaf.renewAtMs > this.#clock.nowMs() ? leaf.context : this.#remint(host)));
    }
    return this.#mint(host, now);
  }

  #remint(host: string): Promise<SecureContext> {
    this.#leaves.delete(host);
    return this.#mint(host, this.#clock.nowMs());
  }

  #mint(host: string, now: number): Promise<SecureContext> {
    const c = canonicalHost(host);
    if (!c) return Promise.reject(new Error(`not a host name or IP: ${host}`));
    const notAfter = Math.min(now + LEAF_VALIDITY_MS, this.#cert.notAfter.getTime());
    const leaf = (async (): Promise<Leaf> => {
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: serial(),
        subject: c.kind === 'name' && c.host.length <= 64 ? `CN=${c.host}` : 'CN=sandglass-egress',
        issuer: this.#cert.subject,
        notBefore: new Date(now - BACKDATE_MS),
        notAfter: new Date(notAfter),
        signingAlgorithm: SIGNING,
        publicKey: this.#leafPublicKey,
        signingKey: this.#key,
        extensions: [
          new x509.SubjectAlternativeNameExtension([{ type: c.kind === 'name' ? 'dns' : 'ip', value: c.host }]),
          new x509.BasicConstraintsExtension(false, undefined, true),
          new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
          new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
          this.#authorityKeyId,
        ],
      });
      return {
        context: createSecureContext({ key: this.#leafKeyPem, cert: cert.toString('pem'), minVersion: 'TLSv1.2' }),
        renewAtMs: notAfter - DAY_MS,
      };
    })();
    this.#leaves.set(host, leaf);
    leaf.catch(() => this.#leaves.delete(host));
    while (this.#leaves.size > MAX_CACHED_LEAVES) this.#leaves.delete(this.#leaves.keys().next().value!);
    return leaf.then((l) => l.context);
  }
}
