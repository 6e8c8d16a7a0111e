// Part of `BENCH_ONLY=clients` (bench/clients.ts): what `sandglass mcp` adds to a call, its `run_command` of `true` through the
// official SDK's stdio client next to the SDK's own `commands.run('true')` on the same sandbox, round by round, and how
// long the server takes from spawn to its tool list (what a desktop agent waits for at start).
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Sandbox } from '@sandglass/sdk';

const bin = fileURLToPath(new URL('../bin/sandglass', import.meta.url));

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** Milliseconds: the MCP call, the SDK call, the MCP hop alone (rounds each), and spawn → tools/list (starts). */
export async function mcpBench(
  { apiUrl, apiKey }: { apiUrl: string; apiKey: string },
  { rounds, starts: startRounds }: { rounds: number; starts: number },
): Promise<{ mcp: number[]; sdk: number[]; hop: number[]; starts: number[] }> {
  const env = { PATH: process.env.PATH ?? '', SANDGLASS_URL: apiUrl, SANDGLASS_API_KEY: apiKey };
  const connect = async () => {
    const client = new Client({ name: 'sandglass-bench', version: '0' });
    await client.connect(new StdioClientTransport({ command: bin, args: ['mcp'], env }));
    return client;
  };

  const starts: number[] = [];
  for (let i = 0; i < startRounds; i++) {
    let client: Client | undefined;
    starts.push(
      await timed(async () => {
        client = await connect();
        await client.listTools();
      }),
    );
    await client!.close();
  }

  const sbx = await Sandbox.create({ apiUrl, apiKey, timeoutS: 900 });
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
    for (let i = 0; i < rounds; i++) {
      mcp.push(await timed(viaMcp));
      sdk.push(await timed(viaSdk));
      hop.push(await timed(hopOnly));
    }
    return { mcp, sdk, hop, starts };
  } finally {
    await client.close();
    await sbx.kill();
  }
}
