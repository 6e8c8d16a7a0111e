// @sandglass/kms: key providers (local keyring; PKCS#11 later) and the AES-256-GCM envelope every key use seals with.
export { KEY_PURPOSES, checkPurpose, type KeyProvider, type KeyPurpose } from './provider.js';
export { LocalKeyring } from './local-keyring.js';
export { seal, unseal } from './seal.js';
