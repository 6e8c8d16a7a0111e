// The control plane's suite (server.test.ts) again, with each test's database on the unit run's PostgreSQL.
process.env.SANDGLASS_TEST_DIALECT = 'postgres';
await import('./server.test.js');
