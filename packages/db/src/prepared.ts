// Queries built and compiled once per database and then run with each call's values: for lookups every request makes.
import { randomBytes } from 'node:crypto';
import type { Compilable, CompiledQuery, Kysely } from 'kysely';

interface Compiled {
  query: CompiledQuery;
  /** For each of the query's parameters, the argument it takes (its index), or -1 where it keeps the compiled value. */
  slots: number[];
}

/**
 * A query Kysely builds and compiles on the first call against a database (its dialect decides the SQL) and only runs
 * after that: building and compiling cost more than SQLite running an indexed lookup (the API key and the sandbox
 * row of every request). `build` is called once, with a marker in place of each argument; every argument must reach
 * the query as a bound parameter (a `where` value, not a column or table name), or the first call throws.
 */
export function preparedQuery<DB, Args extends readonly unknown[], Row>(
  arity: Args['length'],
  build: (db: Kysely<DB>, ...args: Args) => Compilable<Row>,
): (db: Kysely<DB>, ...args: Args) => Promise<Row[]> {
  const byDb = new WeakMap<Kysely<DB>, Compiled>();
  const compile = (db: Kysely<DB>): Compiled => {
    // Markers nobody's value can equal by chance, so each is found among the compiled parameters by identity of text.
    const tag = randomBytes(8).toString('hex');
    const markers = Array.from({ length: arity }, (_, i) => `\u0000prepared-${tag}-${i}`);
    const query = build(db, ...(markers as unknown as Args)).compile();
    const slots = query.parameters.map((p) => (typeof p === 'string' ? markers.indexOf(p) : -1));
    for (let i = 0; i < arity; i++) {
      if (!slots.includes(i)) throw new Error(`prepared query: argument ${i} must be bound as a parameter of ${query.sql}`);
    }
    if (markers.some((m) => query.sql.includes(m))) throw new Error(`prepared query: an argument was inlined in ${query.sql}`);
    return { query, slots };
  };
  return async (db, ...args) => {
    let compiled = byDb.get(db);
    if (!compiled) {
      compiled = compile(db);
      byDb.set(db, compiled);
    }
    const { query, slots } = compiled;
    const parameters = query.parameters.map((p, k) => (slots[k]! >= 0 ? args[slots[k]!] : p));
    return (await db.executeQuery<Row>({ ...query, parameters } as CompiledQuery<Row>)).rows;
  };
}
