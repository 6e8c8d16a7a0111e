// Opens the chunk backend a store URL names: a local directory (file:/abs/path or /abs/path) or an S3 bucket (s3://…).
import { isAbsolute } from 'node:path';
import { fileURLToPath } from 'node:url';
import { invalidArgument } from '@sandglass/core';
import { isKey, type ChunkBackend } from './backend.js';
import { LocalDiskBackend } from './local-disk.js';
import { isBucketName, S3Backend, type S3BackendOptions } from './s3.js';

export interface OpenChunkBackendOptions {
  /** Where SANDGLASS_S3_* and AWS_* settings are read; process.env when absent. */
  env?: Readonly<Record<string, string | undefined>>;
  /** Overrides AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; with neither, the SDK's default chain (profile, instance role). */
  credentials?: S3BackendOptions['credentials'];
}

const FIELD = 'store';
const S3_PARAMS = new Set(['endpoint', 'region', 'pathStyle']);
const DEFAULT_REGION = 'us-east-1';

/**
 * `file:/abs/path` or `/abs/path`: LocalDiskBackend. `s3://bucket[/prefix][?endpoint=…&region=…&pathStyle=true|false]`:
 * S3Backend; a setting missing from the URL comes from SANDGLASS_S3_ENDPOINT, SANDGLASS_S3_REGION (then AWS_REGION,
 * then us-east-1) and SANDGLASS_S3_PATH_STYLE, and path-style addressing is the default with an endpoint (on-prem
 * stores), virtual-hosted without (AWS). Anything unrecognised is refused, naming the part that is wrong.
 */
export function openChunkBackend(url: string, opts: OpenChunkBackendOptions = {}): ChunkBackend {
  if (typeof url !== 'string' || url === '') throw invalidArgument(FIELD, 'must be file:/abs/path, /abs/path or s3://bucket/prefix');
  if (url.startsWith('/')) return new LocalDiskBackend(url);
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'file') return new LocalDiskBackend(filePath(url));
  if (scheme === 's3') return new S3Backend(s3Options(url, opts));
  throw invalidArgument(FIELD, `must be file:/abs/path, /abs/path or s3://bucket/prefix (got ${scheme ? `scheme "${scheme}:"` : 'a relative path'})`);
}

function filePath(url: string): string {
  let path: string;
  try {
    path = fileURLToPath(url);
  } catch (err) {
    throw invalidArgument(`${FIELD}.path`, `must be a file: URL of an absolute local path (${(err as Error).message})`);
  }
  if (!isAbsolute(path)) throw invalidArgument(`${FIELD}.path`, 'must be absolute');
  return path;
}

function s3Options(url: string, opts: OpenChunkBackendOptions): S3BackendOptions {
  const env = opts.env ?? process.env;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidArgument(FIELD, 'must be a URL of the form s3://bucket/prefix?endpoint=…&region=…&pathStyle=true');
  }
  if (parsed.username || parsed.password) {
    throw invalidArgument(`${FIELD}.credentials`, 'must not be in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY');
  }
  if (parsed.port) throw invalidArgument(`${FIELD}.bucket`, 'must be a bucket name, not a host:port; give the server as ?endpoint=');
  if (parsed.hash) throw invalidArgument(FIELD, 'must not have a #fragment');
  const bucket = parsed.hostname;
  if (!isBucketName(bucket)) {
    throw invalidArgument(`${FIELD}.bucket`, `must be an S3 bucket name: 3-63 lowercase letters, digits, "." or "-" (got "${bucket}")`);
  }
  const prefix = parsed.pathname.replace(/^\/+/, '').replace(/\/+$/, '');
  if (prefix !== '' && !isKey(prefix)) {
    throw invalidArgument(`${FIELD}.prefix`, `must be "/"-separated segments of letters, digits, ".", "_" or "-", none starting with "." (got "${prefix}")`);
  }
  for (const name of parsed.searchParams.keys()) {
    if (!S3_PARAMS.has(name)) throw invalidArgument(`${FIELD}.${name}`, 'is not a setting of an s3:// store; use endpoint, region or pathStyle');
  }
  const param = (name: string, envName: string): { value: string; field: string } | undefined => {
    const fromUrl = parsed.searchParams.get(name);
    if (fromUrl !== null) return { value: fromUrl, field: `${FIELD}.${name}` };
    const fromEnv = env[envName];
    return fromEnv === undefined || fromEnv === '' ? undefined : { value: fromEnv, field: envName };
  };

  const endpointSetting = param('endpoint', 'SANDGLASS_S3_ENDPOINT');
  const endpoint = endpointSetting && checkEndpoint(endpointSetting.value, endpointSetting.field);
  const regionSetting = param('region', 'SANDGLASS_S3_REGION');
  const region = regionSetting?.value ?? (env.AWS_REGION || DEFAULT_REGION);
  if (!/^[a-z0-9-]{1,64}$/.test(region))
    throw invalidArgument(regionSetting?.field ?? 'AWS_REGION', `must be a region name such as us-east-1 (got "${region}")`);
  const pathStyleSetting = param('pathStyle', 'SANDGLASS_S3_PATH_STYLE');
  let forcePathStyle = endpoint !== undefined;
  if (pathStyleSetting) {
    if (pathStyleSetting.value !== 'true' && pathStyleSetting.value !== 'false') throw invalidArgument(pathStyleSetting.field, 'must be true or false');
    forcePathStyle = pathStyleSetting.value === 'true';
  }
  const credentials =
    opts.credentials ??
    (env.AWS_ACCESS_KEY_ID && env.AWS_SECRET_ACCESS_KEY
      ? { accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY, sessionToken: env.AWS_SESSION_TOKEN || undefined }
      : undefined);
  return { bucket, prefix, endpoint, region, forcePathStyle, credentials };
}

/** An http(s) origin, optionally with a base path; credentials and queries belong elsewhere. */
function checkEndpoint(value: string, field: string): string {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw invalidArgument(field, 'must be an http:// or https:// URL such as http://127.0.0.1:9000');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw invalidArgument(field, `must be http:// or https:// (got "${u.protocol}")`);
  if (u.username || u.password) throw invalidArgument(field, 'must not carry credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY');
  if (u.search || u.hash) throw invalidArgument(field, 'must not have a query or fragment');
  return value.replace(/\/+$/, '');
}
