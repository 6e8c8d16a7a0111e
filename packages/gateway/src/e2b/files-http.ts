// envd's plain HTTP routes: GET /files (a raw download), POST /files (multipart or octet-stream uploads, maybe
// gzip, with envd 0.6.2's metadata headers), both streamed between the client and the guest agent without holding a whole file.
import { posix } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import type { IncomingMessage } from 'node:http';
import type { Sandbox } from '../sandbox.js';
import { mapAgentError } from '../agent-link.js';
import { MAX_UPLOAD_BYTES, limitBytes } from '../data-plane.js';
import { forEachPart, multipartBoundary, MultipartError } from './multipart.js';
import type { EnvdUser } from './process.js';

/** An envd HTTP error: answered as `{ code: <status>, message }` with that status. */
export class EnvdHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Ends a file's stream at the size the agent declared, so the body matches its Content-Length. */
function truncateAt(sizeBytes: number): Transform {
  let left = sizeBytes;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      const piece = chunk.subarray(0, Math.max(0, left));
      left -= piece.length;
      cb(null, piece.length > 0 ? piece : undefined);
    },
  });
}

export async function download(sbx: Sandbox, user: EnvdUser, path: unknown): Promise<{ sizeBytes: number; body: Readable }> {
  if (typeof path !== 'string' || path === '') throw new EnvdHttpError(400, 'path: the query parameter is required');
  const { sizeBytes, stream } = await sbx.files.open(user.resolve(path, 'path'));
  const body = truncateAt(sizeBytes);
  pipeline(stream, body).catch((e: unknown) => body.destroy(e as Error));
  return { sizeBytes, body };
}

export interface WrittenFile {
  name: string;
  type: 'file';
  path: string;
  metadata?: Record<string, string>;
}

/** envd 0.6.2's file metadata: each `X-Metadata-<key>: <value>` header of an upload, stored as `user.<key>`. */
const METADATA_HEADER = /^x-metadata-(.*)$/i;
/** The SDK's own rules (HTTP token keys, printable US-ASCII values), checked again: the client is not trusted. */
const METADATA_KEY = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;
const METADATA_VALUE = /^[\x20-\x7e]*$/;
/** Bounds of the guest agent (agent/xattr_linux.go), refused here before any byte is sent. */
const MAX_METADATA_KEYS = 64;
const MAX_METADATA_KEY_BYTES = 250;
const MAX_METADATA_VALUE_BYTES = 4096;

/**
 * The upload's metadata from its raw headers, or 400 naming the bad one. Keys are lower-cased: a header name has no
 * case, and the SDK's fetch sends every name lower-cased anyway, so the caller's spelling never arrives.
 */
export function uploadMetadata(rawHeaders: string[]): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const m = METADATA_HEADER.exec(rawHeaders[i]!);
    if (!m) continue;
    const key = m[1]!.toLowerCase();
    const value = rawHeaders[i + 1]!;
    if (!METADATA_KEY.test(key) || key.length > MAX_METADATA_KEY_BYTES)
      throw new EnvdHttpError(400, `metadata key ${JSON.stringify(key)}: 1 to ${MAX_METADATA_KEY_BYTES} HTTP token characters`);
    if (!METADATA_VALUE.test(value) || value.length > MAX_METADATA_VALUE_BYTES)
      throw new EnvdHttpError(400, `metadata value of ${JSON.stringify(key)}: at most ${MAX_METADATA_VALUE_BYTES} printable US-ASCII characters`);
    out ??= {};
    if (key in out) throw new EnvdHttpError(400, `metadata key ${JSON.stringify(key)} is sent twice`);
    out[key] = value;
  }
  if (out !== undefined && Object.keys(out).length > MAX_METADATA_KEYS) throw new EnvdHttpError(400, `metadata: at most ${MAX_METADATA_KEYS} keys a file`);
  return out;
}

/** Streams one file to the guest as the user (who owns it and any directories the write created). */
async function writeOne(sbx: Sandbox, user: EnvdUser, path: string, data: Readable, metadata?: Record<string, string>): Promise<WrittenFile> {
  const target = user.resolve(path, 'path');
  const limited = limitBytes(MAX_UPLOAD_BYTES);
  const piping = pipeline(data, limited).catch((e: unknown) => limited.destroy(e as Error));
  await sbx.files.write(target, limited, { owner: user.name, ...(metadata !== undefined ? { xattrs: metadata } : {}) });
  await piping;
  return { name: posix.basename(target), type: 'file', path: target, ...(metadata !== undefined ? { metadata } : {}) };
}

/**
 * POST /files: multipart/form-data with `file` parts (each part's filename is its path; the `path` query parameter,
 * when given, names the one file instead) or a raw body for the `path` query parameter; gzip if the client says so.
 */
export async function upload(sbx: Sandbox, user: EnvdUser, raw: IncomingMessage, queryPath: unknown): Promise<WrittenFile[]> {
  const path = typeof queryPath === 'string' && queryPath !== '' ? queryPath : undefined;
  const metadata = uploadMetadata(raw.rawHeaders);
  const encoding = (raw.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  if (!['identity', 'gzip', 'x-gzip'].includes(encoding)) throw new EnvdHttpError(400, `Content-Encoding ${encoding} is not supported; send gzip or nothing`);
  // pipe, not pipeline: a failed upload must not destroy the request, whose socket still carries the answer.
  const body: Readable = encoding === 'identity' ? raw : raw.pipe(createGunzip());
  const iterate = () => body.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>;
  const contentType = raw.headers['content-type'];
  const boundary = multipartBoundary(contentType);
  if (boundary !== undefined) {
    const written: WrittenFile[] = [];
    try {
      await forEachPart(iterate(), boundary, async (info, data) => {
        if (info.name !== 'file') {
          data.resume();
          return;
        }
        if (path !== undefined && written.length > 0) throw new EnvdHttpError(400, 'the path query parameter names a single file; send one file part');
        const target = path ?? info.filename;
        if (!target) throw new EnvdHttpError(400, 'a file part needs its path as filename (or the path query parameter)');
        written.push(await writeOne(sbx, user, target, data, metadata));
      });
    } catch (err) {
      if (err instanceof MultipartError) throw new EnvdHttpError(400, `malformed multipart body: ${err.message}`);
      throw err;
    }
    if (written.length === 0) throw new EnvdHttpError(400, 'the multipart body has no part named file');
    return written;
  }
  const media = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (media !== 'application/octet-stream') throw new EnvdHttpError(400, 'uploads are multipart/form-data or application/octet-stream');
  if (path === undefined) throw new EnvdHttpError(400, 'path: the query parameter is required for an application/octet-stream upload');
  return [await writeOne(sbx, user, path, body, metadata)];
}

/** The HTTP status and message of a failed envd HTTP route. */
export function envdHttpError(err: unknown): EnvdHttpError {
  if (err instanceof EnvdHttpError) return err;
  const se = mapAgentError(err);
  switch (se.code) {
    case 'file_not_found':
      return new EnvdHttpError(404, se.message);
    case 'path_outside_sandbox':
    case 'invalid_argument':
    case 'malformed_json':
    case 'is_a_directory':
    case 'not_a_directory':
    case 'file_exists':
      return new EnvdHttpError(400, se.message);
    case 'unauthenticated':
    case 'api_key_revoked':
    case 'api_key_expired':
      return new EnvdHttpError(401, se.message);
    case 'permission_denied':
      return new EnvdHttpError(403, se.message);
    case 'payload_too_large':
      return new EnvdHttpError(413, se.message);
    case 'storage_full':
      return new EnvdHttpError(507, se.message);
    case 'sandbox_not_running':
      return new EnvdHttpError(502, se.message);
    default:
      // The guest's disk filling up reaches the gateway as an agent I/O error that says so.
      if (/no space left on device|disk quota exceeded/i.test(se.message)) return new EnvdHttpError(507, se.message);
      return new EnvdHttpError(500, se.message);
  }
}
