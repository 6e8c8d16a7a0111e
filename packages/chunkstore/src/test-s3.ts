// Starts a local S3-compatible server (s3rver, scripts/s3-server.mjs) as a child process on loopback, for tests and benchmarks.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const SERVER_SCRIPT = fileURLToPath(new URL('../../../scripts/s3-server.mjs', import.meta.url));
/** s3rver's one built-in account: it accepts no other credentials. */
const ACCESS_KEY_ID = 'S3RVER';
const SECRET_ACCESS_KEY = 'S3RVER';
const BUCKET = 'sandglass';
const READY_TIMEOUT_MS = 30_000;

export interface TestS3Server {
  endpoint: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** `s3://<bucket>/<prefix>?endpoint=…&region=us-east-1&pathStyle=true`, for openChunkBackend with the credentials above. */
  url: string;
  stop(): Promise<void>;
}

/** Objects are files under `dir` (s3rver's layout); port 0 or none picks a free loopback port. */
export async function startS3Server(opts: { dir: string; port?: number; prefix?: string }): Promise<TestS3Server> {
  // s3rver seals its list continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
  const argv = ['--openssl-legacy-provider', SERVER_SCRIPT, opts.dir, String(opts.port ?? 0), BUCKET];
  const child = spawn(process.execPath, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s: string) => {
    stderr = (stderr + s).slice(-4000);
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`s3rver did not start within ${READY_TIMEOUT_MS} ms: ${stderr}`)), READY_TIMEOUT_MS);
    const fail = (err: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(err);
    };
    child.once('error', fail);
    child.once('exit', (code, signal) => fail(new Error(`s3rver exited (${signal ?? code}) before it was ready: ${stderr}`)));
    child.stdout.setEncoding('utf8').on('data', (s: string) => {
      out += s;
      const m = /^READY (\d+)$/m.exec(out);
      if (!m) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      resolve(Number(m[1]));
    });
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const prefix = opts.prefix ?? 'store';
  const exited = once(child, 'exit');
  return {
    endpoint,
    bucket: BUCKET,
    accessKeyId: ACCESS_KEY_ID,
    secretAccessKey: SECRET_ACCESS_KEY,
    url: `s3://${BUCKET}/${prefix}?endpoint=${encodeURIComponent(endpoint)}&region=us-east-1&pathStyle=true`,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
