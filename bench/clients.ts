// `BENCH_ONLY=clients npm run bench`: what each client costs against its baseline, in one run on one server — the
// CLI's start (`--version`, `ls`) against a bare `node -e 0`, loading the servers compiled against through tsx, the
// Python SDK's and the MCP server's `true` against the TypeScript SDK's on the same sandbox.
import { fileURLToPath } from 'node:url';
import { buildCliBundle, cliBundleFresh } from '../bin/cli-bundle.mjs';
import { mcpBench } from './mcp.js';
import { pythonSdkBench } from './python-sdk.js';
import { interleaved, serverStartBench, timedSpawn } from './server-start.js';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

export interface ClientRow {
  what: string;
  samplesMs: number[];
  /** The row this one is a ratio of (its `what`); none for a baseline. */
  against?: string;
}

export async function clientsBench(config: { apiUrl: string; apiKey: string }, opts: { quick: boolean }): Promise<ClientRow[]> {
  const rounds = opts.quick ? 5 : 21;
  if (!cliBundleFresh() && buildCliBundle() !== 0) throw new Error('esbuild failed to bundle the CLI');
  const env = { ...process.env, SANDGLASS_URL: config.apiUrl, SANDGLASS_API_KEY: config.apiKey };
  const [node, version, ls] = await interleaved(
    [() => timedSpawn(process.execPath, ['-e', '0'], env), () => timedSpawn(bin, ['--version'], env), () => timedSpawn(bin, ['ls'], env)],
    rounds,
  );
  const server = await serverStartBench(opts.quick ? 3 : 10);
  const py = await pythonSdkBench(config, opts.quick ? 10 : 30);
  const mcp = await mcpBench(config, { rounds: opts.quick ? 10 : 30, starts: opts.quick ? 2 : 5 });
  const NODE = '`node -e 0` (baseline)';
  const SDK = "TypeScript SDK `commands.run('true')` (baseline)";
  return [
    { what: NODE, samplesMs: node! },
    { what: '`sandglass --version`', samplesMs: version!, against: NODE },
    { what: '`sandglass ls`', samplesMs: ls!, against: NODE },
    { what: 'load `@sandglass/server`: `node -e 0` (baseline)', samplesMs: server.baseline },
    { what: 'load `@sandglass/server` compiled', samplesMs: server.compiled, against: 'load `@sandglass/server`: `node -e 0` (baseline)' },
    { what: 'load `@sandglass/server` through tsx', samplesMs: server.sources, against: 'load `@sandglass/server`: `node -e 0` (baseline)' },
    { what: SDK, samplesMs: py.ts },
    { what: "Python SDK `commands.run('true')`", samplesMs: py.python, against: SDK },
    { what: "TypeScript SDK `commands.run('true')` (MCP's baseline)", samplesMs: mcp.sdk },
    { what: 'MCP `run_command` of `true` (stdio round trip)', samplesMs: mcp.mcp, against: "TypeScript SDK `commands.run('true')` (MCP's baseline)" },
    { what: 'MCP tool call refused by input validation (the hop alone)', samplesMs: mcp.hop },
    { what: '`sandglass mcp` spawn → initialize → tools/list', samplesMs: mcp.starts },
  ];
}
