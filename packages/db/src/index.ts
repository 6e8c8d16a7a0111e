// @sandglass/db: the one query layer (Kysely) over SQLite now and PostgreSQL later; schema, migrations, timestamps.
export * from './schema.js';
export * from './open.js';
export * from './prepared.js';
export * from './time.js';
export { GENESIS_HASH } from './migrations.js';
