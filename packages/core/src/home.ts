// Where Sandglass keeps its state: one home directory ($SANDGLASS_HOME, default ~/.sandglass).
import { homedir } from 'node:os';
import { join } from 'node:path';

export function sandglassHome(): string {
  return process.env.SANDGLASS_HOME ?? join(homedir(), '.sandglass');
}

export interface HomeLayout {
  root: string;
  /** Built artifacts (kernel, rootfs, agent, templates) under content-hash keys. */
  artifacts: string;
  /** Per-sandbox runtime directories (sockets, disk overlays, console logs). */
  run: string;
  /** The SQLite database of the embedded deployment. */
  database: string;
  /** Local admin API key of the embedded deployment (mode 0600). */
  adminKeyFile: string;
  /** Where a running `sandglass up` writes its URLs, for the CLI and SDK to find it. */
  serverFile: string;
  /** The local chunk store: encrypted snapshot chunks and manifests. */
  store: string;
  /** The local keyring: master key and wrapped per-tenant data keys (mode 0700). */
  keys: string;
}

export function homeLayout(root = sandglassHome()): HomeLayout {
  return {
    root,
    artifacts: join(root, 'artifacts'),
    run: join(root, 'run'),
    database: join(root, 'sandglass.db'),
    adminKeyFile: join(root, 'admin-key'),
    serverFile: join(root, 'server.json'),
    store: join(root, 'store'),
    keys: join(root, 'keys'),
  };
}
