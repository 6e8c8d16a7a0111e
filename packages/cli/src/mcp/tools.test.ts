// The MCP tool set's own logic: arguments checked before any request (invalid_argument naming the field), the
// advertised JSON Schemas, and how failures become tool errors.
import { describe, expect, it } from 'vitest';
import { NotFoundError } from '@sandglass/sdk';
import { errorAnswer, ToolSet } from './tools.js';

// Nothing listens there: a call that got past validation would fail with connection_failed, not the code asserted.
const tools = new ToolSet({ apiUrl: 'http://127.0.0.1:9', apiKey: 'sk_unused' });
const ctx = { signal: new AbortController().signal, output: async () => undefined };

describe('the MCP tool set', () => {
  it.each([
    ['run_command', { cmd: 'true' }, 'sandboxId'],
    ['run_command', { sandboxId: 'sbx_a', cmd: '' }, 'cmd'],
    ['run_command', { sandboxId: 'sbx_a', cmd: 'true', timeoutMs: 1.5 }, 'timeoutMs'],
    ['run_command', { sandboxId: 'sbx_a', cmd: 'true', envs: { A: 1 } }, 'envs.A'],
    ['run_command', { sandboxId: 'sbx_a', cmd: 'true', background: 'yes' }, 'background'],
    ['write_file', { sandboxId: 'sbx_a', path: '/a', content: 'x', encoding: 'hex' }, 'encoding'],
    ['write_file', { sandboxId: 'sbx_a', path: '/a', content: 'x', mode: 0o10000 }, 'mode'],
    ['port_url', { sandboxId: 'sbx_a', port: 65536 }, 'port'],
    ['kill_command', { sandboxId: 'sbx_a', commandId: 'c', signal: 'SIGSTOP' }, 'signal'],
    ['list_sandboxes', { state: 'asleep' }, 'state'],
    ['create_sandbox', { memoryMb: 512 }, 'memoryMb'],
    ['create_sandbox', { onTimeout: 'sleep' }, 'onTimeout'],
    ['create_sandbox', { autoResume: 'yes' }, 'autoResume'],
    ['create_sandbox', { onTimeoutKeepMemory: 'no' }, 'onTimeoutKeepMemory'],
    ['pause', { sandboxId: 'sbx_a', keepMemory: 'no' }, 'keepMemory'],
    ['create_sandbox', { network: { allow: ['example.com', 7] } }, 'network.allow.1'],
    ['create_sandbox', { network: { allowOut: ['example.com'] } }, 'network.allowOut'],
    ['create_sandbox', { secrets: ['lower_case'] }, 'secrets.0'],
    ['create_sandbox', { snapshotIntervalS: 1 }, 'snapshotIntervalS'],
    ['sandbox_metrics', { sandboxId: 'sbx_a', start: 'yesterday' }, 'start'],
    ['set_port_public', { sandboxId: 'sbx_a', port: 8000 }, 'public'],
    ['set_port_public', { sandboxId: 'sbx_a', port: 0, public: true }, 'port'],
    ['write_stdin', { sandboxId: 'sbx_a', commandId: 'c', data: 'x', eof: 'yes' }, 'eof'],
    ['timeline', {}, 'sandboxId'],
  ])('%s %j: invalid_argument naming %s, before any request', async (name, args, field) => {
    const a = await tools.call(name, args, ctx);
    expect(a.isError).toBe(true);
    expect(a.structuredContent.error).toMatchObject({ code: 'invalid_argument', details: { field } });
    expect(a.content[0]!.text).toMatch(new RegExp(`^invalid_argument: ${field.replaceAll('.', '\\.')}: `));
  });

  it('takes missing arguments as an empty object', async () => {
    expect((await tools.call('read_file', undefined, ctx)).structuredContent.error).toMatchObject({ details: { field: 'sandboxId' } });
  });

  it('advertises an object schema per tool, required fields without defaults', () => {
    const byName = Object.fromEntries(tools.list().map((t) => [t.name, t.inputSchema]));
    expect(byName.run_command).toMatchObject({ type: 'object', required: ['sandboxId', 'cmd'], additionalProperties: false });
    expect(byName.read_file!.required).toEqual(['sandboxId', 'path']);
    expect(byName.list_sandboxes!.required).toBeUndefined();
    expect(byName.run_command).not.toHaveProperty('$schema');
  });

  it('answers a catalogued error with its code, message and details, and anything else as internal without its text', () => {
    const known = errorAnswer(new NotFoundError('sandbox_not_found', 'no sandbox sbx_a', { requestId: 'req_1', details: { id: 'sbx_a' } }), 'run_command');
    expect(known).toEqual({
      isError: true,
      content: [{ type: 'text', text: 'sandbox_not_found: no sandbox sbx_a' }],
      structuredContent: { error: { code: 'sandbox_not_found', message: 'no sandbox sbx_a', requestId: 'req_1', details: { id: 'sbx_a' } } },
    });
    const stderr = process.stderr.write;
    process.stderr.write = () => true;
    try {
      const defect = errorAnswer(new Error('token sk_live_123 leaked'), 'read_file');
      expect(defect.structuredContent.error).toMatchObject({ code: 'internal' });
      expect(JSON.stringify(defect)).not.toContain('sk_live_123');
    } finally {
      process.stderr.write = stderr;
    }
  });
});
