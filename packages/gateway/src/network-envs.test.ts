// A sandbox's own envs reach the agent's env.defaults under the egress variables and secret placeholders, which win.
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger, Redacted } from '@sandglass/core';
import { HostileAgent } from '@sandglass/agent-client/hostile-agent';
import { encodeJsonFrame, FrameType } from '@sandglass/agent-client';
import { NetworkManager, type ResolvedSecret } from './network.js';

let agent: HostileAgent | undefined;
let network: NetworkManager | undefined;

afterEach(async () => {
  network?.proxy.removeSandbox('sbx_envs');
  await agent?.close();
  agent = undefined;
  network = undefined;
});

/** A well-behaved agent for what attach asks: writes complete, the system bundle is missing; keeps each env.defaults. */
async function agentRecordingDefaults(): Promise<{ agent: HostileAgent; defaults: Array<Record<string, string>> }> {
  const a = await HostileAgent.connect();
  const defaults: Array<Record<string, string>> = [];
  a.onCall = (call) => {
    if (call.method === 'env.defaults') defaults.push(call.params.env as Record<string, string>);
    if (call.method === 'file.read') {
      void a.send(encodeJsonFrame(FrameType.reply, call.id, { error: { code: 'not_found', message: 'no bundle' } }));
      return;
    }
    void a.reply(call.id, call.method === 'net.listen' ? { port: call.params.port } : {});
    if (call.method === 'file.write') {
      const streamId = call.params.streamId as number;
      void a.waitFor((f) => f.channel === streamId && f.type === FrameType.end).then(() => a.event({ event: 'file.written', streamId, sizeBytes: 1 }));
    }
  };
  agent = a;
  return { agent: a, defaults };
}

function manager(): NetworkManager {
  const secret: ResolvedSecret = { name: 'API_TOKEN', hosts: ['api.example.com'], approval: 'none', value: async () => new Redacted('v') };
  network = new NetworkManager({
    events: { append: async () => undefined } as never,
    secrets: { resolve: async () => secret },
    logger: createLogger('test', 'silent'),
    tenantOf: () => 'ten_a',
  });
  return network;
}

describe('sandbox envs in env.defaults', () => {
  it('puts the sandbox’s variables under the proxy, CA and secret placeholder variables', async () => {
    const { agent: a, defaults } = await agentRecordingDefaults();
    const nm = manager();
    const spec = nm.newSpec({ allow: ['api.example.com'] }, ['API_TOKEN']);
    const envs = { PROJECT: 'alpha', HTTPS_PROXY: 'http://evil.example:1', https_proxy: 'http://evil.example:1', SSL_CERT_FILE: '/tmp/mine', API_TOKEN: 'raw' };
    await nm.attach('sbx_envs', 'ten_a', a.client, spec, envs);
    expect(defaults).toHaveLength(1);
    expect(defaults[0]).toMatchObject({
      PROJECT: 'alpha',
      HTTPS_PROXY: 'http://127.0.0.1:3128',
      https_proxy: 'http://127.0.0.1:3128',
      SSL_CERT_FILE: '/etc/sandglass/ca-bundle.crt',
      API_TOKEN: spec.placeholders.API_TOKEN,
    });
  });

  it('gives a sandbox without a network its variables all the same', async () => {
    const { agent: a, defaults } = await agentRecordingDefaults();
    const nm = manager();
    await nm.attach('sbx_envs', 'ten_a', a.client, nm.newSpec(undefined, []), { PROJECT: 'alpha' });
    expect(defaults).toEqual([{ PROJECT: 'alpha' }]);
  });
});
