#!/usr/bin/env node
// Runs s3rver (a local S3-compatible server) on loopback for tests and benchmarks, as its own process.
// Usage: node scripts/s3-server.mjs <dir> <port> <bucket>. Prints "READY <port>" once the bucket exists;
// port 0 picks a free one. Exits on SIGTERM/SIGINT, or when its parent closes stdin.
import { mkdirSync } from 'node:fs';
import S3rver from 's3rver';

const [dir, portArg = '0', bucket = 'sandglass'] = process.argv.slice(2);
if (!dir) {
  process.stderr.write('usage: s3-server.mjs <dir> [port] [bucket]\n');
  process.exit(2);
}
mkdirSync(dir, { recursive: true });
const server = new S3rver({
  address: '127.0.0.1',
  port: Number(portArg),
  directory: dir,
  silent: true,
  configureBuckets: [{ name: bucket }],
});
const { port } = await server.run();
process.stdout.write(`READY ${port}\n`);

let closing = false;
const close = async () => {
  if (closing) return;
  closing = true;
  await server.close();
  process.exit(0);
};
process.on('SIGTERM', close);
process.on('SIGINT', close);
// A test runner killed without cleanup closes our stdin: never outlive it.
process.stdin.on('end', close);
process.stdin.resume();
