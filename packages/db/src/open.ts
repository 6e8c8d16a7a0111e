// Opens the Sandglass database from a URL and brings its schema up to date before anyone queries it.
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { migrationProvider } from './migrations.js';
import type { Schema } from './schema.js';

export interface Database {
  db: Kysely<Schema>;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** `sqlite:/abs/path.db`, `sqlite:relative.db` or `sqlite::memory:`. */
  url: string;
}

export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  const db = new Kysely<Schema>({ dialect: dialectFor(opts.url) });
  try {
    await migrate(db);
  } catch (err) {
    await db.destroy();
    throw err;
  }
  return { db, close: () => db.destroy() };
}

export async function migrate(db: Kysely<Schema>): Promise<void> {
  const { error, results } = await new Migrator({ db, provider: migrationProvider }).migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`database migration ${failed} failed`, { cause: error });
  }
}

/**
 * The database holds tenants, key hashes and the event log: readable by its owner only. SQLite creates the WAL and
 * shared-memory files with the database file's mode, so the file is made 0600 before SQLite first opens it; files
 * left by an older version with wider modes are narrowed.
 */
function ownerOnly(path: string): void {
  closeSync(openSync(path, 'a', 0o600));
  for (const f of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
}

function dialectFor(url: string): SqliteDialect {
  if (!url.startsWith('sqlite:')) {
    throw new Error(`unsupported database URL ${JSON.stringify(url.split(':')[0])}: only sqlite: is built so far`);
  }
  const path = url.slice('sqlite:'.length).replace(/^\/\//, '');
  if (path === '') throw new Error('the database URL names no file: use sqlite:/path/to/sandglass.db or sqlite::memory:');
  const memory = path === ':memory:';
  if (!memory) mkdirSync(dirname(path), { recursive: true });
  return new SqliteDialect({
    database: async () => {
      if (!memory) ownerOnly(path);
      const conn = new BetterSqlite3(path);
      // WAL lets readers run beside the writer; a busy timeout rides out another process's write instead of failing.
      if (!memory) conn.pragma('journal_mode = WAL');
      conn.pragma('foreign_keys = ON');
      conn.pragma('busy_timeout = 5000');
      return conn;
    },
  });
}
