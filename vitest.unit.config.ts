// Unit tests: beside the code, pure logic, seconds.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Workspace packages as their TypeScript sources (packages/sdk's exports), not their built dist/. Vite's server
  // defaults less 'module': under it @aws-sdk's packages export extensionless ESM that Node cannot load.
  ssr: { resolve: { conditions: ['@sandglass/source', 'node', 'development|production'] } },
  // One PostgreSQL for the run, so the database layer's tests run on both dialects.
  test: { include: ['packages/*/src/**/*.test.ts', 'deploy/*.test.ts'], globalSetup: ['tests/unit-global-setup.ts'], testTimeout: 60_000, pool: 'forks' },
});
