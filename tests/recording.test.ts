// A real sandbox records its inputs for replay: command specs, stdin with output offsets, file contents and the sync,
// each by content id, while the events themselves hold no environment value, stdin byte, file byte or entropy.
import { describe, expect, it } from 'vitest';
import { Sandbox } from '@sandglass/sdk';
import { config } from './helpers.js';

describe('recording', () => {
  it('names every input by content id and keeps the bytes out of the events', async () => {
    const sbx = await Sandbox.create({ ...config(), timeoutS: 300 });
    try {
      const secretEnv = 'env-value-never-in-events';
      const h = await sbx.commands.run('echo ready; read a; echo "got $a"; read b; echo "then $b"', {
        background: true,
        stdin: true,
        envs: { RECORDED_VAR: secretEnv },
      });
      // The second line goes in once the first answer is out: its recorded offset is past "ready\ngot one\n".
      await h.sendStdin('one\n');
      for (let i = 0; i < 200 && !h.stdout.includes('got one'); i++) await new Promise((r) => setTimeout(r, 50));
      await h.sendStdin('two-stdin-bytes\n');
      const result = await h.wait();
      expect(result.stdout).toBe('ready\ngot one\nthen two-stdin-bytes\n');
      await sbx.files.write('/root/recorded.txt', 'file-content-bytes');

      const events = await sbx.events();
      const raw = JSON.stringify(events);
      for (const leaked of [secretEnv, 'two-stdin-bytes', 'file-content-bytes']) expect(raw).not.toContain(leaked);

      const synced = events.filter((e) => e.type === 'sandbox.synced');
      expect(synced).toHaveLength(1);
      expect(synced[0]!.data).toEqual({ timeUnixNs: expect.stringMatching(/^\d{19}$/), entropyContentId: expect.stringMatching(/^[0-9a-f]{64}$/) });

      const started = events.find((e) => e.type === 'command.started' && e.data.commandId === h.id)!;
      expect(started.data).toMatchObject({ envNames: ['RECORDED_VAR'], stdin: true, recordingId: expect.stringMatching(/^[0-9a-f]{64}$/) });

      const inputs = events.filter((e) => e.type === 'command.input' && e.data.commandId === h.id).map((e) => e.data);
      expect(inputs).toEqual([
        { commandId: h.id, kind: 'stdin', contentId: expect.stringMatching(/^[0-9a-f]{64}$/), sizeBytes: 4, eof: false, outputOffset: expect.any(Number) },
        {
          commandId: h.id,
          kind: 'stdin',
          contentId: expect.stringMatching(/^[0-9a-f]{64}$/),
          sizeBytes: 16,
          eof: false,
          outputOffset: 'ready\ngot one\n'.length,
        },
      ]);
      expect(inputs[0]!.outputOffset as number).toBeLessThanOrEqual('ready\n'.length);

      const written = events.find((e) => e.type === 'file.written' && e.data.path === '/root/recorded.txt')!;
      expect(written.data).toEqual({ path: '/root/recorded.txt', sizeBytes: 18, contentId: expect.stringMatching(/^[0-9a-f]{64}$/) });
    } finally {
      await sbx.kill();
    }
  });
});
