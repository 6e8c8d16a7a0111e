// `npx tsx --import ./bin/workspace-source.mjs bench/mcp.ts` against a running server (SANDGLASS_HOME or
// SANDGLASS_URL/SANDGLASS_API_KEY): what `sandglass mcp` adds to a call, its `run_command` of `true` through the
// official SDK's stdio client next to the SDK's own `commands.run('true')` on the same sandbox, round by round, and how
// long the server takes from spawn to its tool list (what a desktop agent waits for at start).
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import Table from 'cli-table3';
import { Sandbox, resolveConfig } from '@sandglass/sdk';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));
const ROUNDS = Number(process.env.BENCH_N ?? 20);
const STARTS = Number(process.env.BENCH_STARTS ?? 5);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const fmt = (x: number) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;
const signed = (x: number) => `${x < 0 ? '−' : '+'}${fmt(Math.abs(x))}`;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function main(): Promise<void> {
  const { apiUrl, apiKey } = await resolveConfig();
  const env = { PATH: process.env.PATH ?? '', SANDGLASS_URL: apiUrl, SANDGLASS_API_KEY: apiKey };
  const connect = async () => {
    const client = new Client({ name: 'sandglass-bench', version: '0' });
    await client.connect(new StdioClientTransport({ command: bin, args: ['mcp'], env }));
    return client;
  };

  const starts: number[] = [];
  for (let i = 0; i < STARTS; i++) {
    let client: Client | undefined;
    starts.push(
      await timed(async () => {
        client = await connect();
        await client.listTools();
      }),
    );
    await client!.close();
  }

  const sbx = await Sandbox.create({ timeoutS: 900 });
  const client = await connect();
  try {
    const viaMcp = async () => {
      const r = (await client.callTool({ name: 'run_command', arguments: { sandboxId: sbx.id, cmd: 'true' } })) as {
        structuredContent?: { exitCode?: number };
      };
      if (r.structuredContent?.exitCode !== 0) throw new Error(`run_command answered ${JSON.stringify(r)}`);
    };
    const viaSdk = () => sbx.commands.run('true');
    // The MCP hop alone: an answer the server gives without a request (a refused argument).
    const hopOnly = async () => {
      const r = (await client.callTool({ name: 'run_command', arguments: { sandboxId: sbx.id, cmd: '' } })) as { isError?: boolean };
      if (!r.isError) throw new Error('an empty cmd was not refused');
    };
    // Warm both paths (the server's handle for this sandbox; TCG translates each new code path once).
    await viaMcp();
    await viaSdk();
    const mcp: number[] = [];
    const sdk: number[] = [];
    const hop: number[] = [];
    // Interleaved, so both see the same host load.
    for (let i = 0; i < ROUNDS; i++) {
      mcp.push(await timed(viaMcp));
      sdk.push(await timed(viaSdk));
      hop.push(await timed(hopOnly));
    }
    const t = new Table({ head: ['what', 'n', 'p50', 'p95', 'ratio'] });
    t.push(["SDK `commands.run('true')` (baseline)", ROUNDS, fmt(pct(sdk, 50)), fmt(pct(sdk, 95)), 'baseline']);
    t.push([
      'MCP `run_command` of `true` (stdio round trip)',
      ROUNDS,
      fmt(pct(mcp, 50)),
      fmt(pct(mcp, 95)),
      `${(pct(mcp, 50) / pct(sdk, 50)).toFixed(2)}× SDK (${signed(pct(mcp, 50) - pct(sdk, 50))} p50)`,
    ]);
    t.push(['MCP tool call refused by input validation (the hop alone)', ROUNDS, fmt(pct(hop, 50)), fmt(pct(hop, 95)), '']);
    t.push(['`sandglass mcp` spawn → initialize → tools/list', STARTS, fmt(pct(starts, 50)), fmt(pct(starts, 95)), '']);
    process.stdout.write(`${t.toString()}\n`);
  } finally {
    await client.close();
    await sbx.kill();
  }
}

await main();
