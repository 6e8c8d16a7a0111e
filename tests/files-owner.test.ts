// The guest account `user` in a real VM, and files the gateway writes on a user's behalf (E2B's default user) owned by it.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox as E2BSandbox } from 'e2b';
import { Sandbox } from '@sandglass/sdk';
import { adminKey, apiUrl, checkResponsesAgainstSpec, config, gatewayUrl } from './helpers.js';

checkResponsesAgainstSpec();

let sbx: Sandbox;

beforeAll(async () => {
  sbx = await Sandbox.create({ ...config(), timeoutS: 900 });
});

afterAll(async () => {
  await sbx?.kill();
});

describe('the guest account user', () => {
  it('exists with uid/gid 1000, a locked password and a home of its own', async () => {
    const r = await sbx.commands.run('id user; getent passwd user; getent shadow user | cut -d: -f1,2; stat -c "%U:%G %a" /home/user');
    expect(r.stdout).toBe('uid=1000(user) gid=1000(user) groups=1000(user)\nuser:x:1000:1000::/home/user:/bin/bash\nuser:!\nuser:user 755\n');
    const asUser = await sbx.commands.run('cd && touch mine && stat -c %U mine && whoami', { user: 'user' });
    expect(asUser.stdout).toBe('user\nuser\n');
  });
});

describe('files written for a user', () => {
  it('are owned by that user, with the directories the write created', async () => {
    // E2B's SDK writes as its default user `user`: the only public path to the gateway's owner option.
    const opts = { apiKey: adminKey, apiUrl: `${apiUrl}/e2b`, sandboxUrl: `${gatewayUrl}/e2b` } as const;
    const e2b = await E2BSandbox.create('base', { ...opts, timeoutMs: 600_000 });
    try {
      const dir = `/tmp/owned-${randomBytes(3).toString('hex')}`;
      await e2b.files.write(`${dir}/deep/f.txt`, 'mine');
      await e2b.files.makeDir(`${dir}/made/sub`);
      await e2b.files.write('/tmp/as-root.txt', 'root', { user: 'root' });
      const r = await e2b.commands.run(`stat -c "%n %U:%G" ${dir} ${dir}/deep ${dir}/deep/f.txt ${dir}/made ${dir}/made/sub /tmp /tmp/as-root.txt`, {
        user: 'root',
      });
      expect(r.stdout.trim().split('\n')).toEqual([
        `${dir} user:user`,
        `${dir}/deep user:user`,
        `${dir}/deep/f.txt user:user`,
        `${dir}/made user:user`,
        `${dir}/made/sub user:user`,
        '/tmp root:root',
        '/tmp/as-root.txt root:root',
      ]);
    } finally {
      await e2b.kill();
    }
  });
});
