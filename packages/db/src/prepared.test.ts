// preparedQuery on SQLite and PostgreSQL: each call's arguments reach their parameters, whatever their order in the SQL; constants stay; misuse throws.
import { describe, expect, inject, it } from 'vitest';
import type { Kysely } from 'kysely';
import { openDatabase, preparedQuery, toIso, type Schema } from './index.js';
import { createTestDatabase } from './test-postgres.js';

let databases = 0;
const dialects = [
  { dialect: 'sqlite', fresh: async () => 'sqlite::memory:' },
  { dialect: 'postgres', fresh: () => createTestDatabase(inject('postgresUrl'), `prepared_test_${process.pid}_${++databases}`) },
];

async function withTenants(url: string, names: Record<string, string>) {
  const opened = await openDatabase({ url });
  for (const [id, name] of Object.entries(names))
    await opened.db
      .insertInto('tenants')
      .values({ id, name, created_at: toIso(0) })
      .execute();
  return opened;
}

// The arguments in the other order than their parameters, and a constant between them.
const byNameAndId = preparedQuery(2, (db: Kysely<Schema>, id: string, name: string) =>
  db.selectFrom('tenants').select(['id', 'name']).where('name', '=', name).where('id', '!=', 'ten_never').where('id', '=', id),
);

describe.each(dialects)('preparedQuery on $dialect', ({ fresh }) => {
  it("answers each call with its own arguments' rows, the compiled constants kept", async () => {
    const { db, close } = await withTenants(await fresh(), { ten_a: 'a', ten_b: 'b' });
    try {
      expect(await byNameAndId(db, 'ten_a', 'a')).toEqual([{ id: 'ten_a', name: 'a' }]);
      expect(await byNameAndId(db, 'ten_b', 'b')).toEqual([{ id: 'ten_b', name: 'b' }]);
      expect(await byNameAndId(db, 'ten_a', 'b')).toEqual([]);
      expect(await Promise.all([byNameAndId(db, 'ten_b', 'b'), byNameAndId(db, 'ten_a', 'a')])).toEqual([
        [{ id: 'ten_b', name: 'b' }],
        [{ id: 'ten_a', name: 'a' }],
      ]);
    } finally {
      await close();
    }
  });
});

describe('preparedQuery', () => {
  it('compiles once per database, so each answers from its own rows', async () => {
    const one = await withTenants('sqlite::memory:', { ten_a: 'one' });
    const two = await withTenants('sqlite::memory:', { ten_a: 'two' });
    try {
      const nameOf = preparedQuery(1, (db: Kysely<Schema>, id: string) => db.selectFrom('tenants').select('name').where('id', '=', id));
      expect(await nameOf(one.db, 'ten_a')).toEqual([{ name: 'one' }]);
      expect(await nameOf(two.db, 'ten_a')).toEqual([{ name: 'two' }]);
      expect(await nameOf(one.db, 'ten_a')).toEqual([{ name: 'one' }]);
    } finally {
      await one.close();
      await two.close();
    }
  });

  it('binds an argument used twice in both places, and refuses one the query does not bind', async () => {
    const { db, close } = await withTenants('sqlite::memory:', { x: 'x', ten_a: 'a' });
    try {
      const twice = preparedQuery(1, (d: Kysely<Schema>, id: string) => d.selectFrom('tenants').select('name').where('id', '=', id).where('name', '=', id));
      expect(await twice(db, 'x')).toEqual([{ name: 'x' }]);
      expect(await twice(db, 'ten_a')).toEqual([]);
      const unused = preparedQuery(1, (d: Kysely<Schema>, _id: string) => d.selectFrom('tenants').select('name'));
      await expect(unused(db, 'ten_a')).rejects.toThrow(/argument 0 must be bound as a parameter/);
    } finally {
      await close();
    }
  });
});
