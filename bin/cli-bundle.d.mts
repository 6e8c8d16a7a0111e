// Types of bin/cli-bundle.mjs (plain JavaScript: the launcher runs it before any TypeScript loader).
export const CLI_BUNDLE: string;
export const SERVER_BUNDLE: string;
export const SERVER_COMMANDS: Set<string>;
export function cliBundleFresh(): boolean;
export function serverBundleFresh(): boolean;
export function buildCliBundle(): number | null;
export function buildServerBundle(): number | null;
