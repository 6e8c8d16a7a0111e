// @sandglass/kms: key providers (local keyring, a tenant's PKCS#11 HSM) and the AES-256-GCM envelope every key use seals with.
export { KEY_PURPOSES, checkPurpose, type AuditSigner, type KeyProvider, type KeyPurpose } from './provider.js';
export { LocalKeyring } from './local-keyring.js';
export { DEFAULT_PKCS11_TIMEOUT_MS, Pkcs11Wrapper, type Pkcs11Config, type Pkcs11WrapperOptions } from './pkcs11.js';
export { DEFAULT_KEY_CACHE_MS, TenantKeys, type ProviderChoice, type TenantKeyStatus } from './tenant-keys.js';
export { seal, unseal } from './seal.js';
export { newNodeTransportKeys, nodePublicKey, openForNode, sealForNode, type NodeTransportKeys } from './node-seal.js';
