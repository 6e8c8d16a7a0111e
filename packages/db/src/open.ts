// Opens the Sandglass database from a URL and brings its schema up to date before anyone queries it.
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { type Dialect, Kysely, Migrator, PostgresAdapter, PostgresDialect, SqliteDialect, type SqliteDatabase } from 'kysely';
import pg from 'pg';
import { migrationProvider } from './migrations.js';
import type { Schema } from './schema.js';

export interface Database {
  db: Kysely<Schema>;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** `sqlite:/abs/path.db`, `sqlite:relative.db`, `sqlite::memory:`, or `postgres://user@host:port/db` (also `postgresql://`). */
  url: string;
  /** PostgreSQL: connections this process keeps at most (default 10). Appends queue on one row lock, so more buys little. */
  poolSize?: number;
}

export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  const db = new Kysely<Schema>({ dialect: dialectFor(opts) });
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

/** Whether `err` is the database refusing a second row with the same UNIQUE or PRIMARY KEY value, on either dialect. */
export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/** Whether the database is PostgreSQL, for the few statements the dialects spell differently (row locks, isolation). */
export function isPostgres(db: Kysely<Schema>): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter;
}

function dialectFor(opts: OpenDatabaseOptions): Dialect {
  const { url } = opts;
  if (/^postgres(ql)?:\/\//.test(url)) return postgresDialect(url, opts.poolSize ?? 10);
  if (!url.startsWith('sqlite:')) {
    throw new Error(`unsupported database URL scheme ${JSON.stringify(url.split(':')[0])}: use sqlite: or postgres://`);
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
      return withStatementCache(conn);
    },
  });
}

/** Statements kept per connection; Kysely binds values as parameters, so Sandglass's SQL texts are far fewer. */
const STATEMENT_CACHE_SIZE = 512;

/**
 * better-sqlite3 compiles a statement on every prepare, and Kysely prepares for every query: that took longer than the
 * indexed lookup it ran (the API key and the sandbox row of each request). Statements are kept by their SQL text, least
 * recently used dropped first; one still iterating a streamed query is busy, and then a fresh one is prepared.
 */
function withStatementCache(conn: BetterSqlite3.Database): SqliteDatabase {
  const cache = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => conn.close(),
    prepare(sql) {
      const hit = cache.get(sql);
      if (hit && !hit.busy) {
        cache.delete(sql);
        cache.set(sql, hit);
        return hit;
      }
      const stmt = conn.prepare(sql);
      if (!hit) {
        cache.set(sql, stmt);
        if (cache.size > STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
      }
      return stmt;
    },
  };
}

/** int8 (bigint: seq, byte sizes, counts) as a number: exact up to 2^53, far beyond any seq or size Sandglass stores. */
function parseInt8(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`integer ${text} from PostgreSQL is beyond 2^53`);
  return n;
}

function postgresDialect(url: string, poolSize: number): PostgresDialect {
  // Per pool, not pg's global registry, so another library in the process keeps pg's defaults.
  const types = {
    getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
      oid === pg.types.builtins.INT8 && format !== 'binary' ? parseInt8 : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
  };
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    types,
    application_name: 'sandglass',
    // An unreachable server fails the start (or the request) instead of hanging it.
    connectionTimeoutMillis: 10_000,
  });
  // A pooled connection the server drops while idle (a restart, a failover) is discarded by pg and replaced at the next
  // query; without a listener the 'error' event would end the process.
  pool.on('error', () => {});
  return new PostgresDialect({ pool });
}
