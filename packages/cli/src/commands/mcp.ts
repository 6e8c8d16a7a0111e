// `mcp`: Sandglass as Model Context Protocol tools for an agent, over stdio (what a desktop agent starts) or HTTP.
import type { Command } from 'commander';
import { parseNonNegativeInt } from '../args.js';
import type { Act } from './shared.js';

export function registerMcpCommand(program: Command, act: Act): void {
  program
    .command('mcp')
    .description('serve Sandglass as MCP tools over stdio (a desktop agent starts it), or streamable HTTP with --http')
    .option('--http', 'serve streamable HTTP at /mcp instead of stdio; clients send the API key as a bearer token')
    .option('--host <host>', 'address to listen on with --http', '127.0.0.1')
    .option('--port <n>', 'port to listen on with --http (0: any free one, printed on stderr)', parseNonNegativeInt, 7072)
    .action(
      act(async (flags: { http?: boolean; host: string; port: number }) => {
        // Loaded only here: the MCP SDK is not what the other commands need at start.
        const { serveHttp, serveStdio } = await import('../mcp/serve.js');
        const version = program.version() ?? '';
        if (flags.http) await serveHttp(version, { host: flags.host, port: flags.port });
        else await serveStdio(version);
      }),
    );
}
