// Unit tests: beside the code, pure logic, seconds.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: { include: ['packages/*/src/**/*.test.ts'], testTimeout: 60_000, pool: 'forks' },
});
