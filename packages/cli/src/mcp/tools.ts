// The tool set `sandglass mcp` serves: each tool's input schema (zod, advertised as JSON Schema), its action over the
// SDK, and the one way a failure becomes an MCP tool error carrying the catalogue's code.
import { inspect } from 'node:util';
import { z } from 'zod';
import {
  CommandExitError,
  CommandTimeoutError,
  type CommandResult,
  type ConnectionConfig,
  Sandbox,
  type SandboxInfo,
  type SandboxState,
  SandglassError,
  type SignalName,
} from '@sandglass/sdk';
import { withoutAccess } from '../commands/shared.js';

/** What a tool's action gets besides its arguments: where a running command's output goes, and the caller's cancel. */
export interface ToolContext {
  /** One piece of a running command's output; a progress notification when the caller asked for progress. */
  output(stream: 'stdout' | 'stderr', text: string): Promise<void>;
  signal: AbortSignal;
}

/** The answer to a tools/call: the result as JSON text and as structured content, or the same for an error. */
export interface ToolAnswer {
  [key: string]: unknown;
  content: { type: 'text'; text: string }[];
  structuredContent: Record<string, unknown>;
  isError?: boolean;
}

interface Tool<S extends z.ZodObject = z.ZodObject> {
  description: string;
  input: S;
  run(args: z.infer<S>, ctx: ToolContext): Promise<Record<string, unknown>>;
}

const SIGNALS = ['SIGTERM', 'SIGKILL', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const satisfies readonly SignalName[];
const STATES = ['starting', 'running', 'paused', 'ended', 'failed'] as const satisfies readonly SandboxState[];

const sandboxId = z.string().min(1).describe('sandbox id (sbx_…)');
const envs = z.record(z.string(), z.string());
const encoding = z.enum(['utf8', 'base64']).default('utf8');
const port = z.number().int().min(1).max(65535);
const isoTime = z.iso.datetime({ offset: true }).describe('ISO 8601 time, e.g. 2026-06-01T12:00:00Z');
// As the control plane's NetworkRule and SecretName: the rule's own syntax is the server's to judge (policy_invalid).
const rules = z.array(z.string().min(1)).max(1000);
const secretName = z.string().regex(/^[A-Z_][A-Z0-9_]{0,63}$/, 'must be a secret name like [A-Z_][A-Z0-9_]*');

/** The shape of a sandbox in a tool's answer: never its access grant, which is a credential. */
const shown = (info: SandboxInfo) => withoutAccess(info) as unknown as Record<string, unknown>;

/**
 * A tool error as the catalogue has it: `{ error: { code, message, requestId?, details? } }`, the API's wire shape. A
 * failure that is not catalogued is a defect: `internal`, with the original on stderr only (it may hold anything).
 */
export function errorAnswer(err: unknown, tool: string): ToolAnswer {
  let error: { code: string; message: string; requestId?: string; details?: Record<string, unknown> };
  if (err instanceof SandglassError) {
    error = { code: err.code, message: err.message };
    if (err.requestId) error.requestId = err.requestId;
    if (err.details) error.details = err.details;
  } else {
    process.stderr.write(`sandglass mcp: ${tool}: ${inspect(err)}\n`);
    error = { code: 'internal', message: `${tool} failed unexpectedly; the MCP server's stderr has the details` };
  }
  return { content: [{ type: 'text', text: `${error.code}: ${error.message}` }], structuredContent: { error }, isError: true };
}

/** Bad arguments as `invalid_argument`, naming the first offending field (a path such as `envs.A` for a nested one). */
export function invalidArguments(issues: z.core.$ZodIssue[]): SandglassError {
  const issue = issues[0]!;
  const path = [...issue.path.map(String), ...(issue.code === 'unrecognized_keys' ? [issue.keys[0]!] : [])];
  const field = path.join('.') || '(arguments)';
  return new SandglassError('invalid_argument', `${field}: ${issue.message}`, { details: { field } });
}

/** A finished command as a tool answers it: a non-zero exit or a timeout is a result to read, not a failure of the tool. */
function commandAnswer(r: CommandResult): Record<string, unknown> {
  const out: Record<string, unknown> = { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut };
  if (r.signal) out.signal = r.signal;
  if (r.droppedBytes) out.droppedBytes = r.droppedBytes;
  return out;
}

/**
 * The tools over one connection config (empty: the CLI's own resolution — SANDGLASS_URL/SANDGLASS_API_KEY, else a
 * local `sandglass up`'s server.json). Sandbox handles are kept by id, so a call after the first costs no lookup.
 */
export class ToolSet {
  private readonly handles = new Map<string, Sandbox>();
  private readonly tools: Record<string, Tool>;

  constructor(private readonly config: ConnectionConfig = {}) {
    this.tools = this.define();
  }

  /** Name, description and JSON Schema of each tool, as tools/list answers them. */
  list(): { name: string; description: string; inputSchema: { type: 'object'; [key: string]: unknown } }[] {
    return Object.entries(this.tools).map(([name, t]) => {
      const { $schema: _, ...schema } = z.toJSONSchema(t.input, { io: 'input' });
      return { name, description: t.description, inputSchema: { ...schema, type: 'object' } };
    });
  }

  has(name: string): boolean {
    return Object.hasOwn(this.tools, name);
  }

  /** Validates the arguments, runs the tool and answers; every failure is an answer with isError, never a throw. */
  async call(name: string, args: unknown, ctx: ToolContext): Promise<ToolAnswer> {
    const tool = this.tools[name]!;
    try {
      const parsed = tool.input.safeParse(args ?? {});
      if (!parsed.success) throw invalidArguments(parsed.error.issues);
      const result = await tool.run(parsed.data, ctx);
      return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result };
    } catch (err) {
      return errorAnswer(err, name);
    }
  }

  private async sandbox(id: string): Promise<Sandbox> {
    const known = this.handles.get(id);
    if (known) return known;
    const sbx = await Sandbox.connect(id, this.config);
    this.handles.set(id, sbx);
    return sbx;
  }

  private keep(sbx: Sandbox): Sandbox {
    this.handles.set(sbx.id, sbx);
    return sbx;
  }

  private define(): Record<string, Tool> {
    const tool = <S extends z.ZodObject>(t: Tool<S>) => t as unknown as Tool;
    return {
      create_sandbox: tool({
        description: 'Start a new Linux sandbox (a microVM) from a template; answers the sandbox with its id.',
        input: z.strictObject({
          template: z.string().min(1).optional().describe('template name or id; default "base"'),
          memoryMib: z.number().int().positive().optional(),
          vcpus: z.number().int().positive().optional(),
          timeoutS: z.number().int().positive().optional().describe('killed this long after creation'),
          metadata: z.record(z.string(), z.string()).optional(),
          envs: envs.optional().describe('environment of every process in the sandbox (no credentials: use secrets)'),
          diskMib: z.number().int().positive().optional(),
          snapshotIntervalS: z.number().int().min(5).max(86400).optional().describe('seconds between rolling snapshots; default 60'),
          network: z
            .strictObject({ allow: rules.optional(), deny: rules.optional() })
            .optional()
            .describe('egress rules, `host[:port] [METHOD] [/path-prefix]`; deny wins; absent: no network at all'),
          secrets: z.array(secretName).max(64).optional().describe('names of tenant secrets: the sandbox sees placeholders, never the values'),
          onTimeout: z.enum(['kill', 'pause']).optional().describe('what the timeout does: kill (default) or pause (snapshot, release the VM)'),
          autoResume: z.boolean().optional().describe('while paused, a request with its credential to one of its ports resumes it'),
          onTimeoutKeepMemory: z
            .boolean()
            .optional()
            .describe('with onTimeout pause, false keeps only the disk at the timeout (processes end; the resume boots it afresh)'),
        }),
        run: async (a) => shown(await this.keep(await Sandbox.create({ ...this.config, ...a })).getInfo()),
      }),
      sandbox_info: tool({
        description: 'A sandbox as the control plane reports it: state, expiresAt, onTimeout, autoResume, network, …',
        input: z.strictObject({ sandboxId }),
        run: async ({ sandboxId: id }) => shown(await (await this.sandbox(id)).getInfo()),
      }),
      sandbox_metrics: tool({
        description:
          "A running sandbox's CPU, memory and disk over the last hour, oldest first (the guest's own figures, one sample " +
          'every few seconds); start and end keep only the samples between them.',
        input: z.strictObject({ sandboxId, start: isoTime.optional(), end: isoTime.optional() }),
        run: async ({ sandboxId: id, start, end }) => ({
          metrics: await (await this.sandbox(id)).metrics({
            start: start === undefined ? undefined : new Date(start),
            end: end === undefined ? undefined : new Date(end),
          }),
        }),
      }),
      list_sandboxes: tool({
        description: "The sandboxes of this API key's tenant.",
        input: z.strictObject({ state: z.enum(STATES).optional() }),
        run: async (a) => ({ sandboxes: (await Sandbox.list({ ...this.config, ...a })).map(shown) }),
      }),
      run_command: tool({
        description:
          'Run a shell command (bash -c) in a sandbox. Its output streams as progress notifications when the call asks ' +
          'for progress; the answer has exitCode, stdout and stderr. With background: true it answers at once with a ' +
          'commandId: read its output with read_command_output, stop it with kill_command.',
        input: z.strictObject({
          sandboxId,
          cmd: z.string().min(1),
          cwd: z.string().min(1).optional(),
          envs: envs.optional(),
          user: z.string().min(1).optional(),
          timeoutMs: z.number().int().nonnegative().optional().describe('killed after this long; default 60000, 0 = no limit'),
          stdin: z.boolean().optional().describe('keep stdin open for write_stdin (default: stdin is /dev/null)'),
          background: z.boolean().default(false),
        }),
        run: async ({ sandboxId: id, cmd, background, ...opts }, ctx) => {
          const sbx = await this.sandbox(id);
          if (background) {
            const handle = await sbx.commands.run(cmd, { ...opts, background: true, retainOutput: false });
            // Its output stays with the gateway, read by offset later: this process holds no stream open for it.
            await handle.disconnect();
            return { commandId: handle.id, pid: handle.pid };
          }
          const handle = await sbx.commands.run(cmd, {
            ...opts,
            background: true,
            onStdout: (s) => void ctx.output('stdout', s),
            onStderr: (s) => void ctx.output('stderr', s),
          });
          const cancel = () => void handle.kill().catch(() => undefined);
          // A cancel that came while the command was starting finds the signal already aborted.
          if (ctx.signal.aborted) cancel();
          ctx.signal.addEventListener('abort', cancel, { once: true });
          try {
            return commandAnswer(await handle.wait());
          } catch (err) {
            if (err instanceof CommandExitError || err instanceof CommandTimeoutError) return commandAnswer(err.result);
            throw err;
          } finally {
            ctx.signal.removeEventListener('abort', cancel);
          }
        },
      }),
      read_command_output: tool({
        description:
          "A command's output after fromOffset (default: the oldest the gateway still holds), and its exit once it has " +
          'exited; pass the answered outputOffset as the next fromOffset to follow it.',
        input: z.strictObject({ sandboxId, commandId: z.string().min(1), fromOffset: z.number().int().nonnegative().optional() }),
        run: async ({ sandboxId: id, commandId, fromOffset }) => {
          const read = await (await this.sandbox(id)).commands.readOutput(commandId, { fromOffset });
          const text = (fd: 1 | 2) => Buffer.concat(read.pieces.filter((p) => p.fd === fd).map((p) => p.bytes)).toString('utf8');
          const out: Record<string, unknown> = { stdout: text(1), stderr: text(2), outputOffset: read.outputOffset, droppedBytes: read.droppedBytes };
          if (read.exit) out.exit = read.exit;
          return out;
        },
      }),
      write_stdin: tool({
        description:
          'Write to the stdin of a command started with stdin: true (UTF-8 text, or base64 for bytes); eof: true then ' +
          'closes it, as the end of a pipe does.',
        input: z.strictObject({
          sandboxId,
          commandId: z.string().min(1),
          data: z.string().default(''),
          encoding,
          eof: z.boolean().default(false),
        }),
        run: async ({ sandboxId: id, commandId, data, encoding: enc, eof }) => {
          const sbx = await this.sandbox(id);
          const bytes = Buffer.from(data, enc);
          if (bytes.byteLength > 0) await sbx.commands.sendStdin(commandId, bytes);
          if (eof) await sbx.commands.closeStdin(commandId);
          return { writtenBytes: bytes.byteLength, eof };
        },
      }),
      kill_command: tool({
        description: 'Send a signal (default SIGKILL) to a command; killed is false when it had already exited.',
        input: z.strictObject({ sandboxId, commandId: z.string().min(1), signal: z.enum(SIGNALS).default('SIGKILL') }),
        run: async ({ sandboxId: id, commandId, signal }) => ({ killed: await (await this.sandbox(id)).commands.kill(commandId, signal) }),
      }),
      read_file: tool({
        description: 'Read a file of the sandbox: as UTF-8 text, or base64 for binary content.',
        input: z.strictObject({ sandboxId, path: z.string().min(1), encoding }),
        run: async ({ sandboxId: id, path, encoding: enc }) => {
          const bytes = await (await this.sandbox(id)).files.read(path, { format: 'bytes' });
          return { path, encoding: enc, content: Buffer.from(bytes).toString(enc), sizeBytes: bytes.byteLength };
        },
      }),
      write_file: tool({
        description: 'Write a file in the sandbox (parents are created), from UTF-8 text or base64.',
        input: z.strictObject({
          sandboxId,
          path: z.string().min(1),
          content: z.string(),
          encoding,
          mode: z.number().int().min(0).max(0o7777).optional().describe('permission bits, e.g. 493 for 0755'),
        }),
        run: async ({ sandboxId: id, path, content, encoding: enc, mode }) => {
          const written = await (await this.sandbox(id)).files.write(path, Buffer.from(content, enc), { mode });
          return { ...written };
        },
      }),
      list_files: tool({
        description: 'List a directory of the sandbox (depth 1 by default).',
        input: z.strictObject({ sandboxId, path: z.string().min(1), depth: z.number().int().positive().optional() }),
        run: async ({ sandboxId: id, path, depth }) => ({ entries: await (await this.sandbox(id)).files.list(path, { depth }) }),
      }),
      snapshot: tool({
        description: "Snapshot a running sandbox's memory and disk; a named snapshot is pinned. Answers the snapshot.",
        input: z.strictObject({ sandboxId, name: z.string().min(1).optional() }),
        run: async ({ sandboxId: id, name }) => ({ ...(await (await this.sandbox(id)).snapshot({ name })) }),
      }),
      timeline: tool({
        description:
          "A sandbox's retained snapshots, oldest first (rolling and named; fork or resume from any), and its snapshot " +
          'cadence: the interval asked for against the one achieved.',
        input: z.strictObject({ sandboxId }),
        run: async ({ sandboxId: id }) => ({ ...(await (await this.sandbox(id)).timelineWithCadence()) }),
      }),
      fork: tool({
        description: 'Start new sandboxes from a snapshot: from is a snapshot id (snap_…), a sandbox id (its latest snapshot) or sbx_…@<ISO time>.',
        input: z.strictObject({
          from: z.string().min(1),
          count: z.number().int().positive().optional(),
          timeoutS: z.number().int().positive().optional(),
          metadata: z.record(z.string(), z.string()).optional(),
        }),
        run: async ({ from, ...opts }) => {
          const forks = (await Sandbox.fork(from, { ...this.config, ...opts })).map((f) => this.keep(f));
          return { sandboxes: (await Promise.all(forks.map((f) => f.getInfo()))).map(shown) };
        },
      }),
      pause: tool({
        description:
          'Pause a sandbox: snapshot it and stop its VM; resume brings it back under the same id. keepMemory false keeps ' +
          'only its disk: smaller and quicker, and the resume boots it afresh (files kept, processes gone).',
        input: z.strictObject({ sandboxId, keepMemory: z.boolean().optional() }),
        run: async ({ sandboxId: id, keepMemory }) => ({ ...(await (await this.sandbox(id)).pause(keepMemory === undefined ? {} : { keepMemory })) }),
      }),
      resume: tool({
        description: 'Run a paused sandbox again from its latest snapshot, a snapshot of it (snapshotId), or its latest at or before a time (at).',
        input: z.strictObject({ sandboxId, snapshotId: z.string().min(1).optional(), at: z.string().min(1).optional().describe('ISO 8601 time') }),
        run: async ({ sandboxId: id, ...opts }) => shown(await this.keep(await Sandbox.resume(id, { ...this.config, ...opts })).getInfo()),
      }),
      kill_sandbox: tool({
        description: 'Kill a sandbox: its VM stops and its disk is gone; its snapshots stay.',
        input: z.strictObject({ sandboxId }),
        run: async ({ sandboxId: id }) => {
          await (await this.sandbox(id)).kill();
          this.handles.delete(id);
          return { killed: id };
        },
      }),
      list_ports: tool({
        description: 'The TCP ports listening in the sandbox, each with whether it is public.',
        input: z.strictObject({ sandboxId }),
        run: async ({ sandboxId: id }) => ({ ports: await (await this.sandbox(id)).ports.list() }),
      }),
      port_url: tool({
        description:
          'A short-lived URL that opens a guest port in a browser (anyone holding it can, until expiresAt), and the ' +
          "port's host name, which needs the sandbox's access token unless the port is public.",
        input: z.strictObject({
          sandboxId,
          port,
          expiresInS: z.number().int().positive().optional(),
          form: z.enum(['host', 'path']).optional(),
        }),
        run: async ({ sandboxId: id, port, ...opts }) => {
          const sbx = await this.sandbox(id);
          const url = await sbx.ports.url(port, opts);
          return { ...url, host: sbx.getHost(port) };
        },
      }),
      set_port_public: tool({
        description:
          'Open a guest port to requests that carry no credential (public: true), or make it private again; each change ' + 'is an event of the sandbox.',
        input: z.strictObject({ sandboxId, port, public: z.boolean() }),
        run: async ({ sandboxId: id, port: p, public: open }) => {
          await (await this.sandbox(id)).ports.setPublic(p, open);
          return { port: p, public: open };
        },
      }),
    };
  }
}
