// Sealing to a node's public key: opens for that node with exactly the associated data, for no other node.
import { describe, expect, it } from 'vitest';
import { newNodeTransportKeys, openForNode, sealForNode } from './node-seal.js';

describe('sealForNode', () => {
  it("opens only with the node's private key and the same associated data", () => {
    const n1 = newNodeTransportKeys();
    const n2 = newNodeTransportKeys();
    const aad = Buffer.from('n1/ten_a/GH_TOKEN');
    const sealed = sealForNode(n1.publicKey, Buffer.from('ghp_value'), aad);
    expect(openForNode(n1.privateKey, sealed, aad).toString()).toBe('ghp_value');
    expect(() => openForNode(n2.privateKey, sealed, aad)).toThrow();
    expect(() => openForNode(n1.privateKey, sealed, Buffer.from('n2/ten_a/GH_TOKEN'))).toThrow();
    const bent = Buffer.from(sealed);
    bent[bent.length - 1]! ^= 1;
    expect(() => openForNode(n1.privateKey, bent, aad)).toThrow();
    // A fresh ephemeral key each time: two seals of one value differ.
    expect(sealForNode(n1.publicKey, Buffer.from('ghp_value'), aad).equals(sealed)).toBe(false);
  });

  it('refuses a public key that is not X25519', () => {
    expect(() => sealForNode(Buffer.from('nope').toString('base64'), Buffer.from('x'), Buffer.alloc(0))).toThrow();
  });
});
