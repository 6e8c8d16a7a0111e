// A throwaway PostgreSQL server for tests and scripts: its own data directory, a loopback port, trust authentication.
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { GENESIS_HASH } from './migrations.js';

const run = promisify(execFile);

export interface TestPostgres {
  /** postgres://postgres@127.0.0.1:PORT/postgres: the superuser, no password (trust, loopback only). */
  url: string;
  stop(): Promise<void>;
}

/**
 * initdb into `dir`/data and starts the server on 127.0.0.1 (`port`, or a free one), its socket in `dir`; resolves once it
 * accepts connections. PostgreSQL refuses to run as root, so as root the server runs as the `postgres` system user (the
 * Debian package's) or else `nobody`, and `dir` is handed to that user. Durability is traded for speed (fsync off): a
 * crash loses the data, which a test does not keep anyway.
 */
export async function startPostgres(opts: { dir: string; port?: number }): Promise<TestPostgres> {
  const bin = postgresBinDir();
  const data = join(opts.dir, 'data');
  mkdirSync(opts.dir, { recursive: true });
  const user = process.getuid?.() === 0 ? unprivilegedUser() : undefined;
  if (user) chownSync(opts.dir, user.uid, user.gid);
  const as = async (cmd: string, args: string[]) => {
    const [file, argv] = user ? ['runuser', ['-u', user.name, '--', join(bin, cmd), ...args]] : [join(bin, cmd), args];
    // cwd: the server's user may not be allowed into the caller's working directory.
    return run(file, argv, { cwd: opts.dir, env: { ...process.env, LC_ALL: 'C' } });
  };
  // C collation: text compares byte by byte, as on SQLite, so list orders are the same on both dialects.
  await as('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--locale=C', '-E', 'UTF8', '--no-sync']);
  const port = opts.port ?? (await freeLoopbackPort());
  const settings = [
    `-p ${port}`,
    `-k ${opts.dir}`,
    '-c listen_addresses=127.0.0.1',
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c max_connections=300',
  ].join(' ');
  try {
    await as('pg_ctl', ['-D', data, '-l', join(opts.dir, 'server.log'), '-o', settings, '-w', '-t', '60', 'start']);
  } catch (err) {
    const log = existsSync(join(opts.dir, 'server.log')) ? readFileSync(join(opts.dir, 'server.log'), 'utf8').slice(-2000) : '';
    throw new Error(`PostgreSQL did not start on port ${port}: ${(err as Error).message}\n${log}`, { cause: err });
  }
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  await waitForConnections(url);
  return {
    url,
    stop: async () => {
      await as('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    },
  };
}

/**
 * A new database on the server at `url` (dropped first if a previous run left it), with C collation like the server's;
 * returns its URL. Empty, or a copy of `template` (a database nobody is connected to, such as one already migrated:
 * copying it is much quicker than migrating each test's database). Names: lowercase letters, digits and underscores.
 */
export async function createTestDatabase(url: string, name: string, opts: { template?: string } = {}): Promise<string> {
  for (const n of [name, opts.template ?? 'template0']) {
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(n)) throw new Error(`test database name ${JSON.stringify(n)}: use [a-z_][a-z0-9_]*, at most 63`);
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`drop database if exists ${name} with (force)`);
    await client.query(`create database ${name} template ${opts.template ?? 'template0'} encoding 'UTF8' lc_collate 'C' lc_ctype 'C'`);
  } finally {
    await client.end();
  }
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/**
 * Empties every table of a test database made by createTestDatabase from a migrated template, and puts the chain head
 * back at the genesis: the state a fresh copy would have, in one statement rather than a new database (much quicker
 * when every test of a suite wants an empty database).
 */
export async function resetTestDatabase(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      "select quote_ident(tablename) as name from pg_tables where schemaname = 'public' and tablename not like 'kysely\\_%'",
    );
    await client.query(`truncate ${rows.map((r) => r.name).join(', ')} restart identity`);
    await client.query('insert into event_chain_head (id, seq, hash) values ($1, 0, $2)', ['main', GENESIS_HASH]);
  } finally {
    await client.end();
  }
}

/** The newest PostgreSQL under /usr/lib/postgresql/<version>/bin (Debian's layout; not on PATH). */
function postgresBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error(`no PostgreSQL server under ${root}/<version>/bin: run \`node scripts/setup.mjs --test\` (package postgresql-15)`);
  return join(root, versions[0]!, 'bin');
}

function unprivilegedUser(): { name: string; uid: number; gid: number } {
  const passwd = readFileSync('/etc/passwd', 'utf8').split('\n');
  for (const name of ['postgres', 'nobody']) {
    const fields = passwd.find((l) => l.startsWith(`${name}:`))?.split(':');
    if (fields) return { name, uid: Number(fields[2]), gid: Number(fields[3]) };
  }
  throw new Error('running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as');
}

function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

async function waitForConnections(url: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      await client.query('select 1');
      return;
    } catch (err) {
      if (attempt >= 100) throw new Error(`PostgreSQL at ${url} accepts no connections`, { cause: err });
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      await client.end().catch(() => {});
    }
  }
}
