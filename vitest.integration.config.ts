// Integration tests: real VMs through the real server and SDK (tests/); one template boot per run, restored by every test.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Workspace packages as their TypeScript sources (packages/sdk's exports), not their built dist/. Vite's server
  // defaults less 'module': under it @aws-sdk's packages export extensionless ESM that Node cannot load.
  ssr: { resolve: { conditions: ['@sandglass/source', 'node', 'development|production'] } },
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/global-setup.ts'],
    testTimeout: 300_000,
    hookTimeout: 900_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
