// Where the SDK finds the control plane and its API key: explicit options, then env, then the server.json of a local `sandglass up`.
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { AuthenticationError } from './errors.js';

export interface ConnectionConfig {
  /** Control-plane URL, e.g. http://127.0.0.1:7070. Default: $SANDGLASS_URL, else $SANDGLASS_HOME/server.json. */
  apiUrl?: string;
  /** API key. Default: $SANDGLASS_API_KEY, else the admin key file named in $SANDGLASS_HOME/server.json. */
  apiKey?: string;
  /** Limit for one control-plane or gateway request until its response headers arrive. Default 60000. */
  requestTimeoutMs?: number;
}

export interface ResolvedConfig {
  apiUrl: string;
  apiKey: string;
  requestTimeoutMs: number;
}

/** What a running `sandglass up` writes to $SANDGLASS_HOME/server.json. */
export interface ServerFile {
  url: string;
  gatewayUrl: string;
  pid: number;
  adminKeyFile: string;
}

export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;

function sandglassHome(): string {
  return process.env.SANDGLASS_HOME || join(homedir(), '.sandglass');
}

async function readServerFile(): Promise<ServerFile | undefined> {
  const file = join(sandglassHome(), 'server.json');
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return undefined;
  }
  try {
    return JSON.parse(text) as ServerFile;
  } catch (err) {
    throw new AuthenticationError('unauthenticated', `${file} is not valid JSON; restart \`sandglass up\` to rewrite it.`, { cause: err });
  }
}

const notFound = () =>
  new AuthenticationError(
    'unauthenticated',
    'No Sandglass server configured: run `sandglass up`, or set SANDGLASS_URL and SANDGLASS_API_KEY (or pass apiUrl and apiKey).',
  );

/** Fills in what the caller left out; throws `unauthenticated` with what to do when nothing is found. */
export async function resolveConfig(config: ConnectionConfig = {}): Promise<ResolvedConfig> {
  const requestTimeoutMs = config.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  let apiUrl = config.apiUrl ?? (process.env.SANDGLASS_URL || undefined);
  let apiKey = config.apiKey ?? (process.env.SANDGLASS_API_KEY || undefined);
  if (apiUrl === undefined || apiKey === undefined) {
    const server = await readServerFile();
    if (server) {
      apiUrl ??= server.url;
      if (apiKey === undefined && server.adminKeyFile) {
        try {
          apiKey = (await readFile(server.adminKeyFile, 'utf8')).trim();
        } catch (err) {
          throw new AuthenticationError(
            'unauthenticated',
            `Cannot read the admin key file ${server.adminKeyFile} named in server.json; set SANDGLASS_API_KEY or rerun \`sandglass up\`.`,
            { cause: err },
          );
        }
      }
    }
  }
  if (!apiUrl || !apiKey) throw notFound();
  return { apiUrl: apiUrl.replace(/\/+$/, ''), apiKey, requestTimeoutMs };
}
