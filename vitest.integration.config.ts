// Integration tests: real VMs through the real server and SDK (tests/); one template boot per run, restored by every test.
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Workspace packages as their TypeScript sources (packages/sdk's exports), not their built dist/.
  ssr: { resolve: { conditions: ['@sandglass/source', ...defaultServerConditions] } },
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/global-setup.ts'],
    testTimeout: 300_000,
    hookTimeout: 900_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
