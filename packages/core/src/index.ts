// @sandglass/core: ids, the error type and catalogue, Clock/Random, logging, the home directory layout.
export * from './errors.js';
export * from './ids.js';
export * from './clock.js';
export * from './log.js';
export * from './home.js';
export * from './home-lock.js';
export * from './proc.js';
export * from './http.js';
export * from './access-token.js';
export * from './node-secret.js';
export * from './validation.js';
