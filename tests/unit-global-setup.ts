// Starts one throwaway PostgreSQL for the whole unit run; each test file makes its own databases on it (createTestDatabase).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '@sandglass/db';
import { createTestDatabase, startPostgres } from '@sandglass/db/test-postgres';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the unit run's PostgreSQL (postgres://postgres@127.0.0.1:PORT/postgres). */
    postgresUrl: string;
    /** A database on it with every migration applied, for createTestDatabase's `template`. */
    postgresMigrated: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dir = mkdtempSync(join(tmpdir(), 'sandglass-unit-pg-'));
  const t0 = Date.now();
  const server = await startPostgres({ dir });
  console.log(`[setup] PostgreSQL ready in ${((Date.now() - t0) / 1000).toFixed(1)} s at ${server.url}`);
  const migrated = 'sandglass_migrated';
  await (await openDatabase({ url: await createTestDatabase(server.url, migrated) })).close();
  project.provide('postgresUrl', server.url);
  project.provide('postgresMigrated', migrated);
  return async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
}
